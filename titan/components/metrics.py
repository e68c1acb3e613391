"""Metric logging: console, TensorBoard, Weights & Biases."""

from __future__ import annotations

import dataclasses
from typing import Any

from titan.components._pending import not_yet
from titan.config.configurable import Configurable


class MetricsProcessor(Configurable):
    """Collects loss, grad norm, throughput and memory and sends them to the enabled sinks."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Logging frequency and metric sinks."""

        log_freq: int = 10
        """Log metrics every N steps."""
        enable_tensorboard: bool = False
        """Write TensorBoard logs."""
        disable_color_printing: bool = False
        """Print console logs without ANSI colours."""
        save_tb_folder: str = "tb"
        """Sub-folder of dump_folder that receives TensorBoard logs."""
        save_for_all_ranks: bool = False
        """Log TensorBoard / W&B on every rank instead of only one."""
        enable_wandb: bool = False
        """Log to Weights & Biases."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        raise not_yet("MetricsProcessor")

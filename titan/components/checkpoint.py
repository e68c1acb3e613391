"""Distributed checkpoints: save, resume, export."""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, Literal

from titan.components._pending import not_yet
from titan.config.configurable import Configurable


class CheckpointManager(Configurable):
    """Saves and loads model, optimizer, scheduler, data loader and RNG state."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Saving, loading and exporting checkpoints."""

        enable: bool = False
        """Enable checkpointing."""
        enable_ft_dataloader_checkpoints: bool = True
        """Under fault tolerance, also checkpoint the data loader position."""
        folder: str = "checkpoint"
        """Sub-folder of dump_folder that holds checkpoints."""
        interval: int = 500
        """Save a checkpoint every N steps."""
        initial_load_path: str | None = None
        """Directory to load from when the run's own checkpoint folder is empty."""
        initial_load_model_only: bool = True
        """The initial load restores only the model weights."""
        initial_load_in_hf: bool = False
        """The initial load reads Hugging Face safetensors (model only)."""
        initial_load_in_hf_quantized: bool = False
        """The Hugging Face initial load has quantized keys."""
        last_save_model_only: bool = True
        """The last save keeps only the model weights."""
        last_save_in_hf: bool = False
        """The last save writes Hugging Face safetensors (model only)."""
        export_dtype: Literal["float16", "bfloat16", "float32"] = "float32"
        """Dtype of the final model-only export."""
        async_mode: Literal["disabled", "async", "async_with_pinned_mem"] = "disabled"
        """Asynchronous checkpointing mode."""
        keep_latest_k: int = 10
        """Keep only the latest k checkpoints; 0 keeps all, 1 is not allowed."""
        load_step: int = -1
        """Step to load; -1 loads the latest."""
        exclude_from_loading: list[str] = field(default_factory=list)
        """State keys not to load, e.g. optimizer, lr_scheduler or dataloader."""
        enable_first_step_checkpoint: bool = False
        """Save a checkpoint right after the first step."""
        create_seed_checkpoint: bool = False
        """Build the unparallelised model on one device and save it as a seed checkpoint."""
        load_only: bool = False
        """Load checkpoints but never save."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        raise not_yet("CheckpointManager")

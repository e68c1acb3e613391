"""Registry functions for gpt_oss: one per legacy TOML in ``legacy_configs/gpt_oss``; launch with
``--module gpt_oss --config <function name>``.

Each function sets only what differs from the ``Trainer.Config`` defaults.
"""

from __future__ import annotations

from titan.components.checkpoint import CheckpointManager
from titan.components.lr_scheduler import LRSchedulersContainer
from titan.components.metrics import MetricsProcessor
from titan.components.validate import Validator
from titan.config import ActivationCheckpointConfig, ProfilingConfig, TrainingConfig
from titan.models.gpt_oss import model_registry
from titan.trainer import Trainer


def gpt_oss_debugmodel() -> Trainer.Config:
    """Gpt-oss debug training

    Smoke run of the small MoE ``debugmodel``, 10 steps on ``c4_test``, without activation
    checkpointing; CPU or 1-8 GPUs.
    """
    return Trainer.Config(
        description="Gpt-oss debug training",
        model_spec=model_registry("debugmodel"),
        profiling=ProfilingConfig(save_traces_folder="profile_trace"),
        metrics=MetricsProcessor.Config(log_freq=1),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=2, decay_ratio=0.8),
        training=TrainingConfig(steps=10),
        checkpoint=CheckpointManager.Config(interval=10, last_save_model_only=False),
        # The debug model is small enough to keep every activation.
        activation_checkpoint=ActivationCheckpointConfig(mode="none"),
        validator=Validator.Config(freq=5, steps=10),
    )

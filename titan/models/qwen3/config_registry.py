"""Registry functions for qwen3: one per legacy TOML in ``legacy_configs/qwen3``; launch with
``--module qwen3 --config <function name>``.

Each function sets only what differs from the ``Trainer.Config`` defaults.
"""

from __future__ import annotations

from titan.components.checkpoint import CheckpointManager
from titan.components.lr_scheduler import LRSchedulersContainer
from titan.components.metrics import MetricsProcessor
from titan.components.optimizer import OptimizersContainer
from titan.components.validate import Validator
from titan.config import (
    ActivationCheckpointConfig,
    ParallelismConfig,
    ProfilingConfig,
    TrainingConfig,
)
from titan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from titan.models.qwen3 import model_registry
from titan.trainer import Trainer


def qwen3_debugmodel() -> Trainer.Config:
    """Qwen 3 debug training

    Dense ``debugmodel`` smoke run, 10 steps on the tiny ``c4_test`` set; fits on CPU or 1-8 GPUs.
    """
    return Trainer.Config(
        description="Qwen 3 debug training",
        model_spec=model_registry("debugmodel"),
        profiling=ProfilingConfig(save_traces_folder="profile_trace"),
        metrics=MetricsProcessor.Config(log_freq=1),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=2, decay_ratio=0.8),
        training=TrainingConfig(steps=10),
        parallelism=ParallelismConfig(pipeline_parallel_schedule="Interleaved1F1B"),
        checkpoint=CheckpointManager.Config(interval=10, last_save_model_only=False),
        validator=Validator.Config(freq=5, steps=10),
    )


def qwen3_0_6b() -> Trainer.Config:
    """Qwen 3 0.6B training

    Short C4 run (10 steps, logging every step); preset for 8 GPUs, FSDP only.
    """
    return Trainer.Config(
        description="Qwen 3 0.6B training",
        model_spec=model_registry("0.6B"),
        hf_assets_path="./assets/hf/Qwen3-0.6B",
        profiling=ProfilingConfig(save_traces_folder="profile_trace", profile_freq=100),
        metrics=MetricsProcessor.Config(log_freq=1),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
        optimizer=OptimizersContainer.Config(lr=3e-4),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=2),
        training=TrainingConfig(local_batch_size=4, seq_len=4096, steps=10),
        # v0.2.2 validated 8 x 2048 whatever the training shape
        validator=Validator.Config(local_batch_size=8, seq_len=2048),
        checkpoint=CheckpointManager.Config(last_save_model_only=False, export_dtype="float16"),
        activation_checkpoint=ActivationCheckpointConfig(selective_ac_option="op"),
    )


def qwen3_1_7b() -> Trainer.Config:
    """Qwen 3 1.7B training

    C4 run of 100 steps with a checkpoint every 50; preset for 8 GPUs, FSDP only.
    """
    return Trainer.Config(
        description="Qwen 3 1.7B training",
        model_spec=model_registry("1.7B"),
        hf_assets_path="./assets/hf/Qwen3-1.7B",
        profiling=ProfilingConfig(save_traces_folder="profile_trace", profile_freq=100),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=20),
        training=TrainingConfig(local_batch_size=4, seq_len=4096, steps=100),
        # v0.2.2 validated 8 x 2048 whatever the training shape
        validator=Validator.Config(local_batch_size=8, seq_len=2048),
        checkpoint=CheckpointManager.Config(
            interval=50, last_save_model_only=False, export_dtype="float16"
        ),
        activation_checkpoint=ActivationCheckpointConfig(selective_ac_option="op"),
    )


def qwen3_32b() -> Trainer.Config:
    """Qwen3 32B training

    C4 run of 3000 steps; preset for 8 H100 GPUs with 96 GiB each (FSDP, full AC).
    """
    return Trainer.Config(
        description="Qwen3 32B training",
        model_spec=model_registry("32B"),
        hf_assets_path="./assets/hf/Qwen3-32B",
        profiling=ProfilingConfig(save_traces_folder="profile_trace", profile_freq=100),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=600),
        training=TrainingConfig(local_batch_size=2, seq_len=4096, steps=3000),
        # v0.2.2 validated 8 x 2048 whatever the training shape
        validator=Validator.Config(local_batch_size=8, seq_len=2048),
        checkpoint=CheckpointManager.Config(last_save_model_only=False, export_dtype="float16"),
        # selective_ac_option is ignored in full mode; kept so switching to selective is one edit.
        activation_checkpoint=ActivationCheckpointConfig(mode="full", selective_ac_option="op"),
    )


def qwen3_moe_debug() -> Trainer.Config:
    """Qwen 3 MoE debug model training

    Smoke run of the ``debugmodel_moe`` flavor, 10 steps on ``c4_test``; CPU or 1-8 GPUs.
    """
    return Trainer.Config(
        description="Qwen 3 MoE debug model training",
        model_spec=model_registry("debugmodel_moe"),
        profiling=ProfilingConfig(save_traces_folder="profile_trace", profile_freq=100),
        metrics=MetricsProcessor.Config(log_freq=1),
        optimizer=OptimizersContainer.Config(lr=3e-4),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=2),
        training=TrainingConfig(local_batch_size=4, seq_len=4096, steps=10),
        # v0.2.2 validated 8 x 2048 whatever the training shape
        validator=Validator.Config(local_batch_size=8, seq_len=2048),
        checkpoint=CheckpointManager.Config(
            interval=10, last_save_model_only=False, export_dtype="float16"
        ),
        activation_checkpoint=ActivationCheckpointConfig(selective_ac_option="op"),
    )

"""Registry functions for deepseek_v3: one per legacy TOML in ``legacy_configs/deepseek_v3``;
launch with ``--module deepseek_v3 --config <function name>``.

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
    CompileConfig,
    ParallelismConfig,
    ProfilingConfig,
    TrainingConfig,
)
from titan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from titan.models.deepseek_v3 import model_registry
from titan.trainer import Trainer


def deepseek_v3_debugmodel() -> Trainer.Config:
    """DeepSeek-V3 debug training

    Smoke run of the tiny MoE ``debugmodel``, 10 steps on ``c4_test``; CPU or 1-8 GPUs.
    """
    return Trainer.Config(
        description="DeepSeek-V3 debug training",
        model_spec=model_registry("debugmodel"),
        profiling=ProfilingConfig(save_traces_folder="profile_trace"),
        metrics=MetricsProcessor.Config(log_freq=1),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=2, decay_ratio=0.8),
        training=TrainingConfig(steps=10),
        checkpoint=CheckpointManager.Config(interval=10, last_save_model_only=False),
        activation_checkpoint=ActivationCheckpointConfig(selective_ac_option="op"),
    )


def deepseek_v3_16b() -> Trainer.Config:
    """DeepSeek-V3 16B model training

    DeepSeek-MoE 16B pre-training on C4, 1000 steps, cosine WSD schedule; preset for 8 H100 GPUs
    (8-way EP over the FSDP ranks).
    """
    return Trainer.Config(
        description="DeepSeek-V3 16B model training",
        model_spec=model_registry("16B"),
        hf_assets_path="./assets/hf/deepseek-moe-16b-base",
        profiling=ProfilingConfig(save_traces_folder="profile_trace"),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
        optimizer=OptimizersContainer.Config(lr=2.2e-4),
        lr_scheduler=LRSchedulersContainer.Config(
            decay_ratio=0.8, decay_type="cosine", min_lr_factor=0.1
        ),
        training=TrainingConfig(local_batch_size=4, seq_len=4096, steps=1000),
        # v0.2.2 validated 8 x 2048 whatever the training shape
        validator=Validator.Config(local_batch_size=8, seq_len=2048),
        parallelism=ParallelismConfig(
            pipeline_parallel_schedule="Interleaved1F1B", expert_parallel_degree=8
        ),
        checkpoint=CheckpointManager.Config(interval=10),
        activation_checkpoint=ActivationCheckpointConfig(selective_ac_option="op"),
        # Only the loss is compiled; the MoE model runs eagerly.
        compile=CompileConfig(enable=True, components=["loss"]),
    )


def deepseek_v3_671b() -> Trainer.Config:
    """DeepSeek-V3 671B model training

    Pre-training on C4, 10k steps, FSDP only; preset for 512 H100 GPUs.
    """
    return Trainer.Config(
        description="DeepSeek-V3 671B model training",
        model_spec=model_registry("671B"),
        hf_assets_path="./assets/hf/DeepSeek-V3.1-Base",
        profiling=ProfilingConfig(save_traces_folder="profile_trace"),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
        optimizer=OptimizersContainer.Config(lr=2.2e-4),
        lr_scheduler=LRSchedulersContainer.Config(
            warmup_steps=2_000, decay_ratio=0.8, decay_type="cosine", min_lr_factor=0.1
        ),
        training=TrainingConfig(local_batch_size=4, seq_len=4096, steps=10_000),
        # v0.2.2 validated 8 x 2048 whatever the training shape
        validator=Validator.Config(local_batch_size=8, seq_len=2048),
        parallelism=ParallelismConfig(pipeline_parallel_schedule="Interleaved1F1B"),
        activation_checkpoint=ActivationCheckpointConfig(selective_ac_option="op"),
        compile=CompileConfig(enable=True, components=["loss"]),
    )

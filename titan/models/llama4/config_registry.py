"""Registry functions for llama4: one per legacy TOML in ``legacy_configs/llama4``; launch with
``--module llama4 --config <function name>``.

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
from titan.models.llama4 import model_registry
from titan.trainer import Trainer


def llama4_debugmodel() -> Trainer.Config:
    """Llama 4 debug training

    Smoke run of the small MoE ``debugmodel``, 10 steps on ``c4_test``; CPU or 1-8 GPUs.
    """
    return Trainer.Config(
        description="Llama 4 debug training",
        model_spec=model_registry("debugmodel"),
        profiling=ProfilingConfig(save_traces_folder="profile_trace"),
        metrics=MetricsProcessor.Config(log_freq=1),
        # The Llama 4 recipe uses a much smaller epsilon than the default.
        optimizer=OptimizersContainer.Config(lr=4e-3, eps=1e-15),
        lr_scheduler=LRSchedulersContainer.Config(
            warmup_steps=2, decay_ratio=0.8, min_lr_factor=0.1
        ),
        training=TrainingConfig(steps=10),
        checkpoint=CheckpointManager.Config(interval=10, last_save_model_only=False),
        activation_checkpoint=ActivationCheckpointConfig(selective_ac_option="op"),
    )


def llama4_17bx16e() -> Trainer.Config:
    """Llama 4 Scout 17Bx16E training

    Scout (17B active, 16 experts) pre-training on C4, 3000 steps; preset for 64 H100 GPUs
    (TP 8 with experts split the same way x FSDP 8).
    """
    return Trainer.Config(
        description="Llama 4 Scout 17Bx16E training",
        model_spec=model_registry("17bx16e"),
        hf_assets_path="./assets/hf/Llama-4-Scout-17B-16E",
        profiling=ProfilingConfig(save_traces_folder="profile_trace", profile_freq=100),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
        optimizer=OptimizersContainer.Config(lr=4e-3, eps=1e-15),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=600, min_lr_factor=0.1),
        training=TrainingConfig(seq_len=8192, steps=3000),
        # v0.2.2 validated with seq_len 2048 whatever the training seq_len
        validator=Validator.Config(seq_len=2048),
        parallelism=ParallelismConfig(tensor_parallel_degree=8, expert_tensor_parallel_degree=8),
        activation_checkpoint=ActivationCheckpointConfig(mode="full"),
    )


def llama4_17bx128e() -> Trainer.Config:
    """Llama 4 Maverick 17Bx128E training

    Maverick (17B active, 128 experts) on C4, 3000 steps; preset for 256 H100 GPUs
    (TP 8 x PP 4 x FSDP 8). Upstream marks this recipe as still under development.
    """
    return Trainer.Config(
        description="Llama 4 Maverick 17Bx128E training",
        model_spec=model_registry("17bx128e"),
        hf_assets_path="./assets/hf/Llama-4-Maverick-17B-128E",
        profiling=ProfilingConfig(save_traces_folder="profile_trace", profile_freq=100),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
        optimizer=OptimizersContainer.Config(lr=4e-3, eps=1e-15),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=600, min_lr_factor=0.1),
        training=TrainingConfig(local_batch_size=4, seq_len=8192, steps=3000),
        # v0.2.2 validated 8 x 2048 whatever the training shape
        validator=Validator.Config(local_batch_size=8, seq_len=2048),
        parallelism=ParallelismConfig(
            tensor_parallel_degree=8,
            pipeline_parallel_degree=4,
            expert_tensor_parallel_degree=8,
        ),
        activation_checkpoint=ActivationCheckpointConfig(mode="full"),
    )

"""Registry functions for llama3: one per legacy TOML in ``legacy_configs/llama3`` and
``legacy_configs/llama3_ft``; launch with ``--module llama3 --config <function name>``.

Each function sets only what differs from the ``Trainer.Config`` defaults.
"""

from __future__ import annotations

from titan.components.checkpoint import CheckpointManager
from titan.components.lr_scheduler import LRSchedulersContainer
from titan.components.metrics import MetricsProcessor
from titan.components.optimizer import OptimizersContainer
from titan.components.quantization.float8 import Float8LinearConverter
from titan.components.validate import Validator
from titan.config import (
    ActivationCheckpointConfig,
    CommConfig,
    CompileConfig,
    ParallelismConfig,
    ProfilingConfig,
    TrainingConfig,
)
from titan.experiments.ft.manager import FaultTolerance
from titan.experiments.ft.trainer import FaultTolerantTrainer
from titan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from titan.models.llama3 import model_registry
from titan.protocols.model_converter import ModelConvertersContainer
from titan.trainer import Trainer


def llama3_debugmodel() -> Trainer.Config:
    """Llama 3 debug training

    10-step smoke run on the tiny ``c4_test`` set; fits on CPU or 1-8 GPUs.
    """
    return Trainer.Config(
        description="Llama 3 debug training",
        model_spec=model_registry("debugmodel"),
        profiling=ProfilingConfig(save_traces_folder="profile_trace"),
        metrics=MetricsProcessor.Config(log_freq=1),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=2, decay_ratio=0.8),
        training=TrainingConfig(steps=10),
        parallelism=ParallelismConfig(pipeline_parallel_schedule="Interleaved1F1B"),
        checkpoint=CheckpointManager.Config(interval=10, last_save_model_only=False),
        validator=Validator.Config(freq=5, steps=10),
    )


def llama3_debugmodel_float8() -> Trainer.Config:
    """Llama 3 debug training, float8 linears (emulated)

    The debug run with float8 linears emulated in plain dtypes, so it also trains on CPU.
    """
    return Trainer.Config(
        description="Llama 3 debug training, float8 linears (emulated)",
        model_spec=model_registry("debugmodel"),
        metrics=MetricsProcessor.Config(log_freq=1),
        model_converters=ModelConvertersContainer.Config(
            converters=[Float8LinearConverter.Config(filter_fqns=["output"], emulate=True)],
            print_after_conversion=True,
        ),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=2, decay_ratio=0.8),
        training=TrainingConfig(steps=10),
    )


def llama3_8b() -> Trainer.Config:
    """Llama 3 8B training

    Llama 3.1 8B pre-training on C4, 1000 steps; preset for 64 A100 GPUs (pure FSDP).
    """
    return Trainer.Config(
        description="Llama 3 8B training",
        model_spec=model_registry("8B"),
        hf_assets_path="./assets/hf/Llama-3.1-8B",
        profiling=ProfilingConfig(
            enable_profiling=True, save_traces_folder="profile_trace", profile_freq=100
        ),
        metrics=MetricsProcessor.Config(enable_tensorboard=True),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
        optimizer=OptimizersContainer.Config(lr=3e-4),
        training=TrainingConfig(local_batch_size=1, seq_len=8192, steps=1000),
        activation_checkpoint=ActivationCheckpointConfig(selective_ac_option="op"),
        # The legacy validation batch shape defaulted to 8 x 2048, independently of training.
        validator=Validator.Config(freq=500, steps=1200, local_batch_size=8, seq_len=2048),
    )


def llama3_70b() -> Trainer.Config:
    """Llama 3 70B training

    Llama 3.1 70B pre-training on C4, 1000 steps; preset for 64 A100 GPUs (TP 8 x FSDP 8).
    """
    return Trainer.Config(
        description="Llama 3 70B training",
        model_spec=model_registry("70B"),
        hf_assets_path="./assets/hf/Llama-3.1-70B",
        profiling=ProfilingConfig(
            enable_profiling=True, save_traces_folder="profile_trace", profile_freq=100
        ),
        metrics=MetricsProcessor.Config(enable_tensorboard=True),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
        optimizer=OptimizersContainer.Config(lr=1.5e-4),
        training=TrainingConfig(seq_len=8192, steps=1000),
        parallelism=ParallelismConfig(tensor_parallel_degree=8),
        activation_checkpoint=ActivationCheckpointConfig(mode="full"),
        # The legacy validation sequence length defaulted to 2048, independently of training.
        validator=Validator.Config(freq=500, steps=1200, seq_len=2048),
    )


def llama3_405b() -> Trainer.Config:
    """Llama 3 405B training

    Llama 3.1 405B pre-training on C4 with float8 linears and compile; preset for 128 H100 GPUs
    (TP 8 with async TP x FSDP 16).
    """
    return Trainer.Config(
        description="Llama 3 405B training",
        model_spec=model_registry("405B"),
        hf_assets_path="./assets/hf/Llama-3.1-405B",
        profiling=ProfilingConfig(
            enable_profiling=True, save_traces_folder="profile_trace", profile_freq=100
        ),
        metrics=MetricsProcessor.Config(enable_tensorboard=True),
        dataloader=HuggingFaceTextDataLoader.Config(dataset="c4"),
        model_converters=ModelConvertersContainer.Config(
            converters=[
                Float8LinearConverter.Config(
                    enable_fsdp_float8_all_gather=True,
                    precompute_float8_dynamic_scale_for_fsdp=True,
                    filter_fqns=["output"],
                )
            ],
        ),
        optimizer=OptimizersContainer.Config(lr=8e-5),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=600),
        training=TrainingConfig(local_batch_size=2, seq_len=8192, steps=3000),
        parallelism=ParallelismConfig(tensor_parallel_degree=8, enable_async_tensor_parallel=True),
        activation_checkpoint=ActivationCheckpointConfig(mode="full"),
        compile=CompileConfig(enable=True),
        # The legacy validation batch shape defaulted to 8 x 2048, independently of training.
        validator=Validator.Config(freq=500, steps=1200, local_batch_size=8, seq_len=2048),
    )


def llama3_ft_debugmodel() -> FaultTolerantTrainer.Config:
    """Llama 3 fault-tolerant debug training

    The llama3 debug model under TorchFT with DiLoCo (2 fragments), 100 steps on ``c4_test``;
    8 GPUs per replica group. Replica ids and the number of groups come from the launcher
    (``--fault_tolerance.replica_id`` / ``--fault_tolerance.group_size``).
    """
    return FaultTolerantTrainer.Config(
        description="Llama 3 fault-tolerant debug training",
        model_spec=model_registry("debugmodel"),
        profiling=ProfilingConfig(
            enable_profiling=True,
            save_traces_folder="profile_trace",
            profiler_active=10,
            profiler_warmup=0,
        ),
        metrics=MetricsProcessor.Config(log_freq=1),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=2, decay_ratio=0.8),
        training=TrainingConfig(steps=100),
        checkpoint=CheckpointManager.Config(interval=10, last_save_model_only=False),
        # Fail fast so that a lost replica is noticed quickly.
        comm=CommConfig(train_timeout_seconds=15),
        validator=Validator.Config(freq=5, steps=10),
        fault_tolerance=FaultTolerance.Config(
            enable=True,
            process_group="nccl",
            semi_sync_method="diloco",
            sync_steps=10,
            num_fragments=2,
        ),
    )

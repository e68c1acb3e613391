"""Registry functions for flux: one per legacy TOML in ``legacy_configs/flux``; launch with
``--module flux --config <function name>``.

Each function sets only what differs from the ``FluxTrainer.Config`` defaults. The legacy
``[encoder]`` table is the trainer's ``encoder``, which the data loaders also build their T5 and
CLIP tokenizers from (their own ``encoder`` is left unset).
"""

from __future__ import annotations

from titan.components.checkpoint import CheckpointManager
from titan.components.lr_scheduler import LRSchedulersContainer
from titan.components.metrics import MetricsProcessor
from titan.components.optimizer import OptimizersContainer
from titan.config import ActivationCheckpointConfig, ProfilingConfig, TrainingConfig
from titan.models.flux import model_registry
from titan.models.flux.configs import Encoder, Inference, Validation
from titan.models.flux.flux_datasets import FluxDataLoader
from titan.models.flux.trainer import FluxTrainer
from titan.models.flux.validate import FluxValidator


def _encoder(*, max_t5_encoding_len: int = 256) -> Encoder:
    """The T5-XXL and CLIP-L encoders with the FLUX.1-dev autoencoder, as every recipe uses."""
    return Encoder(
        t5_encoder="google/t5-v1_1-xxl",
        autoencoder_path="assets/hf/FLUX.1-dev/ae.safetensors",
        max_t5_encoding_len=max_t5_encoding_len,
    )


def flux_debugmodel() -> FluxTrainer.Config:
    """Flux debug model

    Smoke run of ``flux-debug``, 10 steps on the ``cc12m-test`` image set; preset for 8 GPUs.
    """
    return FluxTrainer.Config(
        description="Flux debug model",
        model_spec=model_registry("flux-debug"),
        hf_assets_path="tests/assets/tokenizer",
        profiling=ProfilingConfig(save_traces_folder="profile_trace"),
        metrics=MetricsProcessor.Config(log_freq=1),
        dataloader=FluxDataLoader.Config(classifier_free_guidance_prob=0.447),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=1, decay_ratio=0.0),
        training=TrainingConfig(local_batch_size=4, max_norm=2.0, steps=10),
        checkpoint=CheckpointManager.Config(interval=10, last_save_model_only=False),
        activation_checkpoint=ActivationCheckpointConfig(mode="full"),
        # The legacy validation batch size (8) was independent of the training one.
        validator=FluxValidator.Config(
            freq=5,
            steps=48,
            local_batch_size=8,
            dataloader=FluxDataLoader.Config(
                dataset="coco-validation",
                infinite=False,
                generate_timesteps=True,
            ),
        ),
        encoder=_encoder(),
        validation=Validation(enable_classifier_free_guidance=True, denoising_steps=4),
        inference=Inference(prompts_path="./torchtitan/models/flux/inference/prompts.txt"),
    )


def flux_dev_model() -> FluxTrainer.Config:
    """Flux-dev model

    FLUX.1-dev training on cc12m (webdataset), 30k steps at 256px; preset for 8 GPUs.
    """
    return FluxTrainer.Config(
        description="Flux-dev model",
        model_spec=model_registry("flux-dev"),
        profiling=ProfilingConfig(save_traces_folder="profile_trace"),
        metrics=MetricsProcessor.Config(log_freq=100),
        dataloader=FluxDataLoader.Config(dataset="cc12m-wds", classifier_free_guidance_prob=0.447),
        optimizer=OptimizersContainer.Config(lr=1e-4),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=3_000, decay_ratio=0.0),
        training=TrainingConfig(local_batch_size=32, steps=30_000),
        checkpoint=CheckpointManager.Config(interval=1_000),
        activation_checkpoint=ActivationCheckpointConfig(mode="full"),
        validator=FluxValidator.Config(
            freq=1000,
            steps=12,
            dataloader=FluxDataLoader.Config(
                dataset="coco-validation",
                infinite=False,
                generate_timesteps=True,
            ),
            save_img_count=50,
        ),
        # dev uses the longer T5 context.
        encoder=_encoder(max_t5_encoding_len=512),
        validation=Validation(enable_classifier_free_guidance=True),
    )


def flux_schnell_model() -> FluxTrainer.Config:
    """Flux-schnell model

    FLUX.1-schnell training on cc12m (webdataset), 30k steps at 256px, batch 64 per GPU;
    preset for 8 GPUs.
    """
    return FluxTrainer.Config(
        description="Flux-schnell model",
        model_spec=model_registry("flux-schnell"),
        profiling=ProfilingConfig(save_traces_folder="profile_trace", profile_freq=100),
        metrics=MetricsProcessor.Config(log_freq=100),
        dataloader=FluxDataLoader.Config(dataset="cc12m-wds", classifier_free_guidance_prob=0.447),
        optimizer=OptimizersContainer.Config(lr=1e-4),
        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=3_000, decay_ratio=0.0),
        training=TrainingConfig(local_batch_size=64, steps=30_000),
        checkpoint=CheckpointManager.Config(interval=1_000),
        activation_checkpoint=ActivationCheckpointConfig(mode="full"),
        validator=FluxValidator.Config(
            freq=1000,
            steps=6,
            dataloader=FluxDataLoader.Config(
                dataset="coco-validation",
                infinite=False,
                generate_timesteps=True,
            ),
            save_img_count=50,
        ),
        # schnell shares the dev autoencoder.
        encoder=_encoder(),
        validation=Validation(enable_classifier_free_guidance=True),
    )

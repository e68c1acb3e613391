"""Flux settings that are not a component: text encoders, sampling during validation, inference."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(kw_only=True, slots=True)
class Encoder:
    """Flux text encoders and autoencoder."""

    t5_encoder: str = "google/t5-v1_1-small"
    """T5 encoder to use: a local folder or a Hugging Face repo name."""
    clip_encoder: str = "openai/clip-vit-large-patch14"
    """CLIP encoder to use: a local folder or a Hugging Face repo name."""
    autoencoder_path: str = "torchtitan/experiments/flux/assets/autoencoder/ae.safetensors"
    """Local path of the autoencoder checkpoint (a safetensors file)."""
    max_t5_encoding_len: int = 256
    """Maximum length of the T5 encoding."""
    test_mode: bool = False
    """Integration-test mode: randomly initialised encoders and a dummy tokenizer."""


@dataclasses.dataclass(kw_only=True, slots=True)
class Validation:
    """How images are sampled during validation."""

    enable_classifier_free_guidance: bool = False
    """Whether to use classifier-free guidance while sampling."""
    classifier_free_guidance_scale: float = 5.0
    """Classifier-free guidance scale while sampling."""
    denoising_steps: int = 50
    """Number of denoising steps to generate one image."""
    eval_freq: int = 100
    """Frequency of evaluation/sampling during training, in steps."""


@dataclasses.dataclass(kw_only=True, slots=True)
class Inference:
    """Flux inference settings."""

    save_img_folder: str = "inference_results"
    """Directory for the inference results."""
    prompts_path: str = "./torchtitan/experiments/flux/inference/prompts.txt"
    """File of newline-separated prompts to generate images for."""
    local_batch_size: int = 2
    """Batch size for inference."""
    img_size: int = 256
    """Image size for inference."""

"""Built-in copy of ``torchtitan.models.flux.job_config`` at v0.2.2."""

from dataclasses import dataclass, field


@dataclass
class Training:
    """Flux additions to ``[training]``."""

    classifier_free_guidance_prob: float = 0.0
    """Probability of dropping each text encoding independently, for classifier-free guidance."""
    img_size: int = 256
    """Width and height of the training images."""
    test_mode: bool = False
    """Integration-test mode: randomly initialised encoders and a dummy tokenizer."""


@dataclass
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


@dataclass
class Validation:
    """Flux additions to ``[validation]``."""

    enable_classifier_free_guidance: bool = False
    """Whether to use classifier-free guidance while sampling."""
    classifier_free_guidance_scale: float = 5.0
    """Classifier-free guidance scale while sampling."""
    denoising_steps: int = 50
    """Number of denoising steps to generate one image."""
    eval_freq: int = 100
    """Frequency of evaluation/sampling during training, in steps."""
    save_img_count: int = 1
    """How many validation images to generate and save; -1 means all samples."""
    save_img_folder: str = "img"
    """Directory for the images generated during validation."""
    all_timesteps: bool = False
    """Generate all stratified timesteps per sample instead of round robin."""


@dataclass
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


@dataclass
class JobConfig:
    """Sections the Flux model adds to or extends in the base config."""

    training: Training = field(default_factory=Training)
    """Flux training options."""
    encoder: Encoder = field(default_factory=Encoder)
    """Flux encoder options."""
    validation: Validation = field(default_factory=Validation)
    """Flux validation options."""
    inference: Inference = field(default_factory=Inference)
    """Flux inference options."""

"""Built-in copy of ``torchtitan.experiments.vlm.job_config`` at v0.2.2."""

from dataclasses import dataclass, field


@dataclass
class Data:
    """Vision-language data settings."""

    max_images_per_batch: int = 10
    """Vision encoder batch size (N)."""
    max_patches_per_image: int = 256
    """Vision encoder sequence length (L)."""
    patch_size: int = 16
    """Patch size of the vision encoder."""
    spatial_merge_size: int = 1
    """Spatial merge of visual tokens after the encoder; 1 means no merging."""
    packing_buffer_size: int = 0
    """Buffer of samples available for packing; a value above 0 enables sample packing."""


@dataclass
class JobConfig:
    """Sections the VLM experiment adds to the base config."""

    data: Data = field(default_factory=Data)
    """Vision-language data options."""

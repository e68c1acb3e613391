"""Built-in copy of ``torchtitan.experiments.transformers_modeling_backend.job_config`` (v0.2.2)."""

from dataclasses import dataclass, field


@dataclass
class HFTransformers:
    """Hugging Face transformers modeling backend."""

    model: str = ""
    """Hugging Face model id, e.g. 'Qwen/Qwen3-4B-Instruct-2507'."""


@dataclass
class JobConfig:
    """Sections the transformers modeling backend adds to the base config."""

    hf_transformers: HFTransformers = field(default_factory=HFTransformers)
    """Hugging Face transformers options."""

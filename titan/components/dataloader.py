"""Data loader configs shared by every dataset."""

from __future__ import annotations

import dataclasses

from titan.config.configurable import Configurable


class BaseDataLoader(Configurable):
    """Abstract: a concrete loader (e.g. ``HuggingFaceTextDataLoader``) must be chosen."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Which dataset to read."""

        dataset: str = ""
        """Dataset name from the dataset registry; the concrete loader gives the default."""
        dataset_path: str | None = None
        """Local path to read the dataset from instead of its default location."""


class ParallelAwareDataloader(BaseDataLoader):
    """Abstract: a loader that shards its data over data-parallel ranks and can be checkpointed."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):
        """Worker-process options of the underlying ``torch.utils.data.DataLoader``."""

        num_workers: int = 0
        """Number of worker processes."""
        persistent_workers: bool = False
        """Keep workers alive between epochs (ignored when num_workers is 0)."""
        pin_memory: bool = False
        """Pin host memory of loaded batches."""
        prefetch_factor: int | None = None
        """Batches prefetched per worker (ignored when num_workers is 0)."""

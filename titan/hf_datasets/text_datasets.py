"""Text datasets (``c4_test``, ``c4``, ...) packed into fixed-length token sequences."""

from __future__ import annotations

import dataclasses
from typing import Any

from titan.components._pending import not_yet
from titan.components.dataloader import ParallelAwareDataloader


class HuggingFaceTextDataLoader(ParallelAwareDataloader):
    """Tokenizes a text dataset and yields ``seq_len``-token samples per data-parallel rank."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(ParallelAwareDataloader.Config):
        """A text dataset from the registry."""

        dataset: str = "c4_test"
        """Dataset name from the dataset registry, e.g. c4 or c4_test."""
        infinite: bool = True
        """Start over when the dataset is exhausted instead of stopping."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        raise not_yet("HuggingFaceTextDataLoader")

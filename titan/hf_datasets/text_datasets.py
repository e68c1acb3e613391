"""Text datasets (``c4_test``, ``c4``, ...) packed into fixed-length token sequences.

The registry below says where each named dataset lives; ``dataset_path`` points a name at another
copy. The loader shares documents out over data-parallel ranks, packs them into samples of
``seq_len + 1`` tokens and yields ``(inputs, labels)`` batches. Its position is saved per rank
(``{"dp_rank_<r>": ..., "world_size": n}``, torchtitan's layout), so a resumed run reads exactly
the batches an uninterrupted one would have. Importing this module does not import torch.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterator
from typing import Any

from titan.components.dataloader import ParallelAwareDataloader
from titan.components.loader_state import rank_key, rank_state, saved_position
from titan.components.local_paths import REPOSITORY_ROOT, existing_path
from titan.config.configurable import NotBuildableError
from titan.hf_datasets.documents import (
    FILE_SUFFIXES,
    DatasetError,
    DocumentSource,
    HubDocuments,
    local_documents,
)
from titan.hf_datasets.packing import PackingPosition, TokenPacker


@dataclasses.dataclass(frozen=True, kw_only=True)
class RegisteredDataset:
    """Where a named dataset's documents are read from when ``dataset_path`` is not set."""

    description: str
    shipped_file: str | None = None
    """Path of a file that ships with titan, relative to the repository root."""
    hub_id: str | None = None
    """Hugging Face Hub dataset streamed with the ``datasets`` package."""
    hub_config: str | None = None
    """Configuration (subset) of the Hub dataset, e.g. C4's "en"."""
    split: str = "train"
    """Split of the Hub dataset, or which files of a ``dataset_path`` folder are read."""


DATASETS: dict[str, RegisteredDataset] = {
    "c4_test": RegisteredDataset(
        description="2,000 synthetic English-like documents shipped in tests/assets",
        shipped_file="tests/assets/c4_test/data.jsonl",
    ),
    "c4_test_validation": RegisteredDataset(
        description="200 held-out synthetic documents shipped in tests/assets",
        shipped_file="tests/assets/c4_test/validation.jsonl",
        split="validation",
    ),
    "c4": RegisteredDataset(
        description="C4 English, streamed from the Hugging Face Hub",
        hub_id="allenai/c4",
        hub_config="en",
    ),
    "c4_validation": RegisteredDataset(
        description="C4 English validation split, streamed from the Hugging Face Hub",
        hub_id="allenai/c4",
        hub_config="en",
        split="validation",
    ),
}


def registered_dataset(name: str) -> RegisteredDataset:
    """The registry entry called ``name``; an unknown name suggests the closest ones."""
    if name in DATASETS:
        return DATASETS[name]
    close = difflib.get_close_matches(name, DATASETS, n=2)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise DatasetError(
        f"unknown dataset {name!r}; {hint}registered datasets: {', '.join(DATASETS)}"
    )


def document_source(name: str, *, dataset_path: str | None = None) -> DocumentSource:
    """Where the documents of dataset ``name`` are read from, ``dataset_path`` overriding it."""
    entry = registered_dataset(name)
    if dataset_path is not None:
        return _source_at(dataset_path, name=name, entry=entry)
    if entry.shipped_file is not None:
        found = existing_path(entry.shipped_file)
        if found is None:
            raise DatasetError(
                f"the shipped dataset {name!r} is missing: {entry.shipped_file} is neither under "
                f"the current folder nor under {REPOSITORY_ROOT} (it ships with titan's "
                "repository, not with the wheel); set dataset_path to a copy, or rewrite it with "
                "`python tests/assets/make_assets.py`"
            )
        return local_documents(found, split=entry.split)
    assert entry.hub_id is not None, f"registry entry {name!r} names no location"
    return HubDocuments(
        hub_id=entry.hub_id,
        config_name=entry.hub_config,
        split=entry.split,
        description=f"dataset {name!r} ({entry.hub_id})",
    )


def _source_at(dataset_path: str, *, name: str, entry: RegisteredDataset) -> DocumentSource:
    found = existing_path(dataset_path)
    if found is not None:
        return local_documents(found, split=entry.split)
    # "owner/name" that is not a local path is a Hub dataset id, as in datasets.load_dataset;
    # a missing "data.jsonl" is a typo, not a Hub id.
    looks_like_file = dataset_path.startswith(".") or dataset_path.lower().endswith(FILE_SUFFIXES)
    if re.fullmatch(r"[\w.-]+(/[\w.-]+)?", dataset_path) and not looks_like_file:
        return HubDocuments(
            hub_id=dataset_path,
            config_name=entry.hub_config,
            split=entry.split,
            description=f"dataset {name!r} at {dataset_path!r} (dataset_path)",
        )
    raise DatasetError(
        f"dataset_path {dataset_path!r} (for dataset {name!r}) does not exist: give a local "
        "jsonl/json/txt/parquet file or folder, or a Hugging Face Hub id like allenai/c4"
    )


class HuggingFaceTextDataLoader(ParallelAwareDataloader):
    """Tokenizes a text dataset and yields ``seq_len``-token samples per data-parallel rank.

    ``iter(loader)`` continues from the loader's position; a finite loader whose pass has ended
    starts a new pass. Batches are CPU ``LongTensor`` pairs ``[local_batch_size, seq_len]``; the
    last batch of a finite pass may hold fewer samples.
    """

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(ParallelAwareDataloader.Config):
        """A text dataset from the registry."""

        dataset: str = "c4_test"
        """Dataset name from the dataset registry, e.g. c4 or c4_test."""
        infinite: bool = True
        """Start over when the dataset is exhausted instead of stopping."""

    def __init__(
        self,
        *,
        config: Config,
        dp_world_size: int,
        dp_rank: int,
        tokenizer: Any,
        seq_len: int,
        local_batch_size: int,
    ) -> None:
        if config.num_workers > 0:
            # Worker processes would read ahead of what the trainer consumed, and their
            # positions could not be saved exactly; tokenizing in the main process keeps up.
            raise NotBuildableError(
                f"dataloader.num_workers={config.num_workers}: the text loader reads in the "
                "training process so that checkpoints resume it exactly; set num_workers = 0"
            )
        if tokenizer is None:
            raise DatasetError(
                "the text data loader needs a tokenizer: set tokenizer and hf_assets_path"
            )
        if not 0 <= dp_rank < dp_world_size:
            raise ValueError(f"dp_rank {dp_rank} is not a rank of {dp_world_size} dp ranks")
        for name, value in (("seq_len", seq_len), ("local_batch_size", local_batch_size)):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, not {value}")
        self.config = config
        self.dp_world_size = dp_world_size
        self.dp_rank = dp_rank
        self.seq_len = seq_len
        self.local_batch_size = local_batch_size
        self.source = document_source(config.dataset, dataset_path=config.dataset_path)
        if isinstance(self.source, HubDocuments):
            self.source.open()  # a missing package or network fails at build time
        self.packer = TokenPacker(
            self.source,
            tokenizer=tokenizer,
            seq_len=seq_len,
            dp_rank=dp_rank,
            dp_world_size=dp_world_size,
            infinite=config.infinite,
        )

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        import torch

        if self.packer.position.finished:
            self.packer.start_next_pass()
        pin = self.config.pin_memory and torch.cuda.is_available()
        while True:
            samples: list[list[int]] = []
            while len(samples) < self.local_batch_size:
                sample = self.packer.next_sample()
                if sample is None:
                    break
                samples.append(sample)
            if not samples:
                return
            tokens = torch.tensor(samples, dtype=torch.long)
            inputs, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
            if pin:
                inputs, labels = inputs.pin_memory(), labels.pin_memory()
            yield inputs, labels
            if len(samples) < self.local_batch_size:
                return

    def state_dict(self) -> dict[str, Any]:
        """This rank's position under its own key, plus the dp world size it belongs to."""
        return rank_state(
            self.packer.position.to_bytes(), dp_rank=self.dp_rank, dp_world_size=self.dp_world_size
        )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a saved position; an empty state (no saved loader) starts afresh."""
        position = saved_position(
            state_dict, dp_rank=self.dp_rank, dp_world_size=self.dp_world_size, error=DatasetError
        )
        if position is not None:
            origin = rank_key(self.dp_rank)
            self.packer.restore(PackingPosition.from_bytes(position, origin=origin))

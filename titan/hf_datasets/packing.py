"""Packing documents into fixed-length token samples, with a position that can be saved exactly.

Each document is tokenized with begin- and end-of-text tokens and appended to a token buffer;
every ``seq_len + 1`` tokens of the buffer make one sample (inputs and labels overlap by all but
one token). The position is (epoch, documents read this epoch, leftover buffer), so a restored
packer continues mid-document with exactly the tokens an uninterrupted one would have used.
Torch-free: the loader turns samples into tensors.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

from titan.hf_datasets.documents import DatasetError, DocumentSource


@dataclasses.dataclass(kw_only=True)
class PackingPosition:
    """Where a rank's packer is in its share of the dataset."""

    epoch: int = 0
    """Completed passes over the rank's documents."""
    documents_read: int = 0
    """Documents of this epoch already tokenized into the buffer."""
    buffer: list[int] = dataclasses.field(default_factory=list)
    """Tokens read but not yet emitted in a sample."""
    finished: bool = False
    """A finite pass reached the end of the data; the next pass starts from the beginning."""

    def to_bytes(self) -> bytes:
        # JSON, not pickle: a checkpoint's data-loader state should not be able to run code.
        return json.dumps(dataclasses.asdict(self), separators=(",", ":")).encode()

    @classmethod
    def from_bytes(cls, data: bytes, *, origin: str) -> PackingPosition:
        try:
            fields: dict[str, Any] = json.loads(data)
            return cls(**fields)
        except (ValueError, TypeError) as error:
            raise DatasetError(f"{origin} is not a text data-loader position: {error}") from None


class TokenPacker:
    """Turns one rank's documents into samples of ``seq_len + 1`` tokens."""

    def __init__(
        self,
        source: DocumentSource,
        *,
        tokenizer: Any,
        seq_len: int,
        dp_rank: int,
        dp_world_size: int,
        infinite: bool,
    ) -> None:
        self.source = source
        self.tokenizer = tokenizer
        self.sample_len = seq_len + 1
        self.dp_rank = dp_rank
        self.dp_world_size = dp_world_size
        self.infinite = infinite
        self.position = PackingPosition()
        self._documents: Iterator[str] | None = None  # opened lazily at position.documents_read

    def restore(self, position: PackingPosition) -> None:
        self.position = position
        self._documents = None

    def start_next_pass(self) -> None:
        """After a finite pass ended: read the data again from its first document."""
        self.restore(PackingPosition(epoch=self.position.epoch + 1))

    def next_sample(self) -> list[int] | None:
        """The next ``seq_len + 1`` tokens; None when a finite pass has run out of documents.

        The tokens left in the buffer at the end of a finite pass are dropped, as torchtitan does.
        """
        position = self.position
        if position.finished:
            return None
        while len(position.buffer) < self.sample_len:
            text = self._next_document()
            if text is not None:
                position.buffer.extend(self.tokenizer.encode(text, add_bos=True, add_eos=True))
                position.documents_read += 1
            elif not self.infinite:
                position.finished = True
                return None
            elif position.documents_read == 0:
                raise DatasetError(
                    f"{self.source.description} has no documents for data-parallel rank "
                    f"{self.dp_rank} of {self.dp_world_size}"
                )
            else:
                self.restore(PackingPosition(epoch=position.epoch + 1, buffer=position.buffer))
                position = self.position
        sample = position.buffer[: self.sample_len]
        del position.buffer[: self.sample_len]
        return sample

    def _next_document(self) -> str | None:
        if self._documents is None:
            self._documents = self.source.documents(
                rank=self.dp_rank,
                world_size=self.dp_world_size,
                start=self.position.documents_read,
            )
        return next(self._documents, None)

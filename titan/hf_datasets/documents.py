"""Where a text dataset's documents come from: local files, or a dataset on the Hugging Face Hub.

A source hands each data-parallel rank its share of the documents, starting from any rank-local
position, so a resumed loader reopens the source where it stopped instead of replaying it.
Local files are read lazily, line by line; a document is parsed only by the rank that keeps it.
This module never imports torch, and imports ``datasets`` only for Hub sources.
"""

from __future__ import annotations

import dataclasses
import gzip
import itertools
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

TEXT_FIELD = "text"
FILE_SUFFIXES = (".jsonl", ".json", ".txt", ".parquet", ".jsonl.gz", ".json.gz", ".txt.gz")
# Hugging Face's naming convention for the split of a file in a dataset folder; a file that names
# no split belongs to "train" (so tests/assets/c4_test/data.jsonl is train, validation.jsonl not).
SPLIT_KEYWORDS = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "val", "dev"),
    "test": ("test", "testing", "eval", "evaluation"),
}
NO_NETWORK_HINT = "use dataset='c4_test', or set dataset_path to a local file or folder"


class DatasetError(ValueError):
    """A dataset that cannot be read: unknown name, missing file or package, or no network."""


class DocumentSource(Protocol):
    """The documents of one dataset split, shared out over data-parallel ranks."""

    description: str
    """How messages name the source, e.g. a path or a Hub id."""

    def documents(self, *, rank: int, world_size: int, start: int) -> Iterator[str]:
        """The texts of ``rank``'s documents, skipping the first ``start`` of them."""
        ...


@dataclasses.dataclass(frozen=True)
class RawDocument:
    """One document before parsing, with where it was found (for error messages)."""

    file: Path
    line: int
    raw: Any
    text_of: Callable[[RawDocument], str]

    def text(self) -> str:
        return self.text_of(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LocalDocuments:
    """Documents of local jsonl / json / txt / parquet files, read in file order.

    Document ``i`` (counted over all files) belongs to rank ``i % world_size``.
    """

    files: tuple[Path, ...]
    description: str

    def documents(self, *, rank: int, world_size: int, start: int) -> Iterator[str]:
        everything = itertools.chain.from_iterable(_raw_documents(path) for path in self.files)
        for document in itertools.islice(everything, start * world_size + rank, None, world_size):
            yield document.text()


@dataclasses.dataclass(frozen=True, kw_only=True)
class HubDocuments:
    """A dataset streamed from the Hugging Face Hub with the ``datasets`` package."""

    hub_id: str
    config_name: str | None
    split: str
    description: str

    def open(self) -> Any:
        """The streaming dataset; fails now (not at the first batch) without package or network."""
        datasets = _import_datasets(self.description)
        try:
            return datasets.load_dataset(
                self.hub_id, name=self.config_name, split=self.split, streaming=True
            )
        except Exception as error:
            if not _is_network_error(error):
                raise
            raise DatasetError(
                f"cannot reach the Hugging Face Hub to stream {self.description} "
                f"({type(error).__name__}: {error}); this machine looks offline: {NO_NETWORK_HINT}"
            ) from error

    def documents(self, *, rank: int, world_size: int, start: int) -> Iterator[str]:
        from datasets.distributed import split_dataset_by_node

        # split_dataset_by_node gives each rank whole shards when their number divides evenly
        # (no rank downloads another's data) and document i % world_size otherwise.
        stream = split_dataset_by_node(self.open(), rank=rank, world_size=world_size)
        for record in stream.skip(start) if start else stream:
            yield record[TEXT_FIELD]


def local_documents(path: Path, *, split: str) -> LocalDocuments:
    """The ``split`` documents of a file, or of the matching files in a folder (recursively)."""
    if path.is_file():
        _check_suffix(path)
        return LocalDocuments(files=(path,), description=str(path))
    candidates = sorted(p for p in path.rglob("*") if p.is_file() and _suffix(p) is not None)
    if not candidates:
        raise DatasetError(
            f"the folder {path} has no dataset files (expected {', '.join(FILE_SUFFIXES)})"
        )
    files = tuple(p for p in candidates if file_split(p.relative_to(path)) == split)
    if not files:
        found = ", ".join(str(p.relative_to(path)) for p in candidates[:5])
        raise DatasetError(
            f"the folder {path} has no {split} files (found {found}); as in Hugging Face "
            f"datasets, a file whose name says {'/'.join(SPLIT_KEYWORDS.get(split, (split,)))} "
            "belongs to that split and any other file to train"
        )
    return LocalDocuments(files=files, description=f"{path} ({split})")


def file_split(relative: Path) -> str:
    """The split a dataset file belongs to, from the words of its path (``c4-validation.00.json``)."""
    words = set(re.split(r"[-._ 0-9/\\]+", relative.as_posix().lower()))
    for split, keywords in SPLIT_KEYWORDS.items():
        if words.intersection(keywords):
            return split
    return "train"


def _suffix(path: Path) -> str | None:
    name = path.name.lower()
    return next((suffix for suffix in FILE_SUFFIXES if name.endswith(suffix)), None)


def _check_suffix(path: Path) -> None:
    if _suffix(path) is None:
        raise DatasetError(
            f"cannot read {path}: a dataset file must end in one of {', '.join(FILE_SUFFIXES)}"
        )


def _open_text(path: Path):
    if path.name.lower().endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def _raw_documents(path: Path) -> Iterator[RawDocument]:
    suffix = _suffix(path) or ""
    if suffix == ".parquet":
        yield from _parquet_documents(path)
    elif suffix.startswith(".txt"):
        # As Hugging Face's "text" builder does: each non-empty line is one document.
        yield from _line_documents(path, text_of=lambda document: document.raw.rstrip("\r\n"))
    elif suffix.startswith(".json") and not suffix.startswith(".jsonl") and _is_json_array(path):
        yield from _json_array_documents(path)
    else:
        yield from _line_documents(path, text_of=_json_line_text)


def _line_documents(path: Path, *, text_of: Callable[[RawDocument], str]) -> Iterator[RawDocument]:
    with _open_text(path) as lines:
        for number, line in enumerate(lines, start=1):
            if line.strip():
                yield RawDocument(file=path, line=number, raw=line, text_of=text_of)


def _json_line_text(document: RawDocument) -> str:
    try:
        record = json.loads(document.raw)
    except json.JSONDecodeError as error:
        raise DatasetError(f"{document.file}:{document.line}: not a JSON line: {error}") from None
    return _record_text(record, document)


def _record_text(record: Any, document: RawDocument) -> str:
    if not isinstance(record, dict) or not isinstance(record.get(TEXT_FIELD), str):
        raise DatasetError(
            f"{document.file}:{document.line}: each record must be an object with a "
            f'"{TEXT_FIELD}" string, like {{"{TEXT_FIELD}": "..."}}'
        )
    return record[TEXT_FIELD]


def _is_json_array(path: Path) -> bool:
    """Whether a ``.json`` file holds one JSON array (else it is JSON lines, as C4's files are)."""
    with _open_text(path) as text:
        while chunk := text.read(64):
            stripped = chunk.lstrip()
            if stripped:
                return stripped.startswith("[")
    return False


def _json_array_documents(path: Path) -> Iterator[RawDocument]:
    with _open_text(path) as text:
        try:
            records = json.load(text)
        except json.JSONDecodeError as error:
            raise DatasetError(f"{path}: not valid JSON: {error}") from None
    for index, record in enumerate(records):
        yield RawDocument(file=path, line=index + 1, raw=record, text_of=_array_record_text)


def _array_record_text(document: RawDocument) -> str:
    return _record_text(document.raw, document)


def _parquet_documents(path: Path) -> Iterator[RawDocument]:
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise DatasetError(
            f"reading {path} needs the `pyarrow` package: pip install pyarrow "
            "(or convert the file to jsonl)"
        ) from None
    table = parquet.ParquetFile(path)
    if TEXT_FIELD not in table.schema_arrow.names:
        raise DatasetError(f'{path}: no "{TEXT_FIELD}" column (found {table.schema_arrow.names})')
    row = 0
    for batch in table.iter_batches(columns=[TEXT_FIELD], batch_size=1024):
        for text in batch.column(0).to_pylist():
            row += 1
            yield RawDocument(file=path, line=row, raw=text, text_of=_parquet_text)


def _parquet_text(document: RawDocument) -> str:
    if not isinstance(document.raw, str):
        raise DatasetError(f'{document.file}: row {document.line} has no "{TEXT_FIELD}" string')
    return document.raw


def _import_datasets(description: str) -> Any:
    try:
        import datasets
    except ImportError:
        raise DatasetError(
            f"{description} is read from the Hugging Face Hub, which needs the `datasets` "
            f"package: install the `datasets` package (pip install datasets), or {NO_NETWORK_HINT}"
        ) from None
    return datasets


def _is_network_error(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is a failed connection rather than a bad request.

    requests, httpx and huggingface_hub each raise their own classes (httpx's are not OSErrors),
    so the chain is matched by class name as well as by ``ConnectionError``/``TimeoutError``.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionError | TimeoutError):
            return True
        names = " ".join(cls.__name__ for cls in type(current).__mro__)
        if re.search(r"Connect|Timeout|Offline|LocalEntryNotFound", names):
            return True
        current = current.__cause__ or current.__context__
    return False

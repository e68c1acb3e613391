"""Where a Flux dataset's image-caption pairs are read from, and how they are shared over ranks.

A dataset is a stream of *groups*: the files that share one key (``00042.jpg``, ``00042.txt``,
``00042.json``), in webdataset's convention that the key is a file's path up to the first dot of
its name. Groups come from webdataset tar shards (read in name order, members in archive order)
or from a plain folder (files in path order). Group ``i`` of the stream belongs to data-parallel
rank ``i % world_size``; only that rank reads its bytes, the others step over the headers.

Nothing is downloaded: a registered name resolves to ``dataset_path`` when it is set, else to a
set titan draws itself (``generated_images``), else it is an error saying what to set. This module
imports neither torch nor PIL.
"""

from __future__ import annotations

import dataclasses
import difflib
import tarfile
from collections.abc import Iterator
from pathlib import Path

from titan.components.local_paths import existing_path
from titan.models.flux.generated_images import ensure_generated_set

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp")
CAPTION_EXTENSION = "txt"
SHARD_SUFFIX = ".tar"


class FluxDatasetError(ValueError):
    """A Flux dataset that cannot be read: unknown name, missing or unusable data."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RegisteredImageSet:
    """A dataset name v0.2.2 knew and where titan finds its data when ``dataset_path`` is unset."""

    description: str
    """What the data is and where, for messages."""
    generated: str | None = None
    """Name of the set titan draws itself for it (``generated_images.GENERATED_SETS``)."""
    upstream: str | None = None
    """Where torchtitan streamed it from; titan never does, the user points dataset_path at a copy."""


IMAGE_DATASETS: dict[str, RegisteredImageSet] = {
    "cc12m-wds": RegisteredImageSet(
        description="Conceptual 12M in webdataset shards",
        upstream="the Hugging Face Hub dataset pixparse/cc12m-wds",
    ),
    "cc12m-test": RegisteredImageSet(
        description="a small image-caption set titan draws itself",
        generated="cc12m-test",
    ),
    "coco-validation": RegisteredImageSet(
        description="a small held-out image-caption set titan draws itself",
        generated="coco-validation",
    ),
}


@dataclasses.dataclass
class Group:
    """The files of one key: extension -> a way to read that file's bytes."""

    key: str
    """The sample key shared by the group's files."""
    origin: str
    """Where the group is, for messages: ``shard.tar:key`` or a folder path."""
    files: dict[str, Path | tarfile.TarInfo] = dataclasses.field(default_factory=dict)
    """Extension -> the file's path, or its member of ``archive``."""
    archive: tarfile.TarFile | None = None
    """The open tar shard the members are read from; None for folder files."""
    root: Path | None = None
    """The dataset folder a folder group's files must lie in (links are followed only inside
    it); None for shard members."""

    def image_extension(self) -> str | None:
        """The first image file's extension, None when the group has no image."""
        return next((ext for ext in IMAGE_EXTENSIONS if ext in self.files), None)

    def read(self, extension: str) -> bytes:
        """The bytes of this group's ``extension`` file; ``OSError`` or ``tarfile.TarError``."""
        where = self.files[extension]
        if isinstance(where, Path):
            if self.root is not None:
                check_inside(where, root=self.root)
            return where.read_bytes()
        assert self.archive is not None
        member = self.archive.extractfile(where)
        if member is None:
            raise tarfile.TarError(f"{where.name} is not a regular file")
        return member.read()


class OutsideFolder(OSError):
    """A dataset file that is a link to a file outside the dataset folder."""


def check_inside(path: Path, *, root: Path) -> None:
    """``OutsideFolder`` when ``path`` resolves outside ``root`` (a link to another file)."""
    target = path.resolve()
    if not target.is_relative_to(root.resolve()):
        raise OutsideFolder(
            f"{path} is a link to {target}, outside the dataset folder {root}; it is not read"
        )


@dataclasses.dataclass(frozen=True)
class UnreadableShard:
    """A shard (or the rest of one) that could not be read; the stream goes on after it."""

    origin: str
    """The shard, for messages."""
    reason: str
    """Why it could not be read."""


def split_key(name: str) -> tuple[str, str]:
    """webdataset's split of a file path into (key, extension) at the first dot of its name."""
    folder, _, base = name.rpartition("/")
    stem, dot, extension = base.partition(".")
    key = f"{folder}/{stem}" if folder else stem
    return key, extension.lower() if dot else ""


@dataclasses.dataclass(frozen=True, kw_only=True)
class ImageTextSource:
    """The groups of a dataset: webdataset shards, or the files of a plain folder."""

    description: str
    """What the data is and where, for messages."""
    shards: tuple[Path, ...] = ()
    """The webdataset tar shards, in reading order."""
    folder: Path | None = None
    """The plain folder of image and caption files, when not shards."""

    def groups(self) -> Iterator[Group | UnreadableShard]:
        """Every group in stream order, with a marker where a shard could not be read."""
        for item in self._all_groups():
            # Files with neither an image nor a caption (a manifest, a README) are no sample.
            if isinstance(item, Group) and not item.image_extension():
                if CAPTION_EXTENSION not in item.files:
                    continue
            yield item

    def _all_groups(self) -> Iterator[Group | UnreadableShard]:
        """Every group of the folder, then of each shard, metadata-only ones included."""
        if self.folder is not None:
            yield from _folder_groups(self.folder)
        for shard in self.shards:
            yield from _shard_groups(shard)


def _folder_groups(folder: Path) -> Iterator[Group]:
    """The groups of a plain folder, its files in path order."""
    files = sorted(path for path in folder.rglob("*") if path.is_file())
    current: Group | None = None
    for path in files:
        key, extension = split_key(path.relative_to(folder).as_posix())
        if current is None or key != current.key:
            if current is not None:
                yield current
            current = Group(key=key, origin=str(folder / key), root=folder)
        current.files[extension] = path
    if current is not None:
        yield current


def _shard_groups(shard: Path) -> Iterator[Group | UnreadableShard]:
    """The groups of one tar shard; a shard that is not a tar or breaks off yields a marker."""
    current: Group | None = None
    try:
        with tarfile.open(shard, mode="r:") as archive:
            for member in archive:
                if not member.isfile():
                    continue
                key, extension = split_key(member.name)
                if current is None or key != current.key:
                    if current is not None:
                        yield current
                    current = Group(key=key, origin=f"{shard}:{key}", archive=archive)
                current.files[extension] = member
            if current is not None:
                yield current
            ends_cleanly = _has_end_marker(archive)
    except (tarfile.TarError, OSError, EOFError) as error:
        yield UnreadableShard(origin=str(shard), reason=str(error) or type(error).__name__)
        return
    if not ends_cleanly:
        yield UnreadableShard(origin=str(shard), reason="it breaks off inside a member's header")


def _has_end_marker(archive: tarfile.TarFile) -> bool:
    """Whether a zero block follows the last member: ``tarfile`` ends a shard cut inside a
    header as if it were complete, and only the missing end-of-archive block tells."""
    archive.fileobj.seek(archive.offset)  # type: ignore[union-attr]
    block = archive.fileobj.read(tarfile.BLOCKSIZE)  # type: ignore[union-attr]
    return len(block) == tarfile.BLOCKSIZE and not block.strip(b"\0")


def image_text_source(
    name: str, *, dataset_path: str | None, generated_root: Path
) -> ImageTextSource:
    """Where dataset ``name`` is read from: ``dataset_path`` when set, else titan's drawn copy
    under ``generated_root``; an error that says what to set when neither applies."""
    entry = _registered(name)
    if dataset_path is not None:
        found = existing_path(dataset_path)
        if found is None:
            raise FluxDatasetError(
                f"dataset_path {dataset_path!r} (dataset {name!r}) does not exist "
                f"({Path(dataset_path).expanduser().resolve()}); set dataset_path to a folder "
                "of webdataset .tar shards, a single .tar shard, or a folder of image and .txt "
                "caption files"
            )
        return source_at(found, name=name, key="dataset_path")
    if entry.generated is None:
        raise FluxDatasetError(
            f"dataset {name!r} ({entry.description}) has no local copy: titan does not download "
            f"it from {entry.upstream}; download its shards yourself and set dataset_path "
            f"(legacy TOML: training.dataset_path) to their folder, or use dataset "
            f"'cc12m-test' for a smoke run"
        )
    folder = ensure_generated_set(entry.generated, generated_root)
    return source_at(folder, name=name, key="the generated set")


def _registered(name: str) -> RegisteredImageSet:
    """The registry entry of ``name``; an unknown name suggests the closest ones."""
    # v0.2.2 compared names case-insensitively.
    entry = IMAGE_DATASETS.get(name.lower())
    if entry is not None:
        return entry
    close = difflib.get_close_matches(name.lower(), IMAGE_DATASETS, n=2)
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    raise FluxDatasetError(
        f"unknown Flux dataset {name!r}; {hint}Flux datasets: {', '.join(IMAGE_DATASETS)}"
    )


def source_at(path: Path, *, name: str, key: str) -> ImageTextSource:
    """The source at ``path``: one shard, a folder of shards, or a folder of image files."""
    described = f"dataset {name!r} at {path} ({key})"
    if path.is_file():
        if path.suffix.lower() != SHARD_SUFFIX:
            raise FluxDatasetError(
                f"{described} is a file but not a .tar shard; give a .tar shard or a folder"
            )
        return ImageTextSource(description=described, shards=(path,))
    shards = tuple(sorted(p for p in path.rglob(f"*{SHARD_SUFFIX}") if p.is_file()))
    if shards:
        return ImageTextSource(description=described, shards=shards)
    has_images = any(
        p.is_file() and split_key(p.name)[1] in IMAGE_EXTENSIONS for p in path.rglob("*")
    )
    if not has_images:
        raise FluxDatasetError(
            f"{described} holds no .tar shards and no image files "
            f"({', '.join('.' + e for e in IMAGE_EXTENSIONS)}); point dataset_path at the "
            "folder that holds them"
        )
    return ImageTextSource(description=described, folder=path)

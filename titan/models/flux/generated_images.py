"""Image-caption sets that titan draws itself, so the Flux debug runs need no downloaded data.

Each image is a few coloured shapes on a plain background, and its caption says what is drawn
("a red circle and a small blue square on a yellow background"), so a caption really describes
its image. Sizes and aspect ratios vary (square, wide, tall, all at least 256 pixels on the short
side) and so do the stored modes (RGB, grey-scale, palette, RGBA and CMYK files), the cases the
loader's preprocessing must handle. Everything comes from a fixed seed: writing a set twice gives
the same bytes.

Two layouts, as the loader reads them::

    cc12m-test/                       webdataset shards, the cc12m layout
        MANIFEST.json                 what titan wrote (name, version, file sizes)
        cc12m-train-0000.tar          {key}.jpg | {key}.png, {key}.txt, {key}.json
        cc12m-train-0001.tar
    coco-validation/                  a plain folder of pairs
        MANIFEST.json
        val-00000.png  val-00000.txt ...

``ensure_generated_set`` writes a set once into a folder titan owns and reuses it afterwards; a
folder of that name that titan did not write is never touched. Run as a script to write a set
anywhere: ``python -m titan.models.flux.generated_images cc12m-test OUT_DIR``.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import random
import shutil
import sys
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

MANIFEST = "MANIFEST.json"
GENERATOR_VERSION = 1
"""Raised whenever the drawing changes, so a set written by an older titan is not reused."""

COLOURS = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 70, 220),
    "yellow": (235, 210, 40),
    "purple": (140, 50, 170),
    "orange": (240, 140, 30),
    "white": (250, 250, 250),
    "black": (15, 15, 15),
    "grey": (128, 128, 128),
}
# (width, height): square, wide and tall images, none below the 256-pixel training size.
SIZES = ((256, 256), (384, 256), (256, 384), (320, 288), (512, 256), (288, 448))
# (PIL mode the file is stored in, file extension): the loader converts every one to RGB.
MODES = (("RGB", "jpg"), ("RGB", "png"), ("L", "jpg"), ("P", "png"), ("RGBA", "png"),
         ("CMYK", "jpg"))  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True)
class GeneratedSet:
    """A set titan can draw: how many samples, how they are stored, and with which seed."""

    description: str
    """What the set is, for messages and the set's manifest."""
    samples: int
    """Number of image-caption pairs."""
    seed: int
    """Seed of the drawing: the same seed writes the same bytes."""
    layout: str
    """"shards" (webdataset tar files) or "folder" (plain image and caption files)."""
    samples_per_shard: int = 16
    """Pairs per webdataset shard (layout ``shards``)."""
    key_prefix: str = ""
    """Prefix of every sample key, which keeps two sets' keys apart."""


GENERATED_SETS: dict[str, GeneratedSet] = {
    "cc12m-test": GeneratedSet(
        description="32 drawn image-caption pairs in 2 webdataset shards (the cc12m layout)",
        samples=32,
        seed=12_000_000,
        layout="shards",
    ),
    "coco-validation": GeneratedSet(
        description="32 drawn image-caption pairs in a plain folder (held out from cc12m-test)",
        samples=32,
        seed=2_014,
        layout="folder",
        key_prefix="val-",
    ),
}


@dataclasses.dataclass(frozen=True)
class DrawnSample:
    """One generated sample: its key, the encoded image, its extension and its caption."""

    key: str
    """The sample's key: the file name before the first dot."""
    image: bytes
    """The encoded image file's bytes."""
    extension: str
    """The image file's extension (``jpg`` or ``png``)."""
    caption: str
    """The caption that describes the drawn shapes."""
    width: int
    """Image width in pixels."""
    height: int
    """Image height in pixels."""
    mode: str
    """PIL mode the image is stored in (RGB, L, P, RGBA or CMYK)."""


def draw_sample(rng: random.Random, *, key: str) -> DrawnSample:
    """Draw one image with ``rng`` and describe it; the same ``rng`` state gives the same bytes."""
    from PIL import Image, ImageDraw

    width, height = rng.choice(SIZES)
    mode, extension = rng.choice(MODES)
    background = rng.choice(sorted(COLOURS))
    image = Image.new("RGB", (width, height), COLOURS[background])
    draw = ImageDraw.Draw(image)
    phrases = []
    for _ in range(rng.randint(1, 3)):
        colour = rng.choice([name for name in sorted(COLOURS) if name != background])
        shape = rng.choice(sorted(DRAW_SHAPE))
        small = rng.random() < 0.5
        extent = rng.randint(24, 64) if small else rng.randint(72, 128)
        x, y = rng.randint(0, width - extent), rng.randint(0, height - extent)
        DRAW_SHAPE[shape](draw, (x, y, x + extent, y + extent), COLOURS[colour])
        phrases.append(_with_article(f"{'small ' if small else ''}{colour} {shape}"))
    caption = f"{' and '.join(phrases)} on {_with_article(background)} background"
    if mode != "RGB":
        image = image.convert(mode)
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG" if extension == "jpg" else "PNG")
    return DrawnSample(key, buffer.getvalue(), extension, caption, width, height, mode)


def _with_article(phrase: str) -> str:
    """``phrase`` after "a", or "an" before a vowel ("an orange circle")."""
    return f"{'an' if phrase[0] in 'aeiou' else 'a'} {phrase}"


def _triangle(draw: Any, box: tuple[int, int, int, int], fill: tuple) -> None:
    """A triangle standing on the bottom of ``box``, its apex at the top centre."""
    left, top, right, bottom = box
    draw.polygon([((left + right) // 2, top), (left, bottom), (right, bottom)], fill=fill)


def _stripe(draw: Any, box: tuple[int, int, int, int], fill: tuple) -> None:
    """A band across the middle third of ``box``."""
    left, top, right, bottom = box
    third = (bottom - top) // 3
    draw.rectangle((left, top + third, right, bottom - third), fill=fill)


DRAW_SHAPE: dict[str, Callable[[Any, tuple[int, int, int, int], tuple], None]] = {
    "circle": lambda draw, box, fill: draw.ellipse(box, fill=fill),
    "square": lambda draw, box, fill: draw.rectangle(box, fill=fill),
    "triangle": _triangle,
    "stripe": _stripe,
}
"""Shape name (as captions say it) -> how it is drawn into a box on a ``PIL.ImageDraw``."""


def drawn_samples(name: str) -> Iterator[DrawnSample]:
    """Every sample of the generated set ``name``, in order."""
    spec = GENERATED_SETS[name]
    rng = random.Random(spec.seed)
    for index in range(spec.samples):
        yield draw_sample(rng, key=f"{spec.key_prefix}{index:05d}")


def write_generated_set(name: str, folder: Path) -> None:
    """Write the set ``name`` into the new, empty ``folder`` (its manifest last)."""
    spec = GENERATED_SETS[name]
    samples = list(drawn_samples(name))
    if spec.layout == "shards":
        for shard, start in enumerate(range(0, len(samples), spec.samples_per_shard)):
            _write_shard(folder / f"cc12m-train-{shard:04d}.tar",
                         samples[start : start + spec.samples_per_shard])  # fmt: skip
    else:
        for sample in samples:
            (folder / f"{sample.key}.{sample.extension}").write_bytes(sample.image)
            (folder / f"{sample.key}.txt").write_bytes(sample.caption.encode("utf-8"))
    files = {path.name: path.stat().st_size for path in sorted(folder.iterdir())}
    manifest = {"name": name, "version": GENERATOR_VERSION, "files": files}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def _write_shard(path: Path, samples: list[DrawnSample]) -> None:
    """One webdataset tar: each sample's members side by side, with fixed metadata so the bytes
    do not depend on when or by whom the shard was written."""
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tar:
        for sample in samples:
            meta = {"key": sample.key, "width": sample.width, "height": sample.height,
                    "mode": sample.mode, "caption": sample.caption}  # fmt: skip
            members = (
                (sample.extension, sample.image),
                ("txt", sample.caption.encode("utf-8")),
                ("json", json.dumps(meta, sort_keys=True).encode("utf-8")),
            )
            for extension, data in members:
                info = tarfile.TarInfo(f"{sample.key}.{extension}")
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))


class GeneratedSetError(ValueError):
    """The folder where a generated set belongs holds something else."""


def ensure_generated_set(name: str, root: Path) -> Path:
    """The folder of set ``name`` under ``root``, written first if it is not there yet.

    The set is drawn into a private temporary folder and renamed into place, so a reader never
    sees half a set and processes that start together (one per rank) agree on one copy.
    """
    folder = root / f"{name}-v{GENERATOR_VERSION}"
    if _is_complete(folder, name):
        return folder
    if folder.exists():
        raise GeneratedSetError(
            f"{folder} exists but is not a complete {name!r} set written by titan (its "
            f"{MANIFEST} is missing or does not match); titan does not overwrite it: move it "
            "away, or set dataset_path to the data you meant"
        )
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        write_generated_set(name, staging)
        try:
            os.rename(staging, folder)
        except OSError:
            # Another process renamed its copy first; use that one if it is complete.
            if not _is_complete(folder, name):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _is_complete(folder: Path, name: str) -> bool:
    """Whether ``folder`` holds the set ``name`` as its manifest lists it."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        if manifest.get("name") != name or manifest.get("version") != GENERATOR_VERSION:
            return False
        return all((folder / file).stat().st_size == size for file, size in files.items())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def main(argv: list[str]) -> int:
    """``python -m titan.models.flux.generated_images NAME OUT_DIR``: write set NAME into a new
    folder OUT_DIR."""
    if len(argv) != 2 or argv[0] not in GENERATED_SETS:
        print(f"usage: python -m titan.models.flux.generated_images "
              f"{{{','.join(GENERATED_SETS)}}} OUT_DIR", file=sys.stderr)  # fmt: skip
        return 2
    out = Path(argv[1])
    if out.exists():
        print(f"error: {out} exists; give a new folder", file=sys.stderr)
        return 2
    out.mkdir(parents=True)
    write_generated_set(argv[0], out)
    print(f"wrote {GENERATED_SETS[argv[0]].description} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

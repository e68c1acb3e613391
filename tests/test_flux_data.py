"""Flux data: the drawn image sets, the loader (preprocessing, guidance dropout, ranks, resume),
the T5/CLIP tokenizers and encoders read from local folders only, and hostile inputs."""

from __future__ import annotations

import io
import json
import logging
import random
import socket
import tarfile
from pathlib import Path

import pytest
import torch
from PIL import Image

from titan.models.flux.configs import Encoder
from titan.models.flux.flux_datasets import STRATIFIED_TIMESTEPS, FluxDataLoader
from titan.models.flux.generated_images import (
    GENERATED_SETS,
    MANIFEST,
    GeneratedSetError,
    drawn_samples,
    ensure_generated_set,
    main as generate_main,
    write_generated_set,
)
from titan.models.flux.image_samples import preprocess_image, sample_rng
from titan.models.flux.image_sources import FluxDatasetError
from titan.models.flux.tokenizer import (
    CLIP_MAX_LENGTH,
    EncoderPathError,
    build_flux_tokenizers,
)

ASSETS_TOKENIZER = str(Path(__file__).parent / "assets" / "tokenizer")
TEST_ENCODER = Encoder(test_mode=True, max_t5_encoding_len=24)


@pytest.fixture(scope="module")
def generated_root(tmp_path_factory) -> Path:
    """One copy of every drawn set, shared by the loader tests of this module."""
    root = tmp_path_factory.mktemp("generated")
    for name in GENERATED_SETS:
        ensure_generated_set(name, root)
    return root


@pytest.fixture(scope="module")
def tokenizers():
    return build_flux_tokenizers(TEST_ENCODER, hf_assets_path=ASSETS_TOKENIZER)


def loader(generated_root: Path, *, rank: int = 0, world: int = 1, batch: int = 4, seed: int = 0,
           **settings) -> FluxDataLoader:  # fmt: skip
    """A Flux loader over small images (img_size 32 keeps preprocessing cheap)."""
    settings.setdefault("img_size", 32)
    settings.setdefault("encoder", TEST_ENCODER)
    config = FluxDataLoader.Config(**settings)
    return config.build(
        dp_world_size=world,
        dp_rank=rank,
        local_batch_size=batch,
        hf_assets_path=ASSETS_TOKENIZER,
        seed=seed,
        generated_data_dir=generated_root,
    )


def everything(data: FluxDataLoader) -> list[tuple[dict, torch.Tensor]]:
    return list(data)


def image_bytes(size: tuple[int, int], *, mode: str = "RGB", colour=(200, 30, 30),
                fmt: str = "PNG") -> bytes:  # fmt: skip
    buffer = io.BytesIO()
    Image.new(mode, size, colour).save(buffer, format=fmt)
    return buffer.getvalue()


def write_pairs(folder: Path, count: int, *, size: int = 8) -> list[str]:
    """``count`` small image-caption pairs with distinct captions; returns the captions."""
    folder.mkdir(parents=True, exist_ok=True)
    captions = []
    for index in range(count):
        (folder / f"{index:03d}.png").write_bytes(
            image_bytes((size, size), colour=(index * 7 % 256, 40, 90))
        )
        captions.append(f"sample number {index}")
        (folder / f"{index:03d}.txt").write_text(captions[-1], encoding="utf-8")
    return captions


def write_shard(path: Path, members: list[tuple[str, bytes]]) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


# --- the drawn sets ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(GENERATED_SETS))
def test_a_drawn_set_is_the_same_bytes_every_time(tmp_path, name):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    write_generated_set(name, first)
    write_generated_set(name, second)
    files = sorted(path.name for path in first.iterdir())
    assert files == sorted(path.name for path in second.iterdir()) and len(files) > 2
    for file in files:
        assert (first / file).read_bytes() == (second / file).read_bytes(), file


def test_drawn_sets_vary_size_mode_and_describe_their_images():
    samples = list(drawn_samples("cc12m-test"))
    assert len(samples) == GENERATED_SETS["cc12m-test"].samples
    assert {s.mode for s in samples} >= {"RGB", "L", "P", "RGBA", "CMYK"}
    shapes = {(s.width > s.height) - (s.width < s.height) for s in samples}
    assert shapes == {-1, 0, 1}  # tall, square and wide
    for sample in samples:
        image = Image.open(io.BytesIO(sample.image))
        assert image.size == (sample.width, sample.height) and min(image.size) >= 256
        assert sample.caption.endswith("background") and sample.caption.startswith("a ")
    held_out = {s.caption for s in drawn_samples("coco-validation")}
    assert len(held_out) > 20


def test_a_drawn_set_is_written_once_and_a_foreign_folder_is_never_touched(tmp_path):
    folder = ensure_generated_set("coco-validation", tmp_path)
    stamp = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert ensure_generated_set("coco-validation", tmp_path) == folder
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == stamp
    assert [p.name for p in tmp_path.iterdir()] == [folder.name]  # no staging folder left
    # A folder of the same name that titan did not write (or a damaged copy) is refused.
    foreign = tmp_path / "other"
    (foreign / folder.name).mkdir(parents=True)
    (foreign / folder.name / "mine.txt").write_text("user data")
    (folder / sorted(stamp)[1]).write_bytes(b"changed")
    for root in (foreign, tmp_path):
        with pytest.raises(GeneratedSetError, match="does not overwrite"):
            ensure_generated_set("coco-validation", root)
    assert (foreign / folder.name / "mine.txt").read_text() == "user data"
    assert (folder / sorted(stamp)[1]).read_bytes() == b"changed"


def test_the_generator_script_writes_a_new_folder_only(tmp_path, capsys):
    assert generate_main(["cc12m-test", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / MANIFEST).is_file()
    assert generate_main(["cc12m-test", str(tmp_path / "out")]) == 2
    assert generate_main(["no-such-set", str(tmp_path / "x")]) == 2
    assert "exists" in capsys.readouterr().err and not (tmp_path / "x").exists()


# --- reading shards and folders ------------------------------------------------------------


def test_the_loader_reads_the_drawn_shards_and_folder(generated_root):
    for name, layout in (("cc12m-test", "shards"), ("coco-validation", "folder")):
        assert GENERATED_SETS[name].layout == layout
        data = loader(generated_root, dataset=name, infinite=False, batch=8)
        batches = everything(data)
        prompts = [p for inputs, _ in batches for p in inputs["prompt"]]
        assert prompts == [s.caption for s in drawn_samples(name)]
        inputs, images = batches[0]
        assert images.shape == (8, 3, 32, 32) and images.dtype == torch.float32
        assert inputs["t5_tokens"].shape == (8, 24) and inputs["t5_tokens"].dtype == torch.long
        assert inputs["clip_tokens"].shape == (8, CLIP_MAX_LENGTH)
        assert -1.0 <= images.min() and images.max() <= 1.0
        assert "timestep" not in inputs and data.skipped == {}


def test_dataset_path_may_be_one_shard_a_folder_of_shards_or_of_pairs(generated_root, tmp_path):
    shards = generated_root / "cc12m-test-v1"
    captions = write_pairs(tmp_path / "pairs" / "nested", 5)
    cases = {
        str(shards / "cc12m-train-0001.tar"): [s.caption for s in drawn_samples("cc12m-test")][16:],
        str(shards): [s.caption for s in drawn_samples("cc12m-test")],
        str(tmp_path / "pairs"): captions,
    }
    for path, expected in cases.items():
        data = loader(generated_root, dataset="cc12m-wds", dataset_path=path, infinite=False,
                      img_size=8)  # fmt: skip
        assert [p for inputs, _ in data for p in inputs["prompt"]] == expected, path


# --- preprocessing -------------------------------------------------------------------------


def normalised(values) -> torch.Tensor:
    """Pixel values 0..255 in [-1, 1], computed in float32 as the loader does."""
    return torch.tensor(values, dtype=torch.float32) / 255.0 * 2.0 - 1.0


def test_a_wide_image_keeps_its_height_and_is_cut_at_a_seeded_offset():
    # 512x256 to 256: no resize, so the cut is exact; red encodes the column.
    image = Image.new("RGB", (512, 256))
    image.putdata([(x % 256, y, 7) for y in range(256) for x in range(512)])
    out = preprocess_image(image, size=256, rng=sample_rng(seed=3, epoch=0, index=5))
    left = sample_rng(seed=3, epoch=0, index=5).randint(0, 256)
    assert out.shape == (3, 256, 256) and out.dtype == torch.float32
    columns = normalised([(left + x) % 256 for x in range(256)])
    assert torch.equal(out[0, 0], columns) and torch.equal(out[0, 255], columns)
    assert torch.equal(out[1, :, 0], normalised(list(range(256))))
    assert torch.all(out[2] == normalised(7))


@pytest.mark.parametrize(
    ("size", "split", "first", "second"),
    [
        ((300, 200), "rows", (255, 0, 0), (0, 0, 255)),  # wide: top red, bottom blue
        ((200, 500), "columns", (0, 255, 0), (255, 255, 255)),  # tall: left green, right white
    ],
)
def test_the_short_side_is_resized_to_img_size_whatever_the_crop(size, split, first, second):
    image = Image.new("RGB", size, first)
    half = Image.new("RGB", (size[0], size[1] // 2) if split == "rows" else (size[0] // 2, size[1]),
                     second)  # fmt: skip
    image.paste(half, (0, size[1] // 2) if split == "rows" else (size[0] // 2, 0))
    for index in range(4):  # any crop offset along the long side gives the same picture
        out = preprocess_image(image, size=100, rng=random.Random(index))
        assert out.shape == (3, 100, 100)
        corner_a, corner_b = out[:, 0, 0], out[:, 99, 99]
        assert torch.equal(corner_a, normalised(first))
        assert torch.equal(corner_b, normalised(second))
        across = out[:, 99, 0] if split == "rows" else out[:, 0, 99]
        assert torch.equal(across, corner_b)


@pytest.mark.parametrize(
    ("mode", "colour", "rgb"),
    [
        ("L", 64, (64, 64, 64)),
        ("RGBA", (10, 20, 30, 255), (10, 20, 30)),
        ("CMYK", (0, 0, 0, 0), (255, 255, 255)),
        ("1", 1, (255, 255, 255)),
    ],
)
def test_other_modes_become_rgb(mode, colour, rgb):
    out = preprocess_image(Image.new(mode, (260, 300), colour), size=64, rng=random.Random(0))
    assert out.shape == (3, 64, 64)
    for channel, value in enumerate(rgb):
        assert torch.all(out[channel] == normalised(value))


def test_an_image_below_img_size_on_either_side_is_no_sample():
    for size in ((255, 400), (400, 255), (10, 10)):
        assert preprocess_image(Image.new("RGB", size), size=256, rng=random.Random(0)) is None

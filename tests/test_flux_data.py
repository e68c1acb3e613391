"""Flux data: the drawn image sets, the loader (preprocessing, guidance dropout, ranks, resume),
the T5/CLIP tokenizers and encoders read from local folders only, and hostile inputs."""

from __future__ import annotations

import io
import logging
import os
import random
import socket
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch
from PIL import Image

from titan.config.configurable import NotBuildableError
from titan.models.flux.configs import Encoder
from titan.models.flux.flux_datasets import STRATIFIED_TIMESTEPS, FluxDataLoader
from titan.models.flux.generated_images import (
    GENERATED_SETS,
    MANIFEST,
    GeneratedSetError,
    drawn_samples,
    ensure_generated_set,
    write_generated_set,
)
from titan.models.flux.generated_images import (
    main as generate_main,
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


@pytest.fixture
def no_network(monkeypatch):
    """Offline mode, and every socket connection recorded and refused."""
    attempts: list[object] = []

    def refuse(self, address, *args):
        attempts.append(address)
        raise OSError("network access in a test")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    return attempts


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
        assert sample.caption.endswith("background") and sample.caption.startswith(("a ", "an "))
        assert " a orange" not in sample.caption and sample.caption.count(" on ") == 1
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


def test_processes_drawing_one_set_together_agree_on_one_complete_copy(tmp_path):
    # Every rank of a run may draw the set at once; whichever renames first, all use its copy.
    probe = (
        "import sys; from pathlib import Path\n"
        "from titan.models.flux.generated_images import ensure_generated_set\n"
        "print(ensure_generated_set('cc12m-test', Path(sys.argv[1])))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    runs = [subprocess.Popen([sys.executable, "-c", probe, str(tmp_path)], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(3)]  # fmt: skip
    outputs = [run.communicate() for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0], outputs
    folders = {out.strip() for out, _ in outputs}
    assert [p.name for p in tmp_path.iterdir()] == ["cc12m-test-v1"]  # no staging folder left
    reference = tmp_path / "reference"
    reference.mkdir()
    write_generated_set("cc12m-test", reference)
    assert folders == {str(tmp_path / "cc12m-test-v1")}
    for file in reference.iterdir():
        assert (tmp_path / "cc12m-test-v1" / file.name).read_bytes() == file.read_bytes()


def test_without_a_folder_for_them_drawn_sets_go_to_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    config = FluxDataLoader.Config(dataset="coco-validation", img_size=32, encoder=TEST_ENCODER)
    data = config.build(dp_world_size=1, dp_rank=0, local_batch_size=2,
                        hf_assets_path=ASSETS_TOKENIZER)  # fmt: skip
    assert data.source.folder == tmp_path / "cache" / "titan" / "flux_data" / "coco-validation-v1"
    assert len(next(iter(data))[1]) == 2


def test_the_generator_script_writes_a_new_folder_only(tmp_path, capsys):
    assert generate_main(["cc12m-test", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / MANIFEST).is_file()
    assert generate_main(["cc12m-test", str(tmp_path / "out")]) == 2
    assert generate_main(["no-such-set", str(tmp_path / "x")]) == 2
    assert "exists" in capsys.readouterr().err and not (tmp_path / "x").exists()


# --- reading shards and folders ------------------------------------------------------------


def test_the_loader_reads_the_drawn_shards_and_folder(generated_root, no_network):
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
    assert no_network == []


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


# --- guidance dropout, ranks, resume, seeds ------------------------------------------------


@pytest.fixture(scope="module")
def tiny_pairs(tmp_path_factory) -> tuple[Path, list[str]]:
    """20 distinct 8x8 pairs: cheap enough to draw thousands of samples from."""
    folder = tmp_path_factory.mktemp("pairs")
    return folder, write_pairs(folder, 20)


@pytest.mark.parametrize("prob", [0.0, 0.25, 0.447, 1.0])
def test_guidance_dropout_drops_each_text_independently_at_the_set_rate(
    generated_root, tiny_pairs, tokenizers, prob
):
    folder, _ = tiny_pairs
    data = loader(generated_root, dataset_path=str(folder), img_size=8, batch=50,
                  classifier_free_guidance_prob=prob)  # fmt: skip
    batches = [batch for batch, _ in zip(data, range(40), strict=False)]  # 2,000 samples
    t5 = torch.cat([inputs["t5_tokens"] for inputs, _ in batches])
    clip = torch.cat([inputs["clip_tokens"] for inputs, _ in batches])
    t5_dropped = (t5 == torch.tensor(tokenizers.empty_t5())).all(dim=1)
    clip_dropped = (clip == torch.tensor(tokenizers.empty_clip())).all(dim=1)
    samples = len(t5)
    assert samples == 2000
    # Binomial standard deviation at n=2000 is at most 0.011; the draws are seeded, so these
    # bounds hold or fail the same way on every run.
    assert abs(t5_dropped.float().mean().item() - prob) < 0.035
    assert abs(clip_dropped.float().mean().item() - prob) < 0.035
    both = (t5_dropped & clip_dropped).float().mean().item()
    assert abs(both - prob * prob) < 0.035
    if prob == 0.0:
        assert not t5_dropped.any() and not clip_dropped.any()


def test_two_ranks_share_out_the_samples_without_overlap(generated_root, tiny_pairs):
    folder, captions = tiny_pairs
    for dataset, path, expected in (
        ("cc12m-test", None, [s.caption for s in drawn_samples("cc12m-test")]),
        ("cc12m-wds", str(folder), captions),
    ):
        seen = []
        for rank in (0, 1):
            data = loader(generated_root, rank=rank, world=2, dataset=dataset,
                          dataset_path=path, infinite=False, img_size=8)  # fmt: skip
            seen.append([p for inputs, _ in data for p in inputs["prompt"]])
        assert seen[0] == expected[0::2] and seen[1] == expected[1::2]
    # Three ranks over 20 samples: 7, 7 and 6, still disjoint and complete.
    shares = [
        [p for inputs, _ in loader(generated_root, rank=r, world=3, dataset_path=str(folder),
                                   infinite=False, img_size=8) for p in inputs["prompt"]]
        for r in range(3)
    ]  # fmt: skip
    assert [len(s) for s in shares] == [7, 7, 6] and sorted(sum(shares, [])) == sorted(captions)


def batches_equal(a: tuple[dict, torch.Tensor], b: tuple[dict, torch.Tensor]) -> bool:
    (inputs_a, images_a), (inputs_b, images_b) = a, b
    return (
        inputs_a.keys() == inputs_b.keys()
        and all(
            torch.equal(v, inputs_b[k]) if isinstance(v, torch.Tensor) else v == inputs_b[k]
            for k, v in inputs_a.items()
        )
        and torch.equal(images_a, images_b)
    )


@pytest.mark.parametrize(
    ("settings", "taken"),
    [
        ({"dataset": "cc12m-test"}, 2),  # mid-pass, both ranks' random crops and dropout
        ({"dataset": "cc12m-test"}, 5),  # 15 of a rank's 16: the next batch crosses passes
        ({"dataset": "coco-validation", "generate_timesteps": True, "infinite": False}, 1),
    ],
)
def test_a_resumed_loader_yields_the_batch_an_uninterrupted_one_would(
    generated_root, settings, taken
):
    for rank in (0, 1):
        common = dict(rank=rank, world=2, batch=3, seed=11, classifier_free_guidance_prob=0.5)
        first = loader(generated_root, **common, **settings)
        stream = iter(first)
        for _ in range(taken):
            next(stream)
        state = first.state_dict()
        expected = next(stream)
        resumed = loader(generated_root, **common, **settings)
        resumed.load_state_dict(state)
        assert batches_equal(next(iter(resumed)), expected)
        assert resumed.position == first.position
        assert set(state) == {f"dp_rank_{rank}", "world_size"}


def test_the_seed_decides_crops_and_dropout_and_nothing_else_does(generated_root):
    def first_batches(seed: int) -> list:
        data = loader(generated_root, seed=seed, batch=8, classifier_free_guidance_prob=0.5)
        return [batch for batch, _ in zip(data, range(2), strict=False)]

    same, again, other = first_batches(5), first_batches(5), first_batches(6)
    assert all(batches_equal(a, b) for a, b in zip(same, again, strict=True))
    assert not all(batches_equal(a, b) for a, b in zip(same, other, strict=True))
    assert same[0][0]["prompt"] == other[0][0]["prompt"]  # the order is the data's


def test_validation_samples_get_the_stratified_timesteps_in_turn(generated_root):
    data = loader(generated_root, dataset="coco-validation", infinite=False, batch=5,
                  generate_timesteps=True)  # fmt: skip
    timesteps = torch.cat([inputs["timestep"] for inputs, _ in data])
    assert len(timesteps) == GENERATED_SETS["coco-validation"].samples
    assert timesteps.dtype == torch.float32
    assert timesteps.tolist() == [STRATIFIED_TIMESTEPS[i % 8] for i in range(len(timesteps))]
    assert STRATIFIED_TIMESTEPS == tuple(1 / 8 * (i + 0.5) for i in range(8))


def test_a_finite_loader_ends_with_a_short_batch_and_starts_over_when_asked(generated_root):
    data = loader(generated_root, dataset="coco-validation", infinite=False, batch=12)
    sizes = [len(images) for _, images in data]
    assert sizes == [12, 12, 8]
    assert [len(images) for _, images in data] == sizes  # a second pass, from the start


@pytest.mark.parametrize(
    ("state", "message"),
    [
        ({"dp_rank_0": b"{}", "world_size": 2}, "saved with 2 data-parallel ranks"),
        ({"dp_rank_1": b"{}", "world_size": 1}, "no position for dp_rank_0"),
        ({"dp_rank_0": "text", "world_size": 1}, "is not bytes"),
        ({"dp_rank_0": b"\xff{", "world_size": 1}, "unusable"),
        ({"dp_rank_0": b'{"epoch": -1}', "world_size": 1}, "epoch=-1"),
        ({"dp_rank_0": b'{"colour": 1}', "world_size": 1}, "unusable"),
    ],
)
def test_an_unusable_saved_state_is_a_clear_error(generated_root, state, message):
    with pytest.raises(FluxDatasetError, match=message):
        loader(generated_root).load_state_dict(state)


# --- tokenizers and encoders, from local folders only --------------------------------------


def test_test_mode_tokenizers_pad_and_cut_to_their_lengths(tokenizers):
    long_caption = " ".join(["a red circle on a blue background"] * 30)
    for tokenizer, length in ((tokenizers.t5, 24), (tokenizers.clip, CLIP_MAX_LENGTH)):
        short, long = tokenizer.encode("a red circle"), tokenizer.encode(long_caption)
        assert len(short) == len(long) == len(tokenizer.encode("")) == length
        assert short[-1] == 0 and 0 not in long[1:]  # padded with 0; cut, never padded
        assert long[0] == short[0] and long[1:6] == short[1:6]


def save_tiny_pretrained(folder: Path, *, kind: str, width: int) -> None:
    """A tiny T5 or CLIP text encoder with its own word-level tokenizer, as save_pretrained
    writes them."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        CLIPTextConfig,
        CLIPTextModel,
        PreTrainedTokenizerFast,
        T5Config,
        T5EncoderModel,
    )

    words = "a red blue green circle square triangle on background small".split()
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{w: i + 3 for i, w in enumerate(words)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    torch.manual_seed(0)
    if kind == "t5":
        model = T5EncoderModel(T5Config(vocab_size=len(vocab), d_model=width, d_kv=4, d_ff=16,
                                        num_layers=1, num_heads=2))  # fmt: skip
    else:
        model = CLIPTextModel(CLIPTextConfig(vocab_size=len(vocab), hidden_size=width,
                                             intermediate_size=16, num_hidden_layers=1,
                                             num_attention_heads=2, eos_token_id=1,
                                             bos_token_id=0, pad_token_id=0))  # fmt: skip
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


@pytest.fixture(scope="module")
def pretrained_folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pretrained")
    folders = {"t5": root / "t5", "clip": root / "clip"}
    save_tiny_pretrained(folders["t5"], kind="t5", width=16)
    save_tiny_pretrained(folders["clip"], kind="clip", width=12)
    return folders


def test_pretrained_tokenizers_and_encoders_load_from_save_pretrained_folders(
    pretrained_folders, no_network
):
    from transformers import CLIPTextModel, T5EncoderModel

    from titan.models.flux.encoders import build_text_encoders

    encoder = Encoder(t5_encoder=str(pretrained_folders["t5"]),
                      clip_encoder=str(pretrained_folders["clip"]), max_t5_encoding_len=10)  # fmt: skip
    tokenizers = build_flux_tokenizers(encoder, hf_assets_path=None)
    t5_tokens = torch.tensor([tokenizers.t5.encode("a red circle"), tokenizers.t5.encode("")])
    clip_tokens = torch.tensor(
        [tokenizers.clip.encode("a small blue square on a red background")] * 2
    )
    assert t5_tokens[0].tolist() == [3, 4, 7] + [0] * 7 and clip_tokens.shape == (2, 77)
    encoders = build_text_encoders(encoder, tokenizers=tokenizers, context_in_dim=16, vec_in_dim=12)
    t5_out, clip_out = encoders.t5(t5_tokens), encoders.clip(clip_tokens)
    assert t5_out.shape == (2, 10, 16) and clip_out.shape == (2, 12)
    assert t5_out.dtype == clip_out.dtype == torch.float32
    assert not any(p.requires_grad for p in encoders.t5.parameters())
    assert not encoders.clip.train().training and not encoders.clip.hf_module.training
    # The same numbers as the saved models themselves.
    saved_t5 = T5EncoderModel.from_pretrained(pretrained_folders["t5"]).eval()
    saved_clip = CLIPTextModel.from_pretrained(pretrained_folders["clip"]).eval()
    with torch.no_grad():
        assert torch.equal(saved_t5(input_ids=t5_tokens).last_hidden_state, t5_out)
        assert torch.equal(saved_clip(input_ids=clip_tokens).pooler_output, clip_out)
    # A model whose width is not the Flux model's is named with the setting it would feed.
    with pytest.raises(EncoderPathError, match=r"encoder\.clip_encoder .* vec_in_dim is 768"):
        build_text_encoders(encoder, tokenizers=tokenizers, context_in_dim=16, vec_in_dim=768)
    assert no_network == []


@pytest.mark.parametrize(("context_in_dim", "vec_in_dim"), [(64, 32), (4096, 768)])
def test_test_mode_encoders_are_tiny_seeded_and_as_wide_as_the_model(
    tokenizers, no_network, context_in_dim, vec_in_dim
):
    from titan.models.flux.encoders import build_text_encoders

    state = torch.random.get_rng_state()
    built = [build_text_encoders(TEST_ENCODER, tokenizers=tokenizers,
                                 context_in_dim=context_in_dim, vec_in_dim=vec_in_dim)
             for _ in range(2)]  # fmt: skip
    assert torch.equal(torch.random.get_rng_state(), state)  # the run's random state is untouched
    t5_tokens = torch.tensor([tokenizers.t5.encode("a red circle")] * 3)
    clip_tokens = torch.tensor([tokenizers.clip.encode("a red circle")] * 3)
    outputs = [(e.t5(t5_tokens), e.clip(clip_tokens)) for e in built]
    assert outputs[0][0].shape == (3, 24, context_in_dim) and outputs[0][0].dtype == torch.float32
    assert outputs[0][1].shape == (3, vec_in_dim) and outputs[0][1].dtype == torch.float32
    assert torch.equal(outputs[0][0], outputs[1][0]) and torch.equal(outputs[0][1], outputs[1][1])
    assert sum(p.numel() for p in built[0].t5.parameters()) < 10_000_000
    assert not any(p.requires_grad for p in built[0].clip.parameters())
    bf16 = built[0].t5.to(torch.bfloat16)(t5_tokens)
    assert bf16.dtype == torch.bfloat16
    assert no_network == []


@pytest.mark.parametrize(
    ("settings", "hf_assets_path", "message"),
    [
        ({"t5_encoder": "./no/such/t5"}, None, r"encoder\.t5_encoder = './no/such/t5' does not"),
        ({"clip_encoder": "/no/such/clip"}, None, r"encoder\.clip_encoder = '/no/such/clip'"),
        ({"t5_encoder": "titan-tests/no-such-encoder"}, None,
         r"encoder\.t5_encoder = 'titan-tests/no-such-encoder' is neither a local folder nor"),
        ({"test_mode": True}, None, "hf_assets_path, which is not set"),
        ({"test_mode": True}, "/no/such/assets", "hf_assets_path.*/no/such/assets"),
    ],
)  # fmt: skip
def test_a_missing_encoder_or_tokenizer_names_its_setting(
    pretrained_folders, no_network, settings, hf_assets_path, message
):
    settings = {"t5_encoder": str(pretrained_folders["t5"]),
                "clip_encoder": str(pretrained_folders["clip"]), **settings}  # fmt: skip
    with pytest.raises(EncoderPathError, match=message):
        build_flux_tokenizers(Encoder(**settings), hf_assets_path=hf_assets_path)
    assert no_network == []


def test_a_folder_without_an_encoder_names_its_setting(pretrained_folders, tmp_path, no_network):
    from titan.models.flux.encoders import build_text_encoders

    (tmp_path / "config.json").write_text("{not json")
    encoder = Encoder(t5_encoder=str(tmp_path), clip_encoder=str(pretrained_folders["clip"]))
    tokenizers = build_flux_tokenizers(
        Encoder(t5_encoder=str(pretrained_folders["t5"]),
                clip_encoder=str(pretrained_folders["clip"])), hf_assets_path=None)  # fmt: skip
    with pytest.raises(EncoderPathError, match=r"cannot read the encoder of encoder\.t5_encoder"):
        build_text_encoders(encoder, tokenizers=tokenizers, context_in_dim=16, vec_in_dim=12)
    with pytest.raises(EncoderPathError, match=r"cannot read the tokenizer of encoder\.t5_encoder"):
        build_flux_tokenizers(encoder, hf_assets_path=None)
    assert no_network == []


# --- hostile inputs ------------------------------------------------------------------------


def good_members(count: int, *, start: int = 0) -> list[tuple[str, bytes]]:
    members = []
    for index in range(start, start + count):
        members.append((f"{index:03d}.png", image_bytes((8, 8))))
        members.append((f"{index:03d}.txt", f"good sample {index}".encode()))
    return members


def read_all(
    generated_root: Path, path: Path, *, world: int = 1
) -> tuple[list[str], FluxDataLoader]:
    data = loader(generated_root, world=world, dataset="cc12m-wds", dataset_path=str(path),
                  infinite=False, img_size=8)  # fmt: skip
    return [p for inputs, _ in data for p in inputs["prompt"]], data


def test_damaged_samples_in_a_shard_are_skipped_counted_and_reported(
    generated_root, tmp_path, caplog
):
    jpeg = image_bytes((8, 8), fmt="JPEG")
    members = good_members(2) + [
        ("100.jpg", b"\xff\xd8 not really a jpeg"),  # corrupt image
        ("100.txt", b"caption of a corrupt image"),
        ("101.jpg", jpeg[: len(jpeg) // 2]),  # truncated image
        ("101.txt", b"caption of a truncated image"),
        ("102.png", image_bytes((8, 8))),
        ("102.txt", b"caf\xe9 in latin-1"),  # caption that is not UTF-8
        ("103.png", image_bytes((4, 9))),  # below img_size
        ("103.txt", b"too small"),
        ("104.png", image_bytes((8, 8))),  # no caption
        ("105.txt", b"no image"),
        ("../../escape.png", image_bytes((8, 8))),  # a hostile name is only a key
        ("../../escape.txt", b"a hostile member name"),
    ] + good_members(1, start=200)  # fmt: skip
    write_shard(tmp_path / "shard.tar", members)
    with caplog.at_level(logging.WARNING, logger="titan.models.flux.flux_datasets"):
        prompts, data = read_all(generated_root, tmp_path / "shard.tar")
    assert prompts == ["good sample 0", "good sample 1", "a hostile member name", "good sample 200"]
    assert data.skipped == {"bad_image": 2, "bad_caption": 1, "too_small": 1, "no_caption": 1,
                            "no_image": 1}  # fmt: skip
    report = data.skip_report()
    assert "skipped 6 samples" in report and "2 (the image cannot be decoded)" in report
    logged = caplog.text
    assert "shard.tar:100" in logged and "shard.tar:102.txt" in logged and "is 4x9" in logged
    assert "the caption is not UTF-8 text" in report and "Traceback" not in logged
    assert not (tmp_path.parent / "escape.png").exists() and sorted(os.listdir(tmp_path)) == [
        "shard.tar"
    ]


def test_a_shard_that_is_not_a_tar_or_breaks_off_is_skipped_and_reported(generated_root, tmp_path):
    write_shard(tmp_path / "a.tar", good_members(2))
    (tmp_path / "b.tar").write_text("this is not a tar archive\n" * 40)
    write_shard(tmp_path / "c.tar", good_members(3, start=10))
    whole = (tmp_path / "c.tar").read_bytes()
    (tmp_path / "c.tar").write_bytes(whole[: 512 * 6 + 100])  # breaks off in its 3rd member
    write_shard(tmp_path / "d.tar", good_members(1, start=20))
    prompts, data = read_all(generated_root, tmp_path)
    assert prompts == ["good sample 0", "good sample 1", "good sample 10", "good sample 20"]
    # c.tar's 011.png came whole, its caption did not.
    assert data.skipped == {"unreadable_shard": 2, "no_caption": 1}
    assert "2 (a shard is not a tar archive or breaks off" in data.skip_report()


@pytest.mark.parametrize("infinite", [False, True])
def test_a_dataset_without_one_usable_sample_is_an_error_not_a_hang(
    generated_root, tmp_path, infinite
):
    (tmp_path / "only.tar").write_bytes(b"\x00garbage" * 100)
    (tmp_path / "pairs").mkdir()
    (tmp_path / "pairs" / "0.png").write_bytes(b"not a png")
    (tmp_path / "pairs" / "0.txt").write_text("broken")
    for path, reason in ((tmp_path / "only.tar", "is not a tar archive"),
                         (tmp_path / "pairs", "cannot be decoded")):  # fmt: skip
        data = loader(generated_root, dataset="cc12m-wds", dataset_path=str(path),
                      infinite=infinite, img_size=8)  # fmt: skip
        with pytest.raises(FluxDatasetError, match=f"no usable sample in a whole pass.*{reason}"):
            next(iter(data))


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.mkdir(), "holds no .tar shards and no image files"),
        (lambda p: (p.mkdir(), (p / "notes.txt").write_text("x")), "no .tar shards and no image"),
        (lambda p: p.write_text("x"), "is a file but not a .tar shard"),
        (lambda p: None, "does not exist"),
    ],
)
def test_a_dataset_path_without_data_names_the_setting_and_the_path(
    generated_root, tmp_path, make, message
):
    path = tmp_path / "data"
    make(path)
    with pytest.raises(FluxDatasetError, match=message) as raised:
        loader(generated_root, dataset="cc12m-test", dataset_path=str(path))
    assert "dataset_path" in str(raised.value) and str(path) in str(raised.value)


def test_a_dataset_titan_cannot_draw_needs_dataset_path_and_names_are_checked(
    generated_root, no_network
):
    with pytest.raises(FluxDatasetError, match="titan does not download.*set dataset_path"):
        loader(generated_root, dataset="cc12m-wds")
    with pytest.raises(FluxDatasetError, match="did you mean 'cc12m-test'"):
        loader(generated_root, dataset="cc12m_test")
    assert loader(generated_root, dataset="CC12M-Test").source.shards  # as v0.2.2: any case
    assert no_network == []


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"num_workers": 2}, "num_workers=2"),
        ({"classifier_free_guidance_prob": 1.5}, r"lie in \[0, 1\]"),
        ({"img_size": 0}, "img_size must be at least 1"),
        ({"encoder": Encoder(test_mode=True, max_t5_encoding_len=0)}, "max_t5_encoding_len"),
    ],
)
def test_settings_the_loader_cannot_honour_are_refused(generated_root, settings, message):
    with pytest.raises((ValueError, NotBuildableError), match=message):
        loader(generated_root, **settings)

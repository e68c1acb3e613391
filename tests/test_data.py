"""Tokenizer, shipped assets, dataset registry and the text data loader."""

from __future__ import annotations

import builtins
import importlib.util
import io
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from titan.components.tokenizer import HuggingFaceTokenizer, TokenizerNotFoundError
from titan.config.configurable import NotBuildableError
from titan.hf_datasets.documents import DatasetError, HubDocuments, LocalDocuments, file_split
from titan.hf_datasets.text_datasets import (
    DATASETS,
    HuggingFaceTextDataLoader,
    document_source,
)

ROOT = Path(__file__).resolve().parents[1]
ASSETS = ROOT / "tests" / "assets"
ASSET_FILES = [
    "c4_test/data.jsonl",
    "c4_test/validation.jsonl",
    "tokenizer/tokenizer.json",
    "tokenizer/tokenizer_config.json",
]
HOSTILE_TEXTS = [
    "",
    " ",
    "plain words, and punctuation!?",
    "  leading and trailing spaces  ",
    "tabs\tand\r\nwindows\nnewlines\n\n\n",
    "naïve café Zoë Ångström façade",
    "日本語のテキストと中文",
    "مرحبا بالعالم",
    "emoji 👩‍👩‍👧‍👦 🏳️‍🌈 🇫🇷 and a skin tone 👍🏽",
    "combining e\u0301 and zalgo Z\u0351\u0337\u0324a\u0352l\u0353g\u035co",
    "\x00\x01\x07 control bytes \x7f",
    "\ufeffbyte order mark and \u200b zero width \u202e right-to-left override",
    "<|begin_of_text|> literal special tokens <|end_of_text|><|pad|>",
    "<|begin_of_text",
    "a" * 5000,
    '{"text": "json inside text"}\n',
]


@pytest.fixture(scope="module")
def tokenizer() -> HuggingFaceTokenizer:
    return HuggingFaceTokenizer.Config().build(tokenizer_path=str(ASSETS / "tokenizer"))


def build_loader(tokenizer, *, dataset="c4_test_validation", world=1, rank=0, seq_len=64,
                 batch=4, infinite=True, dataset_path=None, **options):  # fmt: skip
    config = HuggingFaceTextDataLoader.Config(
        dataset=dataset, dataset_path=dataset_path, infinite=infinite, **options
    )
    return config.build(
        dp_world_size=world,
        dp_rank=rank,
        tokenizer=tokenizer,
        seq_len=seq_len,
        local_batch_size=batch,
    )


def take(loader, count: int) -> list:
    batches = iter(loader)
    return [next(batches) for _ in range(count)]


# Tokenizer ----------------------------------------------------------------------------------


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_tokenizer_round_trips_any_text(tokenizer, text):
    framed = tokenizer.encode(text)
    assert framed[0] == tokenizer.bos_id and framed[-1] == tokenizer.eos_id
    plain = tokenizer.encode(text, add_bos=False, add_eos=False)
    assert plain == framed[1:-1]
    assert tokenizer.decode(plain) == text
    assert tokenizer.decode(framed) == text
    # Text cannot forge a special token: literal "<|end_of_text|>" is ordinary bytes.
    assert tokenizer.bos_id not in plain and tokenizer.eos_id not in plain


def test_tokenizer_special_ids_and_vocab(tokenizer):
    assert tokenizer.vocab_size <= 2048
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|begin_of_text|>", "<|end_of_text|>")
    assert tokenizer.bos_id != tokenizer.eos_id
    assert max(tokenizer.bos_id, tokenizer.eos_id) < tokenizer.vocab_size
    decoded = tokenizer.decode([tokenizer.bos_id, tokenizer.eos_id], skip_special_tokens=False)
    assert decoded == "<|begin_of_text|><|end_of_text|>"


def test_tokenizer_without_config_file_finds_known_special_tokens(tmp_path, tokenizer):
    (tmp_path / "tokenizer.json").write_bytes((ASSETS / "tokenizer/tokenizer.json").read_bytes())
    bare = HuggingFaceTokenizer.Config().build(tokenizer_path=str(tmp_path))
    assert (bare.bos_id, bare.eos_id) == (tokenizer.bos_id, tokenizer.eos_id)


@pytest.mark.parametrize("make_folder", [False, True])
def test_missing_tokenizer_names_the_path_and_key(tmp_path, make_folder):
    folder = tmp_path / "assets"
    if make_folder:
        folder.mkdir()
    with pytest.raises(TokenizerNotFoundError) as error:
        HuggingFaceTokenizer.Config().build(tokenizer_path=str(folder))
    assert isinstance(error.value, FileNotFoundError)
    message = str(error.value)
    assert str(folder) in message and "hf_assets_path" in message
    assert "model.hf_assets_path" in message


@pytest.mark.parametrize(
    "content",
    [b'{"version": "1.0", "model": {', b"{}", b"\x00\xff\xfe not json", b""],
    ids=["truncated", "not-a-tokenizer", "binary", "empty"],
)
def test_an_unreadable_tokenizer_json_is_a_value_error_naming_the_file(tmp_path, content):
    (tmp_path / "tokenizer.json").write_bytes(content)
    with pytest.raises(ValueError) as error:
        HuggingFaceTokenizer.Config().build(tokenizer_path=str(tmp_path))
    message = str(error.value)
    assert message.startswith(f"{tmp_path / 'tokenizer.json'} is not a tokenizer.json")
    assert "hint: point hf_assets_path at a folder with a valid one" in message


def test_a_tokenizer_config_that_is_not_utf8_json_is_a_value_error(tmp_path):
    (tmp_path / "tokenizer.json").write_bytes((ASSETS / "tokenizer/tokenizer.json").read_bytes())
    (tmp_path / "tokenizer_config.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(
        ValueError,
        match=r"tokenizer_config.json \(the tokenizer.s special tokens\) is not valid JSON",
    ):
        HuggingFaceTokenizer.Config().build(tokenizer_path=str(tmp_path))


# Shipped assets -----------------------------------------------------------------------------


def test_assets_generator_rewrites_the_committed_files_byte_for_byte(tmp_path):
    spec = importlib.util.spec_from_file_location("make_assets", ASSETS / "make_assets.py")
    make_assets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_assets)
    make_assets.write_assets(tmp_path)
    for name in ASSET_FILES:
        assert (tmp_path / name).read_bytes() == (ASSETS / name).read_bytes(), name
    total = sum((ASSETS / name).stat().st_size for name in ASSET_FILES)
    assert total < 2_100_000


def test_shipped_corpus_shape():
    lines = (ASSETS / "c4_test/data.jsonl").read_text(encoding="utf-8").splitlines()
    texts = [json.loads(line)["text"] for line in lines]
    assert len(texts) == 2000
    words = [len(text.split()) for text in texts]
    assert min(words) >= 50 and max(words) > 400


# Registry -----------------------------------------------------------------------------------


def test_registry_names():
    assert {"c4_test", "c4_test_validation", "c4", "c4_validation"} <= set(DATASETS)
    assert isinstance(document_source("c4_test"), LocalDocuments)
    assert isinstance(document_source("c4"), HubDocuments)  # nothing is opened yet


def test_unknown_dataset_suggests_the_closest_names():
    with pytest.raises(ValueError) as error:
        document_source("c4_tset")
    message = str(error.value)
    assert "did you mean 'c4_test'" in message
    assert all(name in message for name in DATASETS)


def test_shipped_dataset_is_found_from_another_folder(tmp_path, monkeypatch, tokenizer):
    monkeypatch.chdir(tmp_path)
    source = document_source("c4_test")
    assert source.files[0].resolve() == (ASSETS / "c4_test/data.jsonl").resolve()
    assert next(iter(build_loader(tokenizer, dataset="c4_test")))[0].shape == (4, 64)


def test_hub_dataset_without_datasets_package_says_what_to_install(monkeypatch, tokenizer):
    monkeypatch.delitem(sys.modules, "datasets", raising=False)
    real_import = builtins.__import__

    def refuse_datasets(name, *args, **kwargs):
        if name == "datasets" or name.startswith("datasets."):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse_datasets)
    with pytest.raises(DatasetError, match="install the `datasets` package") as error:
        build_loader(tokenizer, dataset="c4")
    assert "c4_test" in str(error.value) and "dataset_path" in str(error.value)


def test_hub_dataset_offline_says_so(monkeypatch, tokenizer):
    def load_dataset(*args, **kwargs):
        try:
            raise OSError("[Errno 101] Network is unreachable")
        except OSError as cause:
            raise ConnectionError("Couldn't reach 'allenai/c4' on the Hub") from cause

    fake = types.ModuleType("datasets")
    fake.load_dataset = load_dataset
    monkeypatch.setitem(sys.modules, "datasets", fake)
    with pytest.raises(DatasetError, match="offline") as error:
        build_loader(tokenizer, dataset="c4_validation")
    assert "c4_test" in str(error.value) and "dataset_path" in str(error.value)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def texts_of(source) -> list[str]:
    return list(source.documents(rank=0, world_size=1, start=0))


def test_dataset_path_reads_local_files_and_folders(tmp_path):
    jsonl = write(tmp_path / "a.jsonl", '{"text": "one"}\n\n{"text": "two"}\n')
    array = write(tmp_path / "b.json", '[{"text": "three"}, {"text": "four"}]')
    lines = write(tmp_path / "c.txt", "five\n\nsix\n")
    assert texts_of(document_source("c4_test", dataset_path=str(jsonl))) == ["one", "two"]
    assert texts_of(document_source("c4_test", dataset_path=str(array))) == ["three", "four"]
    assert texts_of(document_source("c4_test", dataset_path=str(lines))) == ["five", "six"]
    folder = tmp_path / "corpus"
    write(folder / "part-0.jsonl", '{"text": "train 0"}\n')
    write(folder / "sub/part-1.jsonl", '{"text": "train 1"}\n')
    write(folder / "c4-validation.00000-of-00001.json", '{"text": "held out"}\n')
    assert texts_of(document_source("c4", dataset_path=str(folder))) == ["train 0", "train 1"]
    assert texts_of(document_source("c4_validation", dataset_path=str(folder))) == ["held out"]
    assert file_split(Path("interval.jsonl")) == "train"


def test_dataset_path_errors(tmp_path):
    with pytest.raises(DatasetError, match="does not exist"):
        document_source("c4_test", dataset_path=str(tmp_path / "missing.jsonl"))
    with pytest.raises(DatasetError, match="does not exist"):
        document_source("c4_test", dataset_path="missing.jsonl")
    hub = document_source("c4", dataset_path="someone/corpus")
    assert isinstance(hub, HubDocuments) and hub.hub_id == "someone/corpus"
    bad = write(tmp_path / "bad.jsonl", '{"text": "fine"}\n{"body": "no text"}\n')
    with pytest.raises(DatasetError, match=r"bad.jsonl:2"):
        texts_of(document_source("c4_test", dataset_path=str(bad)))
    with pytest.raises(DatasetError, match="no validation files"):
        document_source("c4_validation", dataset_path=str(bad.parent))


# Loader -------------------------------------------------------------------------------------


def test_batches_are_shifted_long_tensors(tokenizer):
    import torch

    inputs, labels = next(iter(build_loader(tokenizer, seq_len=32, batch=3)))
    assert inputs.shape == labels.shape == (3, 32)
    assert inputs.dtype == labels.dtype == torch.long
    assert torch.equal(inputs[:, 1:], labels[:, :-1])
    assert inputs[0, 0].item() == tokenizer.bos_id  # the first document starts the first sample


def test_dp_ranks_read_disjoint_documents_that_cover_the_dataset():
    source = document_source("c4_test_validation")
    everything = texts_of(source)
    shares = [list(source.documents(rank=r, world_size=3, start=0)) for r in range(3)]
    assert [len(share) for share in shares] == [67, 67, 66]
    for rank, share in enumerate(shares):
        assert share == everything[rank::3]
    assert list(source.documents(rank=1, world_size=3, start=5)) == shares[1][5:]


def test_dp_loaders_yield_different_batches(tokenizer):
    import torch

    first = [build_loader(tokenizer, world=2, rank=r) for r in range(2)]
    batches = [next(iter(loader))[0] for loader in first]
    assert not torch.equal(batches[0], batches[1])


def test_finite_loader_stops_and_starts_a_new_pass(tokenizer):
    import torch

    loader = build_loader(tokenizer, seq_len=512, batch=8, infinite=False)
    first_pass = list(loader)
    assert first_pass and first_pass[-1][0].shape[0] <= 8
    assert all(inputs.shape[1] == 512 for inputs, _ in first_pass)
    second_pass = list(loader)
    assert len(second_pass) == len(first_pass)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first_pass, second_pass, strict=True))


def assert_same_batches(actual, expected):
    import torch

    assert len(actual) == len(expected)
    for (inputs, labels), (want_inputs, want_labels) in zip(actual, expected, strict=True):
        assert torch.equal(inputs, want_inputs) and torch.equal(labels, want_labels)


def checkpoint_round_trip(state: dict) -> dict:
    """The state as DCP would bring it back: serialised and loaded again."""
    import torch

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def test_resume_is_exact_mid_document_and_across_epochs(tokenizer):
    # 100 documents (~20k tokens) per rank, 192 tokens per batch: an epoch is ~105 batches.
    settings = {"world": 2, "rank": 1, "seq_len": 47, "batch": 4}
    reference = take(build_loader(tokenizer, **settings), 125)
    positions = []
    for k in (0, 1, 13, 104, 106, 120):
        interrupted = build_loader(tokenizer, **settings)
        take(interrupted, k)
        state = checkpoint_round_trip(interrupted.state_dict())
        assert set(state) == {"dp_rank_1", "world_size"}
        resumed = build_loader(tokenizer, **settings)
        resumed.load_state_dict(state)
        assert_same_batches(take(resumed, 5), reference[k : k + 5])
        positions.append(json.loads(state["dp_rank_1"]))
    assert any(position["buffer"] for position in positions)  # resumed mid-document
    assert {position["epoch"] for position in positions} == {0, 1}  # and across the wrap


def test_resume_of_a_finite_loader_reaches_the_same_end(tokenizer):
    settings = {"seq_len": 256, "batch": 4, "infinite": False}
    reference = list(build_loader(tokenizer, **settings))
    interrupted = build_loader(tokenizer, **settings)
    take(interrupted, 10)
    resumed = build_loader(tokenizer, **settings)
    resumed.load_state_dict(interrupted.state_dict())
    assert_same_batches(list(resumed), reference[10:])


def test_resume_with_another_dp_world_size_is_refused(tokenizer):
    saved = build_loader(tokenizer, world=2, rank=1)
    take(saved, 2)
    other = build_loader(tokenizer, world=4, rank=1)
    with pytest.raises(DatasetError, match="saved with 2 data-parallel ranks but this run has 4"):
        other.load_state_dict(saved.state_dict())
    with pytest.raises(DatasetError, match="no position for dp_rank_0"):
        build_loader(tokenizer, world=2, rank=0).load_state_dict(saved.state_dict())
    fresh = build_loader(tokenizer)
    fresh.load_state_dict({})  # no saved loader: starts from the beginning
    assert fresh.packer.position.documents_read == 0


@pytest.mark.filterwarnings("ignore::UserWarning")  # DCP without a process group says so
def test_resume_through_a_distributed_checkpoint(tmp_path, tokenizer):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner

    settings = {"world": 2, "rank": 1, "seq_len": 16, "batch": 2}
    reference = take(build_loader(tokenizer, **settings), 8)
    saved = build_loader(tokenizer, **settings)
    take(saved, 7)
    dcp.save({"dataloader": saved}, checkpoint_id=str(tmp_path))
    resumed = build_loader(tokenizer, **settings)
    dcp.load({"dataloader": resumed}, checkpoint_id=str(tmp_path))
    assert_same_batches(take(resumed, 1), reference[7:])
    # A rank the checkpoint has no position for gets the world-size message once the
    # checkpoint manager lets it load partially (plain DCP stops at the missing key first).
    grown = build_loader(tokenizer, world=4, rank=3)
    with pytest.raises(DatasetError, match="saved with 2 data-parallel ranks"):
        dcp.load(
            {"dataloader": grown},
            checkpoint_id=str(tmp_path),
            planner=DefaultLoadPlanner(allow_partial_load=True),
        )


def test_worker_processes_are_refused_up_front(tokenizer):
    with pytest.raises(NotBuildableError, match="num_workers"):
        build_loader(tokenizer, num_workers=2)


def test_config_modules_do_not_import_torch():
    code = (
        "import sys, titan.hf_datasets.text_datasets, titan.components.tokenizer; "
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)

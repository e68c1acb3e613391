"""Files titan reads from folders it did not write are looked at before they are opened: a named
pipe where a tokenizer, config or index file was expected is refused by name instead of blocking
the run (opening a FIFO to read waits for a writer), and a folder, or JSON of the wrong shape, is
refused instead of ending the run with a traceback."""

from __future__ import annotations

import os
import socket

import pytest

from tests.reference import REPO
from titan.components import asset_files
from titan.components.tokenizer import HuggingFaceTokenizer
from titan.models.common.hf_adapter import read_shard_index
from titan.models.deepseek_v3.state_dict_adapter import _read_rope_interleave
from titan.models.flux.state_dict_adapter import transformer_folder

TOKENIZER = REPO / "tests" / "assets" / "tokenizer" / "tokenizer.json"


def plant(path, what: str) -> None:
    """Put ``what`` (fifo, folder, dangling) at ``path``."""
    if what == "fifo":
        os.mkfifo(path)
    elif what == "folder":
        path.mkdir()
    elif what == "dangling":
        path.symlink_to(path.parent / "nowhere")
    else:
        raise AssertionError(what)


def test_kind_names_what_a_path_is_without_opening_it(tmp_path):
    (tmp_path / "file").write_text("{}")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "folder").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "file")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock"))
    try:
        kinds = {name: asset_files.kind(tmp_path / name) for name in os.listdir(tmp_path)}
    finally:
        server.close()
    assert kinds == {
        "file": "file",
        "fifo": "a named pipe (FIFO)",
        "folder": "a folder",
        "link": "file",
        "dangling": "missing",
        "sock": "a socket",
    }
    assert asset_files.kind(tmp_path / "link", follow_symlinks=False) == "a symlink"
    assert asset_files.kind("/dev/null") == "a character device"


@pytest.mark.parametrize(
    ("content", "words"),
    [(b'{"a": ', "is not valid JSON"), (b"\xff\xfe{}", "is not valid JSON")],
)
def test_read_json_refuses_what_is_not_json(tmp_path, content, words):
    (tmp_path / "x.json").write_bytes(content)
    with pytest.raises(asset_files.AssetFileError, match=words):
        asset_files.read_json(tmp_path / "x.json", what="a test file")
    assert asset_files.read_json(tmp_path / "none.json", what="a test file") is None


@pytest.mark.parametrize("what", ["fifo", "folder"])
@pytest.mark.parametrize("name", ["tokenizer.json", "tokenizer_config.json"])
def test_a_tokenizer_file_that_is_not_a_file_is_refused_by_name(tmp_path, name, what):
    if name != "tokenizer.json":
        (tmp_path / "tokenizer.json").write_bytes(TOKENIZER.read_bytes())
    plant(tmp_path / name, what)
    with pytest.raises(ValueError) as error:
        HuggingFaceTokenizer.Config().build(tokenizer_path=str(tmp_path))
    word = {"fifo": "a named pipe (FIFO)", "folder": "a folder"}[what]
    assert f"{tmp_path / name} " in str(error.value)
    assert f"is {word}, not a file" in str(error.value)


def test_a_tokenizer_config_that_is_not_an_object_is_refused(tmp_path):
    (tmp_path / "tokenizer.json").write_bytes(TOKENIZER.read_bytes())
    (tmp_path / "tokenizer_config.json").write_text('["<s>"]')
    with pytest.raises(ValueError, match="holds list JSON, not an object of settings"):
        HuggingFaceTokenizer.Config().build(tokenizer_path=str(tmp_path))


@pytest.mark.parametrize("what", ["fifo", "folder"])
def test_a_shard_index_that_is_not_a_file_is_refused(tmp_path, what):
    plant(tmp_path / "model.safetensors.index.json", what)
    with pytest.raises(asset_files.AssetFileError, match="shard index"):
        read_shard_index(str(tmp_path))


@pytest.mark.parametrize(
    "index",
    [
        '{"metadata": {}}',
        '{"weight_map": ["a"]}',
        '{"weight_map": {"w": "model.safetensors"}}',
        "3",
    ],
)
def test_a_shard_index_without_numbered_shards_is_refused(tmp_path, index):
    (tmp_path / "model.safetensors.index.json").write_text(index)
    with pytest.raises(asset_files.AssetFileError, match="no weight_map of keys to numbered"):
        read_shard_index(str(tmp_path))


def test_a_shard_index_maps_keys_to_shard_numbers(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(
        '{"weight_map": {"a": "model-00002-of-00003.safetensors"}}'
    )
    assert read_shard_index(str(tmp_path)) == {"a": 2}
    assert read_shard_index(str(tmp_path / "elsewhere")) is None
    plant(tmp_path / "dangling", "dangling")
    assert read_shard_index(str(tmp_path), index_file="dangling") is None


@pytest.mark.parametrize("what", ["fifo", "folder"])
def test_a_deepseek_config_json_that_is_not_a_file_is_refused(tmp_path, what):
    plant(tmp_path / "config.json", what)
    with pytest.raises(asset_files.AssetFileError, match="Hugging Face model config"):
        _read_rope_interleave(str(tmp_path))


def test_a_deepseek_config_json_is_read_when_it_is_a_file(tmp_path):
    assert _read_rope_interleave(str(tmp_path)) is True
    (tmp_path / "config.json").write_text('{"rope_interleave": false}')
    assert _read_rope_interleave(str(tmp_path)) is False
    (tmp_path / "config.json").write_text("[1]")
    with pytest.raises(asset_files.AssetFileError, match="holds list JSON"):
        _read_rope_interleave(str(tmp_path))


@pytest.mark.parametrize("what", ["fifo", "folder"])
def test_a_diffusers_index_that_is_not_a_file_is_refused(tmp_path, what):
    assert transformer_folder(str(tmp_path)) == str(tmp_path)
    plant(tmp_path / "model_index.json", what)
    with pytest.raises(asset_files.AssetFileError, match="diffusers pipeline's index"):
        transformer_folder(str(tmp_path))

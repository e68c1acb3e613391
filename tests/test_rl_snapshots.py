"""Versioned weight snapshots: round trip, pruning that keeps the newest and never touches
what titan did not write, refusals, and a push SIGKILLed at each point of its write leaving
the previous version readable (the child says where it stopped; the test kills it then)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
import torch

from tests.training_runs import HANG_SECONDS, REPO, child_env
from titan.rl import snapshots
from titan.rl.snapshots import SnapshotError


def _weights(value: float) -> dict[str, torch.Tensor]:
    """A small state dict, bf16 and fp32, one tensor sharing another's storage."""
    base = torch.full((4, 3), value)
    return {"a": base, "b": base[0], "c": torch.full((2,), value, dtype=torch.bfloat16)}


def test_round_trip_latest_and_config(tmp_path):
    """Each push is loadable bit for bit; latest follows; config.json is written as given."""
    for version in (1, 2, 5):
        path = snapshots.push(_weights(version), tmp_path, version, keep=3, config_json={"x": 1})
        assert path == str(tmp_path / f"v{version}")
        assert snapshots.latest_version(tmp_path) == version
    loaded = snapshots.load(tmp_path)
    for name, tensor in _weights(5).items():
        assert torch.equal(loaded[name], tensor) and loaded[name].dtype == tensor.dtype
    assert torch.equal(snapshots.load(tmp_path, 1)["a"], _weights(1)["a"])
    assert (tmp_path / "v5" / "config.json").read_text().strip().startswith("{")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "v1", "v2", "v5"]


def test_pruning_keeps_the_newest_and_foreign_folders(tmp_path):
    """keep=1 leaves only the newest; a v<N> folder titan did not write and other files stay."""
    (tmp_path / "v0").mkdir()
    (tmp_path / "v0" / "mine.txt").write_text("user data")
    (tmp_path / "notes.txt").write_text("keep me")
    for version in (1, 2, 3):
        snapshots.push(_weights(version), tmp_path, version, keep=1)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["latest", "notes.txt", "v0", "v3"]
    assert (tmp_path / "v0" / "mine.txt").read_text() == "user data"
    assert snapshots.latest_version(tmp_path) == 3


@pytest.mark.parametrize(
    ("setup", "version", "keep", "words"),
    [
        (lambda d: snapshots.push(_weights(1), d, 1), 1, 2, "exists already"),
        (lambda d: (d / "v4").mkdir(), 4, 2, "exists already"),
        (lambda d: (d / "latest").write_text("my notes\n"), 1, 2, "not a snapshot pointer"),
        (lambda d: None, -1, 2, "version must be an int"),
        (lambda d: None, True, 2, "version must be an int"),
        (lambda d: None, 1, 0, "keep must be an int >= 1"),
    ],
)
def test_refusals_change_nothing(tmp_path, setup, version, keep, words):
    """A push that cannot be made raises SnapshotError and leaves the folder as it was."""
    setup(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(SnapshotError, match=words):
        snapshots.push(_weights(9), tmp_path, version, keep=keep)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_bad_targets_and_empty_folders(tmp_path):
    """A file as folder, an empty state dict, nothing to load: clear errors."""
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(SnapshotError, match="is not a folder"):
        snapshots.push(_weights(1), target, 1)
    with pytest.raises(SnapshotError, match="non-empty mapping"):
        snapshots.push({}, tmp_path / "w", 1)
    with pytest.raises(SnapshotError, match="not a named tensor"):
        snapshots.push({"a": [1, 2]}, tmp_path / "w", 1)
    assert snapshots.latest_version(tmp_path / "missing") is None
    with pytest.raises(SnapshotError, match="no complete weight snapshot"):
        snapshots.load(tmp_path / "w")
    with pytest.raises(SnapshotError, match="no complete snapshot of version 7"):
        snapshots.load(tmp_path / "w", 7)


@pytest.mark.parametrize("stage", ["weights", "marker", "rename", "pointer"])
def test_a_push_killed_midway_leaves_the_previous_version(tmp_path, stage):
    """SIGKILL inside the write of version 2: version 1 (or, once renamed, a complete 2) is
    what readers get, loadable; the next push succeeds and clears the dead push's folder."""
    script = REPO / "tests" / "dist_scripts" / "snapshot_killed.py"
    child = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), stage],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(child_env(), PYTHONPATH=str(REPO)),
    )
    try:
        lines = []
        for line in child.stdout:  # the child reports each point it reaches
            lines.append(line.strip())
            if line.startswith("STOPPED"):
                break
        assert lines == ["PUSHED 1", f"STOPPED {stage}"], child.stderr.read()
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=HANG_SECONDS) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdin.close()
        child.stdout.close()
        child.stderr.close()
    expected = 1
    assert snapshots.latest_version(tmp_path) == expected
    assert torch.equal(snapshots.load(tmp_path)["w"], torch.arange(1000, dtype=torch.float32))
    # A dead push's temporary folder goes with the next push; versions count on.
    snapshots.push(_weights(3), tmp_path, 3, keep=5)
    assert snapshots.latest_version(tmp_path) == 3
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")]
    assert leftovers == []
    assert torch.equal(snapshots.load(tmp_path, 1)["w"], torch.arange(1000, dtype=torch.float32))


def _three_versions(folder):
    """Versions 1, 2 and 3 pushed whole (keep 5); latest names 3."""
    for version in (1, 2, 3):
        snapshots.push(_weights(version), folder, version, keep=5)


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda d: (d / "v3" / "model.safetensors").unlink(), "model.safetensors is missing"),
        (lambda d: (d / "v3" / ".titan-snapshot").unlink(), ".titan-snapshot is missing"),
        (lambda d: (d / "v3" / "model.safetensors").write_bytes(b""), "cannot be read"),
        (lambda d: (d / "v3" / "model.safetensors").write_bytes(b"\x10" * 64), "cannot be read"),
    ],
)
def test_a_broken_latest_is_named_not_replaced_by_an_older_one(tmp_path, damage, words):
    """latest names v3, whose files were damaged after the push: load raises naming version 3
    and the file; only newest_readable=True reads v2, and says so."""
    _three_versions(tmp_path)
    damage(tmp_path)
    with pytest.raises(SnapshotError, match=words) as raised:
        snapshots.load(tmp_path)
    assert "version 3" in str(raised.value) and "v3" in str(raised.value)
    fallback = snapshots.load(tmp_path, newest_readable=True)
    assert fallback.version == 2 and fallback.path == str(tmp_path / "v2")
    assert torch.equal(fallback["a"], _weights(2)["a"])
    with pytest.raises(SnapshotError, match="version 3"):
        snapshots.load(tmp_path, 3)


def test_load_says_which_version_it_read(tmp_path):
    """The latest, a named version, and the highest complete one without a pointer."""
    _three_versions(tmp_path)
    assert snapshots.load(tmp_path).version == 3
    assert snapshots.load(tmp_path, 1).version == 1
    (tmp_path / "latest").unlink()
    assert snapshots.load(tmp_path).version == 3
    for bad in (-1, True, "3", 1.0):
        with pytest.raises(SnapshotError, match="version must be an int"):
            snapshots.load(tmp_path, bad)
    with pytest.raises(SnapshotError, match="not both"):
        snapshots.load(tmp_path, 1, newest_readable=True)


def test_no_readable_version_at_all(tmp_path):
    """Every version's weights torn: newest_readable raises naming each file."""
    _three_versions(tmp_path)
    for version in (1, 2, 3):
        (tmp_path / f"v{version}" / "model.safetensors").write_bytes(b"\0" * 10)
    with pytest.raises(SnapshotError, match="no version reads") as raised:
        snapshots.load(tmp_path, newest_readable=True)
    assert all(f"v{v}/model.safetensors" in str(raised.value) for v in (1, 2, 3))


def _swap(path, kind, outside):
    """Replace ``path`` by a FIFO, a folder or a symlink to a file outside the snapshots."""
    if path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to(outside)


@pytest.mark.parametrize("kind", ["fifo", "folder", "symlink"])
@pytest.mark.parametrize("name", ["latest", "v2/model.safetensors", "v2/.titan-snapshot"])
def test_non_regular_files_are_refused_without_blocking(tmp_path, kind, name):
    """A FIFO, a folder or a symlink out of the folder where titan writes a regular file:
    push and load refuse it naming it (a FIFO is never opened: opening it would block), and
    nothing is written."""
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("v1\n")
    folder = tmp_path / "weights"
    for version in (1, 2):
        snapshots.push(_weights(version), folder, version, keep=5)
    _swap(folder / name, kind, outside)
    words = {"fifo": r"a named pipe \(FIFO\)", "folder": "a folder", "symlink": "a symlink"}[kind]
    with pytest.raises(SnapshotError, match=words) as raised:
        snapshots.load(folder) if name == "latest" else snapshots.load(folder, 2)
    assert name.split("/")[-1] in str(raised.value)
    if name == "latest":
        with pytest.raises(SnapshotError, match=words):
            snapshots.push(_weights(3), folder, 3)
        assert not (folder / "v3").exists()
        with pytest.raises(SnapshotError, match=words):
            snapshots.latest_version(folder)
    else:
        with pytest.raises(SnapshotError, match=words):
            snapshots.load(folder)
        assert snapshots.load(folder, newest_readable=True).version == 1
    assert outside.read_text() == "v1\n"


@pytest.mark.parametrize(
    ("folder", "config_json", "words"),
    [
        (123, None, "folder must be a path, not int"),
        (None, None, "folder must be a path, not NoneType"),
        ("", None, "non-empty path"),
        ("w", [("x", 1)], "config_json must be a mapping, not list"),
        ("w", {"x": object()}, "cannot be written as JSON"),
        ("w", {"x": float("nan"), "y": {1, 2}}, "cannot be written as JSON"),
    ],
)
def test_push_refuses_a_bad_folder_or_config_json_before_writing(
    tmp_path, monkeypatch, folder, config_json, words
):
    """Not a path, or a config.json that JSON cannot write: SnapshotError, nothing written."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SnapshotError, match=words):
        snapshots.push(_weights(1), folder, 1, config_json=config_json)
    assert list(tmp_path.iterdir()) == []
    if not isinstance(folder, str):
        with pytest.raises(SnapshotError, match="must be a path"):
            snapshots.load(folder)
        with pytest.raises(SnapshotError, match="must be a path"):
            snapshots.latest_version(folder)

"""titan-migrate never replaces a module that was edited since it wrote it, never writes through a
read-only file unasked, never writes two modules into one file, and says what it wrote and what
it refused (``titan.cli.replace_check``, ``titan.cli.module_stamp``)."""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path

import pytest

from tests.helpers import write as put
from titan.cli import migrate as cli
from titan.cli import module_stamp
from titan.cli.migrate_tree import GENERATED_HEADER

JOB = """\
[model]
name = "llama3"
flavor = "debugmodel"

[training]
steps = {steps}
"""


def run(*argv: object) -> tuple[int, str, str]:
    """``titan-migrate ARGV`` in this process; exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    status = cli.run([str(a) for a in argv], stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Two folders of one TOML each."""
    root = tmp_path / "configs"
    put(root, "a/job_a.toml", JOB.format(steps=3))
    put(root, "b/job_b.toml", JOB.format(steps=4))
    return root


def state(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), stat.S_IMODE(path.stat().st_mode)


# --------------------------------------------------------------------------- the digest


def test_every_byte_of_a_stamped_module_is_covered_by_its_digest():
    code = GENERATED_HEADER + ' from ``x.toml``."""\n\nX = 1\n'
    text = module_stamp.stamped(code)
    data = text.encode()
    assert module_stamp.state(data) == module_stamp.INTACT
    assert text.startswith(code.rstrip("\n")) and text.endswith("\n")
    for index in range(len(data)):  # change, drop or add any one byte: no longer intact
        flipped = data[:index] + bytes([data[index] ^ 1]) + data[index + 1 :]
        assert module_stamp.state(flipped) != module_stamp.INTACT, index
        assert module_stamp.state(data[:index] + data[index + 1 :]) != module_stamp.INTACT
    assert module_stamp.state(data + b"# more\n") == module_stamp.EDITED
    assert module_stamp.state(data.replace(b"\n", b"\r\n")) == module_stamp.EDITED
    assert module_stamp.state(code.encode()) == module_stamp.UNSTAMPED


def test_stdout_o_and_tree_modules_carry_the_same_digest_and_check_accepts_them(tree, tmp_path):
    status, code, _ = run(tree / "a/job_a.toml")
    assert status == 0 and module_stamp.state(code.encode()) == module_stamp.INTACT
    target = tmp_path / "one.py"
    assert run(tree / "a/job_a.toml", "-o", target, "-q")[0] == 0
    assert module_stamp.state(target.read_bytes()) == module_stamp.INTACT
    assert run(tree / "a/job_a.toml", "--check", target)[0] == 0
    assert run(tree, "--out-dir", tmp_path / "out", "-q")[0] == 0
    for module in (tmp_path / "out").rglob("config_registry.py"):
        assert module_stamp.state(module.read_bytes()) == module_stamp.INTACT


# --------------------------------------------------------------------------- hand edits


EDITS = {
    "a line appended": lambda text: text + "# my note\n",
    "a value changed": lambda text: text.replace("steps=3", "steps=300"),
    "the digest line removed": lambda text: text[: text.rindex("# titan-migrate sha256")],
    "the line endings changed": lambda text: text.replace("\n", "\r\n"),
}


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_hand_edited_module_in_a_tree_is_kept_and_named(tree, tmp_path, edit):
    out = tmp_path / "out"
    assert run(tree, "--out-dir", out, "-q")[0] == 0
    mine = out / "a/config_registry.py"
    mine.write_bytes(EDITS[edit](mine.read_text()).encode())
    before = state(mine)
    put(tree, "a/job_a.toml", JOB.format(steps=5))  # a change that would rewrite both
    put(tree, "b/job_b.toml", JOB.format(steps=6))
    status, report, err = run(tree, "--out-dir", out)
    assert status == 1
    assert state(mine) == before
    assert f"not writing {out}/a/config_registry.py: " in err
    assert "--force" in err and "or delete it" in err
    assert "steps=6" in (out / "b/config_registry.py").read_text()  # the other one is written
    assert "1 module written, 1 refused" in report
    assert f"{out}/a/config_registry.py (refused)" in report


def test_force_replaces_an_edited_module_and_says_so(tree, tmp_path):
    out = tmp_path / "out"
    run(tree, "--out-dir", out, "-q")
    mine = out / "a/config_registry.py"
    mine.write_text(mine.read_text() + "# my note\n")
    status, report, err = run(tree, "--out-dir", out, "--force")
    assert status == 0, err
    assert module_stamp.state(mine.read_bytes()) == module_stamp.INTACT
    assert f"note: replaced {out}/a/config_registry.py (--force), although it was edited" in err
    assert "2 modules written" in report
    mine.chmod(0o444)
    status, report, _ = run(tree, "--out-dir", out, "--force", "--format", "json")
    modules = {Path(m["path"]).parent.name: m for m in json.loads(report)["modules"]}
    assert status == 0 and modules["a"]["written"] and modules["a"]["forced"] == "it is read-only"
    assert modules["b"]["forced"] is None and modules["b"]["written"]


def test_a_module_without_a_digest_is_not_replaced_unasked(tree):
    # An older titan-migrate wrote it, or the digest was cut off: edits cannot be ruled out.
    older = tree / "a/config_registry.py"
    older.write_text(GENERATED_HEADER + ' from ``job_a.toml``."""\n\nEDITED = True\n')
    before = state(older)
    status, _, err = run(tree)
    assert status == 1 and state(older) == before
    assert "it has no titan-migrate digest on its last line" in err
    assert run(tree, "--force", "-q")[0] == 0
    assert "EDITED" not in older.read_text()


def test_a_module_titan_did_not_write_is_never_replaced_even_with_force(tree):
    mine = tree / "a/config_registry.py"
    mine.write_text("def mine():\n    return None\n")
    status, _, err = run(tree, "--force")
    assert status == 1 and mine.read_text() == "def mine():\n    return None\n"
    assert "titan-migrate did not write it" in err


# --------------------------------------------------------------------------- read-only


def test_a_read_only_module_is_not_written_through_unless_forced(tree, tmp_path):
    out = tmp_path / "out"
    run(tree, "--out-dir", out, "-q")
    kept = out / "b/config_registry.py"
    kept.chmod(0o444)
    before = state(kept)
    put(tree, "b/job_b.toml", JOB.format(steps=40))
    status, report, err = run(tree, "--out-dir", out)
    assert status == 1 and state(kept) == before
    assert f"not writing {kept}: it is read-only; make it writable, or pass --force" in err
    assert "1 module written, 1 refused" in report
    status, _, err = run(tree, "--out-dir", out, "--force")
    assert status == 0, err
    assert "steps=40" in kept.read_text() and stat.S_IMODE(kept.stat().st_mode) == 0o444
    assert f"replaced {kept} (--force), although it is read-only" in err


def test_dash_o_keeps_an_edited_or_read_only_module(tree, tmp_path):
    toml = tree / "a/job_a.toml"
    target = tmp_path / "config_registry.py"
    assert run(toml, "-o", target, "-q")[0] == 0
    assert run(toml, "-o", target, "-q")[0] == 0  # its own, untouched module: replaced
    target.write_text(target.read_text().replace("steps=3", "steps=30"))
    before = state(target)
    status, _, err = run(toml, "-o", target)
    assert status == 2 and state(target) == before
    assert f"not writing -o {target}: it was edited after titan-migrate wrote it" in err
    assert "nothing was written" in err
    assert run(toml, "-o", target, "--force", "-q")[0] == 0
    assert "steps=3)" in target.read_text()
    target.chmod(0o400)
    before = state(target)
    status, _, err = run(toml, "-o", target)
    assert status == 2 and state(target) == before and "it is read-only" in err


@pytest.mark.parametrize(
    "content",
    [
        b"print('my own module')\n",
        b'"""Registry functions of my team, written by hand."""\n',  # not titan's header
        b"[training]\nsteps = 1\n",  # a TOML
        b"\x00\xff\xfe binary",
        b"\n",  # one blank line is still somebody's file
    ],
)
def test_dash_o_never_replaces_a_file_titan_did_not_write_unless_forced(tree, tmp_path, content):
    toml = tree / "a/job_a.toml"
    target = tmp_path / "mine.py"
    target.write_bytes(content)
    status, out, err = run(toml, "-o", target)
    assert status == 2 and target.read_bytes() == content
    assert f"not writing -o {target}: titan-migrate did not write it" in err
    assert "pass --force" in err
    status, _, err = run(toml, "-o", target, "--force")
    assert status == 0 and target.read_text().startswith(GENERATED_HEADER)
    assert f"replacing {target} (--force), although titan-migrate did not write it" in err


# --------------------------------------------------------------------------- one file, two names


def test_two_folders_whose_modules_are_one_file_are_both_refused(tree, tmp_path):
    out = tmp_path / "out"
    (out / "a").mkdir(parents=True)
    (out / "b").symlink_to("a")
    status, report, err = run(tree, "--out-dir", out, "--format", "json")
    assert status == 1
    assert not (out / "a/config_registry.py").exists()
    assert err.count("(through a link)") == 2
    modules = {Path(m["path"]).parent.name: m for m in json.loads(report)["modules"]}
    assert [modules[n]["written"] for n in "ab"] == [False, False]
    assert "is the same file as" in modules["a"]["refused"]


def test_hard_linked_modules_in_two_folders_are_both_refused(tree, tmp_path):
    out = tmp_path / "out"
    run(tree, "--out-dir", out, "-q")
    (out / "b/config_registry.py").unlink()
    os.link(out / "a/config_registry.py", out / "b/config_registry.py")
    before = state(out / "a/config_registry.py")
    status, report, _ = run(tree, "--out-dir", out)
    assert status == 1 and state(out / "a/config_registry.py") == before
    assert "0 modules written, 2 refused" in report


def test_modules_beside_the_tomls_linked_to_each_other_are_refused(tree):
    run(tree, "-q")
    (tree / "b/config_registry.py").unlink()
    (tree / "b/config_registry.py").symlink_to("../a/config_registry.py")
    status, report, err = run(tree)
    assert status == 1 and "0 modules written, 2 refused" in report
    assert "steps=3" in (tree / "a/config_registry.py").read_text()


@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_dash_o_that_is_a_link_to_a_walked_input_is_refused(tree, tmp_path, link):
    toml = tree / "b/job_b.toml"
    before = toml.read_bytes()
    target = tmp_path / "registry.py"
    if link == "symlink":
        target.symlink_to(toml)
    else:
        os.link(toml, target)
    status, _, err = run(tree, "-o", target)
    assert status == 2 and "refusing to write over it" in err
    assert toml.read_bytes() == before

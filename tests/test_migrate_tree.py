"""``titan-migrate DIR``: whole trees of legacy TOMLs become one ``config_registry.py`` per folder
(beside the TOMLs, or under ``--out-dir``) or one module (``-o``), with a table of what became of
each file; never over an input, never over a file titan-migrate did not write."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import validate
from tests.helpers import write as put
from tests.reference import CORPUS, REPO, require
from titan.cli import diff as diff_cli
from titan.cli import migrate as cli
from titan.cli.migrate_summary import progress, wants_progress
from titan.cli.migrate_tree import GENERATED_HEADER

LLAMA_DEBUG = """\
# A tiny llama3 run.
[job]
description = "tiny llama3"

[model]
name = "llama3"
flavor = "debugmodel"

[training]
steps = 10  # ten steps
local_batch_size = 8
"""

LLAMA_8B = """\
[model]
name = "llama3"
flavor = "8B"

[parallelism]
tensor_parallel_degree = 2
data_parallel_shard_degree = -1

[checkpoint]
enable = true
interval = 500
"""

QWEN_SMALL = """\
[model]
name = "qwen3"
flavor = "0.6B"

[training]
steps = 20

[quantize.linear.float8]
filter_fqns = ["output"]
"""

BROKEN = "[training\nsteps = 1\n"

PROBE_MODULE = '''\
"""A [probe] section this project's TOMLs use without declaring the module."""

from dataclasses import dataclass, field


@dataclass
class Probe:
    """Record statistics of a few modules."""

    every_n_steps: int = 50
    """Record on every N-th step."""


@dataclass
class JobConfig:
    probe: Probe = field(default_factory=Probe)
    """The [probe] section."""
'''


def run(*argv: object, cwd: Path | None = None) -> tuple[int, str, str]:
    """``titan-migrate ARGV`` in this process (from ``cwd``); exit code, stdout, stderr. The
    files are v0.2.2 files, which nothing in them dates: ``--era v0.2.2`` says so."""
    if "--era" not in argv:
        argv = (*argv, "--era", "v0.2.2")
    out, err = io.StringIO(), io.StringIO()
    before = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        status = cli.run([str(a) for a in argv], stdout=out, stderr=err)
    finally:
        os.chdir(before)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def tree(tmp_path) -> Path:
    """Two model folders (one with a file that cannot be migrated), a tool config, a hidden
    folder and a copy of a llama3 folder whose function names clash with the first."""
    root = tmp_path / "configs"
    put(root, "llama3/debug_model.toml", LLAMA_DEBUG)
    put(root, "llama3/llama3_8b.toml", LLAMA_8B)
    put(root, "llama3_copy/debug_model.toml", LLAMA_DEBUG.replace("steps = 10", "steps = 30"))
    put(root, "qwen3/qwen3_small.toml", QWEN_SMALL)
    put(root, "qwen3/broken.toml", BROKEN)
    put(root, "pyproject.toml", '[project]\nname = "not-a-job"\n')
    put(root, ".hidden/debug_model.toml", LLAMA_DEBUG)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def functions(module: Path) -> list[str]:
    return [
        line[4:].partition("(")[0]
        for line in module.read_text(encoding="utf-8").splitlines()
        if line.startswith("def ")
    ]


# --------------------------------------------------------------------------- where modules go


def test_a_folder_gets_a_module_per_folder_beside_its_tomls(tree):
    before = snapshot(tree)
    status, out, err = run(tree)
    assert status == 1, err  # broken.toml is not migrated; the others are
    written = sorted(str(p.relative_to(tree)) for p in tree.rglob("config_registry.py"))
    assert written == [
        "llama3/config_registry.py",
        "llama3_copy/config_registry.py",
        "qwen3/config_registry.py",
    ]
    assert functions(tree / "llama3/config_registry.py") == ["llama3_debugmodel", "llama3_8b"]
    # one module per folder: the same name in two folders needs no suffix
    assert functions(tree / "llama3_copy/config_registry.py") == ["llama3_debugmodel"]
    assert functions(tree / "qwen3/config_registry.py") == ["qwen3_small"]
    # the tool config and the hidden folder are neither read nor written into, inputs untouched
    assert "pyproject.toml" not in out and ".hidden" not in out
    assert {k: v for k, v in snapshot(tree).items() if "config_registry" not in k} == before
    for module in tree.rglob("config_registry.py"):
        text = module.read_text(encoding="utf-8")
        assert text.startswith(GENERATED_HEADER)
        assert f"Regenerate with ``titan-migrate {tree}``." in text
        checked = validate(module)
        assert checked.code == 0, checked.out
    # the module imports and returns the configs the TOMLs describe
    namespace: dict = {}
    exec(compile((tree / "llama3/config_registry.py").read_text(), "registry", "exec"), namespace)
    assert namespace["llama3_8b"]().parallelism.tensor_parallel_degree == 2
    assert namespace["llama3_8b"]().checkpoint.interval == 500


def test_a_second_run_replaces_its_own_modules_with_the_same_text(tree):
    run(tree)
    first = snapshot(tree)
    status, _, err = run(tree)
    assert status == 1, err
    assert snapshot(tree) == first  # config_registry.py met in the walk is not an input


def test_a_file_named_and_met_in_a_walked_folder_is_migrated_once(tree):
    status, out, _ = run(tree / "llama3/debug_model.toml", tree / "llama3")
    assert status == 0, out
    assert functions(tree / "llama3/config_registry.py") == ["llama3_debugmodel", "llama3_8b"]
    assert "2 files: 2 lossless; 1 module written" in out


def test_dash_o_writes_one_module_with_every_function(tree, tmp_path):
    target = tmp_path / "all.py"
    status, out, err = run(tree, "-o", target)
    assert status == 1, err
    assert not list(tree.rglob("config_registry.py"))
    names = functions(target)
    assert names == ["llama3_debugmodel", "llama3_8b", "llama3_debugmodel_", "qwen3_small"]
    assert "renamed-function" in out  # said, not silent
    assert validate(target).code == 0


def test_out_dir_mirrors_the_folders_below_the_common_root(tree, tmp_path):
    before = snapshot(tree)
    out_dir = tmp_path / "registry"
    status, _, err = run(tree, "--out-dir", out_dir)
    assert status == 1, err
    made = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file())
    assert made == [
        "llama3/config_registry.py",
        "llama3_copy/config_registry.py",
        "qwen3/config_registry.py",
    ]
    assert snapshot(tree) == before  # nothing written beside the TOMLs
    # the common root of two folders is their parent; of one folder, the folder itself
    second = tmp_path / "second"
    assert run(tree / "llama3", tree / "qwen3/qwen3_small.toml", "--out-dir", second)[0] == 0
    assert sorted(str(p.relative_to(second)) for p in second.rglob("*.py")) == [
        "llama3/config_registry.py",
        "qwen3/config_registry.py",
    ]
    third = tmp_path / "third"
    assert run(tree / "llama3", "--out-dir", third)[0] == 0
    assert [p.name for p in third.iterdir()] == ["config_registry.py"]


def test_only_files_and_no_output_keep_the_module_on_stdout(tree):
    status, out, err = run(tree / "llama3/debug_model.toml", tree / "llama3/llama3_8b.toml")
    assert status == 0, err
    assert out.startswith(GENERATED_HEADER) and "def llama3_8b()" in out
    assert not list(tree.rglob("config_registry.py"))


def test_a_single_file_run_has_no_summary_table(tree):
    status, out, err = run(tree / "llama3/debug_model.toml")
    assert status == 0
    assert "module" not in err and "1 lossless" not in err
    status, out, err = run(tree / "llama3/debug_model.toml", "--format", "json")
    assert set(json.loads(err)) == {"files", "lossless", "errors", "declarations", "executed"}


# --------------------------------------------------------------------------- never over a file


def test_a_hand_written_registry_is_never_replaced(tree, tmp_path):
    mine = "def mine():\n    return None  # hand-written\n"
    (tree / "llama3/config_registry.py").write_text(mine, encoding="utf-8")
    status, out, err = run(tree)
    assert status == 1
    assert (tree / "llama3/config_registry.py").read_text(encoding="utf-8") == mine
    assert f"not writing {tree}/llama3/config_registry.py: titan-migrate did not write it" in err
    assert "--out-dir" in err  # what to do instead
    assert functions(tree / "qwen3/config_registry.py") == ["qwen3_small"]  # others written
    assert "(refused)" in out and "1 refused" in out
    # the same under --out-dir: a file titan did not write there stays as it was
    out_dir = tmp_path / "registry"
    put(out_dir, "qwen3/config_registry.py", mine)
    status, _, err = run(tree, "--out-dir", out_dir)
    assert status == 1 and "did not write it" in err
    assert (out_dir / "qwen3/config_registry.py").read_text(encoding="utf-8") == mine
    assert (out_dir / "llama3/config_registry.py").read_text().startswith(GENERATED_HEADER)


def test_a_registry_name_that_is_an_input_is_refused(tree):
    toml = tree / "llama3/debug_model.toml"
    before = toml.read_bytes()
    (tree / "llama3/config_registry.py").symlink_to(toml)
    os.link(tree / "qwen3/qwen3_small.toml", tree / "qwen3/config_registry.py")
    status, _, err = run(tree)
    assert status == 1
    assert err.count("it is one of the inputs") == 2
    assert toml.read_bytes() == before
    assert (tree / "qwen3/config_registry.py").read_text(encoding="utf-8") == QWEN_SMALL
    assert (tree / "llama3").joinpath("config_registry.py").is_symlink()


def test_dash_o_over_a_walked_input_is_a_usage_error(tree):
    toml = tree / "qwen3/qwen3_small.toml"
    status, _, err = run(tree, "-o", toml)
    assert status == 2 and "refusing to write over it" in err
    assert toml.read_text(encoding="utf-8") == QWEN_SMALL


# --------------------------------------------------------------------------- the summary


def test_the_text_summary_has_a_line_per_file(tree):
    status, out, err = run(tree)
    table = out[out.index("\nfile ") :]
    lines = table.strip().splitlines()
    assert lines[0].split() == ["file", "function", "outcome", "not", "carried", "module"]
    rows = {line.split()[0]: line.split() for line in lines[2:-1]}
    assert rows[f"{tree}/llama3/debug_model.toml"] == [
        f"{tree}/llama3/debug_model.toml",
        "llama3_debugmodel",
        "lossless",
        "-",
        f"{tree}/llama3/config_registry.py",
    ]
    assert rows[f"{tree}/qwen3/qwen3_small.toml"][2:5] == ["reported", "1", "inert"]
    assert rows[f"{tree}/qwen3/broken.toml"][1:] == ["-", "failed", "1", "error", "-"]
    assert lines[-1] == "5 files: 3 lossless, 1 reported, 1 failed; 3 modules written"


def test_the_json_summary_is_data(tree):
    status, out, err = run(tree, "--format", "json")
    report = json.loads(out)
    rows = {Path(row["file"]).name: row for row in report["summary"]}
    assert rows["qwen3_small.toml"] == {
        "file": f"{tree}/qwen3/qwen3_small.toml",
        "function": "qwen3_small",
        "outcome": "reported",
        "upgraded": 0,
        "not_carried": {"inert": 1},
        "errors": 0,
        "module": f"{tree}/qwen3/config_registry.py",
    }
    assert rows["broken.toml"]["outcome"] == "failed" and rows["broken.toml"]["module"] is None
    assert [m["path"] for m in report["modules"]] == [
        f"{tree}/llama3/config_registry.py",
        f"{tree}/llama3_copy/config_registry.py",
        f"{tree}/qwen3/config_registry.py",
    ]
    assert all(m["written"] and m["refused"] is None for m in report["modules"])
    assert len(report["files"]) == 5  # every key of every file, as for one file


def test_a_key_of_an_older_torchtitan_makes_an_upgraded_row(tree):
    old = LLAMA_DEBUG.replace("steps = 10  # ten steps", "steps = 10\ntensor_parallel_degree = 2")
    put(tree, "llama3/old_era.toml", old)
    status, out, err = run(tree / "llama3", "--out-dir", tree.parent / "out")
    assert status == 0, out
    table = out[out.index("\nfile ") :].strip().splitlines()
    assert table[0].split() == [
        "file",
        "function",
        "outcome",
        "upgraded",
        "not",
        "carried",
        "module",
    ]
    assert f"{tree}/llama3/old_era.toml" in table[4] and "upgraded   1" in table[4]
    assert table[-1] == "3 files: 2 lossless, 1 upgraded; 1 module written"
    report = json.loads(run(tree / "llama3", "--format", "json", "-o", tree.parent / "one.py")[1])
    (row,) = [r for r in report["summary"] if r["file"].endswith("old_era.toml")]
    assert (row["outcome"], row["upgraded"], row["not_carried"]) == ("upgraded", 1, {})
    assert "config.parallelism.tensor_parallel_degree = 2" in (tree.parent / "one.py").read_text()


def test_a_progress_bar_only_on_a_terminal_for_long_runs(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert wants_progress(21, stream=Terminal())
    assert not wants_progress(20, stream=Terminal())
    assert not wants_progress(500, stream=io.StringIO())  # a pipe or a log
    monkeypatch.setenv("CI", "true")
    assert not wants_progress(500, stream=Terminal())
    shown = Terminal()
    with progress(3, stream=shown, enabled=True) as advance:
        for name in ("a.toml", "b.toml", "c.toml"):
            advance(name)
    assert "migrating" in shown.getvalue()


def test_a_long_run_into_a_pipe_shows_no_progress_bar(tmp_path):
    for index in range(25):
        put(tmp_path / "many", f"run_{index:02d}.toml", LLAMA_DEBUG)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "titan.cli.migrate", str(tmp_path / "many")),
            *("--out-dir", "out", "--era", "v0.2.2"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and "migrating" not in done.stdout
    assert "25 files: 25 lossless; 1 module written" in done.stdout
    assert len(functions(tmp_path / "out/config_registry.py")) == 25


# --------------------------------------------------------------------------- --extension


def test_extension_migrates_a_toml_that_uses_a_module_it_does_not_declare(tmp_path):
    put(tmp_path, "probe_ext.py", PROBE_MODULE)
    toml = put(tmp_path, "probe_run.toml", LLAMA_DEBUG + "\n[probe]\nevery_n_steps = 5\n")
    status, _, err = run(toml)
    assert status == 1 and "unknown-key" in err and "probe" in err
    target = tmp_path / "config_registry.py"
    status, out, err = run(toml, "--extension", "probe_ext", "-o", target)
    assert status == 0, out
    assert "lossless" in out
    text = target.read_text(encoding="utf-8")
    assert "every_n_steps=5" in text and "class Probe" in text
    assert f"--extension probe_ext -o {target}``" in text  # regenerating needs the flag too
    assert validate(target).code == 0
    status, _, err = run(toml, "--extension", "probe_xt")
    assert status == 1 and "probe_xt" in err and "not found" in err


def test_extension_in_titan_diff(tmp_path):
    put(tmp_path, "probe_ext.py", PROBE_MODULE)
    written = put(tmp_path, "written.toml", LLAMA_DEBUG + "\n[probe]\nevery_n_steps = 50\n")
    omitted = put(tmp_path, "omitted.toml", LLAMA_DEBUG)
    # without the module, the written default is a difference; with it, both mean 50
    status, out, _ = diff_run(written, omitted)
    assert status == 1 and "probe.every_n_steps" in out
    assert diff_run(written, omitted, "--extension", "probe_ext")[0] == 0
    status, _, err = diff_run(written, omitted, "--extension", "probe_xt")
    assert status == 2 and "--extension" in err and "not found" in err


def test_extension_with_the_upstream_transformers_backend_config(tmp_path):
    require(CORPUS)
    toml = CORPUS / "torchtitan/experiments/transformers_modeling_backend/configs/debug_model.toml"
    status, out, err = run(toml)
    assert status == 1
    assert "pass `--extension transformers_modeling_backend`" in err  # the hint names the flag
    target = tmp_path / "config_registry.py"
    status, out, err = run(toml, "--extension", "transformers_modeling_backend", "-o", target)
    assert status == 0, out
    assert "unknown-key" not in out
    assert "dropped  hf_transformers.model" in out  # reported, as titan trains no such model
    assert validate(target).code == 0
    status, out, err = diff_run(toml, "llama3_debugmodel")
    assert status == 2 and "--extension transformers_modeling_backend" in err
    assert (
        diff_run(toml, "llama3_debugmodel", "--extension", "transformers_modeling_backend")[0] == 1
    )


def diff_run(*argv: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = diff_cli.run([str(a) for a in argv], stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


# --------------------------------------------------------------------------- exit codes


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["-o", "{tmp}/a.py", "--out-dir", "{tmp}/out"], "give one"),
        (["--check", "{tmp}/a.py", "--out-dir", "{tmp}/out"], "give one"),
        (["--out-dir", "{tree}/llama3/debug_model.toml"], "is not a folder"),
        (["--diff"], "--diff needs -o FILE or --check FILE"),
    ],
)
def test_usage_errors_exit_2_and_write_nothing(tree, tmp_path, argv, needle):
    before = snapshot(tree)
    argv = [a.format(tmp=tmp_path, tree=tree) for a in argv]
    status, out, err = run(tree, *argv)
    assert status == 2 and needle in err and "Traceback" not in err
    assert snapshot(tree) == before


def test_exit_codes_of_tree_runs(tree, tmp_path):
    (tree / "qwen3/broken.toml").unlink()
    assert run(tree)[0] == 0  # every file migrated, every module written
    assert run(tree, "--strict")[0] == 1  # qwen3_small.toml is not lossless
    empty = tmp_path / "empty"
    empty.mkdir()
    status, out, err = run(empty)
    assert status == 0 and "no TOML job files found" in err and not list(empty.iterdir())
    status, _, _ = run(tree, "--check", tmp_path / "missing.py")
    assert status == 1  # one module, compared: not there yet
    out_dir = tmp_path / "registry"
    status, _, _ = run(tree, "-o", tmp_path / "one.py")
    assert status == 0 and (tmp_path / "one.py").exists() and not out_dir.exists()


def test_a_tree_run_never_imports_torch(tree, tmp_path):
    probe = textwrap.dedent(
        f"""
        import io, sys
        from titan.cli import migrate
        status = migrate.run([{str(tree)!r}, "--out-dir", {str(tmp_path / "out")!r}],
                             stdout=io.StringIO(), stderr=io.StringIO())
        assert status == 1, status
        assert "torch" not in sys.modules, "torch was imported"
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr


def test_the_generated_header_is_what_the_renderer_writes():
    """The guard recognises titan-migrate's modules by the renderer's first line."""
    from titan.migrate.codegen.render_code import render_module
    from titan.migrate.plan.build import build_plan

    plan = build_plan(REPO / "legacy_configs/llama3/debug_model.toml")
    assert render_module([plan]).startswith(GENERATED_HEADER + " from ")

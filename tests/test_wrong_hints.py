"""Hints that say what is true: each class of hint that used to point the wrong way.

- an old ``enable_float8_linear = false`` beside a ``model.converters`` that lists the converter
  does not say "the converter is not listed";
- a misspelt model family the project declares gets "did you mean" that family, never "declare
  the family"; a new family's declaration line keeps the families already declared;
- an unknown key the scaffold refuses (not a Python name, a keyword, a mangled name, a date) is
  not sent to ``--scaffold-extension`` as written;
- a link to a folder met in a folder walk is named as skipped (and a loop of links ends);
- the pre-commit hooks exclude exactly what a folder walk leaves out (one list).
"""

from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import pytest
import yaml
from titan.schemas.suggest import DECLARE_HINT

from tests.helpers import validate, write
from tests.reference import REPO
from titan.cli import migrate
from titan.cli.discover import NOT_JOB_TOMLS, SKIPPED_DIRS, discover, hook_exclude

DEBUG = '[model]\nname = "llama3"\nflavor = "debugmodel"\n'


def _hints(result) -> dict[str, str]:
    return {d["path"]: d["hint"] for d in result.json()["diagnostics"]}


def _migrate_report(*args: object) -> dict:
    out, err = io.StringIO(), io.StringIO()
    migrate.run([*map(str, args), "--format", "json"], stdout=out, stderr=err)
    return json.loads(err.getvalue() or out.getvalue())


# --------------------------------------------------------------------------------------------
# A converter that is listed


@pytest.mark.parametrize(
    ("listed", "said"),
    [
        ('["float8"]', '(as "float8")'),  # a stale name of the same converter
        ('["quantize.linear.float8"]', '(as "quantize.linear.float8")'),
        ('["quantize.dense.float8"]', '(as "quantize.dense.float8")'),
    ],
)
def test_a_disabled_old_key_beside_a_listed_converter_says_it_stays_enabled(tmp_path, listed, said):
    toml = write(
        tmp_path,
        "job.toml",
        f"{DEBUG}converters = {listed}\n[float8]\nenable_float8_linear = false\n",
    )
    # model.converters replaced the old key on 2025-02-14: a file with both ran on a loader
    # that skipped the old one, so deleting it is what to do
    hint = _hints(validate(toml, "--format", "json"))["float8.enable_float8_linear"]
    assert hint.startswith("delete it") and "not listed" not in hint
    # read on a day whose loader refused an unknown key, the old key is read as it was meant
    hint = _hints(validate(toml, "--format", "json", "--era", "v0.2.2"))[
        "float8.enable_float8_linear"
    ]
    assert "not listed" not in hint
    assert f"model.converters lists it {said}, so the converter stays enabled" in hint
    alone = write(tmp_path, "alone.toml", f"{DEBUG}[float8]\nenable_float8_linear = false\n")
    hint = _hints(validate(alone, "--format", "json"))["float8.enable_float8_linear"]
    assert "the converter is not listed" in hint  # where it is true, it is still said


# --------------------------------------------------------------------------------------------
# A declared model family


def _fork(tmp_path: Path, declaration: str, name: str) -> Path:
    (tmp_path / ".git").mkdir()
    write(tmp_path, "pyproject.toml", f"[tool.titan]\n{declaration}\n")
    return write(tmp_path, "job.toml", f'[model]\nname = "{name}"\nflavor = "small"\n')


@pytest.mark.parametrize(
    ("declaration", "written"),
    [
        ('model-registries = { mymodel = "forkpkg.models" }', "MyModel"),  # another case
        ('model-registries = { mymodel = "forkpkg.models" }', "mymdoel"),  # letters swapped
        ('flavors = { mymodel = ["small"] }', "mymodle"),  # declared by its flavors only
    ],
)
def test_a_misspelt_declared_family_is_meant_not_to_be_declared(tmp_path, declaration, written):
    toml = _fork(tmp_path, declaration, written)
    hint = _hints(validate(toml, "--format", "json"))["model.name"]
    assert hint.startswith("did you mean `mymodel`?"), hint
    assert "model-registries =" not in hint
    report = _migrate_report(toml)
    [unsupported] = [
        d for f in report["files"] for d in f["diagnostics"] if d["code"] == "unsupported-model"
    ]
    assert unsupported["hint"].startswith("did you mean `mymodel`?")


@pytest.mark.parametrize(
    ("declaration", "toml", "path", "line"),
    [
        (
            'model-registries = { mymodel = "forkpkg.models" }',
            '[model]\nname = "othermodel"\nflavor = "small"\n',
            "model.name",
            'model-registries = { mymodel = "forkpkg.models", othermodel = "yourpkg.models" }',
        ),
        (
            'datasets = ["my_corpus"]',
            '[training]\ndataset = "zzzdata"\n',
            "training.dataset",
            'datasets = ["my_corpus", "zzzdata"]',
        ),
    ],
)
def test_a_declaration_line_keeps_what_the_project_declares(
    tmp_path, declaration, toml, path, line
):
    _fork(tmp_path, declaration, "unused")
    file = write(tmp_path, "new.toml", toml)
    assert line in _hints(validate(file, "--format", "json"))[path]


def test_another_case_of_a_declared_converter_is_meant(tmp_path):
    _fork(tmp_path, 'converters = ["npu_rms_norm"]', "unused")
    file = write(tmp_path, "new.toml", f'{DEBUG}converters = ["NPU_RMS_NORM"]\n')
    assert _hints(validate(file, "--format", "json"))["model.converters"] == (
        'did you mean `"npu_rms_norm"`?'
    )


# --------------------------------------------------------------------------------------------
# Keys the scaffold refuses


@pytest.mark.parametrize(
    ("toml", "path", "refused", "why"),
    [
        ("[infra]\nmy-key = 1\n", "infra", "infra.my-key", "it is not a Python name"),
        ("[my-infra]\nnodes = 1\n", "my-infra", "my-infra", "it is not a Python name"),
        ("[2fast]\nx = 1\n", "2fast", "2fast", "it is not a Python name"),
        ("[infra]\nclass = 1\n", "infra", "infra.class", "Python does not allow it"),
        ("[infra]\n__x = 1\n", "infra", "infra.__x", "Python renames (mangles)"),
        ("[training]\nmy-opt = 1\n", "training.my-opt", "training.my-opt", "not a Python name"),
        ("[infra]\nwhen = 2024-01-01\n", "infra", "infra", "TOML date or time"),
    ],
)
def test_no_scaffold_is_suggested_for_a_key_it_refuses(tmp_path, toml, path, refused, why):
    file = write(tmp_path, "job.toml", toml)
    hint = _hints(validate(file, "--format", "json"))[path]
    assert hint != DECLARE_HINT
    assert f"cannot declare `{refused}`" in hint and why in hint
    out, err = io.StringIO(), io.StringIO()
    migrate.run(["--scaffold-extension", str(file)], stdout=out, stderr=err)
    assert f"`{refused}`" in err.getvalue()  # the scaffold leaves out the same key


def test_a_section_the_scaffold_declares_in_part_says_which_key_it_leaves_out(tmp_path):
    file = write(tmp_path, "job.toml", "[infra]\nnodes = 4\nmy-key = 1\nmy_other = 2\n")
    hint = _hints(validate(file, "--format", "json"))["infra"]
    assert "cannot declare `infra.my-key`: it is not a Python name" in hint
    out, err = io.StringIO(), io.StringIO()
    assert migrate.run(["--scaffold-extension", str(file)], stdout=out, stderr=err) == 0
    assert "nodes: int = 4" in out.getvalue() and "`infra.my-key`" in err.getvalue()
    # a table of a known-name section whose keys are not names is one dict field: declarable
    whole = write(tmp_path, "whole.toml", "[infra]\nnodes = 1\n[infra.sub]\na-b = 2\n")
    assert _hints(validate(whole, "--format", "json"))["infra"] == DECLARE_HINT


# --------------------------------------------------------------------------------------------
# Links to folders in a folder walk


def test_a_link_to_a_folder_is_named_as_skipped(tmp_path):
    write(tmp_path, "real/sub/job.toml", "[training]\nsteps = 1\n")
    os.symlink(tmp_path / "real", tmp_path / "link")
    os.symlink("..", tmp_path / "real" / "up")  # a loop
    done = validate(tmp_path)
    assert done.code == 0, done.out
    notes = [line for line in done.err.splitlines() if "skipped" in line]
    assert len(notes) == 2 and all("a link to a folder" in n for n in notes), done.err
    assert any(n.endswith("name it to check it)") for n in notes)
    named = validate(tmp_path / "link")  # named, a link is walked
    assert named.code == 0 and "1 file" in named.out


def test_titan_migrate_names_skipped_links_too(tmp_path):
    write(tmp_path, "real/job.toml", DEBUG)
    os.symlink(tmp_path / "real", tmp_path / "link")
    out, err = io.StringIO(), io.StringIO()
    migrate.run([str(tmp_path), "--out-dir", str(tmp_path / "out")], stdout=out, stderr=err)
    assert "link: it is a link to a folder" in err.getvalue()


# --------------------------------------------------------------------------------------------
# The pre-commit hooks' exclude list and the folder walk's


def test_every_hook_excludes_what_the_walk_skips():
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert [h["id"] for h in hooks if h.get("exclude") != hook_exclude()] == [], (
        "regenerate each hook's exclude: python -c 'from titan.cli.discover import "
        "hook_exclude; print(hook_exclude())'"
    )


def test_the_exclude_pattern_and_the_walk_agree_file_by_file(tmp_path, monkeypatch):
    """Every tool TOML, every job TOML in a hidden or skipped folder, and job TOMLs where a
    walk takes them: the walk takes exactly the files the hooks' pattern lets through."""
    monkeypatch.chdir(tmp_path)
    names = [*sorted(NOT_JOB_TOMLS), "llama3_8b.toml", "ruff_sweep.toml", "pyproject_job.toml"]
    folders = ["", "configs/", "configs/deep/", ".hidden/", "configs/.cache/"]
    folders += [f"{d}/" for d in sorted(SKIPPED_DIRS)] + [f"configs/{d}/" for d in SKIPPED_DIRS]
    every = [folder + name for folder in folders for name in names]
    for path in every:
        write(tmp_path, path, "[training]\nsteps = 1\n")
    walked = {shown for _, shown in discover(["."]).files}
    pattern = re.compile(hook_exclude())
    passed = {p for p in every if p.endswith(".toml") and not pattern.search(p)}
    assert walked == passed
    assert {"llama3_8b.toml", "configs/deep/ruff_sweep.toml"} <= walked
    for name in ("pyproject.toml", ".ruff.toml", "rustfmt.toml", "uv.toml", "Cargo.toml"):
        assert pattern.search(f"configs/{name}") and f"configs/{name}" not in walked

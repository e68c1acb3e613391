"""The project declaration: ``[tool.titan] extensions`` in the nearest ``pyproject.toml``.

A fork's own sections (``[infra]``, ``optimizer.swap_optimizer``) are declared once for the
project and then validated, migrated, diffed and trained like any extension, with no flag; a
declaration titan cannot use is a finding located in ``pyproject.toml``; files outside the
project, or under a nearer ``pyproject.toml``, are not touched by it.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from titan.migrate.plan.build import build_plan
from titan.schemas import project
from titan.schemas.suggest import DECLARE_HINT
from titan.schemas.toml_check import CheckOptions, check_file

from titan.cli import diff, validate

REPO = Path(__file__).resolve().parents[1]

FORK_EXT = """\
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Cluster:
    size: int = 8


@dataclass
class Infra:
    nodes: int = 1
    cluster: Cluster = field(default_factory=Cluster)


@dataclass
class Optimizer:
    swap_optimizer: bool = False


@dataclass
class JobConfig:
    infra: Infra = field(default_factory=Infra)
    optimizer: Optimizer = field(default_factory=Optimizer)
"""

JOB = """\
[model]
name = "llama3"
flavor = "debugmodel"

[optimizer]
swap_optimizer = true

[infra]
nodes = 4

[infra.cluster]
size = 16
"""

DECLARED = (
    '[project]\nname = "fork"\n\n[tool.titan]\nextensions = ["tools/fork_ext.py"]\nera = "v0.2.2"\n'
)


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


@pytest.fixture
def fork(tmp_path: Path, monkeypatch) -> Path:
    """A fork's repository: a declared extension module and one job that uses it."""
    (tmp_path / ".git").mkdir()  # the repository root: the search stops here
    write(
        tmp_path,
        {"pyproject.toml": DECLARED, "tools/fork_ext.py": FORK_EXT, "configs/job.toml": JOB},
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def validate_json(*args: str) -> tuple[int, list[dict]]:
    out, err = io.StringIO(), io.StringIO()
    code = validate.run([*args, "--format", "json"], stdout=out, stderr=err)
    assert code in (0, 1), err.getvalue()
    return code, json.loads(out.getvalue())["diagnostics"]


def located(found: list[dict]) -> list[tuple]:
    return [(d["code"], d["file"], d["line"], d["col"]) for d in found]


# ----------------------------------------------------------------------- the declaration works


def test_a_declared_module_is_merged_into_every_toml_of_the_project(fork):
    assert validate_json("configs/job.toml") == (0, [])
    checked = check_file(fork / "configs" / "job.toml")
    assert checked.declared == ("fork_ext",)
    assert [e.file for e in checked.extensions] == [str(fork / "tools" / "fork_ext.py")]


def test_without_the_declaration_the_fork_keys_are_unknown_and_say_how_to_declare(fork):
    (fork / "pyproject.toml").write_text('[project]\nname = "fork"\n')
    code, found = validate_json("configs/job.toml")
    assert code == 1
    assert {(d["code"], d["path"], d["hint"]) for d in found} == {
        ("unknown-key", "optimizer.swap_optimizer", DECLARE_HINT),
        ("unknown-key", "infra", DECLARE_HINT),
    }


def test_a_dotted_module_is_found_from_the_folder_of_pyproject(fork):
    write(
        fork,
        {
            "pyproject.toml": '[tool.titan]\nextensions = ["forkpkg.config_ext"]\n',
            "forkpkg/__init__.py": "",
            "forkpkg/config_ext.py": FORK_EXT,
        },
    )
    (fork / "tools" / "fork_ext.py").unlink()
    os.chdir(fork / "configs")  # the module is found from pyproject's folder, not the cwd's
    assert validate_json("job.toml") == (0, [])


def test_model_registries_is_reserved_read_and_checked(fork):
    (fork / "pyproject.toml").write_text(
        DECLARED + '[tool.titan.model-registries]\nmymodel = "forkpkg.models.mymodel"\n'
    )
    found = project.for_file(fork / "configs" / "job.toml")
    assert found.model_registries == (("mymodel", "forkpkg.models.mymodel"),)
    assert not found.problems
    assert validate_json("configs/job.toml") == (0, [])


# ----------------------------------------------------------------------- where it applies


def test_a_toml_outside_the_project_is_unaffected(fork, tmp_path_factory):
    outside = tmp_path_factory.mktemp("outside")
    (outside / ".git").mkdir()  # its own repository, without a pyproject.toml
    write(outside, {"job.toml": JOB})
    code, found = validate_json(str(outside / "job.toml"))
    assert code == 1 and {d["path"] for d in found} == {"optimizer.swap_optimizer", "infra"}
    assert check_file(outside / "job.toml").declared == ()


def test_the_search_stops_at_the_repository_root(fork):
    inner = fork / "vendored"
    (inner / ".git").mkdir(parents=True)
    write(inner, {"job.toml": JOB})
    assert check_file(inner / "job.toml").declared == ()


def test_the_nearest_pyproject_wins(fork):
    # A sub-project with a pyproject.toml of its own is a project of its own, declared or not.
    write(fork, {"sub/pyproject.toml": '[project]\nname = "sub"\n', "sub/job.toml": JOB})
    code, found = validate_json("sub/job.toml")
    assert code == 1 and {d["path"] for d in found} == {"optimizer.swap_optimizer", "infra"}
    write(
        fork,
        {
            "sub/pyproject.toml": '[tool.titan]\nextensions = ["sub_ext.py"]\n',
            "sub/sub_ext.py": FORK_EXT.replace("nodes: int = 1", "nodes: str = 'x'"),
        },
    )
    code, found = validate_json("sub/job.toml")  # sub_ext's Infra.nodes is a str
    assert [(d["code"], d["path"], d["file"]) for d in found] == [
        ("wrong-type", "infra.nodes", "sub/job.toml")
    ]
    assert validate_json("configs/job.toml") == (0, [])  # the root project keeps its own


def test_a_pyproject_that_does_not_mention_titan_is_not_parsed(fork):
    # Broken TOML: parsing it would be a finding. It is never parsed, only read.
    (fork / "pyproject.toml").write_text("[project\nname = 'fork'\n")
    found = project.for_file(fork / "configs" / "job.toml")
    assert found.file == str(fork / "pyproject.toml") and not found.problems
    (fork / "pyproject.toml").write_text("[project\n# titan\n")
    assert [p.code for p in project.for_file(fork / "configs" / "job.toml").problems] == [
        "toml-syntax"
    ]


def test_lookups_are_cached_per_folder(fork, monkeypatch):
    project.forget()
    project.for_file(fork / "configs" / "job.toml")
    calls = []
    real = os.path.isfile
    monkeypatch.setattr(os.path, "isfile", lambda p: calls.append(p) or real(p))
    project.for_file(fork / "configs" / "other.toml")
    assert calls == []  # the folder's answer is cached: not one stat more


# ----------------------------------------------------------------------- a declaration titan cannot use


@pytest.mark.parametrize(
    ("pyproject", "expected", "message", "hint"),
    [
        (
            '[tool.titan]\nextension = ["tools/fork_ext.py"]\n',
            ("unknown-key", 2, 1),
            "[tool.titan] has no setting `extension`",
            "did you mean `extensions`?",
        ),
        (
            '[project]\nname = "fork"\n\n[tool.titan]\nextensions = ["tools/missing.py"]\n',
            ("extension-error", 5, 15),
            "extension `tools/missing.py` declared in pyproject.toml does not exist",
            "relative to the folder of pyproject.toml",
        ),
        (
            '[tool.titan]\nextensions = [\n  "tools/fork_ext.py",\n  "forkpkg.nowhere",\n]\n',
            ("extension-error", 4, 3),
            "extension `forkpkg.nowhere` declared in pyproject.toml not found",
            "install the package",
        ),
        (
            "[tool]\ntitan = 3\n",
            ("wrong-type", 2, 1),
            "`tool.titan` must be a table, got int 3",
            "write a [tool.titan] table",
        ),
        (
            '[tool.titan]\nextensions = "tools/fork_ext.py"\n',
            ("wrong-type", 2, 1),
            "[tool.titan] extensions must be a list of modules",
            "got the string 'tools/fork_ext.py'",
        ),
        (
            '[tool.titan]\nextensions = ["tools/fork-ext.py"]\n',
            ("wrong-type", 2, 15),
            "`fork-ext` is not a Python name",
            "rename the file",
        ),
        (
            "[tool.titan]\nmodel-registries = { mymodel = 3 }\n",
            ("wrong-type", 2, 1),
            'model-registries must be a table of NAME = "package.module"',
            "each value names the module",
        ),
    ],
)
def test_a_declaration_titan_cannot_use_is_a_finding_in_pyproject(
    fork, pyproject, expected, message, hint
):
    (fork / "pyproject.toml").write_text(pyproject)
    code, found = validate_json("configs/job.toml")
    assert code == 1
    mine = [d for d in found if d["file"] == "pyproject.toml"]
    assert len(mine) == 1, found
    assert (mine[0]["code"], mine[0]["line"], mine[0]["col"]) == expected
    assert message in mine[0]["message"] and hint in mine[0]["hint"]
    # The other commands fail on it too, never ignore it: titan-migrate reports it as an error.
    plan = build_plan(fork / "configs" / "job.toml")
    assert any(d.span.file == "pyproject.toml" for d in plan.errors())


def test_the_text_report_locates_a_bad_declaration_with_its_hint(fork):
    (fork / "pyproject.toml").write_text('[tool.titan]\nextensions = ["tools/gone.py"]\n')
    out = io.StringIO()
    assert validate.run(["configs/job.toml"], stdout=out, stderr=io.StringIO()) == 1
    text = out.getvalue()
    assert "pyproject.toml:2:15: error[extension-error] extension `tools/gone.py`" in text
    assert "hint: fix the path: paths in [tool.titan] extensions are relative to" in text


def test_a_folder_walk_refuses_a_declaration_it_cannot_use(fork):
    (fork / "pyproject.toml").write_text('[tool.titan]\nextensions = "tools/fork_ext.py"\n')
    err = io.StringIO()
    assert validate.run(["."], stdout=io.StringIO(), stderr=err) == 2
    assert "pyproject.toml:2:1: [tool.titan] extensions must be a list of modules" in (
        err.getvalue()
    )


def test_an_unreadable_declared_module_is_a_finding_at_its_entry(fork):
    (fork / "tools" / "fork_ext.py").write_text("def broken(:\n")
    code, found = validate_json("configs/job.toml")
    assert code == 1
    [bad] = [d for d in found if d["file"] == "pyproject.toml"]
    assert (bad["code"], bad["line"], bad["col"]) == ("extension-error", 5, 15)
    assert "syntax error" in bad["message"] and bad["hint"]


# ----------------------------------------------------------------------- reading the module


def test_a_declared_module_may_use_future_annotations_but_a_custom_module_may_not(fork):
    # v0.2.2 never loads a declared module, so its `from __future__ import annotations` is fine;
    # the same file named as custom_config_module is what v0.2.2 would fail to load.
    assert validate_json("configs/job.toml") == (0, [])
    (fork / "tools" / "job.toml").write_text('[job]\ncustom_config_module = "fork_ext"\n' + JOB)
    code, found = validate_json("tools/job.toml")
    assert code == 0 and [(d["code"], d["file"]) for d in found] == [
        ("extension-unreadable", "tools/job.toml")
    ]


def test_allow_import_imports_a_declared_module_and_says_so(fork):
    sys.modules.pop("fork_ext", None)  # another test's fork_ext, imported in this process
    code, found = validate_json("configs/job.toml", "--allow-import")
    assert code == 0
    assert [(d["code"], d["severity"], d["file"], d["line"]) for d in found] == [
        ("extension-imported", "info", "pyproject.toml", 5)
    ], found
    sys.modules.pop("fork_ext", None)


# ----------------------------------------------------------------------- every command honours it


def test_titan_migrate_carries_the_fork_keys_and_names_the_declaration(fork):
    done = subprocess.run(
        [sys.executable, "-m", "titan.cli.migrate", "configs/job.toml", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=fork,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    [report] = json.loads(done.stderr)["files"]
    assert report["lossless"]
    keys = report["keys"]
    assert keys["infra.nodes"]["status"] == keys["infra.cluster.size"]["status"] == "carried"
    assert keys["optimizer.swap_optimizer"]["status"] == "carried"
    assert "Merged ``fork_ext``: ``pyproject.toml`` declares it for the project" in done.stdout


def test_titan_diff_compares_the_effective_values_with_the_declared_defaults(fork):
    # `nodes = 1` is the declared default: with the declaration the two files are equal.
    write(fork, {"configs/same.toml": JOB.replace("nodes = 4", "nodes = 1")})
    write(fork, {"configs/omitted.toml": JOB.replace("nodes = 4\n", "")})
    out = io.StringIO()
    code = diff.run(["configs/same.toml", "configs/omitted.toml"], stdout=out, stderr=io.StringIO())
    assert code == 0, out.getvalue()
    (fork / "pyproject.toml").write_text('[project]\nname = "fork"\n')
    project.forget()
    code = diff.run(["configs/same.toml", "configs/omitted.toml"], stdout=out, stderr=io.StringIO())
    assert code == 1 and "infra.nodes" in out.getvalue()  # unknown keys are kept as written


def test_titan_train_builds_the_fork_config(fork):
    from titan.cli import train_config

    loaded = train_config.load(
        ["--job.config_file", "configs/job.toml"],
        world_size=1,
        stdout=io.StringIO(),
        stderr=io.StringIO(),
    )
    config = loaded.config
    assert (config.infra.nodes, config.infra.cluster.size, config.optimizer.swap_optimizer) == (
        4,
        16,
        True,
    )


def test_validate_options_still_merge_an_extension_flag_beside_the_declaration(fork):
    write(fork, {"configs/flux.toml": JOB + "\n[encoder]\nmax_t5_encoding_len = 256\n"})
    checked = check_file(fork / "configs" / "flux.toml", CheckOptions(extensions=("flux",)))
    assert [e.module for e in checked.extensions][-1] == "fork_ext"
    assert not [d for d in checked.diagnostics if d.severity.value == "error"]

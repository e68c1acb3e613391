"""The project's own code is imported only when asked, and titan says what it ran and which
declaration it applied.

- building a migrated config that needs a declared package (``[tool.titan] model-registries``,
  a converter class) imports it only with ``--allow-import`` (titan-validate --as-registry,
  titan-diff); without it the report names the package and the flag; a package that cannot be
  imported is a finding, never an internal error (titan-train too);
- the ``pyproject.toml`` that applies is the nearest one up to the repository root; outside any
  repository, none above the working folder; the one applied is named in the text and the JSON
  reports of titan-validate and titan-migrate;
- every user file a command executes (``./config_registry.py`` for a built-in name too, the
  registry modules of a folder walk) is named once: on stderr, or in the JSON report.

Every command runs as its installed console script in a fresh process, in a folder of its own,
so no import or cached lookup of one case leaks into another. A package's import leaves a
marker file: whether it ran is read from the disk, not from titan's word.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

DEBUG_TOML = '[model]\nname = "{name}"\nflavor = "debugmodel"\n{extra}'

_REGISTRY_PACKAGE = """\
import pathlib

pathlib.Path(__file__).with_name("RAN").write_text("imported")


def model_registry(flavor, **kwargs):
    from titan.models.llama3 import model_registry as llama3

    return llama3(flavor, **kwargs)
"""

_CONVERTER_PACKAGE = '''\
import dataclasses
import pathlib

from titan.protocols.model_converter import ModelConverter

pathlib.Path(__file__).with_name("RAN").write_text("imported")


class NPURMSNorm(ModelConverter):
    """A fork's converter."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(ModelConverter.Config):
        """Its config."""
'''


def _run(tool: str, *args: object, cwd: Path) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / tool
    return subprocess.run(
        [str(script), *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=600
    )


def _project(tmp_path: Path, declaration: str, *, name: str = "mymodel", extra: str = "") -> Path:
    """A git repository with a ``pyproject.toml`` declaring ``declaration`` and ``job.toml``."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text(f"[tool.titan]\n{declaration}\n")
    (tmp_path / "job.toml").write_text(DEBUG_TOML.format(name=name, extra=extra))
    return tmp_path


def _package(root: Path, dotted: str, source: str) -> Path:
    """The module ``dotted`` under ``root`` (packages made on the way); its folder."""
    *packages, module = dotted.split(".")
    folder = root
    for part in packages:
        folder = folder / part
        folder.mkdir(exist_ok=True)
        (folder / "__init__.py").touch()
    (folder / f"{module}.py").write_text(source)
    return folder


# The declarations whose migrated config needs the project's own code, with the module it needs.
NEEDS_IMPORT = [
    pytest.param(
        'model-registries = { mymodel = "forkpkg.models" }',
        "mymodel",
        "",
        "forkpkg.models",
        _REGISTRY_PACKAGE,
        id="model-registry",
    ),
    pytest.param(
        'model-registries = { mymodel = "deep.fork.models.mymodel" }',
        "mymodel",
        "",
        "deep.fork.models.mymodel",
        _REGISTRY_PACKAGE,
        id="nested-model-registry",
    ),
    pytest.param(
        'converters = { npu_rms_norm = "forkconv.norms.NPURMSNorm" }',
        "llama3",
        'converters = ["npu_rms_norm"]\n',
        "forkconv.norms",
        _CONVERTER_PACKAGE,
        id="converter-class",
    ),
]


@pytest.mark.parametrize(("declaration", "name", "extra", "module", "source"), NEEDS_IMPORT)
def test_as_registry_imports_declared_code_only_with_allow_import(
    tmp_path, declaration, name, extra, module, source
):
    project = _project(tmp_path, declaration, name=name, extra=extra)
    folder = _package(project, module, source)

    refused = _run("titan-validate", "job.toml", "--as-registry", "--format", "json", cwd=project)
    assert refused.returncode == 0, refused.stdout + refused.stderr
    assert not (folder / "RAN").exists()  # nothing of the project's ran
    [finding] = [d for d in json.loads(refused.stdout)["diagnostics"] if d["code"] == "user-code"]
    assert finding["severity"] == "warning"
    assert module in finding["message"] and "--allow-import" in finding["hint"]
    assert finding["file"] == "job.toml"

    allowed = _run(
        "titan-validate", "job.toml", "--as-registry", "--allow-import", "--format", "json",
        cwd=project,
    )  # fmt: skip
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert (folder / "RAN").exists()
    report = json.loads(allowed.stdout)
    assert report["diagnostics"] == []
    ran = str(Path(*module.split(".")).with_suffix(".py"))
    assert ran in report["executed"]
    assert report["declarations"] == ["pyproject.toml"]


@pytest.mark.parametrize(("declaration", "name", "extra", "module", "source"), NEEDS_IMPORT)
def test_titan_diff_imports_declared_code_only_with_allow_import(
    tmp_path, declaration, name, extra, module, source
):
    project = _project(tmp_path, declaration, name=name, extra=extra)
    folder = _package(project, module, source)

    refused = _run("titan-diff", "job.toml", "llama3_debugmodel", cwd=project)
    assert refused.returncode == 2
    assert not (folder / "RAN").exists()
    assert module in refused.stderr and "pass --allow-import" in refused.stderr
    assert "internal error" not in refused.stderr

    allowed = _run("titan-diff", "job.toml", "llama3_debugmodel", "--allow-import", cwd=project)
    assert allowed.returncode in (0, 1), allowed.stderr
    assert (folder / "RAN").exists()
    ran = str(Path(*module.split(".")).with_suffix(".py"))
    assert f"titan-diff: note: executed {ran} (user code)" in allowed.stderr.splitlines()


@pytest.mark.parametrize(
    ("declaration", "name", "extra", "missing"),
    [
        ('model-registries = { mymodel = "missingpkg.models" }', "mymodel", "", "missingpkg"),
        (
            'converters = { npu = "gone.norms.Norm" }',
            "llama3",
            'converters = ["npu"]\n',
            None,  # the static check already reports the class it cannot find
        ),
    ],
)
def test_a_missing_package_is_a_finding_never_an_internal_error(
    tmp_path, declaration, name, extra, missing
):
    project = _project(tmp_path, declaration, name=name, extra=extra)
    checked = _run(
        "titan-validate", "job.toml", "--as-registry", "--allow-import", "--format", "json",
        cwd=project,
    )  # fmt: skip
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "internal error" not in checked.stderr
    errors = [d for d in json.loads(checked.stdout)["diagnostics"] if d["severity"] == "error"]
    assert errors and all(d["file"] == "job.toml" for d in errors)
    if missing is not None:
        assert any(missing in d["message"] for d in errors if d["code"] == "user-code")

    diffed = _run("titan-diff", "job.toml", "llama3_debugmodel", "--allow-import", cwd=project)
    assert diffed.returncode == 2
    assert "internal error" not in diffed.stderr and "Traceback" not in diffed.stderr


def test_titan_train_reports_a_missing_model_package(tmp_path):
    project = _project(tmp_path, 'model-registries = { mymodel = "missingpkg.models" }')
    done = _run("titan-train", "--job.config_file", "job.toml", "--preflight", cwd=project)
    assert done.returncode == 1
    assert "error[user-code] cannot import `missingpkg.models`" in done.stderr
    assert "internal error" not in done.stderr


# --------------------------------------------------------------------------------------------
# Which pyproject.toml applies


_DATASET = '[training]\ndataset = "my_corpus"\n'
_DECLARES = '[tool.titan]\ndatasets = ["my_corpus"]\n'


def _dataset_job(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "job.toml").write_text(_DATASET)
    return folder / "job.toml"


def test_a_pyproject_above_the_working_folder_outside_a_repository_does_not_apply(tmp_path):
    """A shared folder's pyproject.toml (``/tmp``, a home folder) is not the project's: its
    declaration could make a typo pass. It is named as not applied."""
    (tmp_path / "pyproject.toml").write_text(_DECLARES)
    project = tmp_path / "someone" / "proj"
    _dataset_job(project)
    text = _run("titan-validate", "job.toml", cwd=project)
    assert text.returncode == 1  # my_corpus is not declared for this project
    assert "did not apply" in text.stderr and "pyproject.toml" in text.stderr
    report = json.loads(_run("titan-validate", "job.toml", "--format", "json", cwd=project).stdout)
    assert report["declarations"] == []

    outside = _run("titan-validate", project / "job.toml", cwd=tmp_path / "someone")
    assert outside.returncode == 1  # the file's own folder only: the working folder is above


def test_outside_a_repository_the_working_folder_and_below_apply(tmp_path):
    (tmp_path / "pyproject.toml").write_text(_DECLARES)
    _dataset_job(tmp_path / "configs")
    done = _run("titan-validate", "configs/job.toml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "note: applied the [tool.titan] declaration of pyproject.toml" in done.stderr
    migrated = _run(
        "titan-migrate", "configs/job.toml", "-o", tmp_path / "reg.py", "--format", "json",
        cwd=tmp_path,
    )  # fmt: skip
    assert json.loads(migrated.stdout)["declarations"] == ["pyproject.toml"]


def test_the_walk_stops_at_the_repository_root(tmp_path):
    (tmp_path / "pyproject.toml").write_text(_DECLARES)
    repo = tmp_path / "repo"
    _dataset_job(repo / "configs")
    (repo / ".git").write_text("gitdir: /elsewhere\n")  # a worktree's .git is a file
    done = _run("titan-validate", "configs/job.toml", "--format", "json", cwd=repo)
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["declarations"] == [] and report["diagnostics"][0]["code"] == "invalid-value"

    (repo / "pyproject.toml").write_text(_DECLARES)
    inside = _run("titan-validate", "job.toml", "--format", "json", cwd=repo / "configs")
    assert inside.returncode == 0, inside.stdout
    assert json.loads(inside.stdout)["declarations"] == [str(repo / "pyproject.toml")]


# --------------------------------------------------------------------------------------------
# Which user files ran


_USER_REGISTRY = """\
from titan.models.llama3.config_registry import llama3_debugmodel
from titan.trainer import Trainer


def mine() -> Trainer.Config:
    return llama3_debugmodel()
"""


def test_config_for_a_builtin_name_says_it_ran_config_registry(tmp_path):
    (tmp_path / "config_registry.py").write_text(_USER_REGISTRY)
    text = _run("titan-validate", "--config", "llama3_debugmodel", cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    notes = [line for line in text.stderr.splitlines() if "executed" in line]
    assert notes == ["titan-validate: note: executed config_registry.py (user code)"]
    as_json = _run(
        "titan-validate", "--config", "llama3_debugmodel", "--format", "json", cwd=tmp_path
    )
    assert json.loads(as_json.stdout)["executed"] == ["config_registry.py"]
    assert "executed" not in as_json.stderr

    (tmp_path / "config_registry.py").unlink()  # nothing of the user's: nothing said
    quiet = _run(
        "titan-validate", "--config", "llama3_debugmodel", "--format", "json", cwd=tmp_path
    )
    assert json.loads(quiet.stdout)["executed"] == [] and quiet.stderr == ""


def test_titan_diff_names_each_registry_file_once(tmp_path):
    (tmp_path / "config_registry.py").write_text(_USER_REGISTRY)
    done = _run("titan-diff", "mine", "llama3_debugmodel", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == ["titan-diff: note: executed config_registry.py (user code)"]


def test_a_folder_walk_names_every_registry_module_it_ran(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "config_registry.py").write_text(_USER_REGISTRY)
    done = _run("titan-validate", ".", "--no-cache", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    notes = [line for line in done.stderr.splitlines() if "executed" in line]
    assert notes == [
        "titan-validate: note: executed a/config_registry.py (user code)",
        "titan-validate: note: executed b/config_registry.py (user code)",
    ]
    as_json = _run("titan-validate", ".", "--no-cache", "--format", "json", cwd=tmp_path)
    assert json.loads(as_json.stdout)["executed"] == [
        "a/config_registry.py",
        "b/config_registry.py",
    ]

"""custom_config_module end to end through titan-validate: the shipped examples, typos inside
custom sections, module lookup, never importing without --allow-import, --extension, the corpus."""

from __future__ import annotations

import json
import shutil
import sys
import tomllib

import pytest

from tests.helpers import codes, findings, only, validate, write
from tests.reference import REPO, corpus_files

CUSTOM = REPO / "legacy_configs" / "custom"
PROBE_TOML = CUSTOM / "llama3_with_probe.toml"
TEAM_TOML = CUSTOM / "llama3_team.toml"

STATIC_MODULE = """\
import pathlib

pathlib.Path(__file__).with_name("imported.marker").write_text("ran")
{extra}
from dataclasses import dataclass, field


@dataclass
class Gadget:
    size: int = 3


@dataclass
class JobConfig:
    gadget: Gadget = field(default_factory=Gadget)
"""


def json_of(*args):
    result = validate(*args, "--format", "json")
    return result, result.json()["diagnostics"]


def copy_custom(tmp_path):
    """legacy_configs/custom copied, so edited TOMLs still find their modules beside them."""
    target = tmp_path / "custom"
    shutil.copytree(CUSTOM, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


def edit(path, old, new):
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


def line_col(path, needle):
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if needle in line:
            return number, line.index(needle) + 1
    raise AssertionError(needle)


# --- the shipped examples -----------------------------------------------------------------------


def test_custom_examples_validate_clean():
    result = validate(CUSTOM)
    assert result.code == 0, result.out
    assert "All checks passed: 3 files" in result.out  # two TOMLs and their registry module


def test_typo_inside_custom_probe_section_suggests_the_custom_key(tmp_path):
    path = edit(copy_custom(tmp_path) / PROBE_TOML.name, "every_n_steps = 5", "every_n_step = 5")
    result, diagnostics = json_of(path)
    assert result.code == 1
    d = only(diagnostics)
    assert (d["code"], d["path"]) == ("unknown-key", "probe.every_n_step")
    assert (d["line"], d["col"]) == line_col(path, "every_n_step")
    assert d["hint"] == "did you mean `probe.every_n_steps`?"


def test_value_outside_a_custom_literal_is_an_invalid_choice(tmp_path):
    path = edit(copy_custom(tmp_path) / PROBE_TOML.name, '"activations"', '"activation"')
    d = only(json_of(path)[1])
    assert (d["code"], d["path"]) == ("invalid-choice", "probe.mode")
    assert (d["line"], d["col"]) == line_col(path, "mode = ")
    assert d["hint"] == 'did you mean "activations"?'
    assert '"gradients"' in d["message"]


def test_wrong_types_in_custom_fields_are_not_coerced(tmp_path):
    path = edit(copy_custom(tmp_path) / PROBE_TOML.name, "every_n_steps = 5", 'every_n_steps = "5"')
    edit(path, "probe_warmup_steps = 5", "probe_warmup_steps = 5.5")
    found = {(d["path"], d["code"]) for d in json_of(path)[1]}
    assert found == {
        ("probe.every_n_steps", "wrong-type"),
        ("training.probe_warmup_steps", "wrong-type"),
    }


def test_merged_training_section_keeps_base_keys_and_adds_the_custom_one(tmp_path):
    path = edit(
        copy_custom(tmp_path) / PROBE_TOML.name, "seq_len = 2048", "seq_len = 2048\nsteps = 7"
    )
    assert validate(path).code == 0
    # without the module the custom training key is unknown again
    edit(path, 'custom_config_module = "probe_extension"', "")
    found = {(d["code"], d["path"]) for d in json_of(path)[1]}
    assert ("unknown-key", "training.probe_warmup_steps") in found
    assert ("unknown-key", "probe") in found


def test_overridden_training_steps_default_is_in_the_merged_schema(tmp_path):
    target = tmp_path / "schema.json"
    args = ["--extension", "probe_extension", "--module-path", CUSTOM]
    result = validate("--export-json-schema", target, *args)
    assert result.code == 0, result.err
    training = json.loads(target.read_text())["properties"]["training"]["properties"]
    assert training["steps"]["default"] == 20  # the module's default, not the base 10000
    assert training["probe_warmup_steps"]["default"] == 0
    assert "probe" in json.loads(target.read_text())["properties"]


def test_default_overridden_by_module_is_used_by_rules_and_blamed_on_the_file(tmp_path):
    write(
        tmp_path,
        "keep_one_ext.py",
        "from dataclasses import dataclass, field\n\n\n@dataclass\nclass Checkpoint:\n"
        "    keep_latest_k: int = 1\n\n\n@dataclass\nclass JobConfig:\n"
        "    checkpoint: Checkpoint = field(default_factory=Checkpoint)\n",
    )
    path = write(tmp_path, "job.toml", '[job]\ncustom_config_module = "keep_one_ext"\n')
    result, diagnostics = json_of(path)
    assert result.code == 1
    d = only(diagnostics)
    assert d["code"] == "keep-latest-k"  # the rule saw the module's default of 1
    # A finding of this file must name this file (with several files it is otherwise anonymous).
    assert d["file"] == str(path)
    assert "1 of 1 file failing" in validate(path, "--color", "never").out


# --- the package example ------------------------------------------------------------------------


def test_package_example_with_nested_section_validates():
    assert validate(TEAM_TOML).code == 0


def test_typo_inside_nested_team_alerts_is_found_at_its_line_and_column(tmp_path):
    path = edit(copy_custom(tmp_path) / TEAM_TOML.name, "loss_spike_factor", "loss_spike_factr")
    edit(path, 'severity = "page"', 'severity = "pager"')
    result, diagnostics = json_of(path)
    assert result.code == 1
    typo, choice = sorted(diagnostics, key=lambda d: d["code"], reverse=True)
    assert (typo["code"], typo["path"]) == ("unknown-key", "team.alerts.loss_spike_factr")
    assert (typo["line"], typo["col"]) == line_col(path, "loss_spike_factr")
    assert typo["hint"] == "did you mean `team.alerts.loss_spike_factor`?"
    assert (choice["code"], choice["path"]) == ("invalid-choice", "team.alerts.severity")
    assert (choice["line"], choice["col"]) == line_col(path, "severity = ")


# --- module lookup ------------------------------------------------------------------------------


def test_missing_module_is_an_extension_error_at_the_key(tmp_path, fresh_module_name):
    path = write(
        tmp_path,
        "cfg/job.toml",
        f'[job]\ndump_folder = "o"\n  custom_config_module = "{fresh_module_name}"\n',
    )
    result, diagnostics = json_of(path)
    assert result.code == 1
    d = only(diagnostics)
    assert (d["code"], d["path"], d["line"], d["col"]) == (
        "extension-error",
        "job.custom_config_module",
        3,
        3,
    )
    assert "--module-path" in d["hint"] and fresh_module_name in d["message"]
    text = validate(path, "--color", "never").out
    assert f"{path}:3:3: error[extension-error]" in text

    write(tmp_path, f"elsewhere/{fresh_module_name}.py", STATIC_MODULE.format(extra=""))
    path.write_text(path.read_text() + "[gadget]\nsize = 4\n")
    assert validate(path).code == 1  # the module is not beside the TOML or above it
    assert validate(path, "--module-path", tmp_path / "elsewhere").code == 0
    assert not (tmp_path / "elsewhere" / "imported.marker").exists()


def test_module_path_package_form(tmp_path, fresh_module_name):
    write(tmp_path, f"lib/{fresh_module_name}/__init__.py", "from .cfg import JobConfig\n")
    write(tmp_path, f"lib/{fresh_module_name}/cfg.py", STATIC_MODULE.format(extra=""))
    text = f'[job]\ncustom_config_module = "{fresh_module_name}"\n\n[gadget]\nsize = "4"\n'
    path = write(tmp_path, "cfg/job.toml", text)
    assert codes(json_of(path)[0]) == ["extension-error", "unknown-key"]
    result, diagnostics = json_of(path, "--module-path", tmp_path / "lib")
    d = only(diagnostics)
    assert (d["code"], d["path"], d["line"]) == ("wrong-type", "gadget.size", 5)


# --- never executed without --allow-import ------------------------------------------------------


def test_module_is_read_not_run_unless_import_is_allowed(tmp_path, fresh_module_name):
    write(tmp_path, f"{fresh_module_name}.py", STATIC_MODULE.format(extra=""))
    path = write(
        tmp_path,
        "job.toml",
        f'[job]\ncustom_config_module = "{fresh_module_name}"\n[gadget]\nsize = 2\n',
    )
    marker = tmp_path / "imported.marker"
    assert validate(path).code == 0
    assert not marker.exists()
    assert fresh_module_name not in sys.modules
    bad = write(tmp_path, "bad.toml", path.read_text() + "sise = 1\n")
    assert findings(json_of(bad)[0]) == [("unknown-key", str(bad), 5, 1)]
    assert not marker.exists()

    result = validate(path, "--allow-import")
    assert result.code == 0, result.out
    assert marker.read_text() == "ran"


def test_module_that_raises_on_import_is_still_read_statically(tmp_path, fresh_module_name):
    raising = STATIC_MODULE.format(extra="raise RuntimeError('no GPU on this runner')\n")
    write(tmp_path, f"{fresh_module_name}.py", raising)
    path = write(
        tmp_path,
        "job.toml",
        f'[job]\ncustom_config_module = "{fresh_module_name}"\n[gadget]\nsize = 2\n',
    )
    assert validate(path).code == 0

    result, diagnostics = json_of(path, "--allow-import")
    assert result.code == 1
    d = only([d for d in diagnostics if d["code"] == "extension-error"])
    assert (d["code"], d["line"], d["col"]) == ("extension-error", 2, 1)
    assert "RuntimeError: no GPU on this runner" in d["message"]
    text = validate(path, "--allow-import", "--color", "never")
    assert text.code == 1
    assert "Traceback" not in text.out + text.err and text.err == ""
    # the failed import leaves [gadget] unknown, as v0.2.2 would not have it either
    assert "extension-error" in text.out and "unknown section `gadget`" in text.out


# --- --extension and the built-in upstream modules ----------------------------------------------


def test_extension_flag_merges_flux_without_a_declaration(tmp_path):
    path = write(
        tmp_path,
        "flux.toml",
        '[model]\nname = "flux"\nflavor = "flux-debug"\n[encoder]\nt5_encoder = "google/t5"\n',
    )
    assert validate(path, "--extension", "flux").code == 0
    result, diagnostics = json_of(path)
    assert result.code == 1
    d = only(diagnostics)
    # [encoder] also held keys of an older flux (its auto_encoder_path): reported key by key
    assert (d["code"], d["path"], d["line"], d["col"]) == (
        "unknown-key",
        "encoder.t5_encoder",
        5,
        1,
    )
    assert "--extension flux" in d["hint"]


def test_unknown_extension_name_is_reported(tmp_path):
    path = write(tmp_path, "job.toml", "[training]\nsteps = 1\n")
    result, diagnostics = json_of(path, "--extension", "flx")
    assert result.code == 1
    d = only(diagnostics)
    assert d["code"] == "extension-error" and d["hint"] == "did you mean `flux`?"


@pytest.mark.parametrize("folder", ["flux", "llama3_ft"])
def test_legacy_configs_using_built_in_modules_pass(folder):
    result = validate(REPO / "legacy_configs" / folder)
    assert result.code == 0, result.out
    assert "All checks passed" in result.out


def test_corpus_files_declaring_a_module_validate_clean():
    declaring = []
    for file in corpus_files():
        job = tomllib.loads(file.read_text(encoding="utf-8")).get("job", {})
        if "custom_config_module" in job:
            declaring.append(file)
            result = validate(file, "--format", "json")
            assert result.code == 0, (file, result.out)
    assert len(declaring) >= 4


# --- experimental.custom_args_module (no merge in v0.2.2) ---------------------------------------


def test_custom_args_module_adds_its_sections_as_its_era_did(tmp_path):
    # from #767 (2025-04) until #1871 the loader merged the module named here; v0.2.2 only
    # deprecated the key, so the era chain carries it to job.custom_config_module
    folder = copy_custom(tmp_path)
    path = edit(
        folder / PROBE_TOML.name,
        'custom_config_module = "probe_extension"',
        '[experimental]\ncustom_args_module = "probe_extension"',
    )
    result, diagnostics = json_of(path)
    assert result.code == 0, diagnostics
    found = {(d["code"], d["severity"], d["path"]) for d in diagnostics}
    assert ("deprecated-key", "warning", "experimental.custom_args_module") in found
    assert "unknown-key" not in codes(result) and "extension-error" not in codes(result)


# --------------------------------------------------------------------------- --module-path


FORK_REGISTRY = """\
from titan.config import TrainingConfig
from titan.models.llama3 import model_registry
from titan.trainer import Trainer

from {fork}.settings import STEPS


def fork_job() -> Trainer.Config:
    return Trainer.Config(
        model_spec=model_registry("debugmodel"), training=TrainingConfig(steps=STEPS)
    )
"""

FORK_CONFIG = """\
from dataclasses import dataclass, field


@dataclass
class Infra:
    nodes: int = 1


@dataclass
class JobConfig:
    infra: Infra = field(default_factory=Infra)
"""

FORK_MODELS = """\
from titan.models.llama3 import model_registry as _llama3


def model_registry(flavor: str):
    return _llama3("debugmodel")
"""


@pytest.fixture
def fork(tmp_path, fresh_module_name, monkeypatch):
    """A fork's package in a folder of its own (``fork/``, not installed) and a project
    (``project/``) whose TOMLs and registry file use it."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # titan-train keeps its folders there
    package = tmp_path / "fork" / fresh_module_name
    write(package, "__init__.py", "")
    write(package, "settings.py", "STEPS = 7\n")
    write(package, "job_config.py", FORK_CONFIG)
    write(package, "models.py", FORK_MODELS)
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    write(
        project,
        "pyproject.toml",
        f'[tool.titan]\nmodel-registries = {{ mine = "{fresh_module_name}.models" }}\n',
    )
    write(project, "config_registry.py", FORK_REGISTRY.format(fork=fresh_module_name))
    job = f'[job]\ncustom_config_module = "{fresh_module_name}.job_config"\n\n[infra]\nnodes = 4\n'
    write(project, "job.toml", job)
    write(project, "mine.toml", job + '\n[model]\nname = "mine"\nflavor = "tiny"\n')
    return tmp_path / "fork", project


@pytest.mark.parametrize(
    "command",
    [
        ["{p}/job.toml"],
        ["{p}/mine.toml", "--as-registry", "--allow-import"],  # builds with the fork's models
        ["{p}/config_registry.py", "--no-cache"],
        ["--config", "fork_job", "--registry", "{p}/config_registry.py"],
        ["--registry", "{p}/config_registry.py", "--config", "fork_job"],
    ],
)
def test_titan_validate_finds_the_fork_through_module_path(fork, command):
    folder, project = fork
    args = [arg.format(p=project) for arg in command]
    assert validate(*args).code == 1  # the fork's package is not on any path
    result = validate(*args, "--module-path", folder)
    assert result.code == 0, result.out
    # only notes: the declaration applied, the user files executed
    assert all(line.startswith("titan-validate: note: ") for line in result.err.splitlines())
    result = validate(f"--module-path={folder}", *args)
    assert result.code == 0, result.out


def test_titan_diff_finds_the_fork_through_module_path(fork):
    import io

    from titan.cli import diff

    folder, project = fork
    job = (project / "job.toml").read_text()
    write(project, "default.toml", job.replace("nodes = 4", "nodes = 1"))  # the module's default
    write(project, "unset.toml", job.replace("\n[infra]\nnodes = 4\n", ""))
    argv = [str(project / "default.toml"), str(project / "unset.toml")]
    out, err = io.StringIO(), io.StringIO()
    assert diff.run(argv, stdout=out, stderr=err) == 1  # its default unknown: nodes differs
    assert "infra.nodes" in out.getvalue()
    out, err = io.StringIO(), io.StringIO()
    assert diff.run([*argv, "--module-path", str(folder)], stdout=out, stderr=err) == 0
    assert err.getvalue() == ""


@pytest.mark.parametrize(
    "command",
    [
        ["--job.config_file", "{p}/job.toml", "--training.steps", "3"],
        ["--config", "fork_job", "--registry", "{p}/config_registry.py"],
    ],
)
def test_titan_train_reads_the_config_through_module_path(fork, command):
    import io

    from titan.cli.train_config import load

    folder, project = fork
    argv = [arg.format(p=project) for arg in command]
    out, err = io.StringIO(), io.StringIO()
    loaded = load([*argv, "--module-path", str(folder)], world_size=1, stdout=out, stderr=err)
    assert loaded.config is not None, err.getvalue()
    if "--config" in argv:
        assert loaded.config.training.steps == 7  # from the fork's settings module
    else:
        assert loaded.config.infra.nodes == 4


def test_module_path_without_a_folder_is_a_usage_error():
    import io

    from titan.cli.exits import UsageError
    from titan.cli.train_config import load

    with pytest.raises(UsageError, match="--module-path requires a folder"):
        load(
            ["--config", "x", "--module-path"],
            world_size=1,
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )

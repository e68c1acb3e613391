"""TorchForge app configs (YAML): the legacy sections under ``trainer:`` are checked as a TOML's are,
located at the YAML's line:col, read as Forge's OmegaConf loader reads them; hostile YAMLs are
findings; ``titan-migrate app.yaml`` writes the registry function; and
``titan.migrate.legacy_config.trainer_config`` turns a dict of sections (or a TOML path) into the
config ``titan-train --job.config_file`` trains."""

from __future__ import annotations

import copy
import io
import json
import os
import runpy
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import yaml
from titan.migrate.legacy_config import LegacyConfigError, trainer_config
from titan.schemas.yaml_source import MAX_NODES, parse

from tests.helpers import validate, write

ROOT = Path(__file__).resolve().parents[1]
FORGE = ROOT / "tests" / "data" / "forge"
DEBUG = ROOT / "legacy_configs" / "llama3" / "debug_model.toml"


def check(path: Path, *args: str) -> tuple[int, list[dict], str]:
    """``titan-validate --format json ARGS PATH``: exit code, findings, stderr."""
    result = validate("--format", "json", *args, path)
    return result.code, result.json()["diagnostics"], result.err


def migrate(*args: object) -> tuple[int, str, str]:
    """``titan-migrate ARGS`` in this process: exit code, stdout, stderr."""
    from titan.cli import migrate as cli

    out, err = io.StringIO(), io.StringIO()
    code = cli.run([str(a) for a in args], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


# --------------------------------------------------------------------------- real app configs


def located(found: list[dict]) -> list[tuple]:
    """The findings as (code, path, line, col), but the note on what the app's flavor was in
    its torchtitan (tested with the flavor eras)."""
    return [(d["code"], d["path"], d["line"], d["col"]) for d in found if d["code"] != "era-flavor"]


def test_forge_apps_check_as_their_runs_read_them():
    # The hf:// folders are Forge's own downloads: warnings, at their keys (titan-train needs
    # local folders); the rest of the trainer block is clean.
    code, found, _ = check(FORGE / "grpo_qwen3.yaml", "--ngpu", "1")
    assert code == 0
    assert located(found) == [
        ("hub-path", "model.hf_assets_path", 42, 5),
        ("hub-path", "checkpoint.initial_load_path", 69, 5),
    ]
    # Forge's trainer actor's own arguments are said to be that, not unknown keys.
    code, found, _ = check(FORGE / "rl_llama3_anchors.yaml", "--ngpu", "8")
    assert code == 0
    assert located(found) == [("forge-app", "dcp_path", 44, 3), ("forge-app", "use_dcp", 45, 3)]
    assert {d["severity"] for d in found} == {"info"}
    # checkpoint_folder comes from Forge's command line: unresolvable here, a warning at its key.
    code, found, _ = check(FORGE / "mast_qwen3.yaml", "--ngpu", "8")
    assert code == 0
    assert located(found) == [
        ("interpolation", "checkpoint.folder", 36, 5),
        ("forge-app", "dcp_path", 41, 3),
    ]
    # A world size the degrees do not fit is found at the YAML's line, as in a TOML.
    code, found, _ = check(FORGE / "grpo_qwen3.yaml", "--ngpu", "8")
    assert code == 1
    assert [(d["code"], d["line"], d["col"]) for d in found if d["severity"] == "error"] == [
        ("world-size", 60, 5)
    ]


def test_interpolations_resolve_from_the_file_as_forge_does():
    source = parse((FORGE / "grpo_qwen3.yaml").read_text(), file="app.yaml")
    training, model = source.document["training"], source.document["model"]
    assert training["local_batch_size"] == 4  # ${local_batch_size}: the int, not a string
    assert training["seq_len"] == 1024  # ${sum:${max_req_tokens},${max_res_tokens}}
    assert model["hf_assets_path"] == "hf://Qwen/Qwen3-1.7B"  # inside a string: its text
    anchors = parse((FORGE / "rl_llama3_anchors.yaml").read_text(), file="app.yaml").document
    assert anchors["model"]["flavor"] == "debugmodel"  # from the merge key
    assert anchors["parallelism"]["data_parallel_shard_degree"] == -1
    assert "dcp_path" not in anchors and "use_dcp" not in anchors  # Forge's actor fields
    blocks = parse(
        "base: {name: llama3, flavor: debugmodel}\nloop:\n  x: ${loop}\n"
        "trainer:\n  model: ${base}\n  job: ${loop}\n",
        file="app.yaml",
    )
    assert blocks.document == {"model": {"name": "llama3", "flavor": "debugmodel"}}
    assert [(d.code, d.path) for d in blocks.problems] == [("interpolation", "job")]


@pytest.mark.parametrize(
    ("old", "new", "path", "line", "col", "suggested"),
    [
        ("    steps: 1000000\n", "    stepz: 1000000\n", "training.stepz", 53, 5, "training.steps"),
        ("    lr: 1e-5\n", "    lrr: 1e-5\n", "optimizer.lrr", 45, 5, "optimizer.lr"),
        ("  parallelism:\n", "  paralelism:\n", "paralelism", 58, 3, "parallelism"),
        ("    warmup_steps: 1\n", "    warmup_step: 1\n", "lr_scheduler.warmup_step", 48, 5,
         "lr_scheduler.warmup_steps"),
        ("    max_norm: 1.0\n", "    max_nrom: 1.0\n", "training.max_nrom", 52, 5, "training.max_norm"),
    ],
)  # fmt: skip
def test_misspelt_trainer_key_at_the_yaml_line(tmp_path, old, new, path, line, col, suggested):
    text = (FORGE / "grpo_qwen3.yaml").read_text()
    assert text.count(old) == 1
    app = write(tmp_path, "app.yaml", text.replace(old, new))
    code, found, _ = check(app)
    assert code == 1
    (finding,) = [d for d in found if d["path"] == path]
    assert (finding["code"], finding["file"], finding["line"], finding["col"]) == (
        "unknown-key",
        str(app),
        line,
        col,
    )
    assert suggested in finding["hint"]
    text_report = validate(app).out
    assert f"{app}:{line}:{col}: error[unknown-key]" in text_report


def test_wrong_values_are_found_at_their_yaml_line(tmp_path):
    app = write(
        tmp_path,
        "app.yaml",
        "trainer:\n  training:\n    steps: ten\n    seq_len: -5\n  checkpoint:\n"
        "    keep_latest_k: 1\n  activation_checkpoint:\n    mode: sometimes\n",
    )
    code, found, _ = check(app)
    assert code == 1
    located = {(d["code"], d["line"]) for d in found}
    assert {("wrong-type", 3), ("keep-latest-k", 6), ("invalid-choice", 8)} <= located
    assert any(d["line"] == 4 and d["code"] in ("out-of-range", "invalid-value") for d in found)


# --------------------------------------------------------------------------- how values read

SPELLINGS = """\
flag_on: on
trainer:
  job:
    description: 2024-01-01
  training:
    seed: 0x10
    steps: 1_000
    enable_cpu_offload: yes
    deterministic: No
    max_norm: 1e4
    mixed_precision_param: "1e-4"
  optimizer:
    lr: 1e-4
    eps: 1.5E-8
    weight_decay: .5
    implementation: ~
    early_step_in_backward: ${flag_on}
  lr_scheduler:
    warmup_steps: +3
    min_lr_factor: -0.0
    decay_ratio: null
  checkpoint:
    folder: '017'
    interval: 017
    load_step: -1
  metrics:
    log_freq: 1:30
"""


def test_values_are_read_as_forge_reads_them():
    """The same values as OmegaConf 2.3 (what Forge's config loader calls) gives for the file."""
    from omegaconf import OmegaConf

    expected = OmegaConf.to_container(OmegaConf.create(yaml_via_omegaconf(SPELLINGS)), resolve=True)
    source = parse(SPELLINGS, file="app.yaml")
    assert source.problems == ()
    assert source.document == expected["trainer"]
    # YAML 1.1 as Forge reads it: yes/No/on are booleans, 1e-4 a float, 2024-01-01 a string.
    training = source.document["training"]
    assert training["enable_cpu_offload"] is True and training["deterministic"] is False
    assert source.document["optimizer"]["lr"] == 1e-4
    assert source.document["optimizer"]["early_step_in_backward"] is True
    assert source.document["job"]["description"] == "2024-01-01"
    assert training["mixed_precision_param"] == "1e-4"
    assert source.document["checkpoint"]["interval"] == 15  # YAML 1.1 octal
    assert source.document["metrics"]["log_freq"] == 90  # YAML 1.1 base 60


def yaml_via_omegaconf(text: str):
    """The document as ``OmegaConf.load`` reads the text (Forge's ``sum`` resolver registered)."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("sum", lambda *args: sum(args), replace=True)
    return OmegaConf.load(io.StringIO(text))


def test_forge_apps_read_as_omegaconf_reads_them():
    from omegaconf import OmegaConf

    for name in ("grpo_qwen3.yaml", "rl_llama3_anchors.yaml"):
        text = (FORGE / name).read_text()
        expected = OmegaConf.to_container(yaml_via_omegaconf(text).trainer, resolve=True)
        for field in ("dcp_path", "use_dcp"):
            expected.pop(field, None)
        assert parse(text, file=name).document == expected, name


# --------------------------------------------------------------------------- hostile YAMLs

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n"
    for i in range(8)
)


HOSTILE_YAML = {
    # id: (the app config, a finding it must have, at this line)
    "indentation": ("trainer:\n  training:\n    steps: 1\n   seed: 2\n", "yaml-syntax", 4),
    "unclosed": ("trainer:\n  training: {steps: 1\n", "yaml-syntax", 3),
    "tab": ("trainer:\n\ttraining: {}\n", "yaml-syntax", 2),
    "two-documents": ("trainer: {}\n---\ntrainer: {}\n", "yaml-syntax", 2),
    "alias-bomb": (BOMB + "trainer:\n  training: {steps: 1}\n", "yaml-syntax", 1),
    "bomb-in-trainer": (BOMB.replace("\n", "\n  ").join(["trainer:\n  ", "x: 1\n"]),
        "yaml-syntax", 1),
    "alias-cycle": ("trainer:\n  model: &m\n    x: [*m]\n", "yaml-syntax", 2),
    "list-cycle": ("a: &a [1, [*a]]\ntrainer: {}\n", "yaml-syntax", 1),
    "deep": ("trainer:\n  job: " + "[" * 1200 + "]" * 1200 + "\n", "too-deep", 1),
    "no-trainer": ("policy:\n  engine_args: {model: x}\n", "no-trainer", 1),
    "trainer-list": ("trainer:\n  - model\n", "no-trainer", 2),
    "trainer-null": ("x: 1\ntrainer:\n", "no-trainer", 2),
    "top-list": ("- trainer: {}\n", "no-trainer", 1),
    "empty": ("# nothing\n", "no-trainer", 1),
    "section-scalar": ("trainer:\n  training: 5\n", "wrong-type", 2),
    "section-list": ("trainer:\n  optimizer: [AdamW]\n", "wrong-type", 2),
    "duplicate-in-trainer": ("trainer:\n  training:\n    steps: 1\n    steps: 2\n",
        "yaml-syntax", 4),
    "duplicate-section": ("trainer:\n  training: {}\n  model: {}\n  training: {}\n",
        "yaml-syntax", 4),
    "duplicate-outside": ("policy: 1\npolicy: 2\ntrainer: {training: {steps: 1}}\n",
        "yaml-syntax", 2),
    "date": ("trainer:\n  job:\n    description: !!timestamp 2024-01-01\n", "yaml-type", 3),
    "binary": ("trainer:\n  job:\n    description: !!binary aGk=\n", "yaml-type", 3),
    "set": ("trainer:\n  model:\n    converters: !!set {float8}\n", "yaml-type", 3),
    "python-object": ("trainer:\n  job: !!python/object/apply:os.getcwd []\n", "yaml-type", 2),
    "python-outside": ("x: !!python/name:os.system\ntrainer: {}\n", "yaml-type", 1),
    "local-tag": ("trainer:\n  job: !secret {a: 1}\n", "yaml-type", 2),
    "bad-int": ("trainer:\n  training:\n    steps: !!int ten\n", "yaml-type", 3),
    "bool-key": ("trainer:\n  training:\n    on: 1\n", "yaml-type", 3),
    "list-key": ("trainer:\n  training:\n    ? [a]\n    : 1\n", "yaml-type", 3),
    "bad-merge": ("trainer:\n  model:\n    <<: 5\n", "yaml-syntax", 3),
}  # fmt: skip


@pytest.mark.parametrize(("text", "code", "line"), HOSTILE_YAML.values(), ids=HOSTILE_YAML.keys())
def test_hostile_yaml_is_a_finding(tmp_path, text, code, line):
    app = write(tmp_path, "app.yaml", text)
    exit_code, found, err = check(app)
    assert exit_code == 1, (found, err)
    assert "Traceback" not in err
    assert (code, line) in {(d["code"], d["line"]) for d in found}, found
    assert all(d["hint"] for d in found), found


def test_fix_leaves_an_app_config_as_it_is(tmp_path):
    text = (FORGE / "grpo_qwen3.yaml").read_text().replace("    steps: 1000000", "    stepz: 1")
    app = write(tmp_path, "app.yaml", text)
    for flag in ("--fix", "--diff"):
        result = validate(flag, app)
        assert f"not fixing {app}: --fix rewrites TOML job configs only" in result.err
        assert result.out == "" or "stepz" in result.out
    assert app.read_text() == text


def test_python_tags_construct_nothing(tmp_path):
    marker = tmp_path / "ran"
    app = write(
        tmp_path,
        "app.yaml",
        f"x: !!python/object/apply:os.mkdir [{str(marker)!r}]\n"
        f"trainer:\n  job: !!python/object/apply:os.mkdir [{str(marker)!r}]\n",
    )
    code, found, _ = check(app)
    assert code == 1 and {d["code"] for d in found} == {"yaml-type"}
    assert not marker.exists()


def test_alias_bomb_is_counted_not_expanded():
    source = parse(BOMB + "trainer: {}\n", file="app.yaml")
    assert source.document is None
    assert f"{MAX_NODES:,}" in source.problem.message
    # Anchors that stay small are read, as Forge reads them.
    small = parse("a: &a [1, 2]\ntrainer:\n  model: {converters: *a}\n", file="app.yaml")
    assert small.document == {"model": {"converters": [1, 2]}}


def test_yaml_files_are_checked_when_named_not_by_folder_walks(tmp_path):
    write(tmp_path, "apps/app.yaml", "trainer:\n  training:\n    stepz: 1\n")
    write(tmp_path, "apps/job.toml", "[training]\nsteps = 1\n")
    (tmp_path / ".git").mkdir()
    walked = validate("--format", "json", tmp_path / "apps")
    assert walked.code == 0 and walked.json()["diagnostics"] == []
    named = validate("--format", "json", tmp_path / "apps" / "app.yaml")
    assert named.code == 1
    assert [d["code"] for d in named.json()["diagnostics"]] == ["unknown-key"]
    # The pre-commit hooks take TOML files only: an app config is checked where it is named.
    hooks = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert all(h["types"] != ["yaml"] for h in hooks)


# --------------------------------------------------------------------------- migrate and library


def debug_sections() -> dict:
    with open(DEBUG, "rb") as f:
        return tomllib.load(f)


def test_dict_sections_build_the_config_titan_train_builds_from_the_toml(tmp_path):
    from titan.cli.train_config import load

    sections = debug_sections()
    kept = copy.deepcopy(sections)
    out, err = io.StringIO(), io.StringIO()
    loaded = load(["--job.config_file", str(DEBUG)], world_size=1, stdout=out, stderr=err)
    assert loaded.config is not None, err.getvalue()
    assert trainer_config(sections) == loaded.config
    assert trainer_config(DEBUG) == loaded.config
    assert sections == kept  # the caller's dict is not changed
    # The same sections under an app config's trainer: key, read from YAML; the app says it
    # was written for v0.2.2 (without it, its shape dates it to the torchtitan Forge pinned)
    app = write(
        tmp_path,
        "app.yaml",
        "# titan: era = v0.2.2\n" + yaml.safe_dump({"policy": {"n": 1}, "trainer": sections}),
    )
    assert trainer_config(app) == loaded.config
    from_yaml = load(["--job.config_file", str(app)], world_size=1, stdout=out, stderr=err)
    assert from_yaml.config == loaded.config, err.getvalue()
    code, found, _ = check(app)
    assert (code, found) == (0, [])


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda s: s["training"].update(stepz=3), ["unknown-key", "training.steps"]),
        (lambda s: s["training"].update(steps="ten"), ["wrong-type", "training.steps"]),
        (lambda s: s.update(paralelism={}), ["unknown-key", "parallelism"]),
        (lambda s: s["checkpoint"].update(keep_latest_k=1), ["keep-latest-k"]),
        (lambda s: s["training"].update(steps=object()), ["wrong-type", "training.steps"]),
        (lambda s: s["model"].update({1: "x"}), ["wrong-type", "is not a string"]),
    ],
)
def test_dict_sections_raise_titan_validates_finding(change, expected):
    sections = debug_sections()
    change(sections)
    with pytest.raises(LegacyConfigError) as raised:
        trainer_config(sections)
    text = str(raised.value)
    assert all(word in text for word in expected), text
    assert raised.value.diagnostics
    assert "Traceback" not in text


def test_yaml_path_raises_the_located_finding(tmp_path):
    text = (FORGE / "grpo_qwen3.yaml").read_text().replace("    lr: 1e-5", "    lrr: 1e-5")
    app = write(tmp_path, "app.yaml", text)
    with pytest.raises(LegacyConfigError) as raised:
        trainer_config(app)
    assert f"{app}:45:5: error[unknown-key]" in str(raised.value)
    assert "optimizer.lr" in str(raised.value)
    with pytest.raises(LegacyConfigError, match="must be a mapping"):
        trainer_config(["not", "sections"])  # type: ignore[arg-type]


def test_library_does_not_import_torch(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys, tomllib
        from titan.migrate.legacy_config import trainer_config
        with open({str(DEBUG)!r}, "rb") as f:
            config = trainer_config(tomllib.load(f))
        print(type(config).__qualname__, "torch" in sys.modules)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Trainer.Config", "False"]


def test_titan_migrate_writes_the_trainer_blocks_registry(tmp_path):
    app = tmp_path / "rl_app.yaml"
    app.write_text((FORGE / "rl_llama3_anchors.yaml").read_text())
    code, out, err = migrate(app, "-o", tmp_path / "config_registry.py", "--format", "json")
    assert code == 0, err
    report = json.loads(out)["files"][0]
    assert report["lossless"], report
    module = runpy.run_path(str(tmp_path / "config_registry.py"))
    assert module["llama3_rl_app"]() == trainer_config(app)
    # An interpolation only Forge can compute is left for a human: not lossless.
    mast = tmp_path / "mast.yaml"
    mast.write_text((FORGE / "mast_qwen3.yaml").read_text())
    code, out, err = migrate(mast, "--format", "json")
    assert code == 0, err
    (report,) = json.loads(err)["files"]
    assert not report["lossless"]
    assert "set checkpoint.folder" in out

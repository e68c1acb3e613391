"""Nothing a legacy run used is lost silently: every input key has an outcome, and the values
v0.2.2 derived (the tokenizer folder, the validation shape) are carried whatever the file spells."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from titan.migrate.plan.build import build_plan
from titan.migrate.targets.live import instantiate
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.spec import SectionSpec

from tests.helpers import legacy_tomls
from tests.reference import REPO

HEAD = '[model]\nname = "llama3"\nflavor = "debugmodel"\n'


def plan_of(tmp_path: Path, text: str, name: str = "job.toml", *, era: str | None = "v0.2.2"):
    """The plan of ``text`` as a file written for ``era`` (these files are v0.2.2 files:
    nothing in them dates them, so the era is given)."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return build_plan(path, era=era)


def migrate_cli(tmp_path: Path, name: str, *args: str) -> subprocess.CompletedProcess:
    """``titan-migrate NAME ARGS`` in ``tmp_path``, for a file written for v0.2.2."""
    return subprocess.run(
        [sys.executable, "-m", "titan.cli.migrate", name, "--era", "v0.2.2", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )


# ----------------------------------------------------------------------- model.tokenizer_path


def test_tokenizer_path_alone_becomes_the_assets_folder(tmp_path):
    plan = plan_of(tmp_path, HEAD + 'tokenizer_path = "/data/tok"\n')
    assert instantiate(plan).hf_assets_path == "/data/tok"
    outcome = plan.outcomes["model.tokenizer_path"]
    assert (outcome.status, outcome.paths) == ("carried", ("hf_assets_path",))
    assert plan.lossless()


def test_tokenizer_path_wins_over_hf_assets_path_as_in_v022(tmp_path):
    plan = plan_of(
        tmp_path, HEAD + 'hf_assets_path = "/data/assets"\ntokenizer_path = "/data/tok"\n'
    )
    assert instantiate(plan).hf_assets_path == "/data/tok"  # v0.2.2 copied it over
    assert plan.outcomes["model.hf_assets_path"].status == "inert"
    assert not plan.lossless()  # the file says two things; the report says which one ran
    (change,) = [d for d in plan.diagnostics if d.code == "behaviour-change"]
    assert change.path == "model.hf_assets_path" and change.hint


def test_tokenizer_path_equal_to_hf_assets_path_is_lossless(tmp_path):
    plan = plan_of(tmp_path, HEAD + 'hf_assets_path = "/d"\ntokenizer_path = "/d"\n')
    assert instantiate(plan).hf_assets_path == "/d"
    assert plan.lossless()


def test_the_generated_module_carries_the_tokenizer_folder(tmp_path):
    (tmp_path / "job.toml").write_text(HEAD + 'tokenizer_path = "/data/tok"\n', encoding="utf-8")
    done = migrate_cli(tmp_path, "job.toml")
    assert done.returncode == 0, done.stderr
    assert 'hf_assets_path="/data/tok"' in done.stdout


# ----------------------------------------------------------------------- the validation shape


@pytest.mark.parametrize(
    ("training", "expected"),
    [
        ("local_batch_size = 2\nseq_len = 512\n", (8, 2048)),
        ("local_batch_size = 8\nseq_len = 512\n", (None, 2048)),
        ("local_batch_size = 8\nseq_len = 2048\n", (None, None)),
    ],
)
def test_the_legacy_validation_shape_is_carried_without_a_validation_table(
    tmp_path, training, expected
):
    plan = plan_of(tmp_path, HEAD + "[training]\n" + training)
    validator = instantiate(plan).validator
    assert (validator.local_batch_size, validator.seq_len) == expected
    assert plan.lossless()


def test_the_legacy_validation_shape_is_carried_with_a_table_too(tmp_path):
    plan = plan_of(tmp_path, HEAD + "[training]\nseq_len = 512\n[validation]\nenable = true\n")
    assert instantiate(plan).validator.seq_len == 2048


# ----------------------------------------------------------------------- empty tables


def _sections(spec: SectionSpec, prefix: str = "") -> list[str]:
    found = []
    for item in spec.fields:
        if isinstance(item.annotation, SectionSpec):
            found.append(prefix + item.name)
            found += _sections(item.annotation, f"{prefix}{item.name}.")
    return found


SECTIONS = _sections(LEGACY_SPEC)


def test_every_section_is_listed():
    assert {"checkpoint", "validation", "quantize.linear.float8", "parallelism"} <= set(SECTIONS)


@pytest.mark.parametrize("section", SECTIONS)
def test_an_empty_table_of_any_section_migrates_to_a_valid_module(tmp_path, section):
    text = HEAD if section == "model" else HEAD + f"[{section}]\n"
    plan = plan_of(tmp_path, text)
    assert plan.ok
    config = instantiate(plan)
    assert config.model_spec is not None
    if section != "model":
        assert plan.outcomes[section].status == "default", plan.outcomes[section]
    assert plan.lossless(), [(k, o.status) for k, o in plan.outcomes.items()]
    from titan.migrate.codegen.render_code import render_module

    code = render_module([plan])
    assert "={}" not in code.replace(" ", "")
    compile(code, "config_registry.py", "exec")


def test_all_empty_tables_at_once_give_a_module_titan_validate_passes(tmp_path):
    text = HEAD + "".join(f"[{s}]\n" for s in SECTIONS if s != "model")
    (tmp_path / "job.toml").write_text(text, encoding="utf-8")
    done = migrate_cli(tmp_path, "job.toml", "-o", "config_registry.py")
    assert done.returncode == 0, done.stdout + done.stderr
    check = subprocess.run(
        [sys.executable, "-m", "titan.cli.validate", "config_registry.py", "--no-cache"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert check.returncode == 0, check.stdout + check.stderr


# ----------------------------------------------------------------------- custom modules


REDECLARING = """\
from dataclasses import dataclass, field


@dataclass
class Validation:
    dataloader: str = "MMapDataset"


@dataclass
class JobConfig:
    validation: Validation = field(default_factory=Validation)
"""


def test_a_module_redeclaring_a_nested_section_is_reported_not_a_crash(tmp_path):
    (tmp_path / "redeclaring_ext.py").write_text(REDECLARING, encoding="utf-8")
    (tmp_path / "job.toml").write_text(
        '[job]\ncustom_config_module = "redeclaring_ext"\n'
        + HEAD
        + '[validation]\ndataset = "c4_validation"\ndataloader = "Other"\n',
        encoding="utf-8",
    )
    done = migrate_cli(tmp_path, "job.toml")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert "job.toml:8:1: error[dropped-key] `validation.dataloader = 'Other'`" in done.stderr
    assert "NOT lossless" in done.stderr
    validate = subprocess.run(
        [sys.executable, "-m", "titan.cli.validate", "job.toml", "--as-registry"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert validate.returncode == 1, validate.stdout + validate.stderr
    assert "error[dropped-key]" in validate.stdout


def test_a_module_that_is_not_found_says_where_it_was_looked_for(tmp_path):
    (tmp_path / "job.toml").write_text(
        '[job]\ncustom_config_module = "team_ext"\n' + HEAD, encoding="utf-8"
    )
    done = migrate_cli(tmp_path, "job.toml")
    assert done.returncode == 1
    assert "titan has no team_ext trainer" not in done.stdout + done.stderr
    assert (
        "custom config module 'team_ext' not found: no team_ext.py or team_ext/__init__.py in"
        in (done.stderr)
    )
    assert "pass --module-path DIR" in done.stderr
    assert "__path_hook__" not in done.stderr  # only folders a user can look into
    plan = build_plan(tmp_path / "job.toml")
    assert plan.outcomes["job.custom_config_module"].status == "rejected"


# ----------------------------------------------------------------------- no key without outcome


@pytest.mark.parametrize(
    "toml",
    legacy_tomls(),
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_every_key_of_a_legacy_config_has_an_outcome(toml):
    from titan.migrate.plan.legacy_values import flatten
    from titan.schemas.toml_source import read_text

    text, _ = read_text(toml, shown=str(toml))
    import tomllib

    keys = set(flatten(tomllib.loads(text)))
    plan = build_plan(toml)
    assert keys == set(plan.outcomes), keys ^ set(plan.outcomes)


def test_a_structural_key_nothing_handles_is_reported_not_lost(tmp_path, monkeypatch):
    """The safety net: a key whose home no step handles is an error, never 'lossless'."""
    from titan.migrate.plan import build as plan_build

    monkeypatch.setattr(plan_build, "tokenizer_path", lambda draft: None)
    plan = plan_of(tmp_path, HEAD + 'tokenizer_path = "/data/tok"\n')
    assert plan.outcomes["model.tokenizer_path"].status == "dropped"
    assert not plan.lossless()
    assert any(
        d.code == "dropped-key" and d.severity.value == "error" and d.hint for d in plan.diagnostics
    )


def test_report_of_a_lossless_file_says_so(tmp_path):
    (tmp_path / "job.toml").write_text(
        textwrap.dedent(HEAD + "[checkpoint]\n[training]\nsteps = 5\n"), encoding="utf-8"
    )
    done = migrate_cli(tmp_path, "job.toml", "-o", "config_registry.py")
    assert done.returncode == 0
    report = done.stdout + done.stderr  # with -o the report is the standard output
    assert "job_toml() returns Trainer.Config: lossless" in report or "lossless" in report
    assert "NOT lossless" not in report


EXT_A = """\
from dataclasses import dataclass, field


@dataclass
class Infra:
    cluster: str = "a"


@dataclass
class JobConfig:
    infra: Infra = field(default_factory=Infra)
"""

EXT_B = """\
from dataclasses import dataclass, field


@dataclass
class Deepep:
    enable: bool = False


@dataclass
class Training:
    swap_every: int = 0


@dataclass
class JobConfig:
    deepep: Deepep = field(default_factory=Deepep)
    training: Training = field(default_factory=Training)
"""


def test_two_custom_modules_are_both_carried(tmp_path):
    """The file's own module and another (--extension, or the project's declaration): the
    sections of both live on the one generated trainer subclass."""
    (tmp_path / "ext_a.py").write_text(EXT_A, encoding="utf-8")
    (tmp_path / "ext_b.py").write_text(EXT_B, encoding="utf-8")
    (tmp_path / "job.toml").write_text(
        '[job]\ncustom_config_module = "ext_a"\n'
        + HEAD
        + '[infra]\ncluster = "b"\n[deepep]\nenable = true\n[training]\nswap_every = 3\n',
        encoding="utf-8",
    )
    done = migrate_cli(tmp_path, "job.toml", "--extension", "ext_b", "-o", "config_registry.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "lossless" in done.stdout and "NOT lossless" not in done.stdout
    code = (tmp_path / "config_registry.py").read_text(encoding="utf-8")
    assert 'infra=Infra(cluster="b")' in code and "deepep=Deepep(enable=True)" in code
    assert "swap_every=3" in code
    check = subprocess.run(
        [sys.executable, "-m", "titan.cli.validate", "config_registry.py", "--no-cache"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert check.returncode == 0, check.stdout + check.stderr

"""Dating that admits uncertainty, and keys their own era no longer read.

A file whose keys all still exist at v0.2.2 may be from v0.2.1, v0.2.0 or earlier: it is
*undated*, and while its era would change the run (a default, its flavor) the migration says so
and never calls it lossless; ``--era``, a ``# titan: era`` comment or ``[tool.titan] era``
settles it. A key the loader of the file's own era no longer read did nothing in that run: it
is reported as ignored, never upgraded into a setting (``titan-validate --fix`` deletes it).
The shapes are those of real files: upstream's v0.2.0/v0.2.1 TOMLs, a 2025-07 fork file that
still has ``[float8] enable_float8_linear``, files that kept a renamed key beside its new name.
"""

from __future__ import annotations

import io
import json
import tomllib

import pytest
from titan.migrate.plan.build import build_plan
from titan.migrate.targets.live import instantiate
from titan.schemas import project

from tests.helpers import LEGACY_CONFIGS, validate, write

# A v0.2.1 debug file (torchtitan 81af8833, 2025-12-26): every key still a v0.2.2 key.
V021_DEBUG = """\
[job]
dump_folder = "./outputs"
description = "Llama 3 debug training"

[model]
name = "llama3"
flavor = "debugmodel"
hf_assets_path = "./tests/assets/tokenizer"

[training]
local_batch_size = 8
seq_len = 2048
steps = 10
dataset = "c4_test"

[activation_checkpoint]
mode = "selective"
selective_ac_option = "2"

[compile]
enable = false
"""


def migrate_report(*args: object) -> tuple[int, dict]:
    from titan.cli import migrate

    out, err = io.StringIO(), io.StringIO()
    code = migrate.run([str(a) for a in ("--format", "json", *args)], stdout=out, stderr=err)
    return code, json.loads(err.getvalue() or out.getvalue())


# --------------------------------------------------------------------------- undated files


def test_a_v021_file_without_old_keys_is_undated_and_says_what_its_era_decides(tmp_path):
    path = write(tmp_path, "debug.toml", V021_DEBUG)
    plan = build_plan(path)
    assert plan.era["undated"] and plan.era["floor"] == "2025-08-20"  # compile.enable
    at_stake = {item["key"]: item for item in plan.era["at_stake"]}
    # v0.2.1 checkpointed activations without RNG state (until e347b1e5, 2026-02-15) and
    # wrote under ./torchtitan/outputs (until 755ce8ff, 2025-10-21)
    assert at_stake["activation_checkpoint.preserve_rng_state"]["value"] is False
    assert at_stake["activation_checkpoint.preserve_rng_state"]["commit"] == "e347b1e5"
    assert at_stake["model.flavor"]["value"] == {"rope.scaling": "none"}
    assert "job.dump_folder" not in at_stake  # the file sets it
    assert not plan.lossless() and not plan.errors()
    (warning,) = [d for d in plan.diagnostics if d.code == "era-undated"]
    assert "2025-08-20" in warning.message and "--era v0.2.2" in warning.hint
    # nothing of v0.2.2's reading is changed: the config is what it was before
    config = instantiate(plan)
    assert config.activation_checkpoint.preserve_rng_state is True
    assert config.model_spec.model.rope.scaling == "llama"


def test_the_report_and_json_say_undated(tmp_path):
    path = write(tmp_path, "debug.toml", V021_DEBUG)
    code, report = migrate_report(path, "-o", tmp_path / "out.py")
    (file,) = report["files"]
    assert code == 0 and file["lossless"] is False and report["lossless"] is False
    assert file["era"]["undated"] is True and file["era"]["at_stake"]
    from titan.cli import migrate

    out, err = io.StringIO(), io.StringIO()
    migrate.run([str(path), "-o", str(tmp_path / "o.py")], stdout=out, stderr=err)
    text = out.getvalue() + err.getvalue()
    assert "NOT lossless (undated: its era decides the run)" in text
    assert "era: undated, read as v0.2.2 (its keys allow any day from 2025-08-20)" in text
    code, _ = migrate_report(path, "-o", tmp_path / "out.py", "--strict")
    assert code == 1  # --strict fails a file whose era is not known


@pytest.mark.parametrize(
    ("era", "day", "rope", "rng"),
    [
        ("v0.2.2", "2026-02-20", "llama", True),
        ("v0.2.1", "2025-12-26", "llama", False),
        ("v0.2.0", "2025-10-17", "llama", False),
        ("2025-09", "2025-09-01", "none", False),
    ],
)
def test_the_era_settles_it_three_ways(tmp_path, monkeypatch, era, day, rope, rng):
    """``--era``, the file's own comment and the project's ``[tool.titan] era`` say the same."""
    (tmp_path / ".git").mkdir()
    path = write(tmp_path, "debug.toml", V021_DEBUG)
    given = build_plan(path, era=era)
    commented = write(tmp_path, "commented.toml", f"# titan: era = {era}\n{V021_DEBUG}")
    write(tmp_path, "pyproject.toml", f'[tool.titan]\nera = "{era}"\n')
    project.forget()
    monkeypatch.chdir(tmp_path)
    try:
        declared = build_plan(path)
    finally:
        (tmp_path / "pyproject.toml").unlink()
        project.forget()
    sources = ["--era", "`# titan: era` comment", "[tool.titan] era"]
    for plan, source in zip((given, build_plan(commented), declared), sources, strict=True):
        assert plan.era["assumed"] == day and plan.era["source"] == source
        assert "undated" not in plan.era
        config = instantiate(plan)
        assert config.model_spec.model.rope.scaling == rope
        assert config.activation_checkpoint.preserve_rng_state is rng
    assert instantiate(given) == instantiate(declared)
    if era == "v0.2.2":
        assert given.lossless()


def test_the_projects_era_never_overrides_what_a_files_keys_say(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    write(tmp_path, "pyproject.toml", '[tool.titan]\nera = "v0.2.2"\n')
    old = write(tmp_path, "old.toml", '[model]\nname = "llama3"\n[training]\nbatch_size = 4\n')
    project.forget()
    monkeypatch.chdir(tmp_path)
    plan = build_plan(old)
    assert plan.era["source"] == "evidence" and plan.era["assumed"] == "2025-06-04"


def test_a_file_nothing_would_change_is_not_undated(tmp_path):
    # v0.2.2's own keys from after every change a file of it could feel: lr_scheduler.total_steps
    # (2026-02-06) and no activation checkpointing (the RNG-state default does not matter)
    path = write(
        tmp_path,
        "late.toml",
        '[model]\nname = "qwen3"\nflavor = "8B"\n[lr_scheduler]\ntotal_steps = 100\n'
        '[activation_checkpoint]\nmode = "none"\n',
    )
    plan = build_plan(path)
    assert "undated" not in plan.era and plan.lossless()


@pytest.mark.parametrize(
    "text",
    [
        "# titan: era = 2024-13\n[model]\n",
        "# titan: era = v0.3.0\n[model]\n",
        "# titan: era = 2026-03\n[model]\n",
        "# titan: era = 2024-0\uff15\n[model]\n",
    ],
)
def test_a_comment_that_names_no_era_is_an_error_at_its_line(tmp_path, text):
    path = write(tmp_path, "job.toml", text)
    found = validate(path, "--format", "json").json()["diagnostics"]
    (error,) = [d for d in found if d["code"] == "invalid-value"]
    assert error["line"] == 1 and "titan: era" in error["message"] and error["hint"]


def test_a_project_era_that_names_no_era_is_a_finding_in_pyproject(tmp_path, monkeypatch):
    (tmp_path / ".git").mkdir()
    write(tmp_path, "pyproject.toml", '[tool.titan]\nera = "last year"\n')
    path = write(tmp_path, "job.toml", '[model]\nname = "llama3"\n')
    project.forget()
    monkeypatch.chdir(tmp_path)
    try:
        found = validate(path, "--format", "json").json()["diagnostics"]
    finally:
        project.forget()
    (problem,) = [d for d in found if d["file"].endswith("pyproject.toml")]
    assert "era" in problem["message"] and "last year" in problem["message"]


# --------------------------------------------------------------------------- ignored keys

# A fork file of 2025-07 that kept the float8 switch of early 2025 (gone 2025-02-14, 57387af0):
# its run trained in bf16, since the loader of its day skipped keys it did not declare.
STALE_FLOAT8 = """\
[model]
name = "llama3"
flavor = "8B"
hf_assets_path = "./assets/hf/Llama-3.1-8B"

[float8]
enable_float8_linear = true

[training]
local_batch_size = 1
seq_len = 8192
steps = 100
"""

STALE_CASES = [
    pytest.param(STALE_FLOAT8, "float8.enable_float8_linear", id="float8 switch"),
    pytest.param(
        '[model]\nname = "llama3"\n[training]\nbatch_size = 4\nlocal_batch_size = 8\n',
        "training.batch_size",
        id="renamed batch size beside its new name",
    ),
    pytest.param(
        '[model]\nname = "llama3"\n[training]\ntensor_parallel_degree = 2\n'
        "[parallelism]\npipeline_parallel_microbatch_size = 2\n",
        "training.tensor_parallel_degree",
        id="tp degree left in training",
    ),
    pytest.param(
        '[model]\nname = "llama3"\nnorm_type = "layernorm"\n[training]\nlocal_batch_size = 4\n',
        "model.norm_type",
        id="layernorm after the norm key was gone",
    ),
    pytest.param(
        '[checkpoint]\nenable_checkpoint = true\ninterval_type = "seconds"\n'
        "[validation]\nenable = true\n",
        "checkpoint.interval_type",
        id="seconds interval in a 2025-08 file",
    ),
]


@pytest.mark.parametrize(("text", "key"), STALE_CASES)
def test_a_key_its_era_no_longer_read_is_ignored_never_switched_on(tmp_path, text, key):
    path = write(tmp_path, "job.toml", text)
    plan = build_plan(path)
    outcome = plan.outcomes[key]
    assert outcome.status == "ignored" and "did without it" in outcome.note
    assert plan.era["assumed"] < "2025-08-28"  # a loader that still skipped unknown keys
    (warning,) = [d for d in plan.diagnostics if d.code == "ignored-key" and d.path == key]
    assert warning.severity.value == "warning" and warning.hint.startswith("delete it")
    # what it once meant is not in the built config
    once = build_plan(path, era="v0.2.2")  # read as a file whose loader refused it
    assert once.outcomes[key].status in ("upgraded", "rejected", "dropped")
    found = validate(path, "--format", "json").json()["diagnostics"]
    (finding,) = [d for d in found if d["path"] == key]
    assert finding["code"] == "ignored-key" and finding["severity"] == "warning"


def test_the_float8_switch_of_a_2025_07_file_trains_in_bf16(tmp_path):
    plan = build_plan(write(tmp_path, "job.toml", STALE_FLOAT8))
    assert instantiate(plan).model_converters.converters == []
    assert plan.era["assumed"] == "2025-08-27"


def test_fix_deletes_an_ignored_key_and_keeps_the_files_date(tmp_path):
    path = write(tmp_path, "job.toml", STALE_FLOAT8)
    result = validate("--fix", path)
    assert result.code == 0, result.out + result.err
    text = path.read_text(encoding="utf-8")
    fixed = tomllib.loads(text)
    assert "float8" not in fixed and "converters" not in fixed["model"]
    assert text.splitlines()[0] == "# titan: era = 2025-08-27"
    # the fixed file is the same run: its flavor is still that day's 8B (RoPE unscaled)
    again = build_plan(path)
    assert instantiate(again) == instantiate(build_plan(write(tmp_path, "o.toml", STALE_FLOAT8)))
    assert instantiate(again).model_spec.model.rope.scaling == "none"


def test_a_key_the_era_did_not_yet_read_is_ignored_too(tmp_path):
    # training.enable_float8_linear came on 2024-07-17: a file dated before that did not read it
    path = write(tmp_path, "job.toml", "[training]\nenable_float8_linear = true\n")
    plan = build_plan(path, era="2024-06")
    assert plan.outcomes["training.enable_float8_linear"].status == "ignored"
    assert "only from 2024-07-17 on" in plan.outcomes["training.enable_float8_linear"].note


# --------------------------------------------------------------------------- the first era


def test_torchtrains_first_weeks_trained_at_a_constant_2e_5(tmp_path):
    path = write(tmp_path, "train_config.toml", '[global]\ndump_folder = "./outputs"\n')
    config = instantiate(build_plan(path, era="2024-01-20"))
    assert config.optimizer.lr == 2e-5
    assert config.lr_scheduler.warmup_steps == 0 and config.lr_scheduler.decay_ratio == 0.0
    assert config.training.max_norm == float("inf")  # no clipping before b8c1719b
    assert config.activation_checkpoint.mode == "none"  # before 7d905feb
    assert config.training.mixed_precision_param == "float32"
    after = instantiate(build_plan(path, era="2024-02-05"))
    assert after.optimizer.lr == 8e-4 and after.activation_checkpoint.mode == "full"
    assert after.lr_scheduler.decay_ratio is None and after.training.max_norm == 1.0


def test_the_first_scheduler_warmed_up_over_a_tenth_of_the_steps(tmp_path):
    path = write(tmp_path, "job.toml", '[global]\ndump_folder = "./outputs"\n')
    overrides = ["--training.steps", "100"]
    first = instantiate(build_plan(path, era="2024-02-05", overrides=overrides))
    assert first.lr_scheduler.warmup_steps == 10  # 10% until 41303e15 (#54, 2024-02-14)
    later = instantiate(build_plan(path, era="2024-02-20", overrides=overrides))
    assert later.lr_scheduler.warmup_steps == 20


@pytest.mark.parametrize(
    "text",
    [
        "[training]\nsteps = 100000000000000000000000000000000000000000\n",
        "[training]\nsteps = 9223372036854775807\nwarmup_pct = 0.2\n",
        "[training]\nsteps = 10\nwarmup_pct = inf\n",
    ],
)
def test_a_step_count_out_of_range_dates_and_derives_nothing_it_cannot(tmp_path, text):
    """An undated file's era is tried on every day a default changed, the warmup share of
    2024-02 included: a step count no run could have is the range check's error, not a crash."""
    path = write(tmp_path, "job.toml", text)
    plan = build_plan(path)
    assert plan.root is not None
    found = validate(path, "--format", "json")
    assert found.code == 1 and "Traceback" not in found.err


def test_a_forge_apps_stale_key_is_ignored_as_forges_own_loader_did(tmp_path):
    """Forge's SFT apps kept ``training.compile: false`` long after torchtitan 08b8b244 moved it
    to ``[compile]``: Forge merged the sections into its dataclasses itself and skipped what
    they did not declare, so the key did nothing, even on days torchtitan's own loader refused
    unknown keys."""
    app = (LEGACY_CONFIGS.parent / "tests" / "data" / "forge" / "sft_qwen3.yaml").read_text(
        encoding="utf-8"
    )
    app = app.replace("  steps: 500\n", "  steps: 500\n  compile: false\n")
    path = write(tmp_path, "sft.yaml", app)
    plan = build_plan(path)
    assert plan.era["assumed"] >= "2025-08-28"  # a day torchtitan refused unknown keys on
    assert plan.outcomes["training.compile"].status == "ignored"
    found = validate(path, "--format", "json").json()["diagnostics"]
    (finding,) = [d for d in found if d["path"] == "training.compile"]
    assert finding["code"] == "ignored-key" and finding["severity"] == "warning"
    # a TOML of the same day would not have loaded: its key is read as it was meant
    toml = write(tmp_path, "job.toml", "[training]\ncompile = true\n")
    assert build_plan(toml, era=plan.era["assumed"]).outcomes["training.compile"].status == (
        "upgraded"
    )

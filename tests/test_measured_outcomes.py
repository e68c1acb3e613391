"""A migration's outcomes are measured from the config it built, never only bookkept.

Over every TOML the suite has (``legacy_configs/``, the era files, upstream's v0.2.2 corpus when
``../shared`` is there, and generated documents), each key whose outcome says its value is in the
built config is read back out of the *live* config titan-train would run (the real config
objects, through the key's home) and compared with what the legacy run used. A file with an
error is never "lossless", neither in the report nor in its exit status. The cases after that
are real shapes that were called lossless while the built config said otherwise.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from titan.migrate.plan import homes
from titan.migrate.plan.build import build_plan
from titan.migrate.plan.carry import VALIDATION_SHAPE
from titan.migrate.plan.measured import UNREADABLE, legacy_values, readback
from titan.migrate.plan.report import exit_status
from titan.migrate.targets.config_objects import same
from titan.migrate.targets.live import instantiate

from tests.helpers import legacy_tomls, write
from tests.test_era_defaults import V022_2024_05
from tests.test_migrate_properties import documents

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
FILES = sorted(
    [
        *legacy_tomls(),
        *ROOT.glob("tests/eras/**/*.toml"),
        *(CORPUS.glob("**/*.toml") if CORPUS.is_dir() else ()),
    ]
)
KEPT = ("carried", "default", "structural", "upgraded", "era-default")


def live_value(config: Any, key: str, extension: str | None) -> Any:
    """The value the live config holds for legacy ``key`` (``UNREADABLE`` where its home is not a
    plain field of this config)."""
    found = homes.home(key, extension=extension)
    if found is None or found.kind not in ("same", "moved") or found.path is None:
        return UNREADABLE
    node = config
    for part in found.path.split("."):
        if not hasattr(node, part):
            return UNREADABLE
        node = getattr(node, part)
    return node


def plain(value: Any) -> Any:
    """A config value as TOML would write it (tuples as lists)."""
    if isinstance(value, tuple):
        return [plain(v) for v in value]
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def check_measured(plan: Any) -> None:
    """Every kept key's legacy value is in the live config; errors mean not lossless."""
    assert not (plan.errors() and plan.lossless()), plan.source
    assert exit_status([plan], strict=True) == (0 if plan.lossless() else 1), plan.source
    if not plan.ok:
        return
    legacy = legacy_values(plan)
    config = instantiate(plan)
    for key, outcome in plan.outcomes.items():
        if outcome.status not in KEPT or key not in legacy:
            continue
        built = live_value(config, key, plan.extension)
        if built is None and key in VALIDATION_SHAPE:
            # titan's validator follows the training value when its own is unset
            built = live_value(config, VALIDATION_SHAPE[key], plan.extension)
        if built is UNREADABLE:
            built = readback(plan, key)  # a structural key: the object it chose
        if (
            built is UNREADABLE
            or key.startswith("validation.")
            and not legacy.get("validation.enable")
        ):
            continue
        if isinstance(built, str | int | float | bool | list | tuple | type(None)):
            assert same(legacy[key], plain(built)), (plan.source, key, legacy[key], built)


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(p.parents[2])))
def test_every_kept_outcome_holds_the_legacy_value_in_the_built_config(path: Path) -> None:
    check_measured(build_plan(path, fix_stale_names=True))
    check_measured(build_plan(path))


def test_the_corpus_is_there_under_ci() -> None:
    if os.environ.get("CI") == "true":
        assert CORPUS.is_dir(), "../shared/corpus is promised under CI"


def test_generated_documents_are_measured(tmp_path: Path) -> None:
    @settings(
        max_examples=150,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(documents())
    def check(document: dict[str, Any]) -> None:
        toml = tmp_path / "case.toml"
        toml.write_text(tomli_w.dumps(document), encoding="utf-8")
        check_measured(build_plan(toml))

    check()


# --------------------------------------------------------------------------- cases


def migrate_json(*args: object) -> tuple[int, dict]:
    """``titan-migrate --format json ARGS -o FILE``: exit status and the report."""
    from titan.cli import migrate

    out, err = io.StringIO(), io.StringIO()
    code = migrate.run([str(a) for a in ("--format", "json", *args)], stdout=out, stderr=err)
    return code, json.loads(out.getvalue())


LLAMA = '[model]\nname = "llama3"\nflavor = "debugmodel"\n'


def test_a_file_with_only_an_unknown_flavor_is_not_lossless(tmp_path: Path) -> None:
    path = write(tmp_path, "job.toml", '[model]\nname = "llama3"\nflavor = "1B"\n')
    code, report = migrate_json(path, "-o", tmp_path / "out.py")
    assert code == 1
    assert report["lossless"] is False and report["files"][0]["lossless"] is False


def test_a_converter_list_written_as_a_string_is_rejected_not_default(tmp_path: Path) -> None:
    # a 2024-era spelling the v0.2.2 loader refuses: the key is not carried, and says so
    path = write(tmp_path, "job.toml", f'{LLAMA}converters = "float8"\n')
    code, report = migrate_json(path, "-o", tmp_path / "out.py")
    (file,) = report["files"]
    assert code == 1 and file["lossless"] is False
    assert file["keys"]["model.converters"]["status"] == "rejected"
    assert file["counts"]["rejected"] == 1 and file["counts"]["default"] == 0


def test_a_key_the_built_config_does_not_hold_is_changed_and_an_error(tmp_path: Path) -> None:
    # the measurement, not the step, decides: a home that lost the value is caught
    path = write(tmp_path, "job.toml", f"{LLAMA}[training]\nsteps = 7\n")
    plan = build_plan(path, era="v0.2.2")
    assert plan.outcomes["training.steps"].status == "carried" and plan.lossless()
    plan.root.fields["training"].fields["steps"] = 8  # what a wrong home would build
    from titan.migrate.plan.measured import settle
    from titan.migrate.plan.migration_plan import KeyOutcome

    settle(plan, outcome=KeyOutcome)
    assert plan.outcomes["training.steps"].status == "changed"
    (error,) = plan.errors()
    assert error.code == "value-changed" and "7" in error.message and "8" in error.message
    assert not plan.lossless()


def test_a_dropped_key_that_sets_the_legacy_default_counts_as_the_default(tmp_path: Path) -> None:
    path = write(tmp_path, "job.toml", f"{LLAMA}[memory_estimation]\nenable = false\n")
    plan = build_plan(path, era="v0.2.2")
    assert plan.outcomes["memory_estimation.enable"].status == "default"
    assert plan.lossless()


def test_behaviour_titan_adds_is_listed_in_the_report(tmp_path: Path) -> None:
    path = write(tmp_path, "job.toml", LLAMA)
    code, report = migrate_json(path, "--era", "v0.2.2", "-o", tmp_path / "out.py")
    (file,) = report["files"]
    assert code == 0 and file["lossless"] is True
    (change,) = file["behaviour_changes"]
    assert change["setting"] == "training.on_nonfinite_loss"
    assert "trained on through a NaN" in change["why"]


@pytest.mark.parametrize(("degree", "noted"), [(1, False), (2, True), (4, True)])
def test_a_pipelined_file_is_told_its_gradients_change(tmp_path: Path, degree, noted):
    """v0.2.2 ran backward on the summed loss under PP (grad norms scaled by the token count);
    titan and torchtitan 0.3.0 divide before backward, as the run without PP does."""
    text = f"{LLAMA}[parallelism]\npipeline_parallel_degree = {degree}\n"
    path = write(tmp_path, "job.toml", text)
    code, report = migrate_json(path, "--era", "v0.2.2", "-o", tmp_path / "titan.py")
    (file,) = report["files"]
    assert code == 0 and file["lossless"] is True  # the value is carried; the gradients differ
    changes = {c["setting"]: c["why"] for c in file["behaviour_changes"]}
    assert ("parallelism.pipeline_parallel_degree" in changes) is noted
    code, report = migrate_json(
        path, "--era", "v0.2.2", "--target", "torchtitan==0.3.0", "-o", tmp_path / "up.py"
    )
    (upstream,) = report["files"]
    notes = [
        d["message"]
        for d in upstream["diagnostics"]
        if d["path"] == "parallelism.pipeline_parallel_degree" and d["code"] == "upstream-changed"
    ]
    assert bool(notes) is noted
    if noted:
        why = changes["parallelism.pipeline_parallel_degree"]
        assert "summed, unnormalised loss" in why and "equal the run's without PP" in why
        assert "divides the loss by the batch's valid tokens before backward" in notes[0]


def test_upstream_target_with_a_todo_is_not_lossless_and_fails_strict(tmp_path: Path) -> None:
    # 0.3.0 has no memory estimator: a warning and a TODO, so not lossless
    path = write(tmp_path, "job.toml", f"{LLAMA}[memory_estimation]\nenable = true\n")
    out = tmp_path / "out.py"
    code, report = migrate_json(path, "--target", "torchtitan==0.3.0", "-o", out)
    (file,) = report["files"]
    assert file["todos"] and file["lossless"] is False
    assert code == 0  # a warning only
    code, _ = migrate_json(path, "--target", "torchtitan==0.3.0", "-o", out, "--strict")
    assert code == 1


# --------------------------------------------------------------------------- era defaults

UPSTREAM_2024_05 = ROOT / "tests" / "eras" / "upstream" / "2024_05_upstream_debug_model.toml"


def test_the_2024_05_upstream_file_migrates_to_what_its_era_ran(tmp_path: Path) -> None:
    code, report = migrate_json(UPSTREAM_2024_05, "-o", tmp_path / "out.py")
    (file,) = report["files"]
    assert file["era"]["assumed"] == "2024-07-07" and file["era"]["source"] == "evidence"
    assert {e["key"] for e in file["era"]["evidence"]} >= {"training.fp8_linear"}
    written = {k for k, o in file["keys"].items() if o["status"] == "era-default"}
    assert written == {"optimizer.implementation", "activation_checkpoint.preserve_rng_state"}
    # c4_mini and a tiktoken .model file: the run used them, v0.2.2 cannot say them
    assert code == 1 and file["lossless"] is False
    plan = build_plan(UPSTREAM_2024_05)
    config = instantiate(plan)
    for key, value in V022_2024_05.items():
        built = live_value(config, key, plan.extension)
        if built is None and key in VALIDATION_SHAPE:
            # titan's validator follows the training value when its own is unset
            built = live_value(config, VALIDATION_SHAPE[key], plan.extension)
        if built is UNREADABLE:
            built = readback(plan, key)
        assert same(value, plain(built)), (key, value, built)


def test_the_era_flag_dates_a_file_that_has_no_evidence(tmp_path: Path) -> None:
    path = write(tmp_path, "job.toml", f"{LLAMA}[checkpoint]\nenable = true\n")
    plan = build_plan(path)
    # nothing dates it: read as v0.2.2, and not lossless while its era decides the run
    assert plan.era["assumed"] is None and plan.era["undated"] and not plan.lossless()
    # checkpoint.enable dates it from 2025-08-22 on: the outputs folder, RNG state in AC and
    # RoPE scaling changed after that day
    assert {item["key"] for item in plan.era["at_stake"]} == {
        "job.dump_folder",
        "activation_checkpoint.preserve_rng_state",
        "model.flavor",
    }
    assert build_plan(path, era="v0.2.2").lossless()
    dated = build_plan(path, era="2025-03")
    assert dated.era == {**dated.era, "assumed": "2025-03-01", "source": "--era"}
    assert dated.outcomes["checkpoint.last_save_model_only"].status == "era-default"
    assert instantiate(dated).checkpoint.last_save_model_only is False
    assert instantiate(plan).checkpoint.last_save_model_only is True


def test_a_2024_file_with_checkpointing_keeps_its_full_last_save(tmp_path: Path) -> None:
    text = (
        f'{LLAMA}hf_assets_path = "./tests/assets/tokenizer"\n'
        "[training]\nbatch_size = 4\n[checkpoint]\nenable_checkpoint = true\n"
    )
    plan = build_plan(write(tmp_path, "job.toml", text))
    assert plan.era["assumed"].startswith("2025-0")
    assert plan.outcomes["checkpoint.last_save_model_only"].status == "era-default"
    assert instantiate(plan).checkpoint.last_save_model_only is False
    info = [d for d in plan.diagnostics if d.code == "era-default"]
    assert any("#1336" in d.message for d in info), [d.message for d in info]
    assert not plan.errors(), [str(d) for d in plan.errors()]
    # what keeps it from lossless: its debug flavor took its vocabulary from the tokenizer
    assert plan.todos == {
        "model_spec": [
            f"set model_spec.model.vocab_size to the size of the tokenizer the "
            f"{plan.era['assumed']} run used"
        ]
    }


def test_a_command_line_flag_wins_over_an_era_default(tmp_path: Path) -> None:
    text = f"{LLAMA}[training]\nbatch_size = 4\n[checkpoint]\nenable_checkpoint = true\n"
    path = write(tmp_path, "job.toml", text)
    plan = build_plan(path, overrides=["--checkpoint.last_save_model_only"])
    assert instantiate(plan).checkpoint.last_save_model_only is True
    assert "checkpoint.last_save_model_only" not in {
        d.path for d in plan.diagnostics if d.code == "era-default"
    }


def test_an_old_default_v022_cannot_say_is_an_error_with_the_key_to_write(tmp_path: Path) -> None:
    text = f"{LLAMA}[training]\nbatch_size = 4\n"
    plan = build_plan(write(tmp_path, "job.toml", text))
    (lost,) = [d for d in plan.errors() if d.code == "era-default-lost"]
    assert lost.path == "model.tokenizer_path" and "`model.hf_assets_path`" in lost.hint
    assert "--era" in lost.hint
    # answering it does not move the file's date
    answered = write(
        tmp_path, "answered.toml", text.replace(LLAMA, LLAMA + 'hf_assets_path = "./t"\n')
    )
    again = build_plan(answered)
    assert again.era["assumed"] == plan.era["assumed"]
    assert not [d for d in again.errors() if d.code == "era-default-lost"]


def test_the_era_flag_is_checked_at_the_command_line(tmp_path: Path, capsys) -> None:
    from titan.cli import migrate

    path = write(tmp_path, "job.toml", LLAMA)
    for bad, says in (
        ("2023-05", "outside the legacy eras"),
        ("2024-13", "not a calendar date"),
        ("May 2024", "write it as YYYY-MM, YYYY-MM-DD or one of"),
        ("2024-0\uff15", "write it as YYYY-MM, YYYY-MM-DD or one of"),
    ):
        out, err = io.StringIO(), io.StringIO()
        assert migrate.run([str(path), "--era", bad], stdout=out, stderr=err) == 2
        assert says in capsys.readouterr().err


def test_a_text_report_names_the_era_and_each_era_default(tmp_path: Path) -> None:
    from titan.cli import migrate

    text = f"{LLAMA}[training]\nbatch_size = 4\n[checkpoint]\nenable_checkpoint = true\n"
    path = write(tmp_path, "job.toml", text)
    out, err = io.StringIO(), io.StringIO()
    migrate.run(
        [str(path), "-o", str(tmp_path / "x.py"), "--color", "never"], stdout=out, stderr=err
    )
    report = out.getvalue()
    assert "era: 2025-06-04, the latest day its `training.batch_size`" in report
    assert "era-default checkpoint.last_save_model_only" in report

"""The era chain end to end: TOMLs in every older torchtitan layout migrate to the config their
hand-written v0.2.2 twin gives, titan-validate names each old key's exact v0.2.2 setting at its
line, and what v0.2.2 cannot express is reported with its era.

``tests/eras/`` holds one or more files per era since 2024-H1, each in that era's layout (written
from the history of torchtitan's config files, not copied), and ``NAME.v022.toml`` beside each:
the same settings written by hand with v0.2.2 keys.
"""

from __future__ import annotations

import importlib.util
import io
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from titan.migrate.codegen.render_code import function_names, render_module
from titan.migrate.plan import upgrades
from titan.migrate.plan.build import build_plan
from titan.migrate.plan.legacy_values import flatten
from titan.migrate.plan.migration_plan import KeyOutcome
from titan.migrate.plan.report import as_dict, render_text, summary
from titan.migrate.targets.live import instantiate
from titan.schemas import eras
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.moved_keys import CONVERTERS, RULES, Rule
from titan.schemas.spans import locate_keys
from titan.schemas.spec import SectionSpec

from tests.helpers import validate, write

ERAS = Path(__file__).parent / "eras"
OLD = sorted(p for p in ERAS.glob("*.toml") if not p.name.endswith(".v022.toml"))
NAMES = [p.stem for p in OLD]


def twin(path: Path) -> Path:
    return path.with_name(path.stem + ".v022.toml")


def plan_of(path: Path) -> Any:
    # The converter names of their era ("float8", "quantize.dense.float8") are values, not keys:
    # the chain leaves them to --fix-stale-names.
    return build_plan(path, fix_stale_names=True)


def document(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def old_keys(doc: dict) -> list[tuple[tuple[str, ...], Any]]:
    return [(parts, value) for parts, value in eras.leaves(doc) if eras.rule_for(parts)]


# --------------------------------------------------------------------------- the corpus


def test_every_era_since_2024_h1_has_files_and_twins() -> None:
    assert {name[:7] for name in NAMES} == {"2024_h1", "2024_h2", "2025_h1", "2025_h2"}
    for path in OLD:
        assert twin(path).exists(), path.name
        assert old_keys(document(path)), f"{path.name} has no key of an older era"
        # the twin is upgraded from nothing (its fault-tolerance keys are the ft module's)
        assert not any(o.era for o in build_plan(twin(path)).outcomes.values()), twin(path).name


def refused(path: Path) -> set[str]:
    """The keys whose value the run computed with and v0.2.2 cannot express (error steps)."""
    return {s.dotted for s in eras.upgrade(document(path))[1] if s.severity == "error"}


def era_keys(plan: Any) -> dict[str, str]:
    """The keys the file omits that its era's defaults answer for -> their outcome."""
    return {
        d.path: d.code for d in plan.diagnostics if d.code in ("era-default", "era-default-lost")
    }


@pytest.mark.parametrize("path", OLD, ids=NAMES)
def test_each_key_is_upgraded_carried_or_reported(path: Path) -> None:
    plan = plan_of(path)
    lost = {key for key, code in era_keys(plan).items() if code == "era-default-lost"}
    # refused keys stop the migration, and so does an old default v0.2.2 cannot say
    assert {d.path for d in plan.errors()} == refused(path) | lost
    assert set(plan.outcomes) == set(flatten(document(path))) | set(era_keys(plan))
    written = {k: o for k, o in plan.outcomes.items() if k in flatten(document(path))}
    assert {k for k, o in written.items() if o.status == "rejected"} == refused(path)
    for parts, _ in old_keys(document(path)):
        outcome = plan.outcomes[".".join(parts)]
        assert outcome.status in ("upgraded", "dropped", "inert", "ignored", "rejected"), outcome
        assert outcome.era, outcome  # every old key says where it came from


@pytest.mark.parametrize("path", OLD, ids=NAMES)
def test_the_upgraded_config_equals_the_twins(path: Path) -> None:
    assert validate(twin(path)).code == 0  # the twin is a clean v0.2.2 file
    plan = plan_of(path)
    # the twin spells the same settings with v0.2.2 keys: read at the old file's era, it gets
    # the same era defaults for the keys both omit
    assert instantiate(plan) == instantiate(build_plan(twin(path), era=plan.era["assumed"]))


def test_the_generated_module_passes_titan_validate(tmp_path: Path) -> None:
    plans = [plan_of(path) for path in OLD]
    module = write(tmp_path, "config_registry.py", render_module(plans))
    result = validate(module)
    assert result.code == 0, result.out + result.err
    spec = importlib.util.spec_from_file_location("era_registry", module)
    loaded = importlib.util.module_from_spec(spec)
    sys.modules["era_registry"] = loaded
    try:
        spec.loader.exec_module(loaded)
        for plan, function in zip(plans, function_names(plans), strict=True):
            assert getattr(loaded, function)() == instantiate(plan), function
    finally:
        del sys.modules["era_registry"]


@pytest.mark.parametrize("path", OLD, ids=NAMES)
def test_titan_validate_names_each_destination_at_its_line(path: Path) -> None:
    result = validate(path, "--format", "json")
    assert result.code == 1  # an old key fails on v0.2.2
    found = {d["path"]: d for d in result.json()["diagnostics"] if d["code"] == "moved-key"}
    # keys the loader of the file's era no longer read: what to do is delete them
    ignored = {d["path"]: d for d in result.json()["diagnostics"] if d["code"] == "ignored-key"}
    spans = locate_keys(path.read_text(encoding="utf-8"))
    doc = document(path)
    for parts, value in old_keys(doc):
        dotted = ".".join(parts)
        if dotted in ignored:
            finding = ignored.pop(dotted)
            assert (finding["line"], finding["col"]) == (spans[parts].line, spans[parts].col)
            assert finding["severity"] == "warning" and finding["hint"].startswith("delete it")
            continue
        finding = found.pop(dotted)
        assert (finding["line"], finding["col"]) == (spans[parts].line, spans[parts].col)
        step = eras.translate(parts, value, doc)
        assert step.era in finding["hint"]
        if step.severity == "error":  # what to do instead, never a plain delete
            assert step.hint in finding["hint"] and "drops it" not in finding["hint"]
            continue
        if step.kind == "unportable":
            assert "titan-migrate drops it" in finding["hint"]
            continue
        assert "`titan-validate --fix` rewrites it and titan-migrate carries it" in finding["hint"]
        for new, written in step.writes:
            if new == CONVERTERS:
                assert f"add {eras.toml_value(written[0])} to model.converters" in finding["hint"]
            else:
                assert f"`{'.'.join(new)} = {eras.toml_value(written)}`" in finding["hint"]
    assert found == ignored == {}  # no moved-key finding on anything else


def _hints(path: Path) -> dict[str, str]:
    """Each finding's hint by key, but the defaults of the file's era (the tokenizer it ran)."""
    found = validate(path, "--format", "json").json()["diagnostics"]
    return {d["path"]: d["hint"] for d in found if not d["code"].startswith("era-")}


def test_no_hint_sends_a_whole_old_table_where_some_keys_do_not_go(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "job.toml",
        "[float8]\nenable_float8_linear = true\nenable_fsdp_float8_all_gather = true\n",
    )
    hints = _hints(path)
    assert set(hints) == {"float8.enable_float8_linear", "float8.enable_fsdp_float8_all_gather"}
    assert hints["float8.enable_float8_linear"].startswith(
        'add "quantize.linear.float8" to model.converters;'
    )
    # moe_fqns_prototype came on 2025-06-27, after enable_float8_linear was gone (2025-02-14):
    # such a file's run ignored enable_float8_linear, so it is never turned into a converter
    path.write_text(path.read_text() + "moe_fqns_prototype = ['experts']\n", encoding="utf-8")
    hints = _hints(path)
    assert set(hints) == {
        "float8.enable_float8_linear",
        "float8.enable_fsdp_float8_all_gather",
        "float8.moe_fqns_prototype",
        "quantize.linear.float8",  # the all-gather option's table, inert without its converter
    }
    assert hints["quantize.linear.float8"].startswith("enable it with `model.converters = [")
    assert hints["float8.enable_float8_linear"].startswith("delete it")
    assert hints["float8.enable_fsdp_float8_all_gather"].startswith(
        "now `quantize.linear.float8.enable_fsdp_float8_all_gather = true`;"
    )
    assert hints["float8.moe_fqns_prototype"].startswith(
        'now `quantize.grouped_mm.float8.fqns = ["experts"]`; add "quantize.grouped_mm.float8"'
    )
    assert not any("now `quantize.linear.float8`" in hint for hint in hints.values())


# --------------------------------------------------------------------------- what is not carried


UNPORTABLE = ERAS / "2024_h2_unportable.toml"


def test_unportable_keys_are_reported_with_their_era() -> None:
    plan = plan_of(UNPORTABLE)
    era = era_keys(plan)  # the defaults of its era v0.2.2 cannot say are errors of their own
    dropped = {
        k: o
        for k, o in plan.outcomes.items()
        if o.status in ("dropped", "rejected") and k not in era
    }
    assert plan.outcomes["model.norm_type"].status == "rejected"  # the finding below: an error
    assert set(dropped) == {
        "model.norm_type",
        "training.context_parallel_degree",
        "checkpoint.interval_type",
        "float8.scaling_type_input",
    }
    assert "2024-04 to 2025-04" in dropped["model.norm_type"].era
    assert "LayerNorm" in dropped["model.norm_type"].note
    (error,) = [e for e in plan.errors() if e.code != "era-default-lost"]
    assert (error.path, error.severity.value) == ("model.norm_type", "error")
    assert "accept RMSNorm" in error.hint
    assert '"seconds"' in dropped["checkpoint.interval_type"].note
    assert "#812" in dropped["float8.scaling_type_input"].era
    assert "never read" in dropped["training.context_parallel_degree"].note
    spans = locate_keys(UNPORTABLE.read_text(encoding="utf-8"))
    warnings = {d.path: d for d in plan.diagnostics if d.code == "dropped-key"}
    errors = {d.path: d for d in plan.errors()}
    for key in dropped:
        finding = warnings.get(key) or errors[key]  # a refused key: its error, not a warning
        assert finding.span.line == spans[tuple(key.split("."))].line, key
        assert any(f"`{key} = " in todo for todo in plan.todos[""]), key
    # what v0.2.2 does anyway is upgraded to nothing, and says so
    assert plan.outcomes["float8.scaling_type_weight"].status == "upgraded"
    assert "v0.2.2 does this anyway" in plan.outcomes["float8.scaling_type_weight"].note


def test_collisions_are_reported_never_resolved(tmp_path) -> None:
    """An old key and its v0.2.2 key in one file: the loader of the file's era read only one of
    them (``training.local_batch_size`` replaced ``batch_size`` on 2025-06-05), and the report
    says which; on a day when both were read they collide, and neither is preferred."""
    path = tmp_path / "both.toml"
    path.write_text(
        '[model]\nname = "llama3"\nflavor = "debugmodel"\n[training]\nbatch_size = 4\n'
        "local_batch_size = 8\n[experimental]\npipeline_parallel_degree = 1\n[parallelism]\n"
        "pipeline_parallel_degree = 1\n",
        encoding="utf-8",
    )
    plan = build_plan(path)
    ignored = plan.outcomes["training.batch_size"]
    assert ignored.status == "ignored" and "2025-06-05 (8570415c)" in ignored.note
    assert "`training.local_batch_size` existed" in ignored.note
    assert instantiate(plan).training.local_batch_size == 8
    # dated to a day before the rename, batch_size was read, and the two disagree
    plan = build_plan(path, era="2025-03")
    note = plan.outcomes["training.batch_size"].note
    assert "means `training.local_batch_size = 4`" in note
    assert "also sets `training.local_batch_size = 8`" in note
    # an old key that agrees with the v0.2.2 key beside it is simply upgraded
    assert plan.outcomes["experimental.pipeline_parallel_degree"].status == "upgraded"
    assert instantiate(plan).training.local_batch_size == 8


def test_two_old_keys_that_disagree() -> None:
    doc = {"training": {"data_parallel_degree": 2, "data_parallel_shard_degree": 4}}
    upgraded, steps = eras.upgrade(doc)
    assert [s.kind for s in steps] == ["upgraded", "unportable"]
    assert "`training.data_parallel_degree` already means" in steps[1].why
    assert upgraded == {"parallelism": {"data_parallel_shard_degree": 2}}


def test_converters_are_appended_once() -> None:
    doc = {
        "model": {"converters": ["quantize.linear.float8"]},
        "training": {"fp8_linear": True, "enable_float8_linear": True},
        "float8": {"enable_float8_linear": True},
    }
    upgraded, steps = eras.upgrade(doc)
    assert upgraded == {"model": {"converters": ["quantize.linear.float8"]}}
    assert [s.kind for s in steps] == ["upgraded"] * 3


def test_the_era_of_training_compile_decides_what_was_compiled() -> None:
    alone = eras.translate(("training", "compile"), True, {"training": {"compile": True}})
    assert dict(alone.writes)[("compile", "components")] == ["model", "loss"]
    old = {"training": {"compile": True, "data_parallel_degree": -1}}
    dated = eras.translate(("training", "compile"), True, old)
    assert dict(dated.writes)[("compile", "components")] == ["model"]


def test_the_document_is_not_changed() -> None:
    doc = {"training": {"batch_size": 4}, "float8": {"enable_float8_linear": True}}
    before = json.dumps(doc)
    eras.upgrade(doc)
    assert json.dumps(doc) == before


# --------------------------------------------------------------------------- the migration report


def test_spans_and_comments_follow_the_old_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "job.toml",
        '[training]\nsteps = 5\n# per device\nbatch_size = "4"\nwarmup_steps = 2  # short\n',
    )
    plan = build_plan(path)
    wrong = next(d for d in plan.diagnostics if d.code == "wrong-type")
    assert (wrong.path, wrong.span.line, wrong.span.col) == ("training.local_batch_size", 4, 1)
    assert "written by `training.batch_size`" in wrong.message
    assert plan.outcomes["training.batch_size"].status == "rejected"
    path = write(tmp_path, "ok.toml", "[training]\nsteps = 5\n# per device\nbatch_size = 4\n")
    code = render_module([build_plan(path)])
    assert "# per device\n" in code and "local_batch_size=4" in code


def test_the_report_lists_every_upgraded_key_with_its_era() -> None:
    path = ERAS / "2024_h1_torchtrain.toml"
    plan = plan_of(path)
    upgraded = [k for k, o in plan.outcomes.items() if o.status == "upgraded"]
    assert summary(plan)["upgraded"] == len(upgraded) > 10
    # every key of the file is carried; its era's tokenizer (a .model file) is not sayable
    assert not plan.lossless()
    assert [d.path for d in plan.errors()] == ["model.tokenizer_path"]
    out = io.StringIO()
    render_text([plan], plan.diagnostics, out=out, color=False)
    text = out.getvalue()
    for key in upgraded:
        line = next(row for row in text.splitlines() if f" {key} " in row)
        assert line.lstrip().startswith("upgraded") and "[torchtitan 20" in line, line
    listed = as_dict(plan)["upgraded"]
    assert [row["key"] for row in listed] == upgraded
    assert all(row["era"].startswith("torchtitan 20") for row in listed)
    assert {d.code for d in plan.diagnostics} >= {"upgraded-key"}
    assert all(d.severity.value == "info" for d in plan.diagnostics if d.code == "upgraded-key")


def test_outcome_status_upgraded_counts_as_carried() -> None:
    assert "upgraded" in KeyOutcome.STATUSES


# --------------------------------------------------------------------------- every row


def _field(dotted: str) -> Any:
    from titan.schemas.builtin_extensions import known_extension

    for root in (LEGACY_SPEC, known_extension("ft").root, known_extension("flux").root):
        section: Any = root
        for part in dotted.split("."):
            field = section.field(part) if isinstance(section, SectionSpec) else None
            if field is None:
                break
            section = field.annotation
        else:
            return field
    raise KeyError(dotted)


_SAMPLES = {
    "parallelism.pipeline_parallel_schedule": "GPipe",
    "experimental.custom_import": "my_models",
    "checkpoint.folder": "ckpt",
    "parallelism.context_parallel_rotate_method": "alltoall",
    "parallelism.module_fqns_per_model_part": [["tok_embeddings"]],
    "quantize.linear.float8.recipe_name": "rowwise",
    "quantize.linear.mx.recipe_name": "mxfp8_cublas_rceil",
}


def _sample(dotted: str) -> Any:
    """A valid value for a v0.2.2 key that is not its default (so a wrong home shows)."""
    if dotted in _SAMPLES:
        return _SAMPLES[dotted]
    import typing

    field = _field(dotted)
    annotation, default = field.annotation, field.default
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is typing.Literal:
        return next(choice for choice in args if choice != default)
    kind = annotation if not args or typing.get_origin(annotation) is list else args[0]
    if kind is bool:
        return not default
    if kind is int:
        return 3 if default != 3 else 4
    if kind is float or kind == (float | int):
        return 0.25
    if kind is str:
        return "sample"
    if typing.get_origin(kind) is list:
        (item,) = typing.get_args(kind)
        return [["output"]] if typing.get_origin(item) is list else ["output"]
    raise AssertionError(f"no sample for {dotted}: {annotation!r}")


def _row_value(rule: Rule) -> Any:
    how = rule.how
    if how in ("values", "spelling"):
        return rule.values[0][0]
    if how == "same":
        return rule.values[0] if rule.values else 100  # no value carries: any one is dropped
    if how in ("invert", "converter", "compile", "ignored"):
        return True
    return {
        "folder": "ckpt",
        "warmup_pct": 0.25,
        "dp_type": "fsdp",
        "microbatches": 2,
        "config_folder": "configs",
    }.get(how) or _sample(eras.destination(tuple(_row_key(rule).split("."))))


def _row_key(rule: Rule) -> str:
    """The old key a row is tried with (a key below it, for an old table)."""
    if rule.how != "table":
        return rule.old
    return rule.old + (".filter_fqns" if ".dense." in rule.old else ".fqns")


def _toml(pairs: list[tuple[str, Any]]) -> str:
    return "".join(f"{key} = {eras.toml_value(value)}\n" for key, value in pairs)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.old)
def test_every_row_migrates_to_its_twin(rule: Rule, tmp_path: Path) -> None:
    key = _row_key(rule)
    value = _row_value(rule)
    parts = tuple(key.split("."))
    step = eras.translate(parts, value, {})
    old = write(tmp_path, "old.toml", _toml([(key, value)]))
    new = write(tmp_path, "new.toml", _toml([(".".join(k), v) for k, v in step.writes]))
    plan = build_plan(old)
    outcome = plan.outcomes[key]
    assert outcome.era == step.era
    if step.kind == "unportable":
        assert outcome.status == ("rejected" if step.severity == "error" else "dropped")
    elif step.writes:
        # as the twin's first written key fared: carried means upgraded, inert stays inert
        fared = build_plan(new).outcomes[".".join(step.writes[0][0])].status
        assert outcome.status == ("upgraded" if fared in upgrades.CARRIED else fared)
    else:
        assert outcome.status == "upgraded"
    if step.kind == "unportable":
        return  # nothing written: its twin is an empty file, which its era reads otherwise
    assert plan.outcomes[key].status != "rejected"
    assert instantiate(plan) == instantiate(build_plan(new, era=plan.era["assumed"]))


def test_a_hint_never_offers_a_setting_v022_would_reject(tmp_path: Path) -> None:
    path = write(tmp_path, "job.toml", '[training]\nbatch_size = "4"\n')
    found = validate(path, "--format", "json").json()["diagnostics"]
    (finding,) = [d for d in found if not d["code"].startswith("era-")]
    assert finding["code"] == "moved-key"
    assert "`training.local_batch_size` must be an integer" in finding["hint"]
    assert "--fix` rewrites it" not in finding["hint"]


def test_a_command_line_flag_still_wins_over_an_upgraded_key(tmp_path: Path) -> None:
    path = write(tmp_path, "job.toml", "[training]\nbatch_size = 4\nsteps = 3\n")
    plan = build_plan(path, overrides=["--training.local_batch_size", "6"])
    assert instantiate(plan).training.local_batch_size == 6
    outcome = plan.outcomes["training.batch_size"]
    assert outcome.status == "upgraded"
    assert outcome.note.endswith("then the command line set `--training.local_batch_size`")

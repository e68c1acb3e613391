"""Legacy command-line overrides read as v0.2.2's tyro CLI read them (``titan.migrate.plan.overrides``).

Exact values and types for every rule, every error with its code, message, hint and column, a
tyro 1.0 oracle on a mirrored schema, and a round-trip property over every leaf of the schema.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import io
import subprocess
import sys
import types
import typing
from typing import Any, Literal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from titan.migrate.plan.overrides import (
    COMMAND_LINE,
    Overrides,
    apply_overrides,
    custom_module_flag,
    parse_overrides,
)
from titan.schemas.builtin_extensions import known_extension
from titan.schemas.diagnostics import Severity
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.merged_extensions import merged_schema
from titan.schemas.spec import SectionSpec

EXTENDED = merged_schema([known_extension("ft"), known_extension("flux")])


def parse(line: str | list[str], schema: SectionSpec = LEGACY_SPEC) -> Overrides:
    return parse_overrides(line.split() if isinstance(line, str) else line, schema)


def values(line: str | list[str], schema: SectionSpec = LEGACY_SPEC) -> dict[str, Any]:
    result = parse(line, schema)
    assert result.diagnostics == [], [d.message for d in result.diagnostics]
    return result.values


def same(actual: Any, expected: Any) -> bool:
    """Equal, with the same types all the way down (``1 == 1.0`` is not enough)."""
    if type(actual) is not type(expected):
        return False
    if isinstance(expected, list):
        return len(actual) == len(expected) and all(map(same, actual, expected))
    return actual == expected


# -- values -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "key", "expected"),
    [
        # int: Python's int(), as tyro calls it
        ("--training.steps 5", "training.steps", 5),
        ("--training.steps=5", "training.steps", 5),
        ("--training.steps 1_000", "training.steps", 1000),
        ("--training.steps +7", "training.steps", 7),
        ("--debug.seed -5", "debug.seed", -5),
        ("--debug.seed=-5", "debug.seed", -5),
        # float: an int token gives a float; negative numbers and -inf are values, not flags
        ("--optimizer.lr 1", "optimizer.lr", 1.0),
        ("--optimizer.lr 3e-4", "optimizer.lr", 3e-4),
        ("--optimizer.lr -1e-3", "optimizer.lr", -1e-3),
        ("--optimizer.eps -inf", "optimizer.eps", float("-inf")),
        ("--optimizer.lr .5", "optimizer.lr", 0.5),
        # float | int: tyro tries float first, so an int token becomes a float
        ("--training.max_norm 2", "training.max_norm", 2.0),
        ("--training.max_norm 0.5", "training.max_norm", 0.5),
        # str: kept as written, `None` included (a plain str cannot be None)
        ("--job.dump_folder D", "job.dump_folder", "D"),
        ("--job.description None", "job.description", "None"),
        ("--job.description=-x", "job.description", "-x"),
        ("--job.description=a=b", "job.description", "a=b"),
        ("--job.description=", "job.description", ""),
        ("--job.description -", "job.description", "-"),
        # Literal
        ("--activation_checkpoint.mode full", "activation_checkpoint.mode", "full"),
        ("--training.mixed_precision_param float32", "training.mixed_precision_param", "float32"),
        # X | None: the literal token None
        ("--training.dataset_path None", "training.dataset_path", None),
        ("--training.dataset_path data", "training.dataset_path", "data"),
        ("--debug.seed None", "debug.seed", None),
        ("--lr_scheduler.decay_ratio None", "lr_scheduler.decay_ratio", None),
        ("--lr_scheduler.decay_ratio 1", "lr_scheduler.decay_ratio", 1.0),
        (
            "--quantize.linear.float8.recipe_name rowwise",
            "quantize.linear.float8.recipe_name",
            "rowwise",
        ),
        ("--quantize.linear.float8.recipe_name None", "quantize.linear.float8.recipe_name", None),
        # the TOML path is an ordinary key
        ("--job.config_file x.toml", "job.config_file", "x.toml"),
        ("--job.config-file=x.toml", "job.config_file", "x.toml"),
    ],
)
def test_scalar_values(line: str, key: str, expected: Any) -> None:
    assert same(values(line)[key], expected)


@pytest.mark.parametrize(
    ("argv", "key", "expected"),
    [
        # list[str]: ONE token split on "," without stripping
        (
            ["--model.converters", "quantize.linear.float8,quantize.linear.mx"],
            "model.converters",
            ["quantize.linear.float8", "quantize.linear.mx"],
        ),
        (["--model.converters", "a, b"], "model.converters", ["a", " b"]),
        (["--model.converters", ""], "model.converters", [""]),
        (["--model.converters="], "model.converters", [""]),
        (["--model.converters", "a,,b,"], "model.converters", ["a", "", "b", ""]),
        (["--model.converters", "None"], "model.converters", ["None"]),
        (["--quantize.linear.float8.filter_fqns", "output"], "quantize.linear.float8.filter_fqns", ["output"]),
        (["--quantize.linear.float8.filter-fqns", "output,x"], "quantize.linear.float8.filter_fqns", ["output", "x"]),
        # list[str] | str: the list rule comes first, so a list every time
        (["--quantize.grouped_mm.float8.fqns", "experts,shared"], "quantize.grouped_mm.float8.fqns", ["experts", "shared"]),
        (["--quantize.grouped-mm.mx.fqns", "experts"], "quantize.grouped_mm.mx.fqns", ["experts"]),
        # list[list[str]] | None: every token up to the next flag, each split on ","
        (
            ["--parallelism.module_fqns_per_model_part", "tok_embeddings,layers.0", "layers.1,norm,output"],
            "parallelism.module_fqns_per_model_part",
            [["tok_embeddings", "layers.0"], ["layers.1", "norm", "output"]],
        ),
        (["--parallelism.module_fqns_per_model_part", "None"], "parallelism.module_fqns_per_model_part", None),
        (["--parallelism.module_fqns_per_model_part"], "parallelism.module_fqns_per_model_part", []),
        (["--parallelism.module_fqns_per_model_part", ""], "parallelism.module_fqns_per_model_part", [[""]]),
        (["--parallelism.module_fqns_per_model_part", "None", "a"], "parallelism.module_fqns_per_model_part", [["None"], ["a"]]),
        (["--parallelism.module_fqns_per_model_part=a,b", "c"], "parallelism.module_fqns_per_model_part", [["a", "b"], ["c"]]),
        (["--parallelism.module_fqns_per_model_part", "a", "--"], "parallelism.module_fqns_per_model_part", [["a"]]),
    ],
)  # fmt: skip
def test_list_values(argv: list[str], key: str, expected: Any) -> None:
    assert same(values(argv)[key], expected)


def test_a_variadic_list_stops_at_the_next_flag() -> None:
    got = values("--parallelism.module_fqns_per_model_part a,b c --training.steps 3")
    assert same(got["parallelism.module_fqns_per_model_part"], [["a", "b"], ["c"]])
    assert same(got["training.steps"], 3)


@pytest.mark.parametrize(
    ("line", "key", "expected"),
    [
        ("--checkpoint.enable", "checkpoint.enable", True),
        ("--checkpoint.no-enable", "checkpoint.enable", False),
        ("--checkpoint.no_enable", "checkpoint.enable", False),
        ("--profiling.enable-profiling", "profiling.enable_profiling", True),
        ("--profiling.no-enable-profiling", "profiling.enable_profiling", False),
        ("--profiling.no_enable_profiling", "profiling.enable_profiling", False),
        ("--quantize.linear.float8.no-enable-fsdp-float8-all-gather", "quantize.linear.float8.enable_fsdp_float8_all_gather", False),
        ("--checkpoint.enable --checkpoint.no-enable", "checkpoint.enable", False),
        ("--checkpoint.no-enable --checkpoint.enable", "checkpoint.enable", True),
    ],
)  # fmt: skip
def test_booleans_are_switches(line: str, key: str, expected: bool) -> None:
    assert same(values(line)[key], expected)


@pytest.mark.parametrize(
    "flag",
    [
        "--training.local-batch-size",
        "--training.local_batch_size",
        "--training.local_batch-size",
        "--training.local-batch_size",
    ],
)
def test_hyphens_and_underscores_are_the_same_in_flag_names(flag: str) -> None:
    assert values([flag, "4"]) == {"training.local_batch_size": 4}


def test_section_names_take_hyphens_too() -> None:
    got = values("--activation-checkpoint.mode full --lr-scheduler.warmup-steps 3")
    assert got == {"activation_checkpoint.mode": "full", "lr_scheduler.warmup_steps": 3}


def test_the_last_flag_wins_and_keys_follow_their_last_flag() -> None:
    result = parse("--training.steps 3 --job.dump_folder x --training.steps 5")
    assert list(result.values.items()) == [("job.dump_folder", "x"), ("training.steps", 5)]
    assert result.spans["training.steps"].col == len("--training.steps 3 --job.dump_folder x ") + 1


def test_the_brief_examples() -> None:
    got = values(
        "--training.steps 5 --checkpoint.enable "
        "--model.converters quantize.linear.float8,quantize.linear.mx"
    )
    assert got == {
        "training.steps": 5,
        "checkpoint.enable": True,
        "model.converters": ["quantize.linear.float8", "quantize.linear.mx"],
    }
    assert values("--job.config_file x.toml --training.steps 3 --job.dump_folder D") == {
        "job.config_file": "x.toml",
        "training.steps": 3,
        "job.dump_folder": "D",
    }


def test_spans_point_at_each_flag_and_its_value() -> None:
    result = parse("--training.steps 5 --checkpoint.enable --optimizer.lr=0.1")
    spans = {key: (s.file, s.line, s.col, s.end_col) for key, s in result.spans.items()}
    assert spans == {
        "training.steps": (COMMAND_LINE, 1, 1, 19),
        "checkpoint.enable": (COMMAND_LINE, 1, 20, 39),
        "optimizer.lr": (COMMAND_LINE, 1, 40, 58),
    }
    assert result.source == "--training.steps 5 --checkpoint.enable --optimizer.lr=0.1"


# -- a merged schema ----------------------------------------------------------------------------


def test_extension_keys_with_a_merged_schema() -> None:
    got = values(
        "--fault_tolerance.module_fqns_per_model_fragment tok_embeddings,layers.0 layers.1 "
        "--fault-tolerance.num-fragments 2 --fault_tolerance.enable "
        "--training.img_size 512 --training.classifier_free_guidance_prob 1 "
        "--encoder.t5_encoder google/t5 --validation.no-all-timesteps --training.test-mode",
        EXTENDED,
    )
    expected = {
        "fault_tolerance.module_fqns_per_model_fragment": [["tok_embeddings", "layers.0"], ["layers.1"]],
        "fault_tolerance.num_fragments": 2,
        "fault_tolerance.enable": True,
        "training.img_size": 512,
        "training.classifier_free_guidance_prob": 1.0,
        "encoder.t5_encoder": "google/t5",
        "validation.all_timesteps": False,
        "training.test_mode": True,
    }  # fmt: skip
    assert got.keys() == expected.keys()
    assert all(same(got[key], value) for key, value in expected.items())
    assert same(values("--fault_tolerance.module_fqns_per_model_fragment", EXTENDED)[
        "fault_tolerance.module_fqns_per_model_fragment"], [])  # fmt: skip


def test_an_extension_key_without_its_module_names_the_flag_that_loads_it() -> None:
    (finding,) = parse("--encoder.t5_encoder x").diagnostics
    assert (finding.code, finding.path) == ("unknown-key", "encoder.t5_encoder")
    assert finding.message == "`--encoder.t5_encoder` is an unknown flag"
    assert finding.hint == (
        "`--encoder.t5_encoder` is added by the flux extension: pass "
        "`--job.custom_config_module torchtitan.models.flux.job_config` "
        "or set `[job] custom_config_module`"
    )


def test_an_optional_literal_from_an_extension() -> None:
    schema = merged_schema([known_extension("simple_fsdp")])
    assert values("--compile.graph-passes auto_bucketing", schema) == {
        "compile.graph_passes": "auto_bucketing"
    }
    assert values("--compile.graph_passes None", schema) == {"compile.graph_passes": None}
    (finding,) = parse("--compile.graph_passes auto", schema).diagnostics
    assert finding.code == "invalid-choice"
    assert finding.message == (
        '`--compile.graph_passes` got "auto"; expected one of '
        '"auto_bucketing", "transformer_block_bucketing", "None"'
    )


# -- errors -------------------------------------------------------------------------------------


def only(line: str | list[str], schema: SectionSpec = LEGACY_SPEC):
    """The one finding of a command line, as (code, path, message, hint, col, end_col)."""
    result = parse(line, schema)
    assert len(result.diagnostics) == 1, [d.message for d in result.diagnostics]
    (d,) = result.diagnostics
    assert d.severity is Severity.ERROR
    assert (d.span.file, d.span.line) == (COMMAND_LINE, 1)
    return d.code, d.path, d.message, d.hint, d.span.col, d.span.end_col


def test_unknown_flag_with_did_you_mean_and_its_value_is_not_reported_again() -> None:
    assert only("--training.stpes 5") == (
        "unknown-key",
        "training.stpes",
        "`--training.stpes` is an unknown flag",
        "did you mean `--training.steps`?",
        1,
        17,
    )


def test_unknown_flag_in_the_wrong_section_and_with_hyphens() -> None:
    code, path, _, hint, *_ = only("--training.local-batch-stize 4")
    assert (code, path, hint) == (
        "unknown-key",
        "training.local_batch_stize",
        "did you mean `--training.local_batch_size`?",
    )
    assert only("--steps 4")[3] == "`steps` does not belong in the top level; did you mean `--training.steps` or `--validation.steps`?"  # fmt: skip


def test_a_moved_key_says_where_it_went() -> None:
    code, path, message, hint, *_ = only("--training.tensor_parallel_degree 2")
    assert (code, path) == ("moved-key", "training.tensor_parallel_degree")
    assert message == "`--training.tensor_parallel_degree` is not a v0.2.2 flag"
    assert hint.startswith("now `--parallelism.tensor_parallel_degree`;")


def test_a_section_is_not_a_flag() -> None:
    assert only("--job.dump_folder x --checkpoint 5") == (
        "unknown-key",
        "checkpoint",
        "`--checkpoint` is a section, not a flag",
        "set one key at a time: `--checkpoint.enable`, "
        "`--checkpoint.enable_ft_dataloader_checkpoints`, `--checkpoint.folder`, ...",
        21,
        33,
    )
    assert only("--quantize.linear")[3].startswith(
        "set one key at a time: `--quantize.linear.float8.enable_fsdp_float8_all_gather`"
    )


def test_wrong_number_of_dashes() -> None:
    assert only("-training.steps 3") == (
        "unknown-key",
        "training.steps",
        "`-training.steps` is not a flag",
        "did you mean `--training.steps`?",
        1,
        16,
    )
    assert only("---checkpoint.no-enable")[3] == "did you mean `--checkpoint.no-enable`?"


@pytest.mark.parametrize(
    ("line", "message", "hint", "cols"),
    [
        (
            "--training.steps",
            "`--training.steps` needs a value (an integer)",
            "write `--training.steps VALUE` or `--training.steps=VALUE`",
            (1, 17),
        ),
        (
            "--training.steps --optimizer.lr 2",
            "`--training.steps` needs a value (an integer)",
            "write `--training.steps VALUE` or `--training.steps=VALUE`",
            (1, 17),
        ),
        (
            "--job.description -x",
            "`--job.description` needs a value (a string)",
            "a value that starts with `-` must be attached with `=`: `--job.description=-x`",
            (1, 21),
        ),
        (
            "--model.converters",
            "`--model.converters` needs a value (a comma-separated list of strings)",
            "write `--model.converters VALUE` or `--model.converters=VALUE`",
            (1, 19),
        ),
        (
            "--debug.seed",
            "`--debug.seed` needs a value (an integer or None)",
            "write `--debug.seed VALUE` or `--debug.seed=VALUE`",
            (1, 13),
        ),
    ],
)
def test_missing_value(line: str, message: str, hint: str, cols: tuple[int, int]) -> None:
    path = line.split()[0][2:]
    assert only(line) == ("cli-syntax", path, message, hint, *cols)


@pytest.mark.parametrize(
    ("line", "message", "hint"),
    [
        ("--training.steps ten", '`--training.steps` must be an integer, got "ten"', "write an integer: `--training.steps VALUE`"),
        (
            "--training.steps 5.0",
            '`--training.steps` must be an integer, got "5.0"',
            "an integer takes no decimal point or exponent",
        ),
        (
            "--training.steps None",
            '`--training.steps` must be an integer, got "None"',
            "this key cannot be None; leave the flag out to keep the TOML's value",
        ),
        (
            "--debug.seed none",
            '`--debug.seed` must be an integer or None, got "none"',
            "write `None` with a capital N",
        ),
        ("--optimizer.lr fast", '`--optimizer.lr` must be a number, got "fast"', "write a number: `--optimizer.lr VALUE`"),
        ("--training.max_norm x", '`--training.max_norm` must be a number or an integer, got "x"', "write a number or an integer: `--training.max_norm VALUE`"),
    ],
)  # fmt: skip
def test_wrong_type(line: str, message: str, hint: str | None) -> None:
    flag, value = line.split()
    assert only(line) == ("wrong-type", flag[2:], message, hint, 1, len(line) + 1)


def test_invalid_choice_lists_the_choices_with_did_you_mean() -> None:
    assert only("--job.dump_folder x --activation_checkpoint.mode ful") == (
        "invalid-choice",
        "activation_checkpoint.mode",
        '`--activation_checkpoint.mode` got "ful"; expected one of '
        '"selective", "full", "memory_budget", "none"',
        'did you mean "full"?',
        21,
        53,
    )
    code, _, message, hint, *_ = only("--quantize.linear.float8.recipe_name row")
    assert code == "invalid-choice"
    assert message.endswith('expected one of "tensorwise", "rowwise", "rowwise_with_gw_hp", "None"')
    assert hint == 'did you mean "rowwise"?'
    assert only("--training.mixed_precision_param FLOAT64")[3] == (
        "write one of the choices, e.g. `--training.mixed_precision_param bfloat16`"
    )


@pytest.mark.parametrize(
    ("line", "hint"),
    [
        ("--checkpoint.enable True", "to turn it on write `--checkpoint.enable` alone"),
        ("--checkpoint.enable=true", "to turn it on write `--checkpoint.enable` alone"),
        ("--checkpoint.enable False", "to turn it off write `--checkpoint.no_enable`"),
        ("--checkpoint.no-enable=0", "to turn it off write `--checkpoint.no_enable`"),
        (
            "--checkpoint.enable maybe",
            "write `--checkpoint.enable` to turn it on or `--checkpoint.no_enable` to turn it off",
        ),
    ],
)
def test_a_switch_takes_no_value(line: str, hint: str) -> None:
    value = line.replace("=", " ").split()[1]
    assert only(line) == (
        "cli-syntax",
        "checkpoint.enable",
        f'`{line.replace("=", " ").split()[0]}` is a switch and takes no value, got "{value}"',
        hint,
        1,
        len(line) + 1,
    )
    assert parse(line).values == {}


def test_tokens_no_flag_takes() -> None:
    assert only("5 --training.steps 3") == (
        "cli-syntax",
        "",
        "`5` is not a flag",
        "write each override as `--section.key VALUE`",
        1,
        2,
    )
    assert only("--model.converters a b c") == (
        "cli-syntax",
        "model.converters",
        "unexpected `b c` after the value of `--model.converters`",
        "`--model.converters` takes one comma-separated value: `--model.converters a,b,c`",
        22,
        25,
    )
    assert only("--model.converters=a b")[3] == (
        "`--model.converters` takes one comma-separated value: `--model.converters a,b`"
    )
    assert only("--training.steps 5 6")[2:4] == (
        "unexpected `6` after the value of `--training.steps`",
        "`--training.steps` takes one value",
    )
    assert only("--training.steps 3 -- --training.steps 4") == (
        "cli-syntax",
        "",
        "`--` ends the flags, so `--training.steps 4` after it is not read",
        "remove the `--`",
        20,
        41,
    )


def test_every_problem_in_one_pass() -> None:
    line = (
        "stray --training.stpes 5 --training.steps ten --checkpoint.enable True "
        "--activation_checkpoint.mode ful --model.converters a b --optimizer.lr 0.1 --debug.seed"
    )
    result = parse(line)
    found = [(d.code, d.path, d.span.col) for d in result.diagnostics]
    assert found == [
        ("cli-syntax", "", 1),
        ("unknown-key", "training.stpes", line.index("--training.stpes") + 1),
        ("wrong-type", "training.steps", line.index("--training.steps ten") + 1),
        ("cli-syntax", "checkpoint.enable", line.index("--checkpoint.enable") + 1),
        ("invalid-choice", "activation_checkpoint.mode", line.index("--activation") + 1),
        ("cli-syntax", "model.converters", line.index(" b ") + 2),
        ("cli-syntax", "debug.seed", line.index("--debug.seed") + 1),
    ]
    # What could be read is still read.
    assert result.values == {"model.converters": ["a"], "optimizer.lr": 0.1}


TOKENS = st.one_of(
    st.sampled_from(
        [
            "--training.steps",
            "--training.steps=",
            "--checkpoint.enable",
            "--checkpoint.no-enable=1",
            "--model.converters",
            "--parallelism.module_fqns_per_model_part",
            "--fault-tolerance.module-fqns-per-model-fragment",
            "--training",
            "--training.stpes",
            "--activation_checkpoint.mode",
            "-x",
            "--",
            "-5",
            "None",
            "full",
            "a,b",
        ]
    ),
    st.text(max_size=8),
)


@given(st.lists(TOKENS, max_size=10))
@settings(max_examples=100, deadline=None, derandomize=True)
def test_any_command_line_gives_findings_never_an_exception(argv: list[str]) -> None:
    result = parse_overrides(argv, EXTENDED)
    for d in result.diagnostics:
        assert d.span.file == COMMAND_LINE
        assert 1 <= d.span.col <= len(result.source) + 1
        assert d.span.col <= d.span.end_col <= len(result.source) + 1


# -- the tyro oracle ----------------------------------------------------------------------------

MIRRORED = SectionSpec(
    name="JobConfig",
    fields=tuple(
        f
        for f in merged_schema([known_extension("ft")]).fields
        if f.name in {"training", "checkpoint", "model", "parallelism", "fault_tolerance"}
    ),
)


def _dataclass(spec: SectionSpec) -> type:
    """The dataclass a legacy ``JobConfig`` would be for ``spec``."""
    fields = []
    for field in spec.fields:
        if isinstance(field.annotation, SectionSpec):
            cls = _dataclass(field.annotation)
            fields.append((field.name, cls, dataclasses.field(default_factory=cls)))
        elif isinstance(field.default, list):
            factory = lambda d=field.default: copy.deepcopy(d)  # noqa: E731
            fields.append(
                (field.name, field.annotation, dataclasses.field(default_factory=factory))
            )
        else:
            fields.append((field.name, field.annotation, field.default))
    return dataclasses.make_dataclass(spec.name, fields)


@functools.cache
def _legacy_cli() -> tuple[type, Any]:
    """The mirrored ``JobConfig`` and a registry with v0.2.2's ``register_tyro_rules``."""
    import tyro  # pinned in requirements.txt: the oracle is always there

    registry = tyro.constructors.ConstructorRegistry()

    @registry.primitive_rule
    def list_str_rule(type_info):  # copied in spirit from torchtitan/config/manager.py
        if type_info.type != list[str]:
            return None
        return tyro.constructors.PrimitiveConstructorSpec(
            nargs=1,
            metavar="A,B,C,...",
            instance_from_str=lambda args: args[0].split(","),
            is_instance=lambda instance: all(isinstance(i, str) for i in instance),
            str_from_instance=lambda instance: [",".join(instance)],
        )

    return _dataclass(MIRRORED), registry


def _tyro(argv: list[str]) -> Any:
    """v0.2.2's parse of ``argv`` (None when tyro refuses it)."""
    import tyro

    config_class, registry = _legacy_cli()
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return tyro.cli(config_class, args=argv, registry=registry, console_outputs=False)
    except SystemExit:
        return None


# tyro's "Unrecognized options" path costs 0.3 s a call (it ranks every flag for "Perhaps you
# meant"), so unknown flags, stray tokens and switch values are left to the explicit tests above.
ORACLE_CASES = [
    "--training.steps 5 --training.local-batch-size 4 --training.max_norm 2",
    "--training.steps=-3 --training.dataset_path None --parallelism.module_fqns_per_model_part None",
    "--training.mixed_precision_param float32 --training.enable_cpu_offload",
    "--checkpoint.enable --checkpoint.no-enable --checkpoint.interval 10",
    "--model.converters a,b --model.name x --parallelism.module_fqns_per_model_part a,b c",
    "--parallelism.module_fqns_per_model_part --training.steps 1",
    "--fault_tolerance.module_fqns_per_model_fragment=a,b c --fault-tolerance.num_fragments 2",
    "--training.steps ten",
    "--training.mixed_precision_param float",
    "--training.steps",
]


@pytest.mark.parametrize("line", ORACLE_CASES)
def test_tyro_agrees(line: str) -> None:
    argv = line.split()
    expected = _tyro(argv)
    result = parse_overrides(argv, MIRRORED)
    if expected is None:
        assert result.diagnostics, "tyro refused this command line"
        return
    assert result.diagnostics == []
    for dotted, value in result.values.items():
        node = expected
        for part in dotted.split("."):
            node = getattr(node, part)
        assert same(value, node), dotted


# -- the round trip -----------------------------------------------------------------------------

SAFE = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._", max_size=6)
EDGY = st.one_of(
    st.sampled_from(["", " ", " a ", "-x", "--", "-", "a=b", "None", "-1", "--a.b"]),
    st.text(max_size=8),
)
"""Strings with the spellings a command line treats specially, and anything else."""


def _leaves(spec: SectionSpec, prefix: str = "") -> list[tuple[str, Any]]:
    out = []
    for field in spec.fields:
        if isinstance(field.annotation, SectionSpec):
            out += _leaves(field.annotation, prefix + field.name + ".")
        else:
            out.append((prefix + field.name, field.annotation))
    return out


def _strategy(annotation: Any) -> st.SearchStrategy:
    """Values of ``annotation`` that a command line can express (see the module docstring)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(-(2**70), 2**70)
    if annotation is float:
        return st.floats(allow_nan=False)
    if annotation is str:
        return EDGY
    if origin is Literal:
        return st.sampled_from(args)
    if origin is list and args == (str,):
        return st.lists(EDGY.filter(lambda s: "," not in s), min_size=1, max_size=4)
    if origin is list:
        return st.lists(st.lists(SAFE, min_size=1), max_size=3).filter(lambda v: v != [["None"]])
    if origin in (typing.Union, types.UnionType):
        members = [m for m in args if m is not type(None)]
        # float reads every int token, list[str] every str token, None the token "None".
        shadowed = {int} if float in members else set()
        shadowed |= {str} if list[str] in members else set()
        choices = [_strategy(m) for m in members if m not in shadowed]
        if type(None) in args:
            choices = [c.filter(lambda v: v != "None") for c in choices] + [st.none()]
        return st.one_of(choices)
    raise AssertionError(f"no strategy for {annotation}")


def _render(path: str, value: Any, annotation: Any, *, hyphens: bool, equals: bool) -> list[str]:
    """The flag (and value tokens) that set ``path`` to ``value``."""
    flag = "--" + (path.replace("_", "-") if hyphens else path)
    if annotation is bool:
        section, _, name = flag.rpartition(".")
        return [flag] if value else [f"{section}.no{'-' if hyphens else '_'}{name}"]
    if value is not None and "list[list[str]]" in str(annotation):  # a token per inner list
        return [flag, *(",".join(item) for item in value)]
    if isinstance(value, list):
        token = ",".join(value)
    elif value is None:
        token = "None"
    elif isinstance(value, float):
        token = repr(value)
    else:
        token = str(value)
    if equals or (token.startswith("-") and not isinstance(value, int | float)) or token == "--":
        return [f"{flag}={token}"]
    return [flag, token]


LEAVES = _leaves(LEGACY_SPEC)
CHUNKS = [LEAVES[start : start + 6] for start in range(0, len(LEAVES), 6)]  # 25 of them


@st.composite
def command_lines(
    draw: st.DrawFn, leaves: list[tuple[str, Any]]
) -> tuple[list[str], dict[str, Any]]:
    """Every leaf of ``leaves`` in a random order, then some again (the last flag wins)."""
    argv: list[str] = []
    expected: dict[str, Any] = {}
    order = draw(st.permutations(leaves))
    for path, annotation in order + order[: draw(st.integers(0, 2))]:
        value = draw(_strategy(annotation))
        argv += _render(
            path, value, annotation, hyphens=draw(st.booleans()), equals=draw(st.booleans())
        )
        expected.pop(path, None)
        expected[path] = value
    return argv, expected


# One test per chunk of neighbouring leaves, 8 examples each (200 in all): with ``sampled_from``
# over all leaves, hypothesis's bias leaves a tenth to a third of them untried.
@pytest.mark.parametrize("chunk", range(len(CHUNKS)))
@given(data=st.data())
@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
def test_rendering_a_value_and_reading_it_back_gives_the_same_value(chunk: int, data) -> None:
    argv, expected = data.draw(command_lines(CHUNKS[chunk]))
    result = parse_overrides(argv, LEGACY_SPEC)
    assert result.diagnostics == [], [d.message for d in result.diagnostics]
    assert list(result.values) == list(expected)
    for path, value in expected.items():
        assert same(result.values[path], value), (path, result.values[path], value)


# -- custom_module_flag -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--job.custom_config_module", "a.b"], "a.b"),
        (["--job.custom-config-module", "a.b"], "a.b"),
        (["--job.custom_config_module=a.b"], "a.b"),
        (["--training.steps", "3", "--job.custom-config-module=a.b"], "a.b"),
        (["--job.custom_config_module=first", "--job.custom_config_module", "second"], "first"),
        (["--job.custom_config_module="], None),
        (["--job.custom_config_module"], None),
        (["--job.custom-config_module", "a.b"], None),  # the old loader knew two spellings only
        (["--training.steps", "3"], None),
        ([], None),
    ],
)
def test_custom_module_flag(argv: list[str], expected: str | None) -> None:
    assert custom_module_flag(argv) == expected


# -- apply_overrides ----------------------------------------------------------------------------


def test_apply_overrides_creates_tables_and_never_mutates() -> None:
    document = {"training": {"steps": 7, "seq_len": 100}, "model": {"converters": ["x"]}}
    before = copy.deepcopy(document)
    overrides = {
        "training.steps": 9,
        "model.converters": ["a", "b"],
        "quantize.linear.float8.filter_fqns": ["output"],
        "checkpoint.enable": True,
    }
    overrides_before = copy.deepcopy(overrides)
    result = apply_overrides(document, overrides)
    assert result == {
        "training": {"steps": 9, "seq_len": 100},
        "model": {"converters": ["a", "b"]},
        "quantize": {"linear": {"float8": {"filter_fqns": ["output"]}}},
        "checkpoint": {"enable": True},
    }
    assert document == before and overrides == overrides_before
    result["training"]["seq_len"] = 1
    result["model"]["converters"].append("c")
    assert document == before and overrides == overrides_before


def test_apply_overrides_replaces_a_scalar_where_a_table_is_needed() -> None:
    document = {"training": 5}
    assert apply_overrides(document, {"training.steps": 3}) == {"training": {"steps": 3}}
    assert document == {"training": 5}


def test_apply_overrides_of_parsed_flags() -> None:
    document = {"training": {"steps": 7}}
    result = parse("--training.steps 9 --training.seq_len 100")
    assert apply_overrides(document, result.values) == {"training": {"steps": 9, "seq_len": 100}}


# -- import cost --------------------------------------------------------------------------------


def test_import_is_cheap() -> None:
    code = (
        "import sys, titan.migrate.plan.overrides; "
        "print(sorted(m for m in ('torch', 'tyro', 'titan.cli', 'titan.config', 'difflib', 'json', 'pydantic') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"

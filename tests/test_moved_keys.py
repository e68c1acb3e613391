"""Tests for ``titan.schemas.moved_keys`` (the era table): every row agrees with the v0.2.2 schema,
every key torchtitan's history declared has a row, and lookups behave."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re

import pytest
from titan.schemas import eras, moved_keys
from titan.schemas.builtin_extensions_spec import BUILT_IN
from titan.schemas.eras import destination, rule_for
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.moved_keys import HOWS, RULES, Rule
from titan.schemas.spec import SectionSpec

from tests.reference import extension_keys, reference_keys


@dataclasses.dataclass(frozen=True)
class Schema:
    keys: frozenset[str]  # leaf keys of the base JobConfig at v0.2.2
    sections: frozenset[str]  # every table path above a base leaf ("quantize.linear", ...)
    custom_keys: frozenset[str]  # keys only legal when a shipped custom_config_module is merged

    def is_path(self, path: str) -> bool:
        return path in self.keys or path in self.sections


def leaf_keys(section: SectionSpec, prefix: str = "") -> set[str]:
    """Every dotted leaf key under ``section``."""
    keys = set()
    for field in section.fields:
        if isinstance(field.annotation, SectionSpec):
            keys |= leaf_keys(field.annotation, f"{prefix}{field.name}.")
        else:
            keys.add(prefix + field.name)
    return keys


@pytest.fixture(scope="module")
def schema() -> Schema:
    """The v0.2.2 keys as titan's schema holds them (checked against the reference elsewhere)."""
    keys = frozenset(leaf_keys(LEGACY_SPEC))
    sections = frozenset(
        ".".join(k.split(".")[:i]) for k in keys for i in range(1, k.count(".") + 1)
    )
    custom = set().union(*(leaf_keys(spec.root) for spec in BUILT_IN.values()))
    return Schema(keys, sections, frozenset(custom) - keys)


def test_the_schema_keys_are_the_reference_keys(schema: Schema) -> None:
    assert schema.keys == set(reference_keys())
    # titan also ships the upstream example module, which the reference table leaves out
    assert set(extension_keys()) - schema.keys <= schema.custom_keys


def test_schema_parse_matches_the_documented_totals(schema: Schema) -> None:
    assert len(schema.keys) == 149  # "18 top-level sections, 149 leaf keys"
    assert len({k.split(".")[0] for k in schema.keys}) == 18
    assert {
        "quantize.linear.float8",
        "quantize.grouped_mm.mx",
        "debug",
        "parallelism",
    } <= schema.sections
    assert "fault_tolerance.sync_steps" in schema.custom_keys


# Every key that pytorch/torchtitan main declared in torchtrain/config_manager.py,
# torchtitan/config_manager.py or torchtitan/config/job_config.py from 2024-02 to v0.2.2 and
# that v0.2.2 does not have (argparse `--section.key` flags, then dataclass fields), read from
# `git log -- <those files>` with `git show COMMIT:PATH` at every commit.
HISTORY_KEYS = [
    "checkpoint.enable_checkpoint",
    "checkpoint.initial_load_model_weights_only",
    "checkpoint.interval_type",
    "checkpoint.last_save_in_safetensors_format",
    "checkpoint.last_save_model_weights_only",
    "checkpoint.model_weights_only",
    "comm.timeout_seconds",
    "estimate.memory",
    "estimate.mode",
    "experimental.context_parallel_degree",
    "experimental.context_parallel_rotate_method",
    "experimental.custom_model_path",
    "experimental.enable_async_tensor_parallel",
    "experimental.enable_compiled_autograd",
    "experimental.pipeline_parallel_degree",
    "experimental.pipeline_parallel_microbatches",
    "experimental.pipeline_parallel_schedule",
    "experimental.pipeline_parallel_schedule_csv",
    "experimental.pipeline_parallel_split_mode",
    "experimental.pipeline_parallel_split_points",
    "experimental.torch_spmd",
    "fault_tolerance.fragment_sync_delay",
    "fault_tolerance.fragment_update_alpha",
    "fault_tolerance.module_fqns_per_model_fragment",
    "fault_tolerance.num_fragments",
    "fault_tolerance.should_quantize",
    "fault_tolerance.sync_steps",
    "float8.emulate",
    "float8.enable_float8_linear",
    "float8.enable_fsdp_float8_all_gather",
    "float8.filter_fqns",
    "float8.force_recompute_fp8_weight_in_bwd",
    "float8.moe_fqns_prototype",
    "float8.precompute_float8_dynamic_scale_for_fsdp",
    "float8.recipe_name",
    "float8.scaling_type_grad_output",
    "float8.scaling_type_input",
    "float8.scaling_type_weight",
    "job.print_args",
    "job.save_config_folder",
    "job.use_for_integration_test",
    "lr_scheduler.lr_min",
    "memory_estimation.enabled",
    "metrics.disable_logging_from_checkpoint",
    "metrics.enable_color_printing",
    "metrics.rank_0_only",
    "model.attn_mask_type",
    "model.norm_type",
    "model.use_flex_attn",
    "mx.filter_fqns",
    "mx.moe_fqns_prototype",
    "mx.mxfp8_dim1_cast_kernel_choice",
    "mx.recipe_name",
    "mx.use_fp8_dim1_cast_triton_kernel",
    "optimizer.fused",
    "parallelism.enable_compiled_autograd",
    "parallelism.pipeline_parallel_microbatches",
    "parallelism.pipeline_parallel_split_points",
    "profiling.profile_every_x_iter",
    "profiling.run_profiler",
    "quantize.dense.float8.emulate",
    "quantize.dense.float8.enable_fsdp_float8_all_gather",
    "quantize.dense.float8.filter_fqns",
    "quantize.dense.float8.precompute_float8_dynamic_scale_for_fsdp",
    "quantize.dense.float8.recipe_name",
    "quantize.dense.mx.filter_fqns",
    "quantize.dense.mx.mxfp8_dim1_cast_kernel_choice",
    "quantize.dense.mx.recipe_name",
    "quantize.moe.float8.fqns",
    "quantize.moe.mx.fqns",
    "training.batch_size",
    "training.checkpoint_folder",
    "training.checkpoint_interval",
    "training.checkpoint_interval_type",
    "training.compile",
    "training.data_parallel_degree",
    "training.data_parallel_replicate_degree",
    "training.data_parallel_shard_degree",
    "training.data_parallel_type",
    "training.debug_moe_force_load_balance",
    "training.deterministic",
    "training.disable_loss_parallel",
    "training.enable_float8_linear",
    "training.enable_fp8_linear",
    "training.enable_fsdp_float8_all_gather",
    "training.enable_fsdp_fp8_all_gather",
    "training.enable_loss_parallel",
    "training.enable_selective_ac",
    "training.float8_scaling_type_grad_output",
    "training.float8_scaling_type_input",
    "training.float8_scaling_type_weight",
    "training.fp8_linear",
    "training.fsdp_reshard_after_forward",
    "training.pipeline_parallel_degree",
    "training.precompute_float8_dynamic_scale_for_fsdp",
    "training.seed",
    "training.sequence_parallel_degree",
    "training.tensor_parallel_degree",
    "training.warmup_pct",
    "training.warmup_steps",
    "validation.enabled",
]


def test_every_historical_key_has_a_row() -> None:
    assert len(HISTORY_KEYS) == 101
    assert [key for key in HISTORY_KEYS if rule_for(key) is None] == []


def test_rows_are_unique_and_well_formed() -> None:
    olds = [row.old for row in RULES]
    assert len(olds) == len(set(olds)), "duplicate legacy paths"
    for row in RULES:
        assert isinstance(row, Rule)
        assert row.how in HOWS
        assert row.old and row.old == row.old.strip() and " " not in row.old
        assert row.why, row.old
        if row.how != "never":
            # an era names its months and the PR or commit that ended it
            assert re.search(r"torchtitan \d{4}-\d{2} to \d{4}-\d{2} ", row.era), row.old
            assert re.search(r"#\d+|[0-9a-f]{8}", row.era), row.old
        if row.how == "invert":
            assert "flipped" in row.why, row.old


def _destinations(row: Rule) -> list[str]:
    """Every v0.2.2 key a row can write."""
    found = [row.to] if row.to else []
    if row.how == "move":
        found += list(row.values)
    if row.how == "values" and row.to is None:
        found += [key for _, writes in row.values for key, _ in writes]
    if row.how in ("converter", "moe"):
        found = [k for k in found if not k.startswith("quantize.")] + ["model.converters"]
        if row.how == "moe":
            found.append(row.to)
    if row.how == "compile":
        found.append("compile.components")
    if row.how == "folder":
        found.append("checkpoint.enable")
    if row.how == "extension":
        found.append("job.custom_config_module")
    if row.how == "dp_degree":
        found.append("parallelism.data_parallel_replicate_degree")
    return found


@pytest.mark.parametrize("row", RULES, ids=lambda r: r.old)
def test_every_destination_exists_at_v022(row: Rule, schema: Schema) -> None:
    for new in _destinations(row):
        if row.how == "table":
            assert new in schema.sections, f"{row.old} -> {new} is not a v0.2.2 table"
        elif row.how == "extension":
            assert new in schema.keys or new in schema.custom_keys, new
        else:
            assert new in schema.keys, f"{row.old} -> {new} is not a v0.2.2 key"


@pytest.mark.parametrize("row", RULES, ids=lambda r: r.old)
def test_every_old_path_is_invalid_at_v022(row: Rule, schema: Schema) -> None:
    assert not schema.is_path(row.old), f"{row.old} is still a valid v0.2.2 path"


def test_deprecated_keys_are_not_rows() -> None:
    # still accepted at v0.2.2 (with a warning): the validator's deprecation, not the chain's
    for old in ("model.tokenizer_path", "experimental.custom_args_module"):
        assert rule_for(old) is None


# Keys that really lived under the legacy tables (v0.1.0 wheel, job_config.py@000204a4, #1701).
LEGACY_TABLE_KEYS = [
    "float8.enable_fsdp_float8_all_gather",
    "float8.precompute_float8_dynamic_scale_for_fsdp",
    "float8.recipe_name",
    "float8.filter_fqns",
    "float8.emulate",
    "mx.recipe_name",
    "mx.filter_fqns",
    "mx.mxfp8_dim1_cast_kernel_choice",
    "quantize.dense.float8.filter_fqns",
    "quantize.moe.float8.fqns",
    "quantize.dense.mx.recipe_name",
    "quantize.moe.mx.fqns",
]


@pytest.mark.parametrize("path", LEGACY_TABLE_KEYS)
def test_keys_under_moved_tables_land_on_real_keys(path: str, schema: Schema) -> None:
    assert not schema.is_path(path)
    assert destination(tuple(path.split("."))) in schema.keys


def test_lookup_exact_row() -> None:
    assert rule_for("training.compile").old == "training.compile"
    assert destination(("training", "compile")) == "compile.enable"
    assert destination(("training", "batch_size")) == "training.local_batch_size"
    assert (
        destination(("experimental", "pipeline_parallel_degree"))
        == "parallelism.pipeline_parallel_degree"
    )


def test_table_rows_take_the_keys_below_them() -> None:
    assert rule_for("quantize.moe.float8.fqns").old == "quantize.moe.float8"
    assert destination(("quantize", "moe", "float8", "fqns")) == "quantize.grouped_mm.float8.fqns"
    assert destination(("quantize", "dense", "mx", "whatever")) == "quantize.linear.mx.whatever"
    # [float8] is not a table row: each of its keys has its own row, a stray one has none
    assert rule_for("float8.emulate").old == "float8.emulate"
    assert rule_for("float8.no_such_key") is None
    assert eras.is_old_table(("float8",)) and eras.is_old_table(("quantize", "dense"))
    assert not eras.is_old_table(("quantize",)) and not eras.is_old_table(("training",))


def test_unknown_and_current_paths() -> None:
    for path in (
        "training.stpes",
        "bogus",
        "bogus.key",
        "compile.enable",
        "quantize.linear.float8.emulate",
    ):
        assert rule_for(path) is None, path
    # a leaf row does not swallow invented children
    assert rule_for("training.compile.enable") is None
    assert rule_for("float8x.emulate") is None


def test_inverted_rows() -> None:
    flipped = {r.old: r.to for r in RULES if r.how == "invert"}
    assert flipped == {
        "training.enable_loss_parallel": "parallelism.disable_loss_parallel",
        "metrics.rank_0_only": "metrics.save_for_all_ranks",
        "metrics.enable_color_printing": "metrics.disable_color_printing",
    }


def _imports(module) -> set[str]:
    tree = ast.parse(pathlib.Path(module.__file__).read_text(encoding="utf-8"))
    return {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }


def test_modules_are_pure_data_and_functions() -> None:
    assert _imports(moved_keys) == {"__future__", "titan.schemas._frozen"}
    assert _imports(eras) <= {
        "__future__",
        "functools",  # a key's row is looked up once
        "re",
        "typing",
        "titan.schemas._frozen",
        "titan.schemas.legacy_spec",  # the v0.2.2 sections, to tell the tables only old eras had
        "titan.schemas.moved_keys",
    }
    row = RULES[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.to = "x"  # type: ignore[misc]
    assert not hasattr(row, "__dict__")  # slotted

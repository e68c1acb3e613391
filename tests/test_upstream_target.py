"""``titan-migrate --target torchtitan==0.3.0`` on small inputs, in titan's own environment.

Each case is a TOML of a few lines (``CASES``), migrated in-process with ``--format json``; the
test reads the generated code with ``ast`` (the keyword of ``Trainer.Config(...)``, the
``model_spec = model_registry(...)`` local, the imports, the TODO comments) and the JSON report
(one outcome per key of the file, every finding with its code, severity and key), and checks the
exit code. torchtitan is never installed here, so nothing is imported: the same cases are built
in a real torchtitan 0.3.0 by ``tests/upstream/test_upstream_cases.py``, which reuses ``CASES``
and :func:`migrate_case`.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
from functools import cached_property
from pathlib import Path
from typing import Any

import pytest

from titan.cli import migrate as cli

REPO = Path(__file__).resolve().parents[1]
RUFF = Path(sys.executable).with_name("ruff")
TARGET = "torchtitan==0.3.0"
DEBUG_TOML = REPO / "legacy_configs" / "llama3" / "debug_model.toml"


def toml(
    extra: str = "",
    *,
    name: str = "llama3",
    flavor: str = "debugmodel_flex_attn",
    ac: str = 'mode = "full"',
) -> str:
    """A legacy TOML: the model, an AC table (full AC and FlexAttention by default, so a case
    reports only what its ``extra`` lines cause) and ``extra``."""
    return (
        f'[model]\nname = "{name}"\nflavor = "{flavor}"\n\n[activation_checkpoint]\n{ac}\n\n'
        + extra
    )


_FLOAT8 = '[model]\nconverters = ["quantize.linear.float8"]\n'

CASES: dict[str, str | Path] = {
    "debug": DEBUG_TOML,
    # activation checkpointing
    "ac_full": toml(),
    "ac_none": toml(ac='mode = "none"'),
    "ac_selective_op": toml(
        ac='mode = "selective"\nselective_ac_option = "op"\n'
        'per_op_sac_force_recompute_mm_shapes_by_fqns = ["output", "moe.router.gate"]'
    ),
    "ac_selective_2": toml(ac='mode = "selective"\nselective_ac_option = "2"'),
    "ac_memory_budget": toml(
        '[compile]\nenable = true\ncomponents = ["model"]\n',
        ac='mode = "memory_budget"\nmemory_budget = 0.3',
    ),
    # the optimizer
    "opt_adamw": toml('[optimizer]\nname = "AdamW"\nlr = 3e-4\nweight_decay = 0.05\n'),
    "opt_adam": toml('[optimizer]\nname = "Adam"\nlr = 3e-4\nbeta1 = 0.8\n'),
    "opt_foreach": toml('[optimizer]\nimplementation = "foreach"\n'),
    "opt_early_step": toml("[optimizer]\nearly_step_in_backward = true\n"),
    # converters
    "float8_tensorwise": toml().replace("[model]\n", _FLOAT8, 1),
    "float8_rowwise": toml('[quantize.linear.float8]\nrecipe_name = "rowwise"\n').replace(
        "[model]\n", _FLOAT8, 1
    ),
    "float8_filter": toml(
        '[quantize.linear.float8]\nrecipe_name = "rowwise"\nfilter_fqns = ["output"]\n'
    ).replace("[model]\n", _FLOAT8, 1),
    "float8_compiled": toml(
        '[quantize.linear.float8]\nrecipe_name = "rowwise"\n\n'
        '[compile]\nenable = true\ncomponents = ["model"]\n'
    ).replace("[model]\n", _FLOAT8, 1),
    "mx_default": toml().replace("[model]\n", '[model]\nconverters = ["quantize.linear.mx"]\n', 1),
    "mx_wq": toml('[quantize.linear.mx]\nfilter_fqns = ["wq"]\n').replace(
        "[model]\n", '[model]\nconverters = ["quantize.linear.mx"]\n', 1
    ),
    # flavors and attention
    "flex": toml(flavor="debugmodel_flex_attn"),
    "varlen": toml(flavor="debugmodel_varlen_attn"),
    "sdpa": toml(flavor="debugmodel"),
    "qwen3_deepep": toml(
        '[parallelism]\nexpert_parallel_degree = 2\nexpert_parallel_comm_backend = "deepep"\n',
        name="qwen3",
        flavor="debugmodel_moe",
    ),
    "llama4": toml(name="llama4", flavor="debugmodel"),
    # a file of mid 2025 (training.batch_size): llama3's RoPE was not scaled then
    "era_rope": toml("[training]\nbatch_size = 4\n", flavor="8B").replace(
        "[model]\n", '[model]\nhf_assets_path = "./tests/assets/tokenizer"\n', 1
    ),
    # keys 0.3.0 has no home for
    "loss_parallel_tp2": toml(
        "[parallelism]\ntensor_parallel_degree = 2\ndisable_loss_parallel = true\n"
    ),
    "loss_parallel_tp1": toml(
        "[parallelism]\ntensor_parallel_degree = 1\ndisable_loss_parallel = true\n"
    ),
    "expert_tp": toml(
        "[parallelism]\nexpert_parallel_degree = 2\ntensor_parallel_degree = 2\n"
        "expert_tensor_parallel_degree = 2\n",
        name="qwen3",
        flavor="debugmodel_moe",
    ),
    "validation_on": toml(
        "[training]\nseq_len = 2048\n\n[validation]\nenable = true\nseq_len = 1024\n"
    ),
    "validation_off": toml(
        "[training]\nseq_len = 2048\n\n[validation]\nenable = false\nseq_len = 1024\n"
    ),
}
"""Case name -> a legacy TOML (its text, or a file of the repository)."""


@dataclasses.dataclass(repr=False)
class Migration:
    """One ``titan-migrate --target torchtitan==0.3.0 --format json`` run."""

    status: int
    code: str
    report: dict[str, Any]

    def __repr__(self) -> str:  # pytest shows it on failure: the file, not the whole report
        return f"<{self.entry['file']}: exit {self.status}>"

    @cached_property
    def tree(self) -> ast.Module:
        return ast.parse(self.code)

    @property
    def entry(self) -> dict[str, Any]:
        (entry,) = self.report["files"]
        return entry

    def outcome(self, key: str) -> dict[str, Any]:
        """The report's outcome of a key the file writes."""
        return self.entry["keys"][key]

    def findings(self, code: str | None = None, path: str | None = None) -> list[tuple[str, ...]]:
        """(code, severity, key) of the findings, those of ``code`` / at ``path`` only."""
        return [
            (d["code"], d["severity"], d["path"])
            for d in self.entry["diagnostics"]
            if (code is None or d["code"] == code) and (path is None or d["path"] == path)
        ]

    def severities(self, code: str, path: str) -> list[str]:
        return [severity for _, severity, _ in self.findings(code, path)]

    @property
    def function(self) -> ast.FunctionDef:
        (function,) = [n for n in self.tree.body if isinstance(n, ast.FunctionDef)]
        return function

    @property
    def config(self) -> ast.Call:
        """The ``Trainer.Config(...)`` the function returns."""
        returned = self.function.body[-1]
        assert isinstance(returned, ast.Return) and isinstance(returned.value, ast.Call)
        assert ast.unparse(returned.value.func) == "Trainer.Config", ast.unparse(returned)
        return returned.value

    def field(self, name: str) -> str | None:
        """``Trainer.Config(name=...)``'s value as ``ast.unparse`` writes it; None if unset."""
        found = [k.value for k in self.config.keywords if k.arg == name]
        return ast.unparse(found[0]) if found else None

    def local(self, name: str) -> str | None:
        """The value assigned to the local ``name`` in the function, as ``ast.unparse``."""
        for node in self.function.body:
            if isinstance(node, ast.Assign) and [ast.unparse(t) for t in node.targets] == [name]:
                return ast.unparse(node.value)
        return None

    @property
    def imports(self) -> dict[str, str]:
        """Imported name -> the module it comes from."""
        names: dict[str, str] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom):
                names.update({a.asname or a.name: node.module or "" for a in node.names})
            elif isinstance(node, ast.Import):
                names.update({a.asname or a.name: a.name for a in node.names})
        return names

    @property
    def todos(self) -> list[str]:
        marker = "# TODO(titan-migrate): "
        return [line.split(marker, 1)[1] for line in self.code.splitlines() if marker in line]

    def calls(self, name: str) -> list[str]:
        """Every call of ``name`` in the module, as ``ast.unparse`` writes it."""
        return [
            ast.unparse(node)
            for node in ast.walk(self.tree)
            if isinstance(node, ast.Call) and ast.unparse(node.func) == name
        ]


def norm(snippet: str) -> str:
    """``snippet`` as ``ast.unparse`` writes it (quotes, spacing)."""
    return ast.unparse(ast.parse(snippet, mode="eval").body)


def run_migrate(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = cli.run([str(a) for a in argv], stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


def migrate_case(name: str, folder: Path, *flags: str) -> Migration:
    """Migrate case ``name`` (written to ``folder/<name>.toml``) with the 0.3.0 target."""
    source = CASES[name]
    if isinstance(source, Path):
        path = source
    else:
        path = folder / f"{name}.toml"
        path.write_text(source, encoding="utf-8")
    argv = [path, "--target", TARGET, "--format", "json"]
    status, out, err = run_migrate(*argv, *(("--", *flags) if flags else ()))
    assert "Traceback" not in err, err
    return Migration(status, out, json.loads(err))


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> dict[str, Migration]:
    folder = tmp_path_factory.mktemp("cases")
    return {name: migrate_case(name, folder) for name in CASES}


# --------------------------------------------------------------------------- every case


def test_every_case_is_upstream_code_that_compiles(migrated, tmp_path):
    """Every module is written for 0.3.0 (no titan import anywhere), compiles, and ruff finds
    nothing in it: no undefined name, imports sorted, formatted as ruff formats."""
    for name, m in migrated.items():
        assert m.code.strip(), name
        compile(m.code, name, "exec")
        assert m.entry["returns"] == "torchtitan.trainer:Trainer.Config", name
        modules = set(m.imports.values())
        titan = sorted(x for x in modules if x == "titan" or x.startswith("titan."))
        assert not titan, f"{name} imports {titan}"
        assert modules <= {"__future__"} | {
            x for x in modules if x == "torchtitan" or x.startswith("torchtitan.")
        }, f"{name}: {modules}"
        assert m.imports.get("Trainer") == "torchtitan.trainer", name
        (tmp_path / f"{name}.py").write_text(m.code, encoding="utf-8")
    settings = ("--no-cache", "--config", str(REPO / "pyproject.toml"))
    for command in (["format", "--check", "--diff"], ["check"]):
        done = subprocess.run(
            [str(RUFF), *command, *settings, str(tmp_path)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_every_written_key_has_an_outcome(migrated):
    import tomllib

    from titan.migrate.plan.legacy_values import flatten

    for name, m in migrated.items():
        source = CASES[name]
        text = source.read_text(encoding="utf-8") if isinstance(source, Path) else source
        # and the keys a dated file omits, written with its era's defaults
        era = {d["path"] for d in m.entry["diagnostics"] if d["code"] == "era-default"}
        assert set(m.entry["keys"]) - era == set(flatten(tomllib.loads(text))), name


# --------------------------------------------------------------------------- 1. the debug TOML


def test_llama3_debug_model(migrated):
    m = migrated["debug"]
    assert m.status == 0
    done = subprocess.run(
        [str(RUFF), "format", "--check", "--stdin-filename", "config_registry.py", "-"],
        input=m.code,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "from torchtitan.trainer import Trainer\n" in m.code
    assert "from torchtitan.models.llama3 import model_registry\n" in m.code
    assert m.local("model_spec") == norm('model_registry("debugmodel")')
    assert m.field("model_spec") == "model_spec"
    assert ast.get_docstring(m.function).splitlines()[0] == "Llama 3 debug training"
    assert m.outcome("job.description")["status"] == "structural"
    assert m.field("profiler") == norm(
        'Profiler.Config(save_traces_folder="profile_trace", '
        'save_memory_snapshot_folder="memory_snapshot")'
    )
    assert m.field("training") == norm("TrainingConfig(steps=10, disable_cuda_graphs=True)")
    assert m.field("loss") == norm(
        "ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config("
        "global_vocab_size=decoder_vocab_size(model_spec)))"
    )
    assert m.field("optimizer") == norm("default_adamw(lr=0.0008)")
    assert "titan." not in m.code.replace("torchtitan.", "")
    assert "Written for torchtitan==0.3.0" in m.code


# --------------------------------------------------------------------------- 2. --target


@pytest.mark.parametrize("target", ["bogus", "torchtitan==0.2.0", "torchtitan==0.3.1"])
def test_an_unknown_target_is_a_usage_error(target):
    done = subprocess.run(
        [sys.executable, "-m", "titan.cli.migrate", str(DEBUG_TOML), "--target", target],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    assert f"unknown target {target!r}" in done.stderr
    assert "choose from titan, torchtitan==0.3.0" in done.stderr


def test_torchtitan_means_the_newest_release():
    newest = run_migrate(DEBUG_TOML, "--target", "torchtitan")
    pinned = run_migrate(DEBUG_TOML, "--target", TARGET)
    assert newest[0] == pinned[0] == 0
    assert newest[1] == pinned[1]
    assert f"--target {TARGET}``" in newest[1]
    titan = run_migrate(DEBUG_TOML)
    assert titan[0] == 0 and "torchtitan" not in titan[1]


# --------------------------------------------------------------------------- 3. AC


def test_activation_checkpoint_modes(migrated):
    ac = {name: migrated[name] for name in CASES if name.startswith("ac_")}
    assert ac["ac_full"].field("activation_checkpoint") == "FullAC.Config()"
    assert ac["ac_full"].imports["FullAC"] == "torchtitan.distributed.activation_checkpoint"
    assert ac["ac_none"].field("activation_checkpoint") == "None"
    assert ac["ac_selective_op"].field("activation_checkpoint") == norm(
        'SelectiveAC.Config(force_recompute_mm_shapes_by_fqns=["output", "moe.router.gate"])'
    )
    assert ac["ac_memory_budget"].field("activation_checkpoint") == norm(
        "MemoryBudgetAC.Config(memory_budget=0.3)"
    )
    for name, m in ac.items():
        if name != "ac_selective_2":
            assert m.status == 0, name
            assert not m.findings("upstream-gone"), (name, m.findings())
            assert not m.todos, (name, m.todos)
        assert m.outcome("activation_checkpoint.mode")["status"] == "carried", name
    assert ac["ac_full"].outcome("activation_checkpoint.mode")["note"] == "FullAC.Config"
    key = "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns"
    assert ac["ac_selective_op"].outcome(key)["status"] == "carried"
    assert ac["ac_memory_budget"].outcome("activation_checkpoint.memory_budget") == {
        "status": "carried",
        "paths": ["activation_checkpoint"],
        "note": "",
    }


def test_layer_wise_selective_ac_is_a_warning_with_a_todo(migrated):
    key = "activation_checkpoint.selective_ac_option"
    for name in ("ac_selective_2", "debug"):
        m = migrated[name]
        assert m.status == 0, name
        assert m.findings("upstream-gone") == [("upstream-gone", "warning", key)], name
        assert m.outcome(key)["status"] == "dropped", name
        assert m.report["errors"] == 0
        assert [t for t in m.todos if t.startswith(f"`{key} = '2'` has no torchtitan 0.3.0")]
    # 0.3.0's default policy is the per-op SelectiveAC the migrated run uses
    assert migrated["ac_selective_2"].field("activation_checkpoint") in (
        None,
        "SelectiveAC.Config()",
    )


# --------------------------------------------------------------------------- 4. the optimizer


def test_adamw_is_default_adamw(migrated):
    m = migrated["opt_adamw"]
    assert m.status == 0
    assert m.field("optimizer") == norm("default_adamw(lr=0.0003, weight_decay=0.05)")
    assert m.imports["default_adamw"] == "torchtitan.components.optimizer"
    for key in ("optimizer.name", "optimizer.lr", "optimizer.weight_decay"):
        assert m.outcome(key)["status"] == "carried"
        assert m.outcome(key)["paths"] == ["optimizer"]


def test_other_optimizers_are_one_param_group(migrated):
    m = migrated["opt_adam"]
    assert m.status == 0
    assert m.field("optimizer") == norm(
        "OptimizersContainer.Config(param_groups=[ParamGroupConfig(pattern='.*', "
        "optimizer_name='Adam', optimizer_kwargs={'lr': 0.0003, 'betas': (0.8, 0.95), "
        "'eps': 1e-08, 'weight_decay': 0.1})])"
    )
    kwargs = ast.literal_eval(
        next(
            k.value
            for k in ast.walk(m.config)
            if isinstance(k, ast.keyword) and k.arg == "optimizer_kwargs"
        )
    )
    assert kwargs["betas"] == (0.8, 0.95) and isinstance(kwargs["betas"], tuple)
    assert m.imports["ParamGroupConfig"].startswith("torchtitan.")
    m = migrated["opt_foreach"]
    assert m.status == 0
    assert m.field("optimizer") == norm(
        "OptimizersContainer.Config(param_groups=[ParamGroupConfig(pattern='.*', "
        "optimizer_name='AdamW', optimizer_kwargs={'lr': 0.0008, 'betas': (0.9, 0.95), "
        "'eps': 1e-08, 'weight_decay': 0.1})], implementation='foreach')"
    )
    assert m.outcome("optimizer.implementation")["status"] == "carried"


def test_optimizer_in_backward_is_a_warning(migrated):
    m = migrated["opt_early_step"]
    key = "optimizer.early_step_in_backward"
    assert m.status == 0
    assert m.findings("upstream-gone") == [("upstream-gone", "warning", key)]
    assert m.outcome(key)["status"] == "dropped"
    assert [t for t in m.todos if t.startswith(f"`{key} = True`")]
    assert m.field("optimizer") == norm("default_adamw(lr=0.0008)")


# --------------------------------------------------------------------------- 5. converters


def test_float8_without_a_recipe_is_an_error(migrated):
    m = migrated["float8_tensorwise"]
    key = "quantize.linear.float8.recipe_name"
    assert m.status == 1
    assert m.findings("upstream-gone") == [("upstream-gone", "error", key)]
    assert m.report["errors"] == 1
    assert m.local("model_spec") == norm(
        'model_registry("debugmodel", converters=[Float8LinearConverter.Config()])'
    )
    assert m.imports["Float8LinearConverter"].startswith("torchtitan.components.quantization")
    assert [t for t in m.todos if t.startswith(f"`{key} = None`")]
    assert m.outcome("model.converters")["status"] == "carried"


def test_float8_rowwise_is_carried(migrated):
    m = migrated["float8_rowwise"]
    assert m.status == 0
    assert not m.findings("upstream-gone")
    assert m.outcome("quantize.linear.float8.recipe_name")["status"] == "carried"
    converter = m.calls("Float8LinearConverter.Config")
    # rowwise is 0.3.0's default recipe: written or not, the converter says rowwise
    assert converter in (
        ["Float8LinearConverter.Config()"],
        [norm("Float8LinearConverter.Config(recipe_name='rowwise')")],
    )


def test_float8_skip_list_uses_upstream_module_names(migrated):
    m = migrated["float8_filter"]
    key = "quantize.linear.float8.filter_fqns"
    assert m.status == 0
    assert m.local("model_spec") == norm(
        'model_registry("debugmodel", converters=[Float8LinearConverter.Config('
        'filter_fqns=["lm_head"])])'
    )
    assert m.outcome(key)["status"] == "carried"
    assert "lm_head" in m.outcome(key)["note"]


def test_mx_default_skip_list_is_inverted(migrated):
    """v0.2.2 skipped ``output`` by default; 0.3.0 lists the linears to convert, and every
    linear of llama3 but ``lm_head`` is under ``layers``. The inversion needs the model's list of
    linears (``LINEAR_FQNS`` of the generated spec): without it the skip-list is reported and
    every linear converted."""
    from titan.migrate.targets import upstream_spec_030 as spec

    m = migrated["mx_default"]
    has_linears = "llama3" in getattr(spec, "LINEAR_FQNS", {})
    assert m.calls("MXFP8LinearConverter.Config") == [
        norm('MXFP8LinearConverter.Config(fqns=["layers"])')
    ], f"{m.local('model_spec')}; migrate/targets/upstream_spec_030.py " + (
        "lists llama3's linears" if has_linears else "has no LINEAR_FQNS for llama3"
    )
    assert m.outcome("model.converters")["status"] == "carried"
    assert not m.findings("upstream-gone", "quantize.linear.mx.filter_fqns")


def test_mx_skip_list_of_a_fused_projection_is_reported(migrated):
    m = migrated["mx_wq"]
    key = "quantize.linear.mx.filter_fqns"
    assert m.status == 1
    assert m.severities("upstream-gone", key) == ["error"]
    assert m.outcome(key)["status"] == "dropped"
    assert m.calls("MXFP8LinearConverter.Config") == ["MXFP8LinearConverter.Config()"]
    assert [t for t in m.todos if t.startswith(f"`{key} = ['wq']`")]


def test_mx_skip_list_finding_names_the_fused_projection(migrated):
    (finding,) = [
        d
        for d in migrated["mx_wq"].entry["diagnostics"]
        if d["path"] == "quantize.linear.mx.filter_fqns"
    ]
    assert "fuse" in finding["message"], finding["message"]


def test_compiled_model_reaches_the_converter(migrated):
    m = migrated["float8_compiled"]
    assert m.status == 0
    assert m.calls("Float8LinearConverter.Config") == [
        norm("Float8LinearConverter.Config(model_compile_enabled=True)")
    ]
    uncompiled = migrated["float8_rowwise"].calls("Float8LinearConverter.Config")[0]
    assert "model_compile_enabled" not in uncompiled


# --------------------------------------------------------------------------- 6. flavors


def test_attention_flavors(migrated):
    assert migrated["flex"].local("model_spec") == norm('model_registry("debugmodel")')
    assert migrated["varlen"].local("model_spec") == norm(
        'model_registry("debugmodel", attn_backend="varlen")'
    )
    assert migrated["sdpa"].local("model_spec") == norm('model_registry("debugmodel")')
    for name in ("flex", "varlen", "sdpa"):
        m = migrated[name]
        assert m.status == 0 and not m.findings("upstream-gone"), name
        assert m.outcome("model.flavor")["status"] == "structural", name
    assert migrated["sdpa"].findings("upstream-changed", "model.flavor") == [
        ("upstream-changed", "info", "model.flavor")
    ]
    sdpa = next(d for d in migrated["sdpa"].entry["diagnostics"] if d["path"] == "model.flavor")
    assert "SDPA" in sdpa["message"]
    for name in ("flex", "varlen"):
        assert not migrated[name].findings("upstream-changed", "model.flavor"), name


def test_moe_comm_backend_is_a_model_registry_argument(migrated):
    m = migrated["qwen3_deepep"]
    assert m.status == 0
    assert m.local("model_spec") == norm(
        'model_registry("debugmodel_moe", moe_comm_backend="deepep")'
    )
    assert m.imports["model_registry"] == "torchtitan.models.qwen3"
    assert m.outcome("parallelism.expert_parallel_comm_backend") == {
        "status": "carried",
        "paths": ["model_spec"],
        "note": "model_registry(moe_comm_backend=...)",
    }


def test_a_family_upstream_lacks_is_an_error(migrated):
    m = migrated["llama4"]
    assert m.status == 1
    assert m.findings("upstream-gone") == [("upstream-gone", "error", "model.name")]
    assert m.local("model_spec") is None and m.field("model_spec") is None
    assert not m.calls("model_registry") and "model_registry" not in m.imports
    assert m.outcome("model.name")["status"] == "dropped"
    assert m.outcome("model.flavor")["status"] == "dropped"
    assert m.field("training") == norm("TrainingConfig(disable_cuda_graphs=True)")


# --------------------------------------------------------------------------- 7. gone keys


def test_disable_loss_parallel_matters_under_tensor_parallel_only(migrated):
    key = "parallelism.disable_loss_parallel"
    tp2, tp1 = migrated["loss_parallel_tp2"], migrated["loss_parallel_tp1"]
    assert tp2.status == 0 and tp2.findings("upstream-gone") == [("upstream-gone", "warning", key)]
    assert tp2.outcome(key)["status"] == "dropped"
    assert tp1.status == 0 and not tp1.findings(path=key)
    assert tp1.outcome(key)["status"] == "default"
    assert not tp1.todos


def test_expert_tensor_parallel_is_an_error(migrated):
    m = migrated["expert_tp"]
    key = "parallelism.expert_tensor_parallel_degree"
    assert m.status == 1
    assert m.findings("upstream-gone") == [("upstream-gone", "error", key)]
    assert m.outcome(key)["status"] == "dropped"
    assert "expert_tensor_parallel_degree" not in m.code.replace(f"`{key} = 2`", "")


def test_validation_shape_differs(migrated):
    on, off = migrated["validation_on"], migrated["validation_off"]
    key = "validation.seq_len"
    assert on.status == 1
    assert on.findings("upstream-gone") == [("upstream-gone", "error", key)]
    assert on.outcome(key)["status"] == "dropped"
    assert off.status == 0
    assert off.findings(path=key) == [("upstream-changed", "info", key)]
    assert off.outcome(key)["status"] == "inert"
    assert not off.findings("upstream-gone")


# --------------------------------------------------------------------------- legacy flags


def test_legacy_flags_after_double_dash(tmp_path):
    m = migrate_case(
        "ac_full", tmp_path, "--optimizer.name", "Adam", "--activation_checkpoint.mode", "none"
    )
    assert m.status == 0
    assert m.field("activation_checkpoint") == "None"
    assert "optimizer_name='Adam'" in m.field("optimizer")


# --------------------------------------------------------------------------- 8. folders


def test_folders_get_one_module_each(tmp_path):
    source = tmp_path / "legacy"
    for family in ("llama3", "qwen3"):
        shutil.copytree(REPO / "legacy_configs" / family, source / family)
    before = {p: p.read_bytes() for p in source.rglob("*") if p.is_file()}
    out = tmp_path / "registry"
    status, stdout, stderr = run_migrate(source, "--out-dir", out, "--target", TARGET, "-q")
    assert status == 1, stderr  # the float8 files' tensorwise recipe is an error
    assert "Traceback" not in stderr
    assert {p: p.read_bytes() for p in source.rglob("*") if p.is_file()} == before
    modules = sorted(out.rglob("*.py"))
    assert [p.relative_to(out).as_posix() for p in modules] == [
        "llama3/config_registry.py",
        "qwen3/config_registry.py",
    ]
    for module in modules:
        text = module.read_text(encoding="utf-8")
        docstring = ast.get_docstring(ast.parse(text))
        regenerate = [line for line in docstring.splitlines() if line.startswith("Regenerate")]
        assert regenerate == [
            f"Regenerate with ``titan-migrate {source} --out-dir {out} --target {TARGET}``."
        ], docstring
        functions = [n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]
        assert len(functions) == len(list((source / module.parent.name).glob("*.toml")))
        assert "from torchtitan.trainer import Trainer" in text
    done = subprocess.run(
        [
            str(RUFF),
            "format",
            "--check",
            "--diff",
            "--no-cache",
            "--config",
            str(REPO / "pyproject.toml"),
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr


# --------------------------------------------------------------------------- 9. no torch


_PROBE = """
import importlib.abc, io, json, sys

asked = []

class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "torchtitan"):
            asked.append(name)
        return None

sys.meta_path.insert(0, Watch())
from titan.cli.migrate import main

status = main(sys.argv[1:])
loaded = sorted(m for m in sys.modules if m.partition(".")[0] in ("torch", "torchtitan"))
print(json.dumps({"status": status, "asked": asked, "loaded": loaded}), file=sys.__stderr__)
"""


def test_the_command_imports_neither_torch_nor_torchtitan(tmp_path):
    """Not even an attempt: a finder first in ``sys.meta_path`` records every import of either
    (a failed ``import torchtitan`` leaves nothing in ``sys.modules``)."""
    out = tmp_path / "config_registry.py"
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(DEBUG_TOML), "--target", TARGET, "-o", str(out)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stderr.strip().splitlines()[-1])
    assert result == {"status": 0, "asked": [], "loaded": []}
    assert "from torchtitan.trainer import Trainer" in out.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- several families


def test_several_families_in_one_module_import_each_package(tmp_path):
    """Two families in one module: each through its own package, never two imports of one
    name (the second would silently build every model with the other family's registry)."""
    code, out, _ = run_migrate(
        str(REPO / "legacy_configs" / "qwen3" / "qwen3_moe_debug.toml"),
        str(DEBUG_TOML),
        "--target",
        TARGET,
    )
    assert code == 0
    tree = ast.parse(out)
    imported = [
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]
    assert ("torchtitan.models", "llama3") in imported
    assert ("torchtitan.models", "qwen3") in imported
    assert not [name for _, name in imported if name == "model_registry"]
    calls = {
        ast.unparse(node.value.func)
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "model_spec"
    }
    assert calls == {"llama3.model_registry", "qwen3.model_registry"}


# --------------------------------------------------------------------------- diff and validate


def _cli(module, *argv: str) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = module.run(list(argv), stdout=stdout, stderr=stderr)
    return code, stdout.getvalue(), stderr.getvalue()


def test_diff_compares_two_tomls_as_their_upstream_configs(tmp_path):
    from titan.cli import diff

    left = tmp_path / "a.toml"
    right = tmp_path / "b.toml"
    left.write_text(toml('[optimizer]\nlr = 3e-4\n[profiling]\nsave_traces_folder = "t"\n'))
    right.write_text(
        toml("[optimizer]\nlr = 1e-4\n", flavor="debugmodel_varlen_attn", ac='mode = "none"')
    )
    code, out, err = _cli(diff, str(left), str(right), "--target", "torchtitan")
    assert code == 1, err
    lines = {line.split(":")[0]: line for line in out.splitlines()[2:-1]}
    assert set(lines) == {
        "model_spec",
        "profiler.save_traces_folder",
        "optimizer",
        "activation_checkpoint",
    }, out
    assert (
        "model_registry('debugmodel') -> model_registry('debugmodel', attn_backend='varlen')"
        in (lines["model_spec"])
    )
    assert "default_adamw(lr=0.0003) -> default_adamw(lr=0.0001)" in lines["optimizer"]
    assert "FullAC.Config -> None" in lines["activation_checkpoint"]
    assert "'t' -> 'profile_traces'" in lines["profiler.save_traces_folder"]
    assert out.splitlines()[-1] == "4 differences"
    code, out, _ = _cli(diff, str(left), str(left), "--target", TARGET, "--format", "json")
    assert (code, json.loads(out)) == (0, [])


def test_diff_target_needs_two_legacy_tomls(tmp_path, capsys):
    from titan.cli import diff

    left = tmp_path / "a.toml"
    left.write_text(toml())
    code, _, err = _cli(diff, str(left), "llama3_debugmodel", "--target", TARGET)
    assert code == 2
    assert "compares legacy TOMLs as migrated for it" in err
    assert "Traceback" not in err
    code, _, _ = _cli(diff, str(left), str(left), "--target", "torchtitan==9")
    assert code == 2 and "choose from titan, torchtitan==0.3.0" in capsys.readouterr().err


def test_validate_as_registry_reports_what_upstream_cannot_express(tmp_path):
    from titan.cli import validate

    path = tmp_path / "job.toml"
    path.write_text(toml("[parallelism]\nexpert_tensor_parallel_degree = 2\n"))
    code, out, err = _cli(
        validate, str(path), "--as-registry", "--target", TARGET, "--format", "json"
    )
    findings = json.loads(out)["diagnostics"] if out.strip().startswith("{") else json.loads(out)
    codes = {(f["code"], f["path"]) for f in findings}
    assert ("upstream-gone", "parallelism.expert_tensor_parallel_degree") in codes, out
    assert code == 1, err
    # the same file for titan's own trainer: nothing of the kind
    code, out, _ = _cli(validate, str(path), "--as-registry", "--format", "json")
    assert "upstream-gone" not in out


def test_validate_target_needs_as_registry(tmp_path, capsys):
    from titan.cli import validate

    path = tmp_path / "job.toml"
    path.write_text(toml())
    code, _, err = _cli(validate, str(path), "--target", TARGET)
    assert code == 2
    assert "add --as-registry" in err + capsys.readouterr().err


# --------------------------------------------------------------------------- generated inputs


def test_generated_documents_migrate_for_upstream(tmp_path):
    """Random valid legacy TOMLs (hostile strings among the values): the 0.3.0 migration never
    fails, writes code that compiles, gives every written key an outcome, and names every key
    it drops in a finding. ``tests/upstream/test_upstream_properties.py`` builds the same kind
    of documents in a real torchtitan."""
    import tomli_w
    from hypothesis import HealthCheck, given, settings
    from titan.migrate.codegen.render_code import render_module
    from titan.migrate.plan.build import build_plan
    from titan.migrate.plan.legacy_values import flatten
    from titan.migrate.targets.upstream import retarget

    from tests.test_migrate_properties import documents

    @settings(
        max_examples=150,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(documents())
    def check(document):
        path = tmp_path / "case.toml"
        path.write_text(tomli_w.dumps(document), encoding="utf-8")
        plan = retarget(build_plan(path))
        assert plan.ok and plan.target == TARGET
        code = render_module([plan])
        compile(code, "case.py", "exec")
        assert "import titan" not in code and "from titan" not in code
        assert set(flatten(document)) <= set(plan.outcomes)
        named = {d.path for d in plan.diagnostics}
        if "model.name" in named:  # no model family: its flavor and converters go with it
            named |= {"model.flavor", "model.converters"}
        for key, outcome in plan.outcomes.items():
            if outcome.status == "dropped":
                assert any(key == p or key.startswith(p + ".") for p in named), key

    check()


def test_the_json_report_names_the_target():
    for argv, target in (((DEBUG_TOML, "--target", TARGET), TARGET), ((DEBUG_TOML,), "titan")):
        status, _, err = run_migrate(*argv, "--format", "json")
        assert status == 0
        assert [entry["target"] for entry in json.loads(err)["files"]] == [target]


def test_titan_validate_checks_a_module_written_for_upstream_statically(tmp_path):
    """A migrated upstream module is not imported (titan's environment has no torchtitan): it is
    read against torchtitan 0.3.0's table, passes, and its TODOs still show."""
    from titan.cli import validate

    code, out, _ = run_migrate(DEBUG_TOML, "--target", TARGET)
    module = tmp_path / "config_registry.py"
    module.write_text(out, encoding="utf-8")
    status, text, err = _cli(validate, str(module), "--format", "json", "--no-cache")
    findings = json.loads(text)
    findings = findings["diagnostics"] if isinstance(findings, dict) else findings
    codes = sorted({f["code"] for f in findings})
    assert (status, codes) == (0, ["migration-todo"]), text + err
    status, _, _ = _cli(validate, str(module), "--strict", "--no-cache")
    assert status == 1

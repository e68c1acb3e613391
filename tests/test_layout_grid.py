"""One implementation of every layout rule: over a grid of layouts (degrees × world sizes ×
families × schedules, plus the compile, checkpointing and offload switches), ``titan-validate
--ngpu N`` on the TOML, the same check on the registry config (``titan-validate --config``), and
the check a run makes before it builds anything (``titan.training.run_checks.refuse_findings``,
which ``titan-train``, ``titan-train --preflight`` and ``config.build()`` call) accept and refuse
exactly the same layouts, each refusal with the same code and hint.

What a family's trainer does not support yet is another question, answered by its capability
record (``ModelSpec.refusals``): those refusals are listed apart and never stand in for a rule.
A sample of the grid also goes through ``titan-train --preflight`` itself.
"""

from __future__ import annotations

import io
import itertools
from pathlib import Path

import pytest
from titan.schemas.diagnostics import Severity
from titan.schemas.toml_check import CheckOptions, check_text

REPO = Path(__file__).resolve().parents[1]
FAMILIES = [
    ("llama3", "debugmodel"),
    ("qwen3", "debugmodel_moe"),
    ("gpt_oss", "debugmodel"),
]
WORLD_SIZES = [2, 4, 8]
DEGREES = {
    "data_parallel_replicate_degree": [1, 2],
    "data_parallel_shard_degree": [-1, 1, 2],
    "tensor_parallel_degree": [1, 2],
    "pipeline_parallel_degree": [1, 2],
    "context_parallel_degree": [1, 2],
    "expert_parallel_degree": [1, 2],
}
SWITCHES = [
    {},
    {"pipeline_parallel_schedule": "1F1B"},
    {"seq_len": 6},
    {"enable_async_tensor_parallel": True},
    {"enable_async_tensor_parallel": True, "compile": ["model", "loss"]},
    {"ac_mode": "memory_budget", "compile": ["loss"]},
    {"ac_mode": "memory_budget", "compile": ["model"]},
    {"enable_cpu_offload": True},
]
"""Each layout of the degree grid runs with the first switch; every other switch runs on a slice
of it (every fifth layout): about two thousand layouts, each checked three ways."""
EXTRA = [
    # The rules the degree grid cannot reach on its own: heads TP does not divide, a shard degree
    # of 0, a batch that does not divide, a pipeline the layers cannot fill.
    ("llama3", "debugmodel", 3, {"tensor_parallel_degree": 3}, {"seq_len": 66}),
    ("gpt_oss", "debugmodel", 6, {"tensor_parallel_degree": 3}, {"seq_len": 66}),
    ("llama3", "debugmodel", 4, {"data_parallel_shard_degree": 0}, {}),
    ("llama3", "debugmodel", 4, {}, {"global_batch_size": 12}),
    ("llama3", "debugmodel", 4, {}, {"global_batch_size": 64}),
    ("qwen3", "debugmodel_moe", 4, {"pipeline_parallel_degree": 2}, {"layers_per_stage": 8}),
    ("llama3", "debugmodel", 4, {"pipeline_parallel_degree": 2}, {"layers_per_stage": 2}),
    (
        "llama3",
        "debugmodel",
        4,
        {"pipeline_parallel_degree": 4},
        {"pipeline_parallel_schedule": "ZBVZeroBubble"},
    ),
]
PARALLELISM_SWITCHES = {
    "pipeline_parallel_schedule": "pipeline_parallel_schedule",
    "enable_async_tensor_parallel": "enable_async_tensor_parallel",
    "layers_per_stage": "pipeline_parallel_layers_per_stage",
}
TRAINING_SWITCHES = ("global_batch_size", "enable_cpu_offload")


def layouts() -> list[tuple[str, str, int, dict, dict]]:
    """(family, flavor, world size, degrees, switches) of the grid."""
    grid = []
    combos = [
        dict(zip(DEGREES, values, strict=True)) for values in itertools.product(*DEGREES.values())
    ]
    for (family, flavor), ngpu in itertools.product(FAMILIES, WORLD_SIZES):
        for index, degrees in enumerate(combos):
            for switch_index, switches in enumerate(SWITCHES):
                if switch_index == 0 or index % 5 == switch_index % 5:
                    grid.append((family, flavor, ngpu, degrees, switches))
    return grid + EXTRA


def toml_text(
    family: str, flavor: str, degrees: dict, switches: dict, *, run: Path | None = None
) -> str:
    """The layout as a legacy TOML; ``run``: a folder to write into, with the repository's test
    tokenizer (what a pre-flight reads)."""
    parallelism = {**degrees, **_parallelism_switches(switches)}
    lines = [f'[model]\nname = "{family}"\nflavor = "{flavor}"']
    if run is not None:
        lines += [f'hf_assets_path = "{REPO / "tests" / "assets" / "tokenizer"}"']
        lines += ["[job]", f'dump_folder = "{run}"']
    lines += ["[parallelism]"]
    lines += [f"{key} = {_toml(value)}" for key, value in parallelism.items()]
    training = {"seq_len": switches.get("seq_len", 64), "local_batch_size": 8}
    training |= {key: switches[key] for key in TRAINING_SWITCHES if key in switches}
    lines += ["[training]", *(f"{key} = {_toml(value)}" for key, value in training.items())]
    if "compile" in switches:
        lines += ["[compile]", "enable = true", f"components = {_toml(switches['compile'])}"]
    if "ac_mode" in switches:
        lines += ["[activation_checkpoint]", f'mode = "{switches["ac_mode"]}"']
    return "\n".join(lines) + "\n"


def _parallelism_switches(switches: dict) -> dict:
    """The switches that are ``[parallelism]`` keys, by their key."""
    return {key: switches[name] for name, key in PARALLELISM_SWITCHES.items() if name in switches}


def _toml(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def registry_config(family: str, flavor: str, degrees: dict, switches: dict):
    """The layout as a registry function would build it."""
    import importlib

    from titan.config import (
        ActivationCheckpointConfig,
        CompileConfig,
        ParallelismConfig,
        TrainingConfig,
    )
    from titan.trainer import Trainer

    model_registry = importlib.import_module(f"titan.models.{family}").model_registry
    parallelism = {**degrees, **_parallelism_switches(switches)}
    training = {"seq_len": switches.get("seq_len", 64), "local_batch_size": 8}
    training |= {key: switches[key] for key in TRAINING_SWITCHES if key in switches}
    return Trainer.Config(
        model_spec=model_registry(flavor),
        parallelism=ParallelismConfig(**parallelism),
        training=TrainingConfig(**training),
        compile=(
            CompileConfig(enable=True, components=switches["compile"])
            if "compile" in switches
            else CompileConfig()
        ),
        activation_checkpoint=ActivationCheckpointConfig(mode=switches.get("ac_mode", "selective")),
    )


def errors(findings) -> set[tuple[str, str]]:
    """(code, hint) of every error."""
    return {(d.code, d.hint) for d in findings if d.severity is Severity.ERROR}


def test_validate_both_forms_and_the_runs_checks_refuse_the_same_layouts(tmp_path):
    from titan.config.check import check_config as registry_findings
    from titan.training.run_checks import ConfigFindings, refuse_findings

    grid = layouts()
    assert len(grid) > 2000
    refused = accepted = 0
    codes: set[str] = set()
    unsupported: set[str] = set()
    for family, flavor, ngpu, degrees, switches in grid:
        where = (family, ngpu, degrees, switches)
        text = toml_text(family, flavor, degrees, switches)
        checked = check_text(
            text, file="job.toml", base_dir=tmp_path, options=CheckOptions(ngpu=ngpu)
        )
        from_toml = errors(checked.diagnostics)
        config = registry_config(family, flavor, degrees, switches)
        from_registry = errors(registry_findings(config, ngpu=ngpu, locate=lambda path: None))
        try:
            refuse_findings(config, world_size=ngpu)
            from_run: set[tuple[str, str]] = set()
        except ConfigFindings as refusal:
            from_run = errors(refusal.findings)
        assert from_toml == from_registry == from_run, where
        if from_run:
            refused += 1
            codes |= {code for code, _ in from_run}
        else:
            accepted += 1
            # What the rules accept, the trainer refuses only for want of a capability.
            unsupported |= {r.key for r in config.model_spec.refusals(config, world_size=ngpu)}
    # The grid reaches both verdicts and every layout rule.
    assert accepted > 100 and refused > 1000
    assert {
        "world-size",
        "parallel-degree",
        "expert-parallel",
        "seq-len",
        "tp-heads",
        "pipeline-layout",
        "async-tp",
        "activation-checkpoint",
        "ddp-layout",
        "cpu-offload",
        "batch-size",
    } <= codes, codes
    # Every sound layout of the grid runs on every family: expert parallel and pipeline parallel
    # together with context parallel included (the capability record refuses neither pair).
    assert unsupported == set(), unsupported


PREFLIGHT_SAMPLE = [
    # (family, flavor, ngpu, degrees, switches, the code it is refused with, or None)
    ("llama3", "debugmodel", 4, {"tensor_parallel_degree": 2}, {}, None),
    ("llama3", "debugmodel", 4, {"tensor_parallel_degree": 3}, {}, "world-size"),
    (
        "llama3",
        "debugmodel",
        4,
        {"data_parallel_replicate_degree": 2, "data_parallel_shard_degree": 1},
        {"enable_cpu_offload": True},
        "cpu-offload",
    ),
    (
        "llama3",
        "debugmodel",
        4,
        {
            "data_parallel_replicate_degree": 2,
            "data_parallel_shard_degree": 1,
            "tensor_parallel_degree": 2,
        },
        {},
        "ddp-layout",
    ),
    ("llama3", "debugmodel", 2, {"tensor_parallel_degree": 2}, {"seq_len": 6}, "seq-len"),
    (
        "llama3",
        "debugmodel",
        2,
        {},
        {"ac_mode": "memory_budget", "compile": ["loss"]},
        "activation-checkpoint",
    ),
    ("qwen3", "debugmodel_moe", 4, {"expert_parallel_degree": 2}, {}, None),
    ("qwen3", "debugmodel_moe", 4, {"expert_parallel_degree": 3}, {}, "expert-parallel"),
    (
        "qwen3",
        "debugmodel_moe",
        4,
        {"context_parallel_degree": 2, "expert_parallel_degree": 2},
        {},
        None,
    ),
    (
        "llama3",
        "debugmodel",
        4,
        {"pipeline_parallel_degree": 2, "context_parallel_degree": 2},
        {"pipeline_parallel_schedule": "1F1B"},
        None,
    ),
]


@pytest.mark.parametrize(
    ("family", "flavor", "ngpu", "degrees", "switches", "code"),
    PREFLIGHT_SAMPLE,
    ids=[f"{c[0]}-{c[2]}-{c[5] or 'accepted'}" for c in PREFLIGHT_SAMPLE],
)
def test_titan_train_preflight_agrees_with_titan_validate(
    tmp_path, monkeypatch, capsys, family, flavor, ngpu, degrees, switches, code
):
    from titan.cli import validate
    from titan.train import main

    text = toml_text(family, flavor, degrees, switches, run=tmp_path / "out")
    toml = tmp_path / "job.toml"
    toml.write_text(text, encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    validated = validate.run(["--ngpu", str(ngpu), str(toml)], stdout=out, stderr=err)
    monkeypatch.chdir(REPO)
    capsys.readouterr()
    pre = main(["--preflight", "--ngpu", str(ngpu), "--job.config_file", str(toml)])
    pre_out, pre_err = capsys.readouterr()
    if code is None:
        assert validated == 0, out.getvalue()
        assert pre == 0, pre_err
        assert "pre-flight passed" in pre_out
    else:
        assert validated == 1 and f"error[{code}]" in out.getvalue(), out.getvalue()
        assert pre == 1 and f"error[{code}]" in pre_err, pre_err
        # The same finding: its message, and its hint under it, as titan-validate prints them.
        said = out.getvalue().split(f"error[{code}]")[1].split("\n")[0]
        assert said in pre_err
        (hint,) = [d.hint for d in _findings(toml, ngpu) if d.code == code]
        assert hint in pre_err


def _findings(toml: Path, ngpu: int):
    """titan-validate's findings on ``toml``."""
    text = toml.read_text(encoding="utf-8")
    return check_text(
        text, file=str(toml), base_dir=toml.parent, options=CheckOptions(ngpu=ngpu)
    ).diagnostics

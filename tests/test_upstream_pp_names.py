"""``titan-migrate --target torchtitan==0.3.0`` on legacy pipeline stage lists
(``parallelism.module_fqns_per_model_part``): v0.2.2's ``output`` is 0.3.0's ``lm_head``, and a
name that is no module of the model is an error, never carried for 0.3.0 to drop silently.

Each case is a real legacy TOML migrated through the CLI's entry point; the generated code is read
with ``ast`` and the JSON report for its findings and outcomes.
"""

from __future__ import annotations

import ast
import json

import pytest

from tests.test_upstream_target import TARGET, Migration, norm, run_migrate, toml

KEY = "parallelism.module_fqns_per_model_part"


def _migrate(tmp_path, parallelism: str, **model) -> Migration:
    path = tmp_path / "pp.toml"
    path.write_text(toml(f"[parallelism]\n{parallelism}\n", **model), encoding="utf-8")
    status, out, err = run_migrate(path, "--target", TARGET, "--format", "json")
    assert "Traceback" not in err, err
    return Migration(status, out, json.loads(err))


def _stages(m: Migration) -> str | None:
    """``module_fqns_per_model_part=`` of the generated ``ParallelismConfig(...)``."""
    calls = [k.value for k in m.config.keywords if k.arg == "parallelism"]
    if not calls:
        return None
    found = [k.value for k in calls[0].keywords if k.arg == "module_fqns_per_model_part"]
    return ast.unparse(found[0]) if found else None


def _list(parts: list[list[str]]) -> str:
    return json.dumps(parts)


LLAMA_6 = [
    ["tok_embeddings", "layers.0", "layers.1", "layers.2"],
    ["layers.3", "layers.4", "layers.5", "norm", "output"],
]


@pytest.mark.parametrize(
    ("model", "parts"),
    [
        ({}, LLAMA_6),  # llama3 debugmodel: 6 layers
        (
            # 8 layers on 4 stages: two per rank, which takes a multi-stage schedule
            {"name": "qwen3", "flavor": "debugmodel", "schedule": "Interleaved1F1B"},
            [
                ["tok_embeddings", "layers.0"],
                ["layers.1", "layers.2", "layers.3"],
                ["layers.4", "layers.5", "layers.6"],
                ["layers.7", "norm", "output"],
            ],
        ),
        (
            {"name": "deepseek_v3", "flavor": "debugmodel"},  # the head alone on its stage
            [["tok_embeddings", *[f"layers.{i}" for i in range(6)], "norm"], ["output"]],
        ),
    ],
)
def test_output_becomes_lm_head(tmp_path, model, parts):
    model = dict(model)
    schedule = model.pop("schedule", None)
    extra = f'\npipeline_parallel_schedule = "{schedule}"' if schedule else ""
    m = _migrate(
        tmp_path,
        f"pipeline_parallel_degree = 2\nmodule_fqns_per_model_part = {_list(parts)}{extra}",
        **model,
    )
    wanted = [[{"output": "lm_head"}.get(n, n) for n in part] for part in parts]
    assert _stages(m) == norm(repr(wanted))
    assert "'output'" not in _stages(m)
    assert m.status == 0, m.findings()
    assert m.findings("upstream-changed", KEY) == [("upstream-changed", "info", KEY)]
    outcome = m.outcome(KEY)
    assert outcome["status"] == "carried"
    assert "'output' is 'lm_head'" in outcome["note"]


@pytest.mark.parametrize(
    ("parts", "named"),
    [
        (
            [
                ["tok_embeddings", "layers.0", "layers.1", "layers.2"],
                ["layers.3", "layers.4", "layers.5", "final_norm", "output"],
            ],
            ["'final_norm'"],
        ),
        (  # a layer the 6-layer model does not have
            [
                ["tok_embeddings", "layers.0", "layers.1", "layers.2"],
                ["layers.3", "layers.4", "layers.5", "layers.6", "norm", "output"],
            ],
            ["'layers.6'"],
        ),
        (  # 0.3.0's name in a v0.2.2 file: the legacy run had no such module either
            [
                ["tok_embeddings", "layers.0", "layers.1", "layers.2"],
                ["layers.3", "layers.4", "layers.5", "norm", "lm_head"],
            ],
            ["'lm_head'"],
        ),
        (  # the whole ModuleDict is no stage unit; and a typo, both named
            [["tok_embeddings", "layers"], ["norm", "ouptut"]],
            ["'layers'", "'ouptut'"],
        ),
    ],
)
def test_an_unknown_module_is_an_error_and_not_carried(tmp_path, parts, named):
    m = _migrate(
        tmp_path, f"pipeline_parallel_degree = 2\nmodule_fqns_per_model_part = {_list(parts)}"
    )
    assert m.status == 1
    assert m.findings("upstream-gone", KEY) == [("upstream-gone", "error", KEY)]
    # titan-validate's own pipeline-layout finding names the list too; this is the target's
    (finding,) = [
        d for d in m.entry["diagnostics"] if d["path"] == KEY and d["code"] == "upstream-gone"
    ]
    for name in named:
        assert name in finding["message"]
    assert "6-layer model" in finding["message"]
    assert "module_fqns_per_model_part" in finding["hint"]
    assert finding["line"] == 10  # the line that writes the list
    assert _stages(m) is None  # 0.3.0 splits evenly instead of dropping a name silently
    assert m.outcome(KEY)["status"] == "dropped"
    assert any("module_fqns_per_model_part" in todo for todo in m.todos)


def test_unknown_names_without_pipeline_parallel_are_a_warning(tmp_path):
    parts = [["tok_embeddings", "layers.0"], ["layers.1", "head"]]
    m = _migrate(tmp_path, f"module_fqns_per_model_part = {_list(parts)}")
    assert m.findings("upstream-gone", KEY) == [("upstream-gone", "warning", KEY)]
    assert m.status == 0


def test_a_list_without_renamed_modules_is_carried_as_it_is(tmp_path):
    """A list that leaves the head out has nothing to rename: the target carries it as it is
    (titan-validate's pipeline-layout rule, not the target, says the head is missing)."""
    parts = [
        ["tok_embeddings", "layers.0", "layers.1", "layers.2"],
        ["layers.3", "layers.4", "layers.5", "norm"],
    ]
    m = _migrate(
        tmp_path, f"pipeline_parallel_degree = 2\nmodule_fqns_per_model_part = {_list(parts)}"
    )
    assert _stages(m) == norm(repr(parts))
    assert m.findings(path=KEY) == [("pipeline-layout", "error", KEY)]


def test_titan_target_keeps_titans_names(tmp_path):
    path = tmp_path / "pp.toml"
    body = f"pipeline_parallel_degree = 2\nmodule_fqns_per_model_part = {_list(LLAMA_6)}"
    path.write_text(toml(f"[parallelism]\n{body}\n"), encoding="utf-8")
    status, out, err = run_migrate(path)
    assert status == 0, err
    assert '"norm", "output"' in out and "lm_head" not in out

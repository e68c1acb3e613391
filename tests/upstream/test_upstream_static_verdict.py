"""The static check's verdict on upstream registry modules agrees with building them in 0.3.0.

Hypothesis writes modules in the shape hand-written 0.3.0 registries have (a real family and
flavor, config classes called with valid values, a statement that edits the built config) and
plants at most one mistake of a kind users make. All modules are built in one run of
``build_runner.py`` in the real torchtitan; then, per module:

- a build that raised was predicted: the static check has an error (every ``TypeError``,
  ``ValueError``, ``AttributeError`` or ``KeyError`` of construction is seen without running);
- a module with no mistake builds and the static check has no error (no false alarm);
- a wrong-typed value builds (dataclasses do not check types) and the static check says so.
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.upstream.building import build

EXAMPLES = int(os.environ.get("TITAN_UPSTREAM_EXAMPLES", 200 if os.environ.get("CI") else 120))

FLAVORS = {
    "llama3": ("debugmodel", "8B", "70B"),
    "qwen3": ("debugmodel", "0.6B", "debugmodel_moe"),
    "deepseek_v3": ("debugmodel", "16B"),
    "gpt_oss": ("debugmodel", "20b"),
}

MISTAKES = (
    None,
    "unknown-keyword",
    "positional",
    "flavor",
    "guard",
    "attribute",
    "registry-argument",
    "refused-backend",
    "wrong-type",
    "literal",
)
BUILDS_ANYWAY = {None, "wrong-type", "literal"}
"""Mistakes a build in 0.3.0 does not catch (dataclasses take any value)."""


@st.composite
def modules(draw, mistake: str | None) -> tuple[str, str | None]:
    family = draw(st.sampled_from(sorted(FLAVORS)))
    flavor = draw(st.sampled_from(FLAVORS[family]))
    training = {
        "steps": draw(st.integers(1, 10_000)),
        "local_batch_size": draw(st.integers(1, 16)),
        "seq_len": draw(st.sampled_from([512, 2048, 8192])),
    }
    checkpoint = {
        "interval": draw(st.integers(1, 1000)),
        "keep_latest_k": draw(st.sampled_from([0, 2, 5])),
    }
    scheduler = {"decay_type": draw(st.sampled_from(["linear", "sqrt", "cosine"]))}
    registry_args = ""
    statement = f"config.training.steps = {draw(st.integers(1, 50))}"
    positional = ""
    if mistake == "unknown-keyword":
        key = draw(st.sampled_from(["stpes", "seqlen", "warmup_steps", "tensor_parallel_degree"]))
        training[key] = 1
    elif mistake == "positional":
        positional = "1, "
    elif mistake == "flavor":
        flavor = draw(st.sampled_from([flavor.lower() + "x", flavor.upper() + "_", "tiny"]))
    elif mistake == "guard":
        checkpoint[draw(st.sampled_from(["interval", "keep_latest_k"]))] = draw(
            st.sampled_from([0, 1, -3])
        )
        if checkpoint.get("keep_latest_k") == 0 and checkpoint["interval"] >= 1:
            checkpoint["keep_latest_k"] = 1
    elif mistake == "attribute":
        statement = draw(
            st.sampled_from(
                ["config.training.stpes = 3", "config.checkpoint.intervall = 5", "config.lr = 1"]
            )
        )
    elif mistake == "registry-argument":
        registry_args = ", atn_backend='flex'"
    elif mistake == "refused-backend":
        registry_args = ", attn_backend='sdpa'"
    elif mistake == "wrong-type":
        training["steps"] = str(training["steps"])
    elif mistake == "literal":
        scheduler["decay_type"] = draw(st.sampled_from(["linaer", "Linear", "cos"]))

    def call(values: dict) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in values.items())

    text = (
        "from torchtitan.components.checkpoint import CheckpointManager\n"
        "from torchtitan.components.optimizer import LRSchedulersContainer\n"
        "from torchtitan.config import ParallelismConfig, TrainingConfig\n"
        f"from torchtitan.models.{family} import model_registry\n"
        "from torchtitan.trainer import Trainer\n\n\n"
        "def planted() -> Trainer.Config:\n"
        "    config = Trainer.Config(\n"
        f"        model_spec=model_registry({flavor!r}{registry_args}),\n"
        f"        training=TrainingConfig({positional}{call(training)}),\n"
        "        parallelism=ParallelismConfig(),\n"
        f"        checkpoint=CheckpointManager.Config({call(checkpoint)}),\n"
        f"        lr_scheduler=LRSchedulersContainer.Config({call(scheduler)}),\n"
        "    )\n"
        f"    {statement}\n"
        "    return config\n"
    )
    return text, mistake


def test_the_static_verdict_agrees_with_the_build(upstream_python: Path, tmp_path: Path) -> None:
    from titan.migrate.registry_check import check_text

    cases: list[tuple[Path, str | None, list]] = []

    for planted in MISTAKES:  # every kind, each with its share of the examples

        @settings(
            max_examples=max(4, EXAMPLES // len(MISTAKES)),
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        )
        @given(modules(planted))
        def collect(case: tuple[str, str | None]) -> None:
            text, mistake = case
            path = tmp_path / f"planted_{len(cases)}.py"
            path.write_text(text, encoding="utf-8")
            errors = [d for d in check_text(text, shown=path.name) if d.severity.value == "error"]
            cases.append((path, mistake, errors))

        collect()
    dumped = build(upstream_python, [p for p, _, _ in cases], tmp_path / "built.json", timeout=1800)
    problems = []
    kinds = set()
    for path, mistake, errors in cases:
        entry = dumped[str(path)]
        function = entry["functions"].get("planted", {"error": entry["error"]})
        raised = "error" in function
        kinds.add(mistake)
        if raised and not errors:
            problems.append(
                f"{path.name} ({mistake}): the build raised, the static check saw "
                f"nothing: {function['error'][-300:]}"
            )
        if mistake is None and (raised or errors):
            problems.append(
                f"{path.name}: no mistake, but the build says {function.get('error', '')[-300:]} "
                f"and the static check {[str(e) for e in errors]}"
            )
        if not raised and mistake not in BUILDS_ANYWAY:
            problems.append(f"{path.name} ({mistake}): the planted mistake built")
        if mistake in ("wrong-type", "literal") and not errors:
            problems.append(f"{path.name} ({mistake}): not found statically")
    assert not problems, "\n".join(problems[:20])
    assert kinds == set(MISTAKES)

"""Generated legacy TOMLs, migrated for torchtitan 0.3.0 and built in the real package.

The strategy of ``tests/test_migrate_properties.py`` writes valid legacy TOMLs (random keys of
the v0.2.2 schema with random valid values, hostile strings among them, a real model and flavor,
converters with their tables). Each is migrated with the 0.3.0 target; all modules are built in
one run of ``build_runner.py`` in the upstream environment; then every module must import and
build (no hostile string may run: a module that sets ``sys.modules["pwned"]`` would be seen), and
every key must hold the legacy value at its 0.3.0 home or be reported, as in
``test_upstream_build.py``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import tomli_w
from hypothesis import HealthCheck, given, settings
from titan.migrate.codegen.render_code import render_module
from titan.migrate.plan.build import build_plan
from titan.migrate.plan.migration_plan import Plan
from titan.migrate.targets.upstream import retarget
from titan.migrate.targets.upstream_homes import upstream_homes

from tests.test_migrate_properties import documents
from tests.upstream.building import build
from tests.upstream.test_upstream_build import _equal, _expected, _json, _reported

EXAMPLES = int(os.environ.get("TITAN_UPSTREAM_EXAMPLES", 300 if os.environ.get("CI") else 120))
PROBE = '\nimport sys as _s\nassert "pwned" not in _s.modules, "a hostile string ran"\n'


def _refused_on_purpose(plan: Plan) -> bool:
    """Whether the migration said the function cannot build: the legacy file has an error of
    its own, or a value the legacy run used that 0.3.0 refuses (v0.2.2 refused the run too)."""
    return any(
        d.severity.value == "error"
        and (not d.code.startswith("upstream-") or "will not build" in d.message)
        for d in plan.diagnostics
    )


def test_generated_documents_build_in_torchtitan(upstream_python: Path, tmp_path: Path) -> None:
    cases: list[tuple[Plan, Path]] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(documents())
    def collect(document: dict[str, Any]) -> None:
        index = len(cases)
        toml = tmp_path / f"case_{index}.toml"
        toml.write_text(tomli_w.dumps(document), encoding="utf-8")
        plan = retarget(build_plan(toml))
        assert plan.ok, [str(d) for d in plan.diagnostics]
        module = tmp_path / f"case_{index}.py"
        module.write_text(render_module([plan]) + PROBE, encoding="utf-8")
        cases.append((plan, module))

    collect()
    result = tmp_path / "built.json"
    dumped = build(upstream_python, [m for _, m in cases], result, timeout=1800)
    problems = []
    for plan, module in cases:
        entry = dumped[str(module)]
        if entry["error"]:
            problems.append(f"{module.name}: {entry['error']}")
            continue
        function = entry["functions"].get(plan.function)
        if function is None or "error" in function:
            if not _refused_on_purpose(plan):
                problems.append(f"{module.name}: {function and function['error']}")
            continue
        config = function["config"]
        for key in upstream_homes():
            if key not in plan.effective or _reported(plan, key):
                continue
            for got, want in _expected(plan, key, config):
                if not _equal(_json(got), _json(want)):
                    problems.append(f"{module.name}: {key}: 0.3.0 has {got!r}, legacy {want!r}")
    assert not problems, "\n".join(problems[:40])

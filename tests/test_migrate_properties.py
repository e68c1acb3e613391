"""Properties of the migration on generated inputs: code == live config, hostile strings inert.

A hypothesis strategy writes valid legacy TOMLs (random keys of the v0.2.2 schema, random valid
values, a real model and flavor, converters with their tables); each is migrated, the module is
executed, and its config must equal the live plan's config. CI runs 2000 examples; a sample of
the modules is checked with ruff at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
import typing
from pathlib import Path
from typing import Any

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from titan.migrate.codegen.render_code import render_module
from titan.migrate.plan.build import build_plan
from titan.migrate.plan.legacy_values import flatten
from titan.migrate.targets.live import instantiate
from titan.schemas import flavors
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.rules import CONVERTER_NAMES
from titan.schemas.spec import SectionSpec

from tests.test_migrate import same_config

RUFF = Path(sys.executable).with_name("ruff")
EXAMPLES = 2000 if os.environ.get("CI") else 300

STRUCTURAL = {
    "model.name",
    "model.flavor",
    "model.converters",
    "job.custom_config_module",
    "experimental.custom_args_module",
    "experimental.custom_import",
    "job.config_file",
}
"""Keys the strategy sets on purpose (or never: importing modules is not what this tests)."""

HOSTILE = [
    'a "quoted" value',
    "it's",
    "back\\slash\\",
    "new\nline\r\n\ttab",
    '"""triple""" and \'\'\'',
    "unicode: é 中文 🚀 \u2028 \u00a0",
    "\x00\x1b[31mred",
    "__import__('sys').modules.__setitem__('pwned', 1)",
    '"); __import__("sys").modules.__setitem__("pwned", 1); ("',
    "{__import__('sys').modules.__setitem__('pwned', 1)}",
    "# not a comment",
    "\\N{BULLET} \\x41 \\u0041",
    "",
]


def leaves(section: SectionSpec, prefix: str = "") -> list[tuple[str, Any]]:
    found = []
    for spec in section.fields:
        if isinstance(spec.annotation, SectionSpec):
            found += leaves(spec.annotation, f"{prefix}{spec.name}.")
        else:
            found.append((f"{prefix}{spec.name}", spec.annotation))
    return found


LEAVES = [(k, a) for k, a in leaves(LEGACY_SPEC) if k not in STRUCTURAL]

text = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=20))
floats = st.floats(allow_nan=True, allow_infinity=True, width=64)


def values(annotation: Any) -> st.SearchStrategy:
    """Valid TOML values for a legacy field type (``None`` cannot be written in TOML)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(min_value=-(2**63), max_value=2**63 - 1)
    if annotation is float:
        return floats
    if annotation is str:
        return text
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin in (typing.Union, __import__("types").UnionType):
        return st.one_of([values(a) for a in args if a is not type(None)])
    if origin is list:
        return st.lists(values(args[0]), max_size=3)
    raise AssertionError(f"no strategy for {annotation}")


@st.composite
def documents(draw) -> dict[str, Any]:
    document: dict[str, Any] = {}

    def put(key: str, value: Any) -> None:
        *parents, name = key.split(".")
        table = document
        for part in parents:
            table = table.setdefault(part, {})
        table[name] = value

    family = draw(st.sampled_from(sorted(flavors.FLAVORS)))
    if family != "flux":  # flux needs its custom module: covered by legacy_configs
        put("model.name", family)
        put("model.flavor", draw(st.sampled_from(sorted(flavors.flavor_names(family)))))
    chosen = draw(st.lists(st.sampled_from(LEAVES), max_size=25, unique_by=lambda kv: kv[0]))
    for key, annotation in chosen:
        put(key, draw(values(annotation)))
    if draw(st.booleans()):
        family = draw(st.sampled_from(["float8", "mx"]))
        names = [n for n in CONVERTER_NAMES if n.endswith(family)]
        put("model.converters", draw(st.lists(st.sampled_from(names), unique=True, max_size=2)))
    return document


def test_generated_configs_round_trip_through_code(tmp_path):
    written: list[Path] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(documents())
    def check(document: dict[str, Any]) -> None:
        toml = tmp_path / "case.toml"
        toml.write_text(tomli_w.dumps(document), encoding="utf-8")
        plan = build_plan(toml)
        assert plan.ok, [str(d) for d in plan.diagnostics]
        code = render_module([plan])
        namespace: dict[str, Any] = {"__name__": "migrated_case"}
        exec(compile(code, "migrated_case.py", "exec"), namespace)
        config = namespace[plan.function]()
        same_config(config, instantiate(plan))
        assert "pwned" not in sys.modules
        # Independently of both renderers: each carried key holds the TOML's value.
        written_values = flatten(document)
        for outcome in plan.outcomes.values():
            if (
                outcome.status != "carried"
                or "[" in outcome.paths[0]
                or outcome.key == "model.converters"
            ):
                continue
            for path in outcome.paths:
                same_config(attribute(config, path), written_values[outcome.key])
        if len(written) < 150:
            path = tmp_path / f"case_{len(written)}.py"
            path.write_text(code, encoding="utf-8")
            written.append(path)

    check()
    done = subprocess.run(
        [str(RUFF), "format", "--check", *map(str, written)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def attribute(config: Any, path: str) -> Any:
    for part in path.split("."):
        config = getattr(config, part)
    return config


def test_hostile_strings_come_back_exactly(tmp_path):
    """Every string field at once, for each hostile string: the same string, nothing run."""
    string_keys = [k for k, a in LEAVES if a is str or a == str | None]
    list_keys = [
        k for k, a in LEAVES if typing.get_origin(a) is list and typing.get_args(a) == (str,)
    ]
    assert len(string_keys) > 20 and list_keys
    for i, hostile in enumerate(HOSTILE):
        document: dict[str, Any] = {"model": {"name": "llama3", "flavor": "debugmodel"}}
        for key in [*string_keys, *list_keys]:
            section, _, name = key.rpartition(".")
            table = document
            for part in section.split("."):
                table = table.setdefault(part, {})
            table[name] = [hostile, hostile] if key in list_keys else hostile
        toml = tmp_path / f"hostile_{i}.toml"
        toml.write_text(tomli_w.dumps(document), encoding="utf-8")
        plan = build_plan(toml)
        code = render_module([plan])
        namespace: dict[str, Any] = {"__name__": f"hostile_{i}"}
        exec(compile(code, f"hostile_{i}.py", "exec"), namespace)
        assert "pwned" not in sys.modules, hostile
        config = namespace[plan.function]()
        same_config(config, instantiate(plan))
        carried = [o for o in plan.outcomes.values() if o.status == "carried"]
        assert carried
        for outcome in carried:
            value = config
            for part in outcome.paths[0].split("."):
                value = getattr(value, part)
            key = outcome.key
            assert value == ([hostile, hostile] if key in list_keys else hostile), key

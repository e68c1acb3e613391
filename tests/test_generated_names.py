"""Names a generated ``config_registry.py`` invents never clash with what it imports or relies on.

Every Python keyword, soft keyword and builtin, and every name a generated module imports or
defines (read from a real generated module), is used as a custom section name, a field name and a
registry function name (through the TOML file name and ``model.name``). The module must be
``ruff``-clean, import, and every function must return exactly the live config of its TOML.
"""

from __future__ import annotations

import ast
import builtins
import io
import keyword
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from titan.migrate.codegen.render_code import function_names, render_module
from titan.migrate.plan.build import build_plan
from titan.migrate.targets.live import instantiate
from titan.schemas.toml_check import CheckOptions

from tests.test_migrate import REPO, RUFF, load_module, same_config

LEGACY = REPO / "legacy_configs"

RICH_EXTENSION = """
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass
class Alerts:
    mode: Literal["a", "b"] = "a"
    extra: Any = 1
    tags: list[str] = field(default_factory=list)


@dataclass
class Team:
    alerts: Alerts = field(default_factory=Alerts)


@dataclass
class Training:
    probe_steps: int = 0


@dataclass
class JobConfig:
    team: Team = field(default_factory=Team)
    training: Training = field(default_factory=Training)
"""


def _module_names(source: str) -> set[str]:
    """Every name a module binds at its top level: imports, classes, functions, assignments."""
    found = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.ClassDef | ast.FunctionDef):
            found.add(node.name)
        elif isinstance(node, ast.Assign):
            found |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return found


@pytest.fixture(scope="module")
def generated_names(tmp_path_factory) -> set[str]:
    """The names of a module that uses every import the renderer has: two families (the family
    packages), an unsupported model, a custom module with Literal, Any, list defaults, a new
    section and an extended one."""
    folder = tmp_path_factory.mktemp("rich")
    (folder / "rich_ext.py").write_text(RICH_EXTENSION, encoding="utf-8")
    (folder / "custom.toml").write_text(
        '[job]\ncustom_config_module = "rich_ext"\n[team.alerts]\nmode = "b"\ntags = ["x"]\n'
        "[training]\nprobe_steps = 3\n",
        encoding="utf-8",
    )
    (folder / "vlm.toml").write_text('[model]\nname = "vlm"\n', encoding="utf-8")
    tomls = [
        LEGACY / "llama3" / "llama3_8b.toml",
        LEGACY / "qwen3" / "qwen3_0.6b.toml",
        LEGACY / "llama3_ft" / "debug_model.toml",
        LEGACY / "flux" / "flux_dev_model.toml",
        folder / "custom.toml",
        folder / "vlm.toml",
    ]
    source = render_module([build_plan(t) for t in tomls])
    names = _module_names(source)
    wanted = {"dataclass", "field", "Any", "Literal", "annotations", "unsupported_model"}
    assert wanted | {"llama3", "qwen3", "Trainer", "TrainingConfig"} <= names, names
    return names


def all_names(generated: set[str]) -> list[str]:
    return sorted(
        {*keyword.kwlist, *keyword.softkwlist, "type", *dir(builtins), *generated, "config"}
    )


def _check_module(tomls: list[Path], folder: Path, name: str) -> str:
    """Migrate ``tomls`` into one module; it is ruff-clean and each function equals the live
    config of its TOML. Returns the module source."""
    plans = [build_plan(toml) for toml in tomls]
    assert all(p.ok for p in plans), [d for p in plans for d in p.errors()]
    code = render_module(plans)
    path = folder / f"{name}.py"
    path.write_text(code, encoding="utf-8")
    for command in (
        [str(RUFF), "format", "--check", "--diff", str(path)],
        [str(RUFF), "check", "--no-cache", "--select", "E,F,I,B,UP", "--ignore", "E501", str(path)],
    ):
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        assert done.returncode == 0, done.stdout + done.stderr
    try:
        module = load_module(path, name)
        for plan, function in zip(plans, function_names(plans), strict=True):
            same_config(getattr(module, function)(), instantiate(plan), function)
    finally:
        sys.modules.pop(name, None)
    return code


def test_every_reserved_name_as_a_section_and_a_field(generated_names, tmp_path):
    names = [n for n in all_names(generated_names) if not keyword.iskeyword(n)]
    # Each name is a section of its own (JobConfig field -> generated class and trainer field),
    # and a field of one section, typed so that defaults use list, dict and nested sections.
    kinds = [
        ("int", "0", lambda i: str(i)),
        ("list[str]", "field(default_factory=list)", lambda i: f'["v{i}"]'),
        ("dict[str, int]", "field(default_factory=dict)", lambda i: f"{{ k = {i} }}"),
        ("float", "1.5", lambda i: "inf" if i % 2 else "-0.25"),
    ]
    classes = [
        "from dataclasses import dataclass, field\n\n",
        "@dataclass\nclass Leaf:\n    value: int = 0\n\n",
    ]
    names_fields = []
    toml = ['[job]\ncustom_config_module = "names_ext"\n']
    values = []
    for index, name in enumerate(names):
        annotation, default, value = kinds[index % len(kinds)]
        names_fields.append(f"    {name}: {annotation} = {default}\n")
        values.append(f"{name} = {value(index)}\n")
        classes.append(f"@dataclass\nclass Section{index}:\n    value: int = 0\n\n")
    names_fields.append("    nested: Leaf = field(default_factory=Leaf)\n")
    classes.append("@dataclass\nclass Names:\n" + "".join(names_fields) + "\n")
    root = [
        f"    {name}: Section{i} = field(default_factory=Section{i})\n"
        for i, name in enumerate(names)
    ]
    root.append("    names: Names = field(default_factory=Names)\n")
    classes.append("@dataclass\nclass JobConfig:\n" + "".join(root))
    (tmp_path / "names_ext.py").write_text("".join(classes), encoding="utf-8")
    toml += [f"[{name}]\nvalue = {i + 1}\n" for i, name in enumerate(names)]
    toml += ["[names]\n", *values, "[names.nested]\nvalue = 7\n"]
    (tmp_path / "names.toml").write_text("".join(toml), encoding="utf-8")

    plan = build_plan(tmp_path / "names.toml")
    code = _check_module([tmp_path / "names.toml"], tmp_path, "names_registry")
    assert not [d for d in plan.diagnostics if d.code == "extension-unreadable"]
    renamed = {d.path for d in plan.diagnostics if d.code == "renamed-class"}
    assert {"Trainer", "TrainingConfig", "Any", "Literal", "Exception", "any", "Team"} <= renamed
    # Names Python keeps for itself cannot be dataclass fields: reported, not carried.
    dropped = {d.path for d in plan.diagnostics if d.code == "extension-class"}
    assert {"__debug__", "__doc__", "names.__import__"} <= dropped
    statuses = {o.status for k, o in plan.outcomes.items() if k.startswith("names.__doc__")}
    assert statuses == {"dropped"}
    assert plan.outcomes["names.list"].status == "carried" and not plan.errors()
    assert "from dataclasses import field as dataclass_field" in code  # a field is named field


def test_every_reserved_name_as_a_function(generated_names, tmp_path):
    tomls = []
    for name in all_names(generated_names):
        path = tmp_path / f"{name}.toml"
        path.write_text(f'[model]\nname = "{name}"\n[training]\nsteps = 3\n', encoding="utf-8")
        tomls.append(path)
    # A real family too, so that the family packages are imported by name.
    tomls.append(LEGACY / "llama3" / "llama3_8b.toml")
    code = _check_module(tomls, tmp_path, "functions_registry")
    defined = [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]
    assert "llama3_" in defined and "llama3" not in defined  # `llama3` is the imported package
    assert "class_" in defined and "list_" in defined and "config_" in defined
    plan = build_plan(tmp_path / "list.toml")
    assert [d.message for d in plan.diagnostics if d.code == "renamed-function"] == [
        "the registry function is `list_`: `list` is a Python builtin"
    ]


def test_two_custom_modules_with_one_section_name(tmp_path):
    for module in ("ext_a", "ext_b"):
        (tmp_path / f"{module}.py").write_text(
            textwrap.dedent(
                """
                from dataclasses import dataclass, field


                @dataclass
                class Team:
                    size: int = 1


                @dataclass
                class JobConfig:
                    team: Team = field(default_factory=Team)
                """
            ),
            encoding="utf-8",
        )
        (tmp_path / f"{module}.toml").write_text(
            f'[job]\ncustom_config_module = "{module}"\n[team]\nsize = {len(module)}\n',
            encoding="utf-8",
        )
    plans = [build_plan(tmp_path / f"{m}.toml") for m in ("ext_a", "ext_b")]
    code = render_module(plans)
    assert "class Team:" in code and "class Team2:" in code
    path = tmp_path / "two_registry.py"
    path.write_text(code, encoding="utf-8")
    try:
        module = load_module(path, "two_registry")
        for plan, function in zip(plans, function_names(plans), strict=True):
            config, live = getattr(module, function)(), instantiate(plan)
            assert config.team.size == live.team.size == 5
            assert type(config.team).__name__ != "Team" or function.endswith("ext_a")
    finally:
        sys.modules.pop("two_registry", None)


def test_a_keyword_section_is_reported_not_a_traceback(tmp_path):
    (tmp_path / "kw.toml").write_text("[class]\nvalue = 1\n", encoding="utf-8")
    plan = build_plan(tmp_path / "kw.toml")
    assert plan.ok and [d.code for d in plan.errors()] == ["unknown-key"]
    out = io.StringIO()
    from titan.migrate.plan.report import render_text

    render_text([plan], plan.diagnostics, out=out, color=False)
    assert "Traceback" not in out.getvalue() and "class" in out.getvalue()


def test_an_infinite_default_after_a_field_named_float(tmp_path, fresh_module_name):
    # Only an imported module can have an infinite default (the static reader reads literals).
    (tmp_path / f"{fresh_module_name}.py").write_text(
        textwrap.dedent(
            """
            from __future__ import annotations  # the fields below shadow float and list

            import math
            from dataclasses import dataclass, field


            @dataclass
            class Limits:
                float: float = 1.0
                ceiling: float = math.inf
                list: list[str] = field(default_factory=lambda: [])
                names: list[str] = field(default_factory=lambda: [])


            @dataclass
            class Other:
                ceiling: float = -math.inf


            @dataclass
            class JobConfig:
                limits: Limits = field(default_factory=Limits)
                other: Other = field(default_factory=Other)
            """
        ),
        encoding="utf-8",
    )
    toml = tmp_path / "limits.toml"
    toml.write_text(
        f'[job]\ncustom_config_module = "{fresh_module_name}"\n[limits]\nfloat = 2.0\nnames = ["a"]\n'
        "[other]\nceiling = 3.0\n",
        encoding="utf-8",
    )
    plan = build_plan(toml, options=CheckOptions(allow_import=True), era="v0.2.2")
    assert plan.lossless() and not plan.errors(), plan.diagnostics
    code = render_module([plan])
    assert "ceiling: float = dataclass_field" not in code  # `field` is not shadowed here
    assert 'ceiling: float = field(default_factory=lambda: float("inf"))' in code
    assert "list: list[str] = field(default_factory=lambda: [])" in code
    assert "names: list[str] = field(default_factory=lambda: [])" in code
    assert 'ceiling: float = float("-inf")' in code  # no field named float in Other
    path = tmp_path / "limits_registry.py"
    path.write_text(code, encoding="utf-8")
    try:
        module = load_module(path, "limits_registry")
        config = getattr(module, function_names([plan])[0])()
        same_config(config, instantiate(plan))
        assert config.limits.ceiling == math.inf and type(config).__name__.endswith("TrainerConfig")
    finally:
        sys.modules.pop("limits_registry", None)

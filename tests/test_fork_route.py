"""A fork's route from its TOMLs to a lossless migration: every hint followed ends there or in an
error, never in a value dropped at exit 0.

A fork folder (its own flavor ``1B`` built by its model registry package, its converter
``npu_rms_norm``, keys of its own under ``[model]`` and a section ``[infra]``) is taken through
what the findings ask for: ``titan-migrate --scaffold-extension``, then the ``[tool.titan]`` lines
the hints name (with the user's package written where the hint has a placeholder). Then
``titan-validate`` is clean, ``titan-migrate`` is lossless, the fork's values are in the built
config (live and generated alike), and the generated module passes ``titan-validate
--allow-import``. The steps on the way (a converter declared without its class, a flavor without
its registry, ``[model]`` fields of a family titan cannot name) are errors with the line to write.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from titan.migrate.plan.build import build_plan
from titan.migrate.targets.live import instantiate
from titan.schemas import project

from tests.test_migrate import load_module, same_config

REGISTRY = '''\
"""The fork's llama3 flavors: titan's debug model with fewer layers."""

import dataclasses

from titan.models.llama3 import model_registry as titan_registry

LAYERS = {"1B": 2}


def model_registry(flavor: str):
    """The fork's flavor ``flavor`` of llama3, labelled with its own name."""
    spec = titan_registry("debugmodel")
    spec.model.n_layers = LAYERS[flavor]
    return dataclasses.replace(spec, flavor=flavor)
'''

CONVERTERS = '''\
"""The fork's converters."""

import dataclasses

from titan.protocols.model_converter import ModelConverter


class NpuRmsNorm(ModelConverter):
    """Swaps the RMS norms for the fork's fused kernel (nothing to swap on this machine)."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(ModelConverter.Config):
        """The fused norm's options."""

        eps_override: float | None = None
        """An epsilon other than the model's."""
'''

TOMLS = {
    "configs/llama3_1b.toml": """\
        [model]
        name = "llama3"
        flavor = "1B"
        converters = ["npu_rms_norm"]
        npu_fused_attention = false
        npu_zones = ["x", "y"]

        [infra]
        cluster = "npu-a"
        nodes = 4

        [training]
        steps = 10
        """,
    "configs/llama3_debug.toml": """\
        [model]
        name = "llama3"
        flavor = "debugmodel"
        npu_fused_attention = true
        npu_zones = ["z"]

        [infra]
        cluster = "npu-b"
        nodes = 1

        [training]
        steps = 3
        """,
}


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


@pytest.fixture
def fork(tmp_path: Path) -> Path:
    """A fork's repository: its package (model registry, converter) and its TOMLs."""
    (tmp_path / ".git").mkdir()
    _write(
        tmp_path,
        {
            "pyproject.toml": '[project]\nname = "fork"\n',
            "forkpkg/__init__.py": "",
            "forkpkg/models/__init__.py": "",
            "forkpkg/models/llama3.py": REGISTRY,
            "forkpkg/converters.py": CONVERTERS,
            **TOMLS,
        },
    )
    project.forget()
    yield tmp_path
    project.forget()
    for name in [m for m in sys.modules if m == "forkpkg" or m.startswith("forkpkg.")]:
        del sys.modules[name]


def command(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m module ARGS`` in ``cwd``, with the fork's package importable."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(cwd), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


_LINE = re.compile(
    r"\[tool\.titan\] ((?:[a-z-]+ = (?:\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\")(?: and )?)+)"
)
_PLACEHOLDERS = {
    "yourpkg.models.llama3": "forkpkg.models.llama3",
    "package.module.Class": "forkpkg.converters.NpuRmsNorm",
}


def follow(root: Path, hint: str) -> None:
    """Write the ``[tool.titan]`` lines ``hint`` names into ``pyproject.toml``, as a user does:
    their own package where the hint has a placeholder."""
    for placeholder, real in _PLACEHOLDERS.items():
        hint = hint.replace(placeholder, real)
    found = _LINE.search(hint)
    assert found, hint
    pyproject = root / "pyproject.toml"
    document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    table = document.setdefault("tool", {}).setdefault("titan", {})
    for line in found.group(1).split(" and "):
        table.update(tomllib.loads(line))
    import tomli_w

    pyproject.write_text(tomli_w.dumps(document), encoding="utf-8")
    project.forget()


def findings(done: subprocess.CompletedProcess) -> list[dict]:
    return json.loads(done.stdout)["diagnostics"]


# --------------------------------------------------------------------------- the whole route


def test_following_every_hint_ends_in_a_lossless_migration(fork):
    first = findings(command("titan.cli.validate", "configs", "--format", "json", cwd=fork))
    assert sorted({d["code"] for d in first}) == [
        "unknown-converter",
        "unknown-flavor",
        "unknown-key",
    ]
    scaffold = next(d["hint"] for d in first if d["code"] == "unknown-key")
    assert "titan-migrate --scaffold-extension" in scaffold
    done = command("titan.cli.migrate", "--scaffold-extension", "configs", cwd=fork)
    assert done.returncode == 0, done.stderr
    # Reviewing the module, the fork's author writes the zones' type as their code has it.
    module = re.sub(
        r"(?m)^    npu_zones: .*$", '    npu_zones: tuple[str, ...] = ("x",)', done.stdout
    )
    assert "npu_zones: tuple[str, ...]" in module
    _write(fork, {"fork_ext.py": module})
    follow(fork, scaffold)

    for _ in range(4):  # each finding's hint, until the check is clean
        checked = command("titan.cli.validate", "configs", "--format", "json", cwd=fork)
        left = findings(checked)
        if not left:
            break
        assert {d["code"] for d in left} <= {"unknown-converter", "unknown-flavor"}, left
        follow(fork, left[0]["hint"])
    assert checked.returncode == 0 and left == [], checked.stdout

    tomls = sorted(TOMLS)
    report = command(
        "titan.cli.migrate", *tomls, "-o", "config_registry.py", "--format", "json", cwd=fork
    )
    # The converter's name alone cannot be built: the error's hint is the line with its class.
    assert report.returncode == 1, report.stdout + report.stderr
    found = [d for file in json.loads(report.stdout)["files"] for d in file["diagnostics"]]
    [error] = [d for d in found if d["severity"] == "error"]
    assert error["code"] == "undeclared-converter-class"
    assert 'converters = { npu_rms_norm = "package.module.Class" }' in error["hint"]
    follow(fork, error["hint"])

    report = command(
        "titan.cli.migrate", *tomls, "-o", "config_registry.py", "--format", "json", cwd=fork
    )
    # Nothing in the TOMLs says which torchtitan they were written for: the warning's hint is
    # the line that says so for the whole project.
    found = [d for file in json.loads(report.stdout)["files"] for d in file["diagnostics"]]
    undated = [d for d in found if d["code"] == "era-undated"]
    assert undated and all(d["severity"] == "warning" for d in undated), found
    follow(fork, undated[0]["hint"])

    report = command(
        "titan.cli.migrate", *tomls, "-o", "config_registry.py", "--format", "json", cwd=fork
    )
    assert report.returncode == 0, report.stdout + report.stderr
    result = json.loads(report.stdout)
    files = result["files"]
    assert result["lossless"] is True and [f["lossless"] for f in files] == [True, True], files
    keys = files[0]["keys"]
    assert files[1]["keys"]["model.npu_fused_attention"] == {
        "status": "carried",
        "paths": ["model_spec.model.npu_fused_attention"],
        "note": "",
    }
    assert keys["model.npu_zones"]["paths"] == ["model_spec.model.npu_zones"]
    assert keys["model.converters"]["status"] == "carried"
    assert files[1]["keys"]["infra.cluster"]["status"] == "carried"

    code = (fork / "config_registry.py").read_text(encoding="utf-8")
    assert "class ForkExtLlama3ModelConfig(Llama3Model.Config):" in code
    assert "npu_zones: tuple[str, ...] = " in code
    assert "from forkpkg.converters import NpuRmsNorm" in code
    assert "converters=[NpuRmsNorm.Config()]" in code
    checked = command(
        "titan.cli.validate", "config_registry.py", "--allow-import", "--no-cache", cwd=fork
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr

    # The values are in the config titan-train runs, and the generated function builds the same.
    sys.path.insert(0, str(fork))
    try:
        generated = load_module(fork / "config_registry.py", "fork_route_registry")
        plans = [build_plan(fork / toml) for toml in tomls]
        live = [instantiate(plan) for plan in plans]
        for config, function in zip(live, ("llama3_1b", "llama3_debug"), strict=True):
            same_config(getattr(generated, function)(), config)
    finally:
        sys.path.remove(str(fork))
        sys.modules.pop("fork_route_registry", None)
    fork_1b, debug = live
    model = fork_1b.model_spec.model
    assert (model.npu_fused_attention, model.npu_zones) == (False, ("x", "y"))
    assert (fork_1b.model_spec.flavor, model.n_layers) == ("1B", 2)  # the fork's registry built it
    assert [type(c).__qualname__ for c in fork_1b.model_converters.converters] == [
        "NpuRmsNorm.Config"
    ]
    assert (fork_1b.infra.cluster, fork_1b.infra.nodes) == ("npu-a", 4)
    assert (debug.model_spec.model.npu_fused_attention, debug.model_spec.model.npu_zones) == (
        True,
        ("z",),
    )
    assert debug.model_spec.model.n_layers == 6  # titan's debugmodel, with the fork's fields


# --------------------------------------------------------------------------- the steps on the way


FORK_MODEL_EXT = """\
from dataclasses import dataclass, field


@dataclass
class Model:
    npu_fused_attention: bool = False
    npu_zones: tuple[str, ...] = ("x",)


@dataclass
class Infra:
    cluster: str = "npu-a"
    nodes: int = 4


@dataclass
class JobConfig:
    model: Model = field(default_factory=Model)
    infra: Infra = field(default_factory=Infra)
"""


def _declare(root: Path, titan: str) -> None:
    """A ``[tool.titan]`` table of ``titan``'s lines, for a project of v0.2.2 files."""
    (root / "pyproject.toml").write_text(
        f'[tool.titan]\nera = "v0.2.2"\n{textwrap.dedent(titan)}', encoding="utf-8"
    )
    project.forget()


def _errors(plan) -> list:
    return [d for d in plan.diagnostics if d.severity.value == "error"]


def test_a_converter_declared_by_name_only_is_an_error_whose_hint_is_the_line(fork):
    _declare(
        fork,
        """\
        model-registries = { llama3 = "forkpkg.models.llama3" }
        flavors = { llama3 = ["1B"] }
        converters = ["npu_rms_norm", "npu_rope"]
        """,
    )
    plan = build_plan(fork / "configs/llama3_1b.toml")
    [error] = [d for d in _errors(plan) if d.code != "unknown-key"]
    assert error.code == "undeclared-converter-class" and error.path == "model.converters"
    assert error.span.line == 4
    assert error.hint.endswith(
        '[tool.titan] converters = { npu_rms_norm = "package.module.Class", npu_rope = '
        '"package.module.Class" } (titan-train imports it; titan-migrate writes its Config())'
    )
    assert plan.outcomes["model.converters"].status == "dropped"
    assert plan.root.get("model_converters.converters") == []


def test_a_converter_class_that_is_not_there_is_an_error(fork):
    _declare(
        fork,
        """\
        model-registries = { llama3 = "forkpkg.models.llama3" }
        flavors = { llama3 = ["1B"] }
        converters = { npu_rms_norm = "forkpkg.converters.NpuRmsNrom" }
        """,
    )
    plan = build_plan(fork / "configs/llama3_1b.toml")
    [error] = [d for d in _errors(plan) if d.code != "unknown-key"]
    assert error.code == "undeclared-converter-class"
    assert "`forkpkg.converters.NpuRmsNrom`" in error.message
    _declare(fork, 'converters = { npu_rms_norm = "nowhere_pkg.converters.NpuRmsNorm" }\n')
    plan = build_plan(fork / "configs/llama3_1b.toml")
    assert "undeclared-converter-class" in {d.code for d in _errors(plan)}


def test_a_declared_converter_class_is_named_not_imported(fork):
    _declare(
        fork,
        """\
        model-registries = { llama3 = "forkpkg.models.llama3" }
        flavors = { llama3 = ["1B"] }
        converters = { npu_rms_norm = "forkpkg.converters.NpuRmsNorm" }
        """,
    )
    plan = build_plan(fork / "configs/llama3_1b.toml")
    [converter] = plan.root.get("model_converters.converters")
    assert converter.cls == "forkpkg.converters:NpuRmsNorm.Config"
    assert plan.outcomes["model.converters"].status == "carried"
    assert "forkpkg" not in sys.modules  # titan-migrate never runs the fork's code


def test_a_declared_flavor_without_its_registry_is_an_error(fork):
    _write(fork, {"job.toml": '[model]\nname = "llama3"\nflavor = "1B"\n'})
    _declare(fork, 'flavors = { llama3 = ["1B"] }\n')
    plan = build_plan(fork / "job.toml")
    [error] = _errors(plan)
    assert error.code == "unsupported-model"
    assert 'model-registries = { llama3 = "yourpkg.models.llama3" }' in error.hint
    follow(fork, error.hint)
    plan = build_plan(fork / "job.toml")
    assert _errors(plan) == [] and plan.root.fields["model_spec"].module == "forkpkg.models.llama3"


def test_a_flavor_the_declared_registry_does_not_build_stays_an_error(fork):
    _write(
        fork,
        {
            "forkpkg/models/llama3.py": """\
                from titan.models.llama3 import model_registry as titan_registry

                LAYERS = {"1B": 2}


                def model_registry(flavor):
                    spec = titan_registry("debugmodel")
                    spec.model.n_layers = LAYERS[flavor]
                    return spec
                """,
            "job.toml": '[model]\nname = "llama3"\nflavor = "2B"\n',
        },
    )
    _declare(fork, 'model-registries = { llama3 = "forkpkg.models.llama3" }\n')
    plan = build_plan(fork / "job.toml")
    assert [d.code for d in _errors(plan)] == ["unknown-flavor"]
    # The command line's registry is the user's answer for this run: the check cannot know it.
    (fork / "pyproject.toml").unlink()
    project.forget()
    given = build_plan(fork / "job.toml", model_registries={"llama3": "forkpkg.models.llama3"})
    assert _errors(given) == []


def test_model_fields_of_a_family_titan_cannot_name_are_an_error(fork):
    _write(
        fork,
        {
            "fork_ext.py": """\
                from dataclasses import dataclass, field


                @dataclass
                class Model:
                    npu_fused_attention: bool = False


                @dataclass
                class JobConfig:
                    model: Model = field(default_factory=Model)
                """,
            "job.toml": '[model]\nname = "bamba"\nflavor = "9B"\nnpu_fused_attention = true\n',
        },
    )
    _declare(
        fork,
        """\
        extensions = ["fork_ext.py"]
        model-registries = { bamba = "forkpkg.models.llama3" }
        """,
    )
    plan = build_plan(fork / "job.toml")
    [error] = _errors(plan)
    assert (error.code, error.path) == ("extension-class", "model.npu_fused_attention")
    assert "model config class of `bamba`" in error.message
    assert plan.outcomes["model.npu_fused_attention"].status == "dropped"


def test_model_fields_without_a_model_to_hold_them_are_an_error(fork):
    _write(
        fork,
        {
            "fork_ext.py": "from dataclasses import dataclass, field\n\n\n@dataclass\n"
            "class Model:\n    npu_fused_attention: bool = False\n\n\n@dataclass\n"
            "class JobConfig:\n    model: Model = field(default_factory=Model)\n",
            "job.toml": '[model]\nname = "llama3"\nflavor = "1B"\nnpu_fused_attention = true\n',
        },
    )
    _declare(fork, 'extensions = ["fork_ext.py"]\nflavors = { llama3 = ["1B"] }\n')
    plan = build_plan(fork / "job.toml")
    assert sorted(d.code for d in _errors(plan)) == ["dropped-key", "unsupported-model"]
    assert plan.outcomes["model.npu_fused_attention"].status == "dropped"


# --------------------------------------------------------------------------- titan's side


def test_each_family_model_config_is_the_class_its_registry_builds():
    from titan.migrate.plan.model_keys import MODEL_CONFIGS
    from titan.migrate.targets.spec_types import load_class

    from titan.models import SUPPORTED_MODELS, model_registry

    assert sorted(MODEL_CONFIGS) == sorted(SUPPORTED_MODELS)
    for family, path in MODEL_CONFIGS.items():
        package = __import__(f"titan.models.{family}", fromlist=["FLAVORS"])
        spec = model_registry(family, package.FLAVORS[0])
        assert type(spec.model) is load_class(path), family


def test_extend_model_keeps_the_registrys_fields_and_refuses_another_class():
    import dataclasses

    from titan.models import extend_model, model_registry
    from titan.models.llama3 import Llama3Model
    from titan.models.qwen3 import Qwen3Model

    @dataclasses.dataclass(kw_only=True, slots=True)
    class WithSpec(Llama3Model.Config):
        """llama3 with a field named like extend_model's own parameters."""

        spec: str = "x"
        """A fork field whose name is also a parameter name of extend_model."""

    base = model_registry("llama3", "debugmodel")
    extended = extend_model(base, WithSpec, spec="y")
    assert type(extended.model) is WithSpec and extended.model.spec == "y"
    assert extended.model.n_layers == base.model.n_layers and extended.flavor == "debugmodel"

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Other(Qwen3Model.Config):
        """A fork field on another family's class."""

    with pytest.raises(TypeError, match="does not extend .*Llama3Model.Config"):
        extend_model(base, Other)


# --------------------------------------------------------------------------- types as written

TYPED_EXT = """\
from dataclasses import dataclass, field
from typing import Literal, Optional


@dataclass
class Infra:
    zones: tuple[str, ...] = ("a",)
    pair: tuple[int, str] = (1, "a")
    tags: list[str] = field(default_factory=list)
    limits: dict[str, int] = field(default_factory=dict)
    mode: Literal["fast", "safe"] = "safe"
    region: str | None = None
    backup: Optional[str] = None
    groups: list[tuple[str, ...]] | None = None
    shards: dict[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass
class JobConfig:
    infra: Infra = field(default_factory=Infra)
"""

TYPED_JOB = """\
[job]
custom_config_module = "typed_ext"

[infra]
zones = ["a", "b"]
pair = [2, "b"]
tags = ["t"]
limits = { cpu = 4 }
mode = "fast"
region = "eu"
groups = [["x", "y"], ["z"]]
shards = { a = [1, 2] }
"""


def test_every_field_type_and_value_is_kept_as_the_module_writes_it(tmp_path):
    from titan.migrate.codegen.render_code import render_module

    from titan.cli import validate

    _write(tmp_path, {"typed_ext.py": TYPED_EXT, "job.toml": TYPED_JOB, ".git/HEAD": ""})
    plan = build_plan(tmp_path / "job.toml", era="v0.2.2")
    assert plan.lossless(), [(d.code, d.message) for d in plan.diagnostics]
    assert {key: plan.outcomes[key].status for key in ("infra.limits", "infra.shards")} == {
        "infra.limits": "carried",
        "infra.shards": "carried",
    }
    code = render_module([plan])
    for line in (
        'zones: tuple[str, ...] = ("a",)',
        'pair: tuple[int, str] = (1, "a")',
        "tags: list[str] = field(default_factory=list)",
        "limits: dict[str, int] = field(default_factory=dict)",
        'mode: Literal["fast", "safe"] = "safe"',
        "region: str | None = None",
        "backup: str | None = None",
        "groups: list[tuple[str, ...]] | None = None",
        "shards: dict[str, tuple[int, ...]] = field(default_factory=dict)",
        'zones=("a", "b")',
        'pair=(2, "b")',
        'limits={"cpu": 4}',
        'groups=[("x", "y"), ("z",)]',
        'shards={"a": (1, 2)}',
    ):
        assert line in code, line
    path = tmp_path / "typed_registry.py"
    path.write_text(code, encoding="utf-8")
    module = load_module(path, "typed_registry")
    try:
        same_config(module.llama3_job(), instantiate(plan))
    finally:
        sys.modules.pop("typed_registry", None)
    out, err = io.StringIO(), io.StringIO()  # titan's own check: every value in its field's type
    argv = ["--registry", str(path), "--config", "llama3_job"]
    assert validate.run(argv, stdout=out, stderr=err) == 0, out.getvalue() + err.getvalue()


@pytest.mark.parametrize(
    ("value", "annotation", "expected"),
    [
        (["a", "b"], tuple[str, ...], ("a", "b")),
        ([1, "a"], tuple[int, str], (1, "a")),
        ([["a"], ["b", "c"]], list[tuple[str, ...]], [("a",), ("b", "c")]),
        ({"k": [1]}, dict[str, tuple[int, ...]], {"k": (1,)}),
        (["a"], tuple[str, ...] | None, ("a",)),
        (None, tuple[str, ...] | None, None),
        (["a"], list[str], ["a"]),
        ("fast", "Literal", "fast"),
    ],
)
def test_a_toml_value_takes_the_shape_of_its_field(value, annotation, expected):
    from titan.migrate.plan.extension_classes import conform
    from titan.migrate.targets.config_objects import same

    assert same(conform(value, annotation), expected)


@pytest.mark.parametrize("registry", [True, False])
def test_the_0_3_0_target_reports_the_fork_converter_and_model_fields(fork, registry):
    from titan.migrate.codegen.render_code import render_module
    from titan.migrate.targets.choice import UPSTREAM_030, converter

    _write(fork, {"fork_ext.py": FORK_MODEL_EXT})
    toml = "configs/llama3_1b.toml" if registry else "configs/llama3_debug.toml"
    if not registry:  # titan's own flavor: the fork's converter in titan's llama3 family
        text = (
            (fork / toml).read_text().replace("[infra]", "converters = ['npu_rms_norm']\n[infra]")
        )
        (fork / toml).write_text(text)
    _declare(
        fork,
        """\
        extensions = ["fork_ext.py"]
        model-registries = { llama3 = "forkpkg.models.llama3" }
        flavors = { llama3 = ["1B"] }
        converters = { npu_rms_norm = "forkpkg.converters.NpuRmsNorm" }
        """,
    )
    plan = converter(UPSTREAM_030)(build_plan(fork / toml))
    found = {(d.code, d.path, d.severity.value) for d in plan.diagnostics}
    assert ("upstream-gone", "model.converters", "error") in found
    assert ("extension-class", "model.npu_fused_attention", "warning") in found
    code = render_module([plan])  # written for 0.3.0: no titan config class in it
    assert "import NpuRmsNorm" not in code and "ForkExtLlama3ModelConfig" not in code

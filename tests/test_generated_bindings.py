"""Every name a generated ``config_registry.py`` binds is bound once, to what the code means.

Hostile TOML file names, ``model.name`` values and ``--model-registry`` package names (private,
dunder, keyword, builtin, non-ASCII, punctuation, digits first, the names of titan's and torchtitan
0.3.0's imports and helpers, packages that share a last name) are migrated for both targets.
Each module must be ``ruff format``-clean, import, and every registry function must run: titan's
functions return the live config of their TOML, the 0.3.0 functions run against a stand-in
``torchtitan`` package (torchtitan is not installed here) that records which import every call
went to. The function names must be public, and exactly the ones the report lists.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.abc
import importlib.machinery
import json
import subprocess
import sys
import tempfile
import types
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from titan.migrate.codegen.bindings import model_call
from titan.migrate.codegen.render_code import DERIVE_DEPTH, function_names, render_module
from titan.migrate.plan import report
from titan.migrate.plan.build import build_plan
from titan.migrate.targets.choice import retarget
from titan.migrate.targets.live import instantiate

from tests.test_migrate import REPO, RUFF, load_module, same_config

TARGETS = ("titan", "torchtitan==0.3.0")

HOSTILE_STEMS = (
    "_x",
    "__getattr__",
    "__init__",
    "None",
    "class",
    "1st",
    "ünïcode",
    "a-b",
    "a_b",
    "中文",
    "__",
    "-",
    "x" * 80,
    "default_adamw",
    "decoder_vocab_size",
    "abspath",
    "Trainer",
    "model_registry",
    "model_spec",
    "config",
    "field",
    "print",
    "llama3",
    "qwen3_5",
    "kimi_k2_7",
    "pkga_models",
    "mypkg_llama3",
)
"""File names (without ``.toml``) that are no public identifier or name something imported."""

HOSTILE_MODELS = (
    "llama3",
    "qwen3",
    "_fam",
    "__init__",
    "a-b",
    "None",
    "default_adamw",
    "decoder_vocab_size",
    "fam.x",
    "ünï",
    "Trainer",
    "model_spec",
)
"""``model.name`` values (the real families too, so that the family packages are imported)."""

PACKAGES = (
    "pkga.models",
    "pkgb.models",
    "pkg_a.b.models",
    "pkg.a_b.models",
    "mypkg.llama3",
    "pkgc.Trainer",
    "pkgd.default_adamw",
    "pkge.field",
    "pkgf.model_spec",
    "pkgg.config",
    "pkgh.print",
    "pkgi.qwen3",
)
"""Model registry packages: two that export ``models``, two whose dotted paths read alike, and
last names that are titan's or torchtitan's imports, locals and builtins."""

REGISTRY = '''\
"""A fork's model registry: llama3's debug model, and a record of each call."""

from titan.models.llama3 import model_registry as _llama3

CALLS = []


def model_registry(flavor):
    CALLS.append(flavor)
    return _llama3("debugmodel")
'''


@pytest.fixture(scope="module")
def packages(tmp_path_factory) -> Path:
    """Every package of :data:`PACKAGES` on ``sys.path``, each a recording ``model_registry``."""
    root = tmp_path_factory.mktemp("registries")
    for package in PACKAGES:
        folder = root
        for part in package.split("."):
            folder = folder / part
            folder.mkdir(exist_ok=True)
            init = folder / "__init__.py"
            if not init.exists():
                init.write_text("", encoding="utf-8")
        (folder / "__init__.py").write_text(REGISTRY, encoding="utf-8")
    sys.path.insert(0, str(root))
    yield root
    sys.path.remove(str(root))
    for name in [m for m in sys.modules if m.split(".")[0] in {p.split(".")[0] for p in PACKAGES}]:
        del sys.modules[name]


# --------------------------------------------------------------------------- a stand-in torchtitan


class Made:
    """What a stand-in torchtitan callable returned: which import made it, and with what."""

    def __init__(self, origin: str, args: tuple, kwargs: dict) -> None:
        self.origin, self.args, self.kwargs = origin, args, kwargs

    def __getattr__(self, name: str) -> Any:  # config.training.steps = ... of derived functions
        if name.startswith("__"):
            raise AttributeError(name)
        child = Made(f"{self.origin}.{name}", (), {})
        setattr(self, name, child)
        return child


class Stub:
    """A name of the stand-in torchtitan: calling it records its full dotted path."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    def __getattr__(self, name: str) -> Stub:
        if name.startswith("__"):
            raise AttributeError(name)
        return Stub(f"{self.origin}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Made:
        return Made(self.origin, args, kwargs)


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports every ``torchtitan.*`` module as one whose every name is a :class:`Stub`."""

    def find_spec(self, name, path=None, target=None):
        if name == "torchtitan" or name.startswith("torchtitan."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = lambda attr, origin=spec.name: (  # type: ignore[attr-defined]
            Stub(f"{origin}.{attr}")
        )
        return module

    def exec_module(self, module):
        pass


@contextlib.contextmanager
def stand_in_torchtitan():
    finder = _StandIn()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [m for m in sys.modules if m.split(".")[0] == "torchtitan"]:
            del sys.modules[name]


# --------------------------------------------------------------------------- the checks


def _defined(code: str) -> list[str]:
    return [n.name for n in ast.parse(code).body if isinstance(n, ast.FunctionDef)]


def _bound_once(code: str) -> None:
    """No top-level name is bound twice; no function's local is a top-level name."""
    tree = ast.parse(code)
    bound: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            bound += [a.asname or a.name for a in node.names]
        elif isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.append(node.name)
    assert len(bound) == len(set(bound)), sorted(n for n in bound if bound.count(n) > 1)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            stores = {
                n.id
                for n in ast.walk(node)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
            }
            assert not stores & set(bound), (node.name, stores & set(bound))


def _chain_depth(code: str) -> int:
    """The longest chain of functions that call an earlier one (``config = earlier()``)."""
    tree = ast.parse(code)
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    depth: dict[str, int] = {}
    for name, node in functions.items():
        called = [
            c.func.id
            for c in ast.walk(node)
            if isinstance(c, ast.Call) and isinstance(c.func, ast.Name) and c.func.id in functions
        ]
        depth[name] = max((depth[c] + 1 for c in called), default=0)
    return max(depth.values(), default=0)


def _ruff_clean(path: Path) -> None:
    done = subprocess.run(
        [str(RUFF), "format", "--check", "--diff", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _registry_calls(package: str) -> list[str]:
    return sys.modules[package].CALLS


def _migrate(folder: Path, files: list[Path], registries: dict[str, str], target: str) -> None:
    """Migrate ``files`` into one module and check it (see the module docstring)."""
    plans = [build_plan(path, model_registries=registries) for path in files]
    if target != "titan":
        plans = retarget(plans, target)
    usable = [p for p in plans if p.ok]
    code = render_module(usable)
    report.note_renamed_functions(usable, names=function_names(usable))
    listed = [report.as_dict(p)["function"] for p in usable]
    assert _defined(code) == listed, (_defined(code), listed)
    assert all(name.isidentifier() and name.isascii() and name[0] != "_" for name in listed), listed
    _bound_once(code)
    assert _chain_depth(code) <= DERIVE_DEPTH
    name = f"bindings_{uuid.uuid4().hex[:12]}"
    path = folder / f"{name}.py"
    path.write_text(code, encoding="utf-8")
    _ruff_clean(path)
    with stand_in_torchtitan() if target != "titan" else contextlib.nullcontext():
        try:
            module = load_module(path, name)
            for plan in usable:
                _call(module, plan, target)
        finally:
            sys.modules.pop(name, None)


def _call(module: Any, plan: Any, target: str) -> None:
    """Run ``plan``'s function; its model comes from the registry package the plan names."""
    call = model_call(plan)
    package = call.package if call is not None else None
    users = package is not None and not package.startswith(("titan.", "torchtitan."))
    before = list(_registry_calls(package)) if users and package in sys.modules else []
    config = getattr(module, plan.function)()
    if users:
        # the user's own registry ran last: this plan's package, with this plan's flavor (a
        # function built from an earlier one runs that one's registry call first)
        assert _registry_calls(package)[len(before) :][-1:] == [call.flavor], plan.function
    if target == "titan":
        from titan.trainer import Trainer

        assert isinstance(config, Trainer.Config)
        same_config(config, instantiate(plan), plan.function)
    else:
        assert config.origin == "torchtitan.trainer.Trainer.Config", config.origin
        optimizer = config.kwargs.get("optimizer")
        if isinstance(optimizer, Made) and "default_adamw" in optimizer.origin:
            assert optimizer.origin == "torchtitan.components.optimizer.default_adamw"
        loss = config.kwargs.get("loss")
        if isinstance(loss, Made):
            vocab = loss.kwargs["loss_fn"].kwargs["global_vocab_size"]
            assert vocab.origin == "torchtitan.models.common.config_utils.decoder_vocab_size"
            assert vocab.args == (config.kwargs["model_spec"],)
        spec = config.kwargs.get("model_spec")
        if package is not None and package.startswith("torchtitan."):
            assert spec.origin == f"{package}.model_registry" and spec.args[0] == call.flavor


def _write(folder: Path, stem: str, model: str, flavor: str) -> Path:
    path = folder / f"{stem}.toml"
    path.write_text(
        f"[model]\nname = {json.dumps(model)}\nflavor = {json.dumps(flavor)}\n"
        f"[training]\nsteps = {len(stem) + 1}\n",
        encoding="utf-8",
    )
    return path


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("target", TARGETS)
def test_every_hostile_file_name_is_a_public_function(target, tmp_path, packages):
    # With the family's prefix (`llama3__x`) and bare (`model.name` equal to the stem: `_x`).
    (tmp_path / "prefixed").mkdir()
    (tmp_path / "bare").mkdir()
    files = [_write(tmp_path / "prefixed", stem, "llama3", "debugmodel") for stem in HOSTILE_STEMS]
    files += [_write(tmp_path / "bare", stem, stem, "debugmodel") for stem in HOSTILE_STEMS]
    _migrate(tmp_path, files, {}, target)


@pytest.mark.parametrize("target", TARGETS)
def test_packages_that_share_a_last_name_each_get_their_own_calls(target, tmp_path, packages):
    files, registries = [], {}
    for index, package in enumerate(PACKAGES):
        family = f"fam{index}"
        registries[family] = package
        files.append(_write(tmp_path, f"{family}_job", family, f"flavor_{index}"))
    files.append(_write(tmp_path, "llama", "llama3", "debugmodel"))
    files.append(_write(tmp_path, "qwen", "qwen3", "0.6B"))
    # `--model-registry llama3=mypkg.llama3` beside titan's own llama3
    registries["llama3"] = "mypkg.llama3"
    files.append(_write(tmp_path, "mine", "llama3", "my_70B"))
    _migrate(tmp_path, files, registries, target)


def _chain(folder: Path, count: int) -> list[Path]:
    """``count`` TOMLs, each differing from the one before by one value and from all others by
    more, so that each function would be built from the one before it."""
    files = []
    for index in range(count):
        path = folder / f"c{index:04d}.toml"
        path.write_text(
            f"[training]\nsteps = {1000 + index // 2}\n"
            f"[checkpoint]\ninterval = {10 + (index + 1) // 2}\n",
            encoding="utf-8",
        )
        files.append(path)
    return files


@pytest.mark.parametrize("target", TARGETS)
def test_a_long_chain_of_derived_configs_stays_shallow(target, tmp_path):
    files = _chain(tmp_path, 3 * DERIVE_DEPTH + 5)
    _migrate(tmp_path, files, {}, target)
    code = render_module([build_plan(path) for path in files])
    assert code.count("# Built in full: building it from") == 3
    assert "config = llama3_c0000()" in code and "config = llama3_c0031()" in code


def test_a_thousand_chained_files_make_a_module_whose_last_function_runs(tmp_path):
    _chain(tmp_path, 1100)
    done = subprocess.run(
        [sys.executable, "-m", "titan.cli.migrate", str(tmp_path), "-q", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    code = (tmp_path / "config_registry.py").read_text(encoding="utf-8")
    assert _chain_depth(code) == DERIVE_DEPTH
    module = load_module(tmp_path / "config_registry.py", "chained_registry")
    try:
        assert module.llama3_c1099().training.steps == 1549
        assert module.llama3_c1099().checkpoint.interval == 560
    finally:
        sys.modules.pop("chained_registry", None)


@pytest.mark.parametrize("target", TARGETS)
def test_the_command_line_reports_each_rename_and_lists_the_module_functions(target, tmp_path):
    stems = ("_x", "__getattr__", "ünïcode", "a-b", "a_b", "class", "1st", "default_adamw")
    for stem in stems:
        _write(tmp_path, stem, stem, "debugmodel")
    done = subprocess.run(
        [sys.executable, "-m", "titan.cli.migrate", *[f"{s}.toml" for s in stems]]
        + ["--target", target, "--format", "json", "-o", "registry.py"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert "Traceback" not in done.stderr, done.stderr
    files = json.loads(done.stdout)["files"]
    code = (tmp_path / "registry.py").read_text(encoding="utf-8")
    assert [f["function"] for f in files] == _defined(code)
    messages = {
        f["file"]: [d["message"] for d in f["diagnostics"] if d["code"] == "renamed-function"]
        for f in files
    }
    assert messages["_x.toml"] == [
        "the registry function is `x`: `_x` is private (titan-validate and titan-train skip "
        "names that start with `_`)"
    ]
    assert any("`getattr` is a Python builtin" in m for m in messages["__getattr__.toml"])
    assert messages["ünïcode.toml"] == [
        "the registry function is `unicode`: `ünïcode` is not ASCII"
    ]
    assert messages["a_b.toml"] == [
        "the registry function is `a_b_`: `a_b` is taken by an earlier file"
    ]
    assert messages["default_adamw.toml"] == [
        "the registry function is `default_adamw_`: `default_adamw` is a name the generated "
        "module imports"
    ]


def test_a_name_an_import_took_is_not_reported_as_an_earlier_files(tmp_path, packages):
    # `pkga_models` is how the module imports pkga.models beside pkgb.models
    _write(tmp_path, "a", "fa", "x")
    _write(tmp_path, "b", "fb", "x")
    _write(tmp_path, "pkga_models", "pkga_models", "debugmodel")
    registries = {"fa": "pkga.models", "fb": "pkgb.models"}
    plans = [build_plan(tmp_path / f"{s}.toml", model_registries=registries) for s in "ab"]
    plans.append(build_plan(tmp_path / "pkga_models.toml"))
    report.note_renamed_functions(plans, names=function_names(plans))
    (note,) = [d for d in plans[2].diagnostics if d.code == "renamed-function"]
    assert note.message == (
        "the registry function is `pkga_models_`: `pkga_models` is a model registry package "
        "the module imports"
    )


def test_a_registry_module_that_no_import_can_name_is_a_message(tmp_path):
    _write(tmp_path, "a", "fa", "x")
    done = subprocess.run(
        [sys.executable, "-m", "titan.cli.migrate", "a.toml", "--model-registry", "fa=pkg.class"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert "'pkg.class' of `fa` is not an importable module path" in done.stderr


_NAMES = st.one_of(
    st.sampled_from(HOSTILE_STEMS),
    st.text(
        st.characters(codec="utf-8", exclude_characters="/\\\x00", exclude_categories=("Cs", "Cc")),
        min_size=1,
        max_size=12,
    ).filter(lambda s: s not in (".", "..") and not s.startswith(".")),
)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    jobs=st.lists(
        st.tuples(_NAMES, st.one_of(st.sampled_from(HOSTILE_MODELS), _NAMES)),
        min_size=1,
        max_size=6,
        unique_by=lambda job: job[0].casefold(),
    ),
    registered=st.lists(st.sampled_from(PACKAGES), max_size=4),
    target=st.sampled_from(TARGETS),
)
def test_any_names_make_a_module_that_binds_each_name_once(jobs, registered, target, packages):
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        files, registries = [], {}
        for index, (stem, model) in enumerate(jobs):
            package = registered[index] if index < len(registered) else None
            if package is not None and model not in ("llama3", "qwen3"):
                registries[model] = package
            files.append(_write(root, stem, model, f"f{index}"))
        _migrate(root, files, registries, target)


def test_the_stand_in_torchtitan_is_gone_after_use():
    with stand_in_torchtitan():
        from torchtitan.components.optimizer import default_adamw

        assert default_adamw(lr=1).origin == "torchtitan.components.optimizer.default_adamw"
    assert "torchtitan" not in sys.modules
    assert not any(isinstance(finder, _StandIn) for finder in sys.meta_path)


CONVERTERS = '''\
"""A fork's converters whose class names are titan's own import names."""

import dataclasses


class Trainer:
    @dataclasses.dataclass(kw_only=True)
    class Config:
        pass


class field:
    @dataclasses.dataclass(kw_only=True)
    class Config:
        pass
'''


@pytest.mark.parametrize("owner", ["Trainer", "field"])
def test_a_fork_class_named_like_an_import_of_titan_is_imported_apart(owner, tmp_path):
    from titan.migrate.targets.config_objects import Obj, outside_class

    package = f"forkconv_{uuid.uuid4().hex[:8]}"
    (tmp_path / package).mkdir()
    (tmp_path / package / "__init__.py").write_text(CONVERTERS, encoding="utf-8")
    plan = build_plan(_write(tmp_path, "job", "llama3", "debugmodel"))
    converter = Obj(outside_class(f"{package}:{owner}.Config"), {})
    plan.root.fields["model_converters"].fields["converters"] = [converter]
    code = render_module([plan])
    _bound_once(code)
    assert f"from {package} import {owner} as {package}_{owner}" in code
    path = tmp_path / f"conv_{package}.py"
    path.write_text(code, encoding="utf-8")
    _ruff_clean(path)
    sys.path.insert(0, str(tmp_path))
    try:
        module = load_module(path, path.stem)
        config = getattr(module, plan.function)()
        from titan.trainer import Trainer

        assert isinstance(config, Trainer.Config)
        [made] = config.model_converters.converters
        assert type(made).__module__ == package and type(made).__qualname__ == f"{owner}.Config"
    finally:
        sys.path.remove(str(tmp_path))
        for name in (path.stem, package):
            sys.modules.pop(name, None)

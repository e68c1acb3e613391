"""``titan-validate --python PATH`` builds an upstream torchtitan module's configs in PATH, inside
titan's sandboxed worker: what each function built comes back as plain JSON, what it raised with
the line, and every way the worker ends (the time limit, ``os._exit``, the memory limit) is an
ending at the function's line while the other functions are still built.

PATH here is "another interpreter" for real: a wrapper that runs titan's Python with ``-S`` (no
site-packages: neither titan's dependencies nor titan itself are importable in it) and only a
small stand-in ``torchtitan`` package on its path, so the worker's side is shown to need nothing
but the standard library and torchtitan."""

from __future__ import annotations

import dataclasses
import enum
import io
import stat
import sys
from pathlib import Path

import pytest

from titan.cli.registry_child import _SHAPES
from titan.cli.upstream_build import build_module, upstream_python_problem
from titan.cli.upstream_run import dump

STUB = {
    "torchtitan/__init__.py": '__version__ = "{version}"\n',
    "torchtitan/trainer.py": """\
import dataclasses
import enum


class Mode(enum.StrEnum):
    FAST = "fast"


@dataclasses.dataclass(kw_only=True, slots=True)
class TrainingConfig:
    steps: int = 10
    lr: float = 8e-4
    mode: Mode = Mode.FAST


class Trainer:
    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config:
        model_spec: object = None
        training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
        converters: list = dataclasses.field(default_factory=list)
        extra: dict = dataclasses.field(default_factory=dict)
""",
    "torchtitan/protocols/__init__.py": "",
    "torchtitan/protocols/model_spec.py": """\
import dataclasses


@dataclasses.dataclass
class ModelSpec:
    name: str
    flavor: str
    model: object
    parallelize_fn: object = None
""",
    "torchtitan/models/__init__.py": "",
    "torchtitan/models/fake/__init__.py": """\
import dataclasses

from torchtitan.protocols.model_spec import ModelSpec


class FakeModel:
    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config:
        dim: int = 8


def model_registry(flavor):
    return ModelSpec(name="fake", flavor=flavor, model=FakeModel.Config(), parallelize_fn=print)
""",
    "torchtitan/models/fake/config_registry.py": """\
from torchtitan.trainer import Trainer

from . import model_registry


def fake_debug() -> Trainer.Config:
    return Trainer.Config(model_spec=model_registry("debug"))
""",
    "torchtitan/components/__init__.py": "",
    "torchtitan/components/quantization/__init__.py": "",
    "torchtitan/components/quantization/float8.py": """\
import dataclasses


def has_cuda_capability(major, minor):
    return False  # a machine without the GPU float8 targets


@dataclasses.dataclass(kw_only=True, slots=True)
class Float8LinearConverter:
    emulate: bool = False

    def __post_init__(self):
        if not has_cuda_capability(8, 9):
            raise ValueError("float8 is only supported on SM89 or later")
""",
}
"""A stand-in for upstream torchtitan 0.3.0: its config dataclasses (kw_only, slots), a model
folder with ``model_registry`` and its own ``config_registry.py``, ``ModelSpec``, and a float8
converter that asks the GPU's generation when it is built."""

HEAD = "from torchtitan.models.fake import model_registry\nfrom torchtitan.trainer import Trainer\n"


def plain(*names: str) -> str:
    """Registry functions that build the default config: those that must be built whatever
    came before them."""
    return "".join(
        f"\n\ndef {n}() -> Trainer.Config:\n    return Trainer.Config()\n" for n in names
    )


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> dict[str, str]:
    """Interpreters: ``good`` (torchtitan 0.3.0), ``old`` (torchtitan 0.2.2) and ``bare`` (no
    torchtitan); and ``site``, the stand-in's folder."""
    root = tmp_path_factory.mktemp("upstream")
    sites = {"good": root / "site", "old": root / "old-site"}
    for site, version in ((sites["good"], "0.3.0"), (sites["old"], "0.2.2")):
        for name, text in STUB.items():
            if site == sites["old"] and name != "torchtitan/__init__.py":
                continue
            (site / name).parent.mkdir(parents=True, exist_ok=True)
            (site / name).write_text(text.replace("{version}", version), encoding="utf-8")
    pythons = {
        "good": wrapper(root / "good-python", sites["good"]),
        "old": wrapper(root / "old-python", sites["old"]),
        "bare": wrapper(root / "bare-python", None),
    }
    return {**pythons, "site": str(sites["good"])}


def wrapper(path: Path, site: Path | None) -> str:
    """A shell script that runs titan's Python as another interpreter: no site-packages, only
    ``site`` on its path."""
    env = f"PYTHONPATH='{site}' " if site is not None else "PYTHONPATH= "
    path.write_text(f"#!/bin/sh\n{env}exec '{sys.executable}' -S \"$@\"\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def build(upstream: dict, module: Path, names: list[str], **options):
    """Build ``names`` of ``module`` in the stand-in's interpreter; the result and what the
    module printed."""
    stderr = io.StringIO()
    settings = {"package": None, "timeout": 60.0, "memory_limit": None, **options}
    built = build_module(
        str(module), module.name, names, python=upstream["good"], stderr=stderr, **settings
    )
    return built, stderr.getvalue()


def write(tmp_path: Path, source: str) -> Path:
    module = tmp_path / "config_registry.py"
    module.write_text(source, encoding="utf-8")
    return module


def line_of(source: str, needle: str) -> int:
    (line,) = [n for n, text in enumerate(source.splitlines(), 1) if needle in text]
    return line


BUILDS = (
    "import sys\n"
    "from torchtitan.components.quantization.float8 import Float8LinearConverter\n"
    "from torchtitan.trainer import Trainer, TrainingConfig\n"
    + HEAD
    + """

def job() -> Trainer.Config:
    loop = []
    loop.append(loop)
    print("building job")
    return Trainer.Config(
        model_spec=model_registry("debug"),
        training=TrainingConfig(steps=4),
        extra={1: ("a", 2.5), "loop": loop, "what": object()},
    )


def quantized() -> Trainer.Config:
    return Trainer.Config(converters=[Float8LinearConverter()])


def where() -> Trainer.Config:
    try:
        import pydantic  # noqa: F401
        titan_dependencies = True
    except ImportError:
        titan_dependencies = False
    return Trainer.Config(extra={"no_site": sys.flags.no_site, "pydantic": titan_dependencies})


def number():
    return 3
"""
)


@pytest.mark.slow
def test_each_function_built_comes_back_as_plain_json(tmp_path, upstream):
    module = write(tmp_path, BUILDS)
    built, printed = build(upstream, module, ["job", "quantized", "where", "number"])
    assert (built.problem, built.import_error, built.endings) == (None, None, [])
    assert built.functions["job"] == {
        "returned_type": "torchtitan.trainer:Trainer.Config",
        "config": {
            "__class__": "torchtitan.trainer:Trainer.Config",
            "model_spec": {
                "__class__": "torchtitan.protocols.model_spec:ModelSpec",
                "name": "fake",
                "flavor": "debug",
                "model": "torchtitan.models.fake:FakeModel.Config",
            },
            "training": {
                "__class__": "torchtitan.trainer:TrainingConfig",
                "steps": 4,
                "lr": 8e-4,
                "mode": "fast",
            },
            "converters": [],
            "extra": {"1": ["a", 2.5], "loop": ["<cycle>"], "what": "<object>"},
        },
    }
    # the converter's GPU check passes as on the GPUs it targets
    (converter,) = built.functions["quantized"]["config"]["converters"]
    assert converter == {
        "__class__": "torchtitan.components.quantization.float8:Float8LinearConverter",
        "emulate": False,
    }
    # run by another interpreter: no site-packages, none of titan's dependencies
    assert built.functions["where"]["config"]["extra"] == {"no_site": 1, "pydantic": False}
    assert built.functions["number"] == {"config": 3, "returned_type": "builtins:int"}
    assert "building job" in printed and "Traceback" not in printed


@pytest.mark.slow
def test_an_unknown_keyword_is_a_type_error_at_its_line(tmp_path, upstream):
    source = (
        HEAD
        + """

def typo() -> Trainer.Config:
    spec = model_registry("debug")
    return Trainer.Config(model_spec=spec, trainign=None)


def _helper():
    return Trainer.Config(stpes=4)


def nested() -> Trainer.Config:
    return _helper()
"""
        + plain("fine")
    )
    module = write(tmp_path, source)
    built, _ = build(upstream, module, ["typo", "nested", "fine", "absent"])
    error = built.functions["typo"]["error"]
    assert error["type"] == "TypeError" and "trainign" in error["message"]
    assert error["frames"] == [[str(module), line_of(source, "trainign=")]]
    # innermost first
    assert built.functions["nested"]["error"]["frames"] == [
        [str(module), line_of(source, "stpes=4")],
        [str(module), line_of(source, "return _helper()")],
    ]
    assert "config" in built.functions["fine"]
    assert built.functions["absent"]["error"]["type"] == "AttributeError"


@pytest.mark.slow
def test_an_atexit_handler_runs_after_the_functions_and_its_error_is_kept(tmp_path, upstream):
    source = (
        "import atexit\n"
        + HEAD
        + """

def _goodbye():
    raise RuntimeError("goodbye failed")


atexit.register(_goodbye)
"""
        + plain("job")
    )
    module = write(tmp_path, source)
    built, _ = build(upstream, module, ["job"])
    assert "config" in built.functions["job"] and built.endings == []
    (error,) = built.atexit_errors
    assert (error["type"], error["message"]) == ("RuntimeError", "goodbye failed")
    assert error["frames"][0] == [str(module), line_of(source, "goodbye failed")]


@pytest.mark.slow
def test_a_models_own_registry_imports_relative_to_its_package(upstream):
    module = Path(upstream["site"]) / "torchtitan/models/fake/config_registry.py"
    built, _ = build(upstream, module, ["fake_debug"], package="torchtitan.models.fake")
    assert built.import_error is None
    assert built.functions["fake_debug"]["config"]["model_spec"]["flavor"] == "debug"
    # from its file alone, `from . import` has no package to import from
    alone, _ = build(upstream, module, ["fake_debug"])
    assert alone.import_error["type"] == "ImportError" and alone.functions == {}


@pytest.mark.parametrize(
    ("source", "kind", "needle"),
    [
        (HEAD + "\nsettings = {}\nsettings['missing']\n", "KeyError", "['missing']"),
        (HEAD + "\ndef broken(:\n    pass\n", "SyntaxError", "def broken(:"),
        ("from torchtitan.nowhere import Trainer\n", "ModuleNotFoundError", "nowhere"),
    ],
    ids=["raises", "syntax", "missing-module"],
)
@pytest.mark.slow
def test_an_import_that_fails_is_its_error_at_its_line(tmp_path, upstream, source, kind, needle):
    module = write(tmp_path, source + "\n\ndef job():\n    return 1\n")
    built, printed = build(upstream, module, ["job"])
    assert built.import_error["type"] == kind
    assert built.import_error["frames"][0] == [str(module), line_of(source, needle)]
    assert (built.functions, built.endings) == ({}, [])
    assert "Traceback" not in printed


@pytest.mark.slow
def test_a_function_past_the_time_limit_ends_there_and_the_next_is_built(tmp_path, upstream):
    source = (
        "import time\n"
        + HEAD
        + """

def slow() -> Trainer.Config:
    time.sleep(600)
    return Trainer.Config()
"""
        + plain("after")
    )
    module = write(tmp_path, source)
    built, _ = build(upstream, module, ["slow", "after"], timeout=2.0)
    (ended,) = built.endings
    assert (ended.how, ended.name) == ("timeout", "slow")
    assert "slow" not in built.functions and "config" in built.functions["after"]
    (finding,) = built.ending_findings(text=source)
    assert finding.span.line == line_of(source, "time.sleep(600)")
    assert "no answer after 2 s while running slow()" in finding.message


@pytest.mark.slow
def test_a_function_that_ends_the_process_is_an_ending_and_the_others_are_built(tmp_path, upstream):
    source = (
        "import os\n"
        + HEAD
        + plain("first")
        + """

def exits() -> Trainer.Config:
    os._exit(3)
"""
        + plain("last")
    )
    module = write(tmp_path, source)
    built, _ = build(upstream, module, ["first", "exits", "last"])
    (ended,) = built.endings
    assert (ended.how, ended.name, ended.status, ended.said) == ("exit", "exits", 3, "os._exit(3)")
    assert sorted(built.functions) == ["first", "last"]
    (finding,) = built.ending_findings(text=source)
    assert finding.span.line == line_of(source, "os._exit(3)")
    assert "ended its process (os._exit(3)) while running exits()" in finding.message


@pytest.mark.slow
def test_memory_past_the_limit_is_that_functions_error_and_the_next_is_built(tmp_path, upstream):
    source = (
        HEAD
        + """

def hog() -> Trainer.Config:
    grown = bytearray(16 * 1024**3)
    return Trainer.Config(extra={"size": len(grown)})
"""
        + plain("after")
    )
    module = write(tmp_path, source)
    built, _ = build(upstream, module, ["hog", "after"], memory_limit=1024**3)
    error = built.functions["hog"]["error"]
    assert error["type"] == "MemoryError" and "--memory-limit 1 GiB" in error["message"]
    assert error["frames"][0] == [str(module), line_of(source, "bytearray")]
    assert "config" in built.functions["after"] and built.endings == []


@pytest.mark.slow
def test_an_interpreter_that_cannot_build_says_why(tmp_path, upstream):
    assert upstream_python_problem(upstream["good"]) is None
    missing = upstream_python_problem(str(tmp_path / "nowhere" / "python"))
    assert "no such file" in missing and "torchtitan 0.3.0" in missing
    assert "no such command on PATH" in upstream_python_problem("no-such-python-anywhere")
    text = tmp_path / "notes.txt"
    text.write_text("not a program\n", encoding="utf-8")
    assert "is not executable" in upstream_python_problem(str(text))
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\necho hello\n", encoding="utf-8")
    script.chmod(0o755)
    assert "is not a Python interpreter" in upstream_python_problem(str(script))
    bare = upstream_python_problem(upstream["bare"])
    assert "cannot import torchtitan" in bare and "pip install torchtitan==0.3.0" in bare
    old = upstream_python_problem(upstream["old"])
    assert "has torchtitan 0.2.2" in old and "0.3.0" in old


@pytest.mark.parametrize(
    ("content", "said"),
    [(None, "no such file"), (b"\x7fELF\x00garbage", "cannot be run")],
    ids=["missing", "exec-format-error"],
)
@pytest.mark.slow
def test_an_interpreter_that_cannot_start_is_a_problem_not_a_traceback(tmp_path, content, said):
    python = tmp_path / "python"
    if content is not None:
        python.write_bytes(content)
        python.chmod(0o755)
    module = write(tmp_path, HEAD)
    built = build_module(
        str(module),
        "config_registry.py",
        ["job"],
        python=str(python),
        package=None,
        timeout=60.0,
        memory_limit=None,
        stderr=io.StringIO(),
    )
    assert said in built.problem
    assert (built.functions, built.endings) == ({}, [])


VALID_BUILT = [
    {"ev": "built", "name": "job", "config": {"a": 1}, "returned_type": "m:C"},
    {"ev": "built", "name": None, "error": {"type": "E", "message": "m", "frames": [["f", 3]]}},
    {"ev": "built", "name": "", "error": {"type": "E", "message": "", "frames": []}},
]
GARBAGE_BUILT = [
    {"ev": "built", "config": 1, "returned_type": "m:C"},  # no name
    {"ev": "built", "name": 3, "config": 1, "returned_type": "m:C"},
    {"ev": "built", "name": "job", "config": 1},  # no returned_type
    {"ev": "built", "name": "job"},  # neither
    {"ev": "built", "name": None, "config": 1, "returned_type": "m:C"},  # the import built none
    {"ev": "built", "name": "", "config": 1, "returned_type": "m:C"},
    {"ev": "built", "name": "job", "config": 1, "returned_type": "m:C", "error": {}},  # both
    {"ev": "built", "name": "job", "config": 1, "returned_type": "m:C", "more": 1},
    {"ev": "built", "name": "job", "error": "boom"},
    {"ev": "built", "name": "job", "error": {"type": "E", "message": "m"}},
    {"ev": "built", "name": "job", "error": {"type": "E", "message": "m", "frames": [["f"]]}},
    {"ev": "built", "name": "job", "error": {"type": "E", "message": "m", "frames": [["f", True]]}},
    {"ev": "built", "name": "job", "error": {"type": 1, "message": "m", "frames": []}},
    {
        "ev": "built",
        "name": "job",
        "error": {"type": "E", "message": "m", "frames": []},
        "returned_type": "m:C",
    },
]


@pytest.mark.parametrize("event", VALID_BUILT)
def test_a_built_event_of_the_workers_shape_is_read(event):
    assert _SHAPES["built"](event)


@pytest.mark.parametrize("event", GARBAGE_BUILT)
def test_a_built_event_of_any_other_shape_is_garbage(event):
    assert not _SHAPES["built"](event)


class Colour(enum.Enum):
    RED = 1


@dataclasses.dataclass(kw_only=True, slots=True)
class Leaf:
    size: int = 2
    later: int = dataclasses.field(init=False)


@dataclasses.dataclass
class Node:
    child: object = None


def test_dump_keeps_json_leaves_and_names_everything_else():
    assert dump(Leaf()) == {"__class__": f"{__name__}:Leaf", "size": 2, "later": "<unset>"}
    assert dump([Colour.RED, (1, None), {2: b"x"}]) == ["<Colour>", [1, None], {"2": "<bytes>"}]
    node = Node()
    node.child = node
    assert dump(node) == {"__class__": f"{__name__}:Node", "child": "<cycle>"}
    deep: list = []
    for _ in range(100):
        deep = [deep]
    assert "<too deep>" in str(dump(deep))
    assert dump({"same": [1], "again": [1]}) == {"same": [1], "again": [1]}  # no false cycle


@pytest.mark.slow
def test_titan_from_a_clone_in_any_folder_starts_the_worker_and_stays_off_its_path(
    tmp_path, upstream
):
    """The worker's interpreter loads titan by file, from wherever the checkout lies: its
    worker modules import there, and nothing of the checkout (nor of the site-packages a wheel
    lies in, beside titan's own torch) joins that interpreter's path."""
    import json
    import shutil
    import subprocess

    import titan
    from titan.cli.registry_child import UPSTREAM_BOOT

    checkout = Path(titan.__file__).resolve().parents[1]
    clone = tmp_path / "any folder" / "titan-clone"
    for folder in ("titan", "schemas", "migrate"):
        shutil.copytree(
            checkout / folder, clone / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    probe = (
        "import titan.cli.registry_worker, titan.cli.upstream_run, titan.migrate\n"
        "print(json.dumps([titan.migrate.__file__, sys.path, sorted(sys.modules)]))\n"
    )
    setup = json.dumps({"titan": str(clone / "titan" / "__init__.py")})
    done = subprocess.run(
        [upstream["good"], "-c", UPSTREAM_BOOT + probe, setup],
        capture_output=True,
        text=True,
        cwd=checkout,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    migrate, path, modules = json.loads(done.stdout)
    assert migrate == str(clone / "migrate" / "__init__.py")
    assert not any(str(clone) in p or str(checkout) in p or p in ("", ".") for p in path), path
    assert not {"pydantic", "torch", "tyro", "rich"} & set(modules)

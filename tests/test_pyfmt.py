"""Tests of ``titan.migrate.codegen.pyfmt``: exact layouts, and a differential test against ruff.

The differential test builds a few hundred random modules from a seeded generator, writes them
to one folder and runs ``ruff format --check`` and ``ruff check --select I`` once on it: ruff
must want no change. Each module is also compiled and executed with stand-ins for every name it
uses, and every literal must come back bit for bit (hostile strings included), every docstring
must be ``normalize_docstring`` of its text, and every comment must stay one comment.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import io
import math
import random
import shutil
import subprocess
import sys
import tokenize
import tomllib
from pathlib import Path

import pytest
from titan.migrate.codegen.pyfmt import nodes as py
from titan.migrate.codegen.pyfmt.docstrings import normalize_docstring
from titan.migrate.codegen.pyfmt.imports import _Natural, sort_imports
from titan.migrate.codegen.pyfmt.layout import literal_text
from titan.migrate.codegen.pyfmt.printer import format_module
from titan.migrate.codegen.pyfmt.text import LINE_WIDTH

ROOT = Path(__file__).resolve().parent.parent
SEED = 20240611
MODULES = 420


def ruff_binary() -> str:
    """The ruff next to the running Python (the project's virtualenv), else the one on PATH."""
    candidate = Path(sys.executable).parent / "ruff"
    found = str(candidate) if candidate.exists() else shutil.which("ruff")
    assert found is not None, "ruff is pinned in requirements.txt: run `make test` to install it"
    return found


def run_ruff(*args: str) -> subprocess.CompletedProcess:
    """ruff with the project's settings (line length 100, py311) and ``titan`` first-party."""
    command = [
        ruff_binary(),
        *args,
        "--no-cache",
        "--config",
        str(ROOT / "pyproject.toml"),
        "--config",
        "lint.isort.known-first-party = ['titan']",
    ]
    return subprocess.run(command, capture_output=True, text=True, check=False)


def ruff_wants_no_change(folder: Path) -> None:
    """Assert ``ruff format --check`` and ``ruff check --select I`` pass on ``folder``; on
    failure, show the start of ruff's report (its diffs of the first files)."""
    formatted = run_ruff("format", "--check", str(folder))
    report = formatted.stdout[:12000] + formatted.stderr[:2000]
    assert formatted.returncode == 0, f"ruff format would change:\n{report}"
    checked = run_ruff("check", "--select", "I", str(folder))
    report = checked.stdout[:12000] + checked.stderr[:2000]
    assert checked.returncode == 0, f"ruff check --select I:\n{report}"


def format_statements(*stmts: object) -> str:
    """The text of a module made of ``stmts``."""
    return format_module(py.Module(list(stmts)))


# ----------------------------------------------------------------------------- expected layouts

LAYOUT_CASES: dict[str, tuple[object, str]] = {}
"""name -> (module, expected text); checked exactly, and all checked by ruff at once."""


def case(name: str, module: object, expected: str) -> None:
    """Register an exact-layout test."""
    LAYOUT_CASES[name] = (module, expected)


call = py.Call
arg = py.Arg

case(
    "one line when it fits",
    py.Module([py.Assign("training", call("TrainingConfig", [arg(10, "steps")]))]),
    "training = TrainingConfig(steps=10)\n",
)
case(
    "arguments together on one indented line",
    py.Module(
        [
            py.FunctionDef(
                "f",
                "Trainer.Config",
                [
                    py.Return(
                        call(
                            "Trainer.Config",
                            [
                                arg(
                                    call(
                                        "ProfilingConfig",
                                        [
                                            arg(True, "enable_profiling"),
                                            arg("profile_trace", "save_traces_folder"),
                                            arg(100, "profile_freq"),
                                        ],
                                    ),
                                    "profiling",
                                ),
                                arg(call("TrainingConfig", [arg(10, "steps")]), "training"),
                            ],
                        )
                    )
                ],
            )
        ]
    ),
    """\
def f() -> Trainer.Config:
    return Trainer.Config(
        profiling=ProfilingConfig(
            enable_profiling=True, save_traces_folder="profile_trace", profile_freq=100
        ),
        training=TrainingConfig(steps=10),
    )
""",
)
case(
    "single list element: no trailing comma",
    py.Module(
        [
            py.Assign(
                "model_converters",
                call(
                    "ModelConvertersContainer.Config",
                    [
                        arg(
                            py.ListExpr(
                                [
                                    call(
                                        "Float8LinearConverter.Config",
                                        [
                                            arg(True, "enable_fsdp_float8_all_gather"),
                                            arg(True, "precompute_float8_dynamic_scale_for_fsdp"),
                                            arg(["output"], "filter_fqns"),
                                        ],
                                    )
                                ]
                            ),
                            "converters",
                        ),
                        arg(True, "print_after_conversion"),
                    ],
                ),
            )
        ]
    ),
    """\
model_converters = ModelConvertersContainer.Config(
    converters=[
        Float8LinearConverter.Config(
            enable_fsdp_float8_all_gather=True,
            precompute_float8_dynamic_scale_for_fsdp=True,
            filter_fqns=["output"],
        )
    ],
    print_after_conversion=True,
)
""",
)
case(
    "single argument that splits: no trailing comma",
    py.Module(
        [
            py.Assign(
                "x",
                call("Foo", [call("Bar", [arg("a" * 50, "first"), arg("b" * 40, "second")])]),
            )
        ]
    ),
    f"""\
x = Foo(
    Bar(
        first="{"a" * 50}",
        second="{"b" * 40}",
    )
)
""",
)
case(
    "lists split one item per line with a trailing comma",
    py.Module([py.Assign("names", py.Lit(["a" * 30, "b" * 30, "c" * 30]))]),
    f"""\
names = [
    "{"a" * 30}",
    "{"b" * 30}",
    "{"c" * 30}",
]
""",
)
case(
    "nested lists",
    py.Module([py.Assign("groups", py.Lit([["a" * 40, "b" * 40], ["c" * 30]]))]),
    f"""\
groups = [
    ["{"a" * 40}", "{"b" * 40}"],
    ["{"c" * 30}"],
]
""",
)
case(
    "dicts and tuples",
    py.Module(
        [
            py.Assign("d", py.Lit({"key": 1, "other": [1.5, None]})),
            py.Assign("t", py.Lit((1,))),
            py.Assign("e", py.Lit(((), [], {}))),
            py.Assign("big", py.Lit({"k" * 50: "v" * 50})),
        ]
    ),
    f"""\
d = {{"key": 1, "other": [1.5, None]}}
t = (1,)
e = ((), [], {{}})
big = {{
    "{"k" * 50}": "{"v" * 50}"
}}
""",
)
case(
    "empty calls and lists stay flat",
    py.Module([py.Assign("x", call("Foo")), py.Assign("y", py.ListExpr())]),
    "x = Foo()\ny = []\n",
)
case(
    "comments force one argument per line",
    py.Module(
        [
            py.Assign(
                "x",
                call(
                    "Foo",
                    [
                        arg(1, "a", comments=["leading", "two\nlines"]),
                        arg(2, "b", trailing="trailing"),
                    ],
                ),
            ),
            py.Assign("y", call("Foo", [arg(1, "a", trailing="only one")])),
        ]
    ),
    """\
x = Foo(
    # leading
    # two
    # lines
    a=1,
    b=2,  # trailing
)
y = Foo(
    a=1  # only one
)
""",
)
case(
    "a trailing comment counts for the line width, a pragma does not",
    py.Module(
        [
            py.FunctionDef(
                "f",
                None,
                [
                    py.Assign("x", call("Foo", [arg(1, "a")]), trailing="c" * 82),
                    py.Assign("x", call("Foo", [arg(1, "a")]), trailing="noqa: " + "c" * 76),
                ],
            )
        ]
    ),
    f"""\
def f():
    x = Foo(
        a=1
    )  # {"c" * 82}
    x = Foo(a=1)  # noqa: {"c" * 76}
""",
)
case(
    "unsplittable values are parenthesized when that makes them fit",
    py.Module(
        [
            py.FunctionDef(
                "f",
                None,
                [
                    py.Assign("x" * 32, py.Lit("a" * 77)),
                    py.Assign("x" * 32, py.Lit("a" * 96)),
                    py.Assign("x" * 32, py.Ref("a" * 15 + "." + "b" * 59)),
                    py.Assign("x" * 92, call("Foo")),
                    py.Return(py.Lit("r" * 100)),
                ],
            )
        ]
    ),
    f"""\
def f():
    {"x" * 32} = (
        "{"a" * 77}"
    )
    {"x" * 32} = "{"a" * 96}"
    {"x" * 32} = (
        {"a" * 15}.{"b" * 59}
    )
    {"x" * 92} = (
        Foo()
    )
    return "{"r" * 100}"
""",
)
case(
    "a call is parenthesized only when its first line would not fit",
    py.Module(
        [
            py.FunctionDef(
                "f",
                None,
                [
                    py.Assign("x" * 30, call("a" * 49 + ".F" + "o" * 16, [arg(1, "a")])),
                    py.Assign("x" * 120, call("Foo", [arg(1, "a"), arg(2, "b")])),
                    py.Return(call("a" * 79 + ".F" + "o" * 16, [arg(1, "a"), arg(2, "b")])),
                ],
            )
        ]
    ),
    f"""\
def f():
    {"x" * 30} = (
        {"a" * 49}.F{"o" * 16}(a=1)
    )
    {"x" * 120} = Foo(
        a=1, b=2
    )
    return {"a" * 79}.F{"o" * 16}(
        a=1, b=2
    )
""",
)
case(
    "trailing comments of names and strings move inside the parentheses",
    py.Module(
        [
            py.FunctionDef(
                "f",
                None,
                [
                    py.Assign("x" * 10, py.Lit("abc"), trailing="c" * 80),
                    py.Assign("y" * 10, py.Ref("a.b"), trailing="c" * 80),
                ],
            )
        ]
    ),
    f"""\
def f():
    {"x" * 10} = (
        "abc"  # {"c" * 80}
    )
    {"y" * 10} = (
        a.b
    )  # {"c" * 80}
""",
)
case(
    "strings, floats and hostile text",
    py.Module(
        [
            py.Assign("a", py.Lit("it's")),
            py.Assign("b", py.Lit('say "hi"')),
            py.Assign("c", py.Lit("it's \"x\" 'y'")),
            py.Assign("d", py.Lit("tab\tnew\nline\x00\u2028é中😀\\")),
            py.Assign("e", py.Lit([1e-08, 0.0003, 8e-05, -0.0, 1e16, float("inf")])),
            py.Assign("f", py.Lit([float("-inf"), float("nan"), 2**70, -3])),
            py.Assign("g", py.Lit("\"); __import__('os').system('x') #")),
        ]
    ),
    """\
a = "it's"
b = 'say "hi"'
c = "it's \\"x\\" 'y'"
d = "tab\\tnew\\nline\\x00\\u2028é中😀\\\\"
e = [1e-08, 0.0003, 8e-05, -0.0, 1e16, float("inf")]
f = [float("-inf"), float("nan"), 1180591620717411303424, -3]
g = "\\"); __import__('os').system('x') #"
""",
)
case(
    "docstrings",
    py.Module(
        [
            py.Docstring("Module doc."),
            py.FunctionDef("f", None, [py.Docstring("  One line.  ")]),
            py.FunctionDef(
                "g", None, [py.Docstring('"Quoted" start\n\n    indented\n  back\n"end"')]
            ),
            py.FunctionDef("h", None, [py.Docstring('has """ and \\ inside"')]),
        ]
    ),
    '''\
"""Module doc."""


def f():
    """One line."""


def g():
    """\\"Quoted" start

        indented
      back
    "end\\"
    """


def h():
    """has ""\\" and \\\\ inside\\""""
''',
)
case(
    "dataclass",
    py.Module(
        [
            py.ClassDef(
                "Probe",
                ["Base"],
                [
                    py.Docstring("A probe."),
                    py.AnnAssign("mode", 'Literal["off", "on"]', py.Lit("off")),
                    py.FieldDoc("What to record."),
                    py.AnnAssign("every", "int", py.Lit(50)),
                    py.AnnAssign(
                        "modules",
                        "list[str]",
                        call("field", [arg(py.Lambda(py.Lit(["layers.0"])), "default_factory")]),
                    ),
                    py.FieldDoc("Module prefixes."),
                    py.FunctionDef("method", "int", [py.Return(py.Lit(1))]),
                    py.AnnAssign("after", "str | None"),
                ],
                decorators=[call("dataclass", [arg(True, "kw_only"), arg(True, "slots")])],
            ),
        ]
    ),
    '''\
@dataclass(kw_only=True, slots=True)
class Probe(Base):
    """A probe."""

    mode: Literal["off", "on"] = "off"
    """What to record."""
    every: int = 50
    modules: list[str] = field(default_factory=lambda: ["layers.0"])
    """Module prefixes."""

    def method() -> int:
        return 1

    after: str | None
''',
)
case(
    "lambda bodies split like other values",
    py.Module(
        [
            py.ClassDef(
                "A",
                [],
                [
                    py.AnnAssign(
                        "modules",
                        "list[str]",
                        call(
                            "field",
                            [arg(py.Lambda(py.Lit([f"layers.{i}" * 3 for i in range(5)])), "f")],
                        ),
                    )
                ],
            )
        ]
    ),
    """\
class A:
    modules: list[str] = field(
        f=lambda: [
            "layers.0layers.0layers.0",
            "layers.1layers.1layers.1",
            "layers.2layers.2layers.2",
            "layers.3layers.3layers.3",
            "layers.4layers.4layers.4",
        ]
    )
""",
)
case(
    "blank lines: imports, comments before definitions, empty bodies",
    py.Module(
        [
            py.Docstring("Doc."),
            *sort_imports(
                [
                    py.ImportFrom("titan.trainer", ["Trainer"]),
                    py.ImportFrom("__future__", ["annotations"]),
                    py.ImportFrom("dataclasses", ["field", "dataclass"]),
                ]
            ),
            py.Assign("x", py.Lit(1)),
            py.Comment("leads f"),
            py.FunctionDef("f", None, [py.Comment("only a comment")]),
            py.ClassDef("C", [], []),
            py.Comment("the end"),
        ]
    ),
    '''\
"""Doc."""

from __future__ import annotations

from dataclasses import dataclass, field

from titan.trainer import Trainer

x = 1


# leads f
def f():
    # only a comment
    pass


class C:
    pass


# the end
''',
)
case(
    "long imports wrap one name per line",
    py.Module(
        [
            py.ImportFrom("titan.config", [f"Config{i:02d}" for i in range(9)]),
        ]
    ),
    "from titan.config import (\n" + "".join(f"    Config{i:02d},\n" for i in range(9)) + ")\n",
)


@pytest.mark.parametrize("name", list(LAYOUT_CASES))
def test_layout(name: str) -> None:
    module, expected = LAYOUT_CASES[name]
    assert format_module(module) == expected


def test_expected_layouts_are_what_ruff_writes(tmp_path: Path) -> None:
    for number, (_, expected) in enumerate(LAYOUT_CASES.values()):
        (tmp_path / f"case_{number:02d}.py").write_text(expected, encoding="utf-8")
    (tmp_path / "sorted_imports.py").write_text(SORTED_IMPORTS, encoding="utf-8")
    ruff_wants_no_change(tmp_path)


def test_line_width_is_the_projects() -> None:
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert settings["tool"]["ruff"]["line-length"] == LINE_WIDTH


def test_import_line_fits_at_exactly_100_columns() -> None:
    names = ["a" * 40, "b" * 40]
    fits = py.ImportFrom("m" * 5, names)  # 5 + 5 + 8 + 40 + 2 + 40 columns
    assert format_statements(fits).count("\n") == 1
    assert len(format_statements(fits).rstrip("\n")) == 100
    assert format_statements(py.ImportFrom("m" * 6, names)).count("\n") == 4


def test_sort_imports_order() -> None:
    imports = [
        py.ImportFrom("typing", ["Literal", "Any", "TYPE_CHECKING", "cast", "T", "aB", "ab"]),
        py.Import("os"),
        py.ImportFrom("dataclasses", ["field", "dataclass"]),
        py.Import("sys as system"),
        py.ImportFrom("titan.config", ["TrainingConfig as TC", "ParallelismConfig"]),
        py.ImportFrom("titan.config", ["ProfilingConfig", "ParallelismConfig"]),
        py.ImportFrom("titan.models10", ["z"]),
        py.ImportFrom("titan.models2", ["y"]),
        py.ImportFrom("titan.Models", ["x"]),
        py.ImportFrom("torch", ["nn"]),
        py.ImportFrom(".sub", ["thing"]),
        py.ImportFrom("..up", ["other"]),
        py.ImportFrom("__future__", ["annotations"]),
    ]
    groups = sort_imports(imports, first_party=["titan"])
    assert format_statements(*groups) == SORTED_IMPORTS


SORTED_IMPORTS = """\
from __future__ import annotations

import os
import sys as system
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, T, aB, ab, cast

from torch import nn

from titan.config import ParallelismConfig, ProfilingConfig
from titan.config import TrainingConfig as TC
from titan.Models import x
from titan.models2 import y
from titan.models10 import z

from ..up import other
from .sub import thing
"""


def test_natural_order() -> None:
    names = ["x10", "x2", "x02", "x1", "x", "x_a", "x.a", "X3"]
    ordered = sorted(names, key=_Natural)
    assert ordered == ["X3", "x", "x.a", "x02", "x1", "x2", "x10", "x_a"]


def test_annotation_that_would_have_to_split_is_an_error() -> None:
    field = py.AnnAssign("x" * 90, "list[int]", py.Lit(["a"]))
    with pytest.raises(ValueError, match="annotation"):
        format_statements(py.ClassDef("C", [], [field]))


def test_invalid_names_are_rejected() -> None:
    for bad in ["a b", "class", "a..b", "", "1x", "x.None"]:
        with pytest.raises(ValueError):
            py.Ref(bad)
    with pytest.raises(ValueError):
        py.Call("f", [py.Arg(1, "a"), py.Arg(2)])
    with pytest.raises(TypeError):
        py.Lit(object())
    with pytest.raises(ValueError):
        py.Arg(1, name="not valid")
    for annotation in ["", "int\rx = 1", "str\x0c", "int\u2028"]:
        with pytest.raises(ValueError):
            py.AnnAssign("x", annotation)
        with pytest.raises(ValueError):
            py.FunctionDef("f", annotation)


def test_nodes_compare_and_print() -> None:
    one = py.Call("Foo", [py.Arg(1, "a")])
    assert one == py.Call(py.Ref("Foo"), [py.Arg(py.Lit(1), name="a")])
    assert one != py.Call("Foo", [py.Arg(2, "a")])
    assert repr(py.Lit(1)) == "Lit(value=1)"


def test_literal_text() -> None:
    assert literal_text("a") == '"a"'
    assert literal_text(['x"y', 1.0]) == "['x\"y', 1.0]"


def test_import_is_light() -> None:
    """pyfmt imports nothing outside the standard library (and never torch)."""
    code = (
        "import sys; before = set(sys.modules); import titan.migrate.codegen.pyfmt.printer; "
        "print('\\n'.join(sorted(set(sys.modules) - before)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    for module in result.stdout.split():
        top = module.split(".")[0]
        ours = module in ("titan", "titan.migrate") or module.startswith("titan.migrate.")
        assert top in sys.stdlib_module_names or ours, module


def test_determinism() -> None:
    """The same tree gives the same text, and so does the same tree built again."""

    def texts(seed: int) -> list[str]:
        generator = Generator(random.Random(seed))
        return [format_module(generator.module()) for _ in range(30)]

    assert texts(7) == texts(7)
    module = Generator(random.Random(8)).module()
    assert format_module(module) == format_module(module)


def hostile_modules() -> list[tuple[str, str]]:
    """``(hostile string, module text)``: the string in a literal, a docstring and comments."""
    modules = []
    for hostile in [*HOSTILE, "".join(HOSTILE), '"""' + "".join(HOSTILE)]:
        module = py.Module(
            [
                py.Docstring(hostile),
                py.Comment(hostile),
                py.Assign("value", py.Lit(hostile), comments=[hostile], trailing=hostile),
                py.Assign("items", py.ListExpr([py.Arg(hostile, trailing=hostile), hostile])),
                py.ClassDef("C", [], [py.Docstring(hostile), py.AnnAssign("x", "str")]),
            ]
        )
        modules.append((hostile, format_module(module)))
    return modules


def test_hostile_text_is_only_data(tmp_path: Path) -> None:
    """Run with the real builtins, each module defines its string and nothing else happens;
    and ruff wants no change."""
    for number, (hostile, text) in enumerate(hostile_modules()):
        namespace: dict = {}
        exec(compile(text, f"<hostile {number}>", "exec"), namespace)
        assert sorted(namespace) == ["C", "__builtins__", "__doc__", "items", "value"], text
        assert namespace["value"] == hostile and namespace["items"] == [hostile, hostile]
        expected_doc = normalize_docstring(hostile)
        assert inspect.cleandoc(namespace["__doc__"]) == expected_doc
        assert inspect.cleandoc(namespace["C"].__doc__) == expected_doc
        assert "PWNED" not in vars(builtins)
        assert count_comments(text) == 2 * comment_lines(hostile) + 2, text
        (tmp_path / f"hostile_{number:02d}.py").write_text(text, encoding="utf-8")
    ruff_wants_no_change(tmp_path)


# ----------------------------------------------------------------------------- random trees

HOSTILE = [
    "\"); __import__('builtins').__dict__.__setitem__('PWNED', 1) #",
    "'); __import__('builtins').__dict__.__setitem__('PWNED', 1) #",
    "__import__('os').system('echo pwned')",
    '"""',
    "'''",
    "\\",
    '\\"',
    "\\'",
    '"',
    "'",
    '""',
    "\"'",
    "\n",
    "\r\n",
    "\r",
    "\t",
    "\x00",
    "\x0b\x0c",
    "\x1b[31m",
    "\x85",
    "\u2028\u2029",
    "\ud800",
    "\ufeff",
    "\u202e",
    "\xa0",
    "\u3000",
    "é",
    "中文",
    "😀",
    "e\u0301",
    "#",
    "# x",
    "\\N{BULLET}",
    "\\x41",
    "{}",
    "  ",
    ")",
    "]",
    "lambda: 1",
]
WORDS = ["steps", "warmup", "lr", "c4", "profile", "trace", "model", "float8", "output", "a", "x"]
NAMES = ["Foo", "Bar", "TrainingConfig", "Trainer", "model_registry", "Config", "CheckpointManager"]
PRAGMAS = ["noqa", "noqa: E501", "type: ignore", "pyright: ignore", "nosec", "NOQA"]
ANNOTATIONS = ["int", "str", "float", "Foo", "Trainer.Config", "None"]
COMPOUND_ANNOTATIONS = ["list[str]", "dict[str, int]", "int | None", 'Literal["a", "b"]']
IMPORTABLE = {  # names apart from NAMES: the stubs of a module must not be shadowed
    "dataclasses": ["dataclass", "field"],
    "typing": ["Any", "TYPE_CHECKING", "cast"],
    "collections.abc": ["Iterator", "Sequence"],
    "os.path": ["join"],
    "torch": ["nn", "Tensor"],
    "numpy": ["ndarray"],
    "titan.config": ["ProfilingConfig", "ParallelismConfig", "JOB_CONFIG", "helper"],
    "titan.models.llama3": ["flavors"],
    "titan.trainer": ["TrainerBase"],
    ".local": ["thing"],
    "..parent": ["other"],
}


class Stub:
    """Stands in for every name a generated module uses: attributes are stubs, calls record."""

    def __init__(self, name: str) -> None:
        self.stub_name = name

    def __getattr__(self, attr: str) -> Stub:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Stub(f"{self.stub_name}.{attr}")

    def __call__(self, *args: object, **kwargs: object) -> object:
        if len(args) == 1 and not kwargs and is_definition(args[0]):
            return args[0]  # a plain decorator
        return Called(self.stub_name, args, kwargs)

    def __getitem__(self, item: object) -> Stub:
        return self

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (type(self.stub_name.replace(".", "_"), (), {}),)


class Called:
    """What calling a stub returns: the call, plus attributes set on it later."""

    def __init__(self, name: str, args: tuple, kwargs: dict) -> None:
        self.call = (name, args, kwargs)

    def __getattr__(self, attr: str) -> object:
        if attr.startswith("__"):
            raise AttributeError(attr)
        child = Called(f".{attr}", (), {})
        setattr(self, attr, child)
        return child

    def __call__(self, *args: object) -> object:
        if len(args) == 1 and is_definition(args[0]):
            return args[0]  # a decorator with arguments
        return Called("()", args, {})


def is_definition(value: object) -> bool:
    """True for a class or a ``def`` function: what a decorator receives (not a lambda)."""
    return isinstance(value, type) or getattr(value, "__name__", "<lambda>") != "<lambda>"


def same(actual: object, expected: object) -> bool:
    """Bit-exact comparison of a run-time value with the value a tree was built from."""
    if isinstance(expected, Expect):
        return expected.matches(actual)
    if type(actual) is not type(expected):
        return False
    if isinstance(expected, float):
        if math.isnan(expected):
            return math.isnan(actual)
        return actual == expected and math.copysign(1, actual) == math.copysign(1, expected)
    if isinstance(expected, list | tuple):
        return len(actual) == len(expected) and all(map(same, actual, expected))
    if isinstance(expected, dict):
        return list(actual) == list(expected) and all(
            same(actual[key], value) for key, value in expected.items()
        )
    return actual == expected


class Expect:
    """The run-time value expected for a node that is not a literal."""

    def __init__(self, kind: str, name: str = "", args: tuple = (), kwargs: dict | None = None):
        self.kind, self.name, self.args, self.kwargs = kind, name, args, kwargs or {}

    def matches(self, actual: object) -> bool:
        if self.kind == "ref":
            return isinstance(actual, Stub) and actual.stub_name == self.name
        if self.kind == "lambda":
            return callable(actual) and same(actual(), self.args[0])
        if not isinstance(actual, Called):
            return False
        name, args, kwargs = actual.call
        return (
            name == self.name
            and same(list(args), list(self.args))
            and list(kwargs) == list(self.kwargs)
            and all(same(kwargs[key], value) for key, value in self.kwargs.items())
        )


def expected_value(expr: object) -> object:
    """What ``expr`` evaluates to in a module run with :class:`Stub` names."""
    if isinstance(expr, py.Lit):
        return expr.value
    if isinstance(expr, py.Ref):
        return Expect("ref", expr.text)
    if isinstance(expr, py.Lambda):
        return Expect("lambda", args=(expected_value(expr.body),))
    if isinstance(expr, py.ListExpr):
        return [expected_value(item.value) for item in expr.items]
    if isinstance(expr, py.TupleExpr):
        return tuple(expected_value(item.value) for item in expr.items)
    if isinstance(expr, py.DictExpr):
        return {item.key.value: expected_value(item.value) for item in expr.items}
    positional = tuple(expected_value(a.value) for a in expr.args if a.name is None)
    keywords = {a.name: expected_value(a.value) for a in expr.args if a.name is not None}
    return Expect("call", expr.func.text, positional, keywords)


class Generator:
    """Random modules mixing every node kind, with the checks each one needs recorded."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.values: list[tuple[str, object]] = []
        self.docstrings: dict[str, str] = {}
        self.comment_count = 0
        self.heads = {"Literal", "Foo", "Trainer"}  # names used in annotations
        self.counter = 0

    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def fresh(self, prefix: str) -> str:
        """A name used nowhere else in the module."""
        self.counter += 1
        return f"{prefix}{self.counter}"

    # -- text ------------------------------------------------------------------------------
    def identifier(self) -> str:
        if self.chance(0.15):
            return "n" + "".join(self.rng.choices("abcdefgh_", k=self.rng.randint(15, 60)))
        return self.rng.choice(NAMES) if self.chance(0.5) else self.rng.choice(WORDS) + "_k"

    def dotted(self) -> str:
        parts = [self.identifier() for _ in range(self.rng.choice([1, 1, 2, 3]))]
        self.heads.add(parts[0])
        return ".".join(parts)

    def text(self) -> str:
        pieces = []
        for _ in range(self.rng.choice([0, 1, 1, 2, 3, 6])):
            roll = self.rng.random()
            if roll < 0.35:
                pieces.append(self.rng.choice(HOSTILE))
            elif roll < 0.45:
                pieces.append("w" * self.rng.randint(20, 120))
            else:
                pieces.append(self.rng.choice(WORDS))
        return self.rng.choice([" ", "", "_"]).join(pieces)

    def comment(self) -> str:
        if self.chance(0.15):
            return self.rng.choice(PRAGMAS) + " " + self.text()
        if self.chance(0.1):
            return "c" * self.rng.randint(40, 95)
        return self.text()

    def leading(self) -> tuple[str, ...]:
        if not self.chance(0.08):
            return ()
        texts = tuple(self.comment() for _ in range(self.rng.randint(1, 2)))
        self.comment_count += sum(comment_lines(text) for text in texts)
        return texts

    def trailing(self) -> str | None:
        if not self.chance(0.08):
            return None
        self.comment_count += 1
        return self.comment()

    # -- expressions -----------------------------------------------------------------------
    def scalar(self) -> object:
        roll = self.rng.random()
        if roll < 0.35:
            return self.text()
        if roll < 0.55:
            return self.rng.choice([0, 1, -3, 10**30, -(2**70), 123456789])
        if roll < 0.8:
            floats = [1e-08, 0.0003, 8e-05, -0.0, 0.0, 1e16, -1.5e300, 5e-324, 2.5]
            return self.rng.choice(floats + [math.inf, -math.inf, math.nan])
        return self.rng.choice([True, False, None])

    def literal(self, depth: int) -> object:
        if depth <= 0 or self.chance(0.6):
            return self.scalar()
        size = self.rng.randint(0, 5)
        kind = self.rng.choice(["list", "tuple", "dict"])
        if kind == "dict":
            keys = {self.rng.choice([self.text(), self.rng.randint(-5, 99)]) for _ in range(size)}
            return {key: self.literal(depth - 1) for key in keys}
        items = [self.literal(depth - 1) for _ in range(size)]
        return items if kind == "list" else tuple(items)

    def expr(self, depth: int) -> object:
        roll = self.rng.random()
        if depth <= 0 or roll < 0.3:
            return py.Lit(self.literal(1))
        if roll < 0.4:
            return py.Ref(self.dotted())
        if roll < 0.75:
            return self.call(depth)
        if roll < 0.85:
            return py.ListExpr([self.item(depth) for _ in range(self.rng.randint(0, 4))])
        if roll < 0.9:
            return py.TupleExpr([self.item(depth) for _ in range(self.rng.randint(0, 3))])
        items = []
        for key in {self.text() for _ in range(self.rng.randint(0, 3))}:
            value = self.expr(depth - 1)
            items.append(py.DictItem(py.Lit(key), value, self.leading(), self.trailing()))
        return py.DictExpr(items)

    def item(self, depth: int) -> py.Arg:
        return py.Arg(self.expr(depth - 1), None, self.leading(), self.trailing())

    def call(self, depth: int) -> py.Call:
        args = []
        for _ in range(self.rng.choice([0, 0, 1, 1, 2])):
            args.append(py.Arg(self.expr(depth - 1), None, self.leading(), self.trailing()))
        names = set()
        for _ in range(self.rng.randint(0, 6)):
            name = self.identifier().lower()
            if name not in names:
                names.add(name)
                value = self.expr(depth - 1)
                if self.chance(0.08):
                    value = py.Lambda(value)
                args.append(py.Arg(value, name, self.leading(), self.trailing()))
        return py.Call(py.Ref(self.dotted()), args)

    # -- statements ------------------------------------------------------------------------
    def docstring(self, owner: str) -> py.Docstring:
        lines = [self.text() for _ in range(self.rng.choice([1, 1, 2, 4]))]
        indents = [" " * self.rng.choice([0, 0, 2, 4, 8]) for _ in lines]
        text = "\n".join(indent + line for indent, line in zip(indents, lines, strict=True))
        if self.chance(0.2):
            text = "\n" + text + "\n   "
        self.docstrings[owner] = normalize_docstring(text)
        return py.Docstring(text)

    def assign(self, prefix: str) -> py.Assign:
        target = self.fresh(prefix)
        value = self.expr(self.rng.randint(0, 4))
        self.values.append((target, expected_value(value)))
        return py.Assign(target, value, self.leading(), self.trailing())

    def statements(self, prefix: str, count: int) -> list:
        body = []
        for _ in range(count):
            if self.chance(0.1):
                text = self.comment()
                self.comment_count += comment_lines(text)
                body.append(py.Comment(text))
            body.append(self.assign(prefix))
        return body

    def function(self, owner: str = "") -> py.FunctionDef:
        name = self.fresh("func_")
        call = f"{owner}{name}()"
        body = [self.docstring(name)] if self.chance(0.7) else []
        if self.chance(0.5):
            value = self.expr(self.rng.randint(1, 4))
            self.values.append((call, expected_value(value)))
            body.append(py.Return(value))
        else:
            body.append(py.Assign("config", py.Call(py.Ref(self.dotted()))))
            for _ in range(self.rng.randint(1, 4)):
                attribute = self.fresh(self.identifier().lower()) + "_x" * self.rng.randint(0, 20)
                value = self.expr(self.rng.randint(0, 3))
                self.values.append((f"{call}.{attribute}", expected_value(value)))
                path = f"config.{attribute}"
                body.append(py.Assign(path, value, self.leading(), self.trailing()))
            body.append(py.Return(py.Ref("config")))
        return py.FunctionDef(name, self.rng.choice([None, "Trainer.Config", "int"]), body)

    def field(self, owner: str) -> list:
        name = self.fresh("field_") + "_f" * self.rng.choice([0, 0, 5, 25])
        simple = self.chance(0.5)
        annotation = self.rng.choice(ANNOTATIONS if simple else COMPOUND_ANNOTATIONS)
        value = None if self.chance(0.2) else self.expr(self.rng.randint(0, 3))
        if value is not None:
            self.values.append((f"{owner}{name}", expected_value(value)))
        stmts = [py.AnnAssign(name, annotation, value, self.leading())]
        if self.chance(0.6):
            stmts.append(py.FieldDoc(self.text()))
        return stmts

    def klass(self, owner: str = "") -> py.ClassDef:
        name = self.fresh("Class")
        path = f"{owner}{name}."
        body = [self.docstring(name)] if self.chance(0.7) else []
        for _ in range(self.rng.randint(0, 4)):
            body += self.field(path)
        if self.chance(0.2):
            body.append(self.function(path))
        if not owner and self.chance(0.15):
            body.append(self.klass(path))
        decorators = []
        if self.chance(0.5):
            flags = [py.Arg(True, "kw_only"), py.Arg(True, "slots")]
            decorators.append(py.Call(py.Ref(self.dotted()), flags))
        bases = [self.dotted() for _ in range(self.rng.choice([0, 0, 1, 2]))]
        return py.ClassDef(name, bases, body, decorators)

    def imports(self) -> list:
        chosen = []
        for module in self.rng.sample(sorted(IMPORTABLE), self.rng.randint(0, 6)):
            available = IMPORTABLE[module]
            names = self.rng.sample(available, self.rng.randint(1, len(available)))
            if self.chance(0.2):
                names[0] += " as alias_" + names[0].lower()
            chosen.append(py.ImportFrom(module, names))
        if self.chance(0.3):
            chosen.append(py.Import(self.rng.choice(["os", "sys as system", "torch", "titan"])))
        if chosen and self.chance(0.7):
            chosen.append(py.ImportFrom("__future__", ["annotations"]))
        return sort_imports(chosen, first_party=["titan"])

    def module(self) -> py.Module:
        body: list = []
        if self.chance(0.7):
            body.append(self.docstring("<module>"))
        body += self.imports()
        for _ in range(self.rng.randint(1, 5)):
            roll = self.rng.random()
            if roll < 0.35:
                body += self.statements("value_", self.rng.randint(1, 3))
            elif roll < 0.7:
                body.append(self.function())
            else:
                body.append(self.klass())
            if self.chance(0.1):
                text = self.comment()
                self.comment_count += comment_lines(text)
                body.append(py.Comment(text))
        return py.Module(body)


def comment_lines(text: str) -> int:
    """How many comment lines an own-line comment text prints as."""
    return text.replace("\r\n", "\n").replace("\r", "\n").count("\n") + 1


def build_modules(count: int) -> list[tuple[str, Generator]]:
    """``count`` formatted random modules with their generators (the recorded checks). A
    module whose layout pyfmt refuses (an annotation that would split) is drawn again."""
    rng = random.Random(SEED)
    built = []
    refused = 0
    while len(built) < count:
        generator = Generator(rng)
        module = generator.module()
        try:
            built.append((format_module(module), generator))
        except ValueError:
            refused += 1
    assert refused < count // 10, f"{refused} modules refused"
    return built


def run_module(text: str, generator: Generator) -> tuple[dict, list[str]]:
    """Execute a generated module with stubs for every name; returns its namespace and the
    modules it imported."""
    imported = []
    real_import = builtins.__import__

    def fake_import(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "__future__":
            return real_import(name, globals, locals, fromlist, level)
        imported.append(name)
        return Stub(name)

    namespace = {name: Stub(name) for name in generator.heads}
    namespace["__builtins__"] = dict(vars(builtins), __import__=fake_import)
    exec(compile(text, "<generated>", "exec"), namespace)
    return namespace, imported


def lookup(namespace: dict, path: str) -> object:
    """The value at a path like ``value_4``, ``func_3().a``, ``Class1.Class2.func_5()``."""
    value = None
    for number, part in enumerate(path.split(".")):
        name = part.removesuffix("()")
        value = namespace[name] if number == 0 else getattr(value, name)
        if part.endswith("()"):
            value = value()
    return value


def docstrings_of(text: str) -> dict[str, str | None]:
    """``ast.get_docstring`` of the module (``"<module>"``) and of every function and class."""
    tree = ast.parse(text)
    found = {"<module>": ast.get_docstring(tree)}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            found[node.name] = ast.get_docstring(node)
    return found


def count_comments(text: str) -> int:
    """The number of comment tokens Python's tokenizer finds."""
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    return sum(token.type == tokenize.COMMENT for token in tokens)


@pytest.fixture(scope="module")
def random_modules() -> list[tuple[str, Generator]]:
    """The random modules, built once for the tests below."""
    return build_modules(MODULES)


def test_random_modules_are_what_ruff_writes(random_modules, tmp_path: Path) -> None:
    """The differential test: one ruff run over all random modules wants no change."""
    for number, (text, _) in enumerate(random_modules):
        (tmp_path / f"generated_{number:03d}.py").write_text(text, encoding="utf-8")
    ruff_wants_no_change(tmp_path)


def test_random_modules_keep_every_value(random_modules) -> None:
    """Every value (literals bit for bit, calls, names, lambdas) comes back when run."""
    checked = 0
    for text, generator in random_modules:
        namespace, imported = run_module(text, generator)
        assert "PWNED" not in vars(builtins)
        assert "builtins" not in imported, text
        for path, expected in generator.values:
            actual = lookup(namespace, path)
            assert same(actual, expected), f"{path}: {actual!r} != {expected!r}\n{text}"
            checked += 1
    assert checked > 2000


def test_random_modules_keep_docstrings_and_comments(random_modules) -> None:
    """Docstrings read back as their normalized text; no comment ends early or merges."""
    for text, generator in random_modules:
        found = docstrings_of(text)
        for owner, expected in generator.docstrings.items():
            assert found[owner] == expected, (owner, text)
        assert count_comments(text) == generator.comment_count, text


def boundary_statements(n: int) -> list:
    """Statements of many shapes whose width grows with ``n``: swept over ``n``, each shape
    crosses the 100-column limit at some point, one column at a time."""
    text, wide, combining = "s" * n, "中" * (n // 2) + "é" * (n % 2), "e\u0301" * n
    stmts = [
        py.Assign("x" * n, call("Foo", [arg(1, "a"), arg("v", "b"), arg([1, 2], "c")])),
        py.Assign("x", call("Foo", [arg(text, "a"), arg(call("Bar", [arg(1), arg("z")]), "d")])),
        py.Assign("x", call("Foo", [arg(call("Bar", [arg(text, "b"), arg("zz", "c")]))])),
        py.Assign("x", call("F", [arg(py.ListExpr([call("B", [arg(text), arg("z")])]), "k")])),
        py.Assign("x", call("Foo", [arg(1, "a")]), trailing="c" * n),
        py.Assign("x", call("Foo", [arg(1, "a")]), trailing="type: " + "c" * n),
        py.Assign("x", call("F", [arg(call("B", [arg(1)]), "a", trailing="c" * n), arg(2, "z")])),
        py.Assign("x", py.Lit(wide)),
        py.Assign("x", py.Lit(combining)),
        py.Assign("x" * n, call("a" * 30 + ".Foo", [arg(1, "a"), arg(2, "b")])),
        py.Assign("x" * n, call("Foo", [arg(1, "a", comments=["c"]), arg(2, "b")])),
        py.Assign("x", call("Foo", [arg(py.Lambda(py.Lit(text)), "f")])),
        py.Assign("x", call("Foo", [arg(py.Lambda(call("Bar", [arg(text, "q")])), "f" * n)])),
        py.Assign("x", call("Foo", [arg(py.Lambda(py.Lit([text, "t"])), "f")])),
        py.Assign("x", py.Lit({text: [1, 2], "k": {"a": text}, "t": (text,)})),
        py.Return(call("a" * n + ".Foo", [arg(1, "a"), arg(call("Bar", [arg("q" * 40)]), "b")])),
        py.AnnAssign("f" * n, "list[int]", call("field", [arg(py.Lambda(py.Lit([1])), "d")])),
        py.AnnAssign("f" * n, "int | None", py.Lit([1, 2, 3])),
        py.AnnAssign("f" * n, "str"),
    ]
    for value in [py.Lit(text), py.Ref("a." + text), py.Lit(-(10**n)), call("F" + text)]:
        stmts.append(py.Assign("x" * 20, value))
        stmts.append(py.Assign("x" * 20, value, trailing="c" * (n // 2)))
        stmts.append(py.Return(value))
        stmts.append(py.AnnAssign("f" * 20, "list[int]", value))
        stmts.append(py.AnnAssign("f" * 20, "Trainer.Config", value))
    return stmts


def test_widths_around_the_limit_are_what_ruff_writes(tmp_path: Path) -> None:
    """Random lengths hit the 100-column edge only by chance: sweep it for each shape."""
    written = 0
    for n in range(70, 106):
        for number, stmt in enumerate(boundary_statements(n)):
            if isinstance(stmt, py.Return):
                module = py.Module([py.FunctionDef("f", None, [stmt])])
            else:
                module = py.Module([py.ClassDef("C", [], [stmt])])
            try:
                text = format_module(module)
            except ValueError:
                assert isinstance(stmt, py.AnnAssign)  # an annotation that would have to split
                continue
            (tmp_path / f"width_{n}_{number:02d}.py").write_text(text, encoding="utf-8")
            written += 1
    assert written > 1000
    ruff_wants_no_change(tmp_path)


def test_docstring_normalization_is_stable() -> None:
    rng = random.Random(SEED)
    for _ in range(300):
        text = Generator(rng).docstring("x").text
        normalized = normalize_docstring(text)
        assert normalize_docstring(normalized) == normalized
        module = format_statements(py.FunctionDef("f", None, [py.Docstring(text)]))
        assert docstrings_of(module)["f"] == normalized

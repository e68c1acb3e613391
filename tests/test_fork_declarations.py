"""A fork's own flavors and converters, declared once in ``[tool.titan]`` (``titan.schemas.fork_names``).

A fork builds flavors titan does not ship (``llama3`` ``1B``) and registers converters of its own
(``npu_rms_norm``). ``titan-validate`` checks ``model.flavor`` and ``model.converters`` against
titan's names plus the project's declarations (and the flavor table of a declared model registry,
when its file says it plainly); an unknown one's hint names the exact ``[tool.titan]`` line, and
following the hints of a real fork folder ends in a clean check.
"""

from __future__ import annotations

import re
import textwrap
import tomllib
from pathlib import Path

import pytest
from titan.schemas import fork_names, project
from titan.schemas.toml_check import CheckOptions, check_file

from tests.helpers import validate

FORK_EXT = """\
from dataclasses import dataclass, field


@dataclass
class Model:
    npu_fused_attention: bool = False
    \"\"\"Use the fork's fused NPU attention kernel.\"\"\"


@dataclass
class Infra:
    cluster: str = "default"
    nodes: int = 1


@dataclass
class JobConfig:
    model: Model = field(default_factory=Model)
    infra: Infra = field(default_factory=Infra)
"""

JOB = """\
[model]
name = "llama3"
flavor = "1B"
converters = ["npu_rms_norm"]
npu_fused_attention = true

[infra]
cluster = "npu-a"
nodes = 4

[training]
steps = 10
"""


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    (root / ".git").mkdir(exist_ok=True)  # the repository root: the project walk stops here
    project.forget()
    return root


def _findings(path: Path) -> list:
    project.forget()
    return check_file(str(path), CheckOptions()).diagnostics


def _only(found: list, code: str):
    matching = [d for d in found if d.code == code]
    assert len(matching) == 1, [(d.code, d.message) for d in found]
    return matching[0]


# --------------------------------------------------------------------------- the declaration


def test_flavors_and_converters_are_read_from_the_declaration(tmp_path):
    _write(
        tmp_path,
        {
            "pyproject.toml": """\
                [tool.titan]
                flavors = { llama3 = ["1B", "3B"], mymodel = ["small"] }
                converters = ["npu_rms_norm", "npu_rope"]
                """
        },
    )
    declared = project.for_folder(tmp_path)
    assert declared.problems == ()
    assert declared.flavors == (("llama3", ("1B", "3B")), ("mymodel", ("small",)))
    assert declared.converters == (("npu_rms_norm", None), ("npu_rope", None))
    assert {"flavors", "converters"} <= set(project.KEYS)


def test_converters_may_name_their_class(tmp_path):
    _write(
        tmp_path,
        {
            "pyproject.toml": """\
                [tool.titan]
                converters = { npu_rms_norm = "forkpkg.converters.NPURMSNormConverter" }
                """
        },
    )
    declared = project.for_folder(tmp_path)
    assert declared.problems == ()
    assert declared.converters == (("npu_rms_norm", "forkpkg.converters.NPURMSNormConverter"),)


@pytest.mark.parametrize(
    ("line", "key", "words"),
    [
        ('flavors = ["1B"]', "flavors", "got an array"),
        ('flavors = { llama3 = "1B" }', "flavors", "`llama3` = the string '1B'"),
        ("flavors = { llama3 = [] }", "flavors", "`llama3` = an empty array"),
        ('converters = "npu_rms_norm"', "converters", "got the string"),
        ('converters = { npu_rms_norm = "NoModule" }', "converters", "package.module.Class"),
    ],
)
def test_a_declaration_titan_cannot_use_is_a_finding_in_pyproject(tmp_path, line, key, words):
    _write(tmp_path, {"pyproject.toml": f"[tool.titan]\n{line}\n", "job.toml": JOB})
    found = _only(_findings(tmp_path / "job.toml"), "wrong-type")
    assert found.path == f"tool.titan.{key}"
    assert (found.span.file, found.span.line) == (str(tmp_path / "pyproject.toml"), 2)
    assert words in f"{found.message} {found.hint}"


def test_declaring_a_converter_torchtitan_registers_is_refused(tmp_path):
    _write(
        tmp_path,
        {"pyproject.toml": '[tool.titan]\nconverters = ["npu_x", "quantize.linear.float8"]\n'},
    )
    declared = project.for_folder(tmp_path)
    assert declared.converters == (("npu_x", None),)
    (problem,) = declared.problems
    assert problem.code == "invalid-value" and "quantize.linear.float8" in problem.message
    assert problem.span.col == len('converters = ["npu_x", ') + 1


# --------------------------------------------------------------------------- the checks


def test_declared_flavor_and_converter_pass_and_others_still_fail(tmp_path):
    _write(
        tmp_path,
        {
            "pyproject.toml": """\
                [tool.titan]
                flavors = { llama3 = ["1B"] }
                converters = ["npu_rms_norm"]
                """,
            "ok.toml": '[model]\nname = "llama3"\nflavor = "1B"\nconverters = ["npu_rms_norm"]\n',
            "bad.toml": '[model]\nname = "llama3"\nflavor = "2B"\nconverters = ["npu_swiglu"]\n',
        },
    )
    assert _findings(tmp_path / "ok.toml") == []
    found = _findings(tmp_path / "bad.toml")
    assert sorted(d.code for d in found) == ["unknown-converter", "unknown-flavor"]


def test_a_misspelt_declared_name_gets_did_you_mean(tmp_path):
    _write(
        tmp_path,
        {
            "pyproject.toml": """\
                [tool.titan]
                flavors = { llama3 = ["1B_npu"] }
                converters = ["npu_rms_norm"]
                """,
            "job.toml": '[model]\nname = "llama3"\nflavor = "1b_npu"\nconverters = ["npu_rms_nrom"]\n',
        },
    )
    found = _findings(tmp_path / "job.toml")
    assert _only(found, "unknown-converter").hint == 'did you mean `"npu_rms_norm"`?'
    assert _only(found, "unknown-flavor").hint == "did you mean `1B_npu`?"


def test_flavors_are_read_from_a_declared_registry_file(tmp_path):
    _write(
        tmp_path,
        {
            "pyproject.toml": '[tool.titan]\nmodel-registries = { mymodel = "forkpkg.mymodel" }\n',
            "forkpkg/__init__.py": "",
            "forkpkg/mymodel.py": """\
                FLAVORS = {"small": dict(dim=256), "large": dict(dim=4096)}


                def model_registry(flavor: str):
                    if flavor not in FLAVORS:
                        raise ValueError(f"no flavor {flavor}")
                    return FLAVORS[flavor]
                """,
            "small.toml": '[model]\nname = "mymodel"\nflavor = "small"\n',
            "typo.toml": '[model]\nname = "mymodel"\nflavor = "smal"\n',
            "other.toml": '[model]\nname = "mymodel"\nflavor = "7B"\n',
        },
    )
    assert _findings(tmp_path / "small.toml") == []  # no unknown-model warning: it is declared
    assert (
        _only(_findings(tmp_path / "typo.toml"), "unknown-flavor").hint == "did you mean `small`?"
    )
    hint = _only(_findings(tmp_path / "other.toml"), "unknown-flavor").hint
    assert 'flavors = { mymodel = ["7B"] }' in hint and "declared for mymodel: small, large" in hint


def test_a_registry_titan_cannot_read_checks_only_the_declared_flavors(tmp_path):
    registry = """\
        from forkpkg.tables import FLAVORS


        def model_registry(flavor: str):
            return FLAVORS[flavor]
        """
    _write(
        tmp_path,
        {
            "pyproject.toml": '[tool.titan]\nmodel-registries = { mymodel = "forkpkg.mymodel" }\n',
            "forkpkg/mymodel.py": registry,
            "job.toml": '[model]\nname = "mymodel"\nflavor = "anything"\n',
        },
    )
    assert _findings(tmp_path / "job.toml") == []  # its model_registry is the only judge
    (tmp_path / "pyproject.toml").write_text(
        '[tool.titan]\nmodel-registries = { mymodel = "forkpkg.mymodel" }\n'
        'flavors = { mymodel = ["small"] }\n'
    )
    hint = _only(_findings(tmp_path / "job.toml"), "unknown-flavor").hint
    assert 'flavors = { mymodel = ["small", "anything"] }' in hint
    assert "cannot read which flavors forkpkg.mymodel.model_registry builds" in hint


@pytest.mark.parametrize(
    ("source", "flavors"),
    [
        ('T = {"a": 1, "b": 2}\ndef model_registry(flavor):\n    return T[flavor]\n', ("a", "b")),
        (
            'T: dict = {"a": 1}\ndef model_registry(name, /):\n    if name not in T:\n'
            '        raise KeyError(f"{name}")\n    return T[name]\n',
            ("a",),
        ),
        # Passed on, compared, rebound, two tables, a ** spread, imported: not a plain answer.
        ('T = {"a": 1}\ndef model_registry(flavor):\n    return build(flavor, T[flavor])\n', None),
        ('T = {"a": 1}\ndef model_registry(flavor):\n    return T[flavor.lower()]\n', None),
        (
            'T = {"a": 1}\ndef model_registry(flavor):\n    flavor = "a"\n    return T[flavor]\n',
            None,
        ),
        (
            'T = {"a": 1}\nU = {"b": 2}\ndef model_registry(f):\n    return T[f] if f in T else U[f]\n',
            None,
        ),
        (
            'B = {"x": 0}\nT = {"a": 1, **B}\ndef model_registry(flavor):\n    return T[flavor]\n',
            None,
        ),
        ("from x import T\ndef model_registry(flavor):\n    return T[flavor]\n", None),
        ('T = {"a": 1}\nT = make()\ndef model_registry(flavor):\n    return T[flavor]\n', None),
        ('T = {"a": 1}\n', None),
        ("def model_registry(:\n", None),
    ],
)
def test_registry_flavors_are_read_only_when_the_file_says_them_plainly(tmp_path, source, flavors):
    file = tmp_path / "registry.py"
    file.write_text(source)
    assert fork_names.registry_flavors(str(file)) == flavors


# --------------------------------------------------------------------------- the hints


def test_hints_name_the_declaration_not_just_a_list(tmp_path):
    _write(tmp_path, {"job.toml": JOB})
    found = _findings(tmp_path / "job.toml")
    flavor = _only(found, "unknown-flavor").hint
    assert 'flavors = { llama3 = ["1B"] }' in flavor
    assert 'model-registries = { llama3 = "yourpkg.models.llama3" }' in flavor
    assert "--model-registry llama3=yourpkg.models.llama3" in flavor
    assert "llama3 flavors: debugmodel" in flavor  # what titan ships, after the route
    converter = _only(found, "unknown-converter").hint
    assert 'converters = ["npu_rms_norm"]' in converter
    assert "registered converters:" in converter


def test_a_hint_extends_what_is_already_declared(tmp_path):
    _write(
        tmp_path,
        {
            "pyproject.toml": """\
                [tool.titan]
                flavors = { llama3 = ["3B"] }
                converters = ["npu_rope"]
                """,
            "job.toml": '[model]\nname = "llama3"\nflavor = "1B"\nconverters = ["npu_rms_norm"]\n',
        },
    )
    found = _findings(tmp_path / "job.toml")
    assert 'flavors = { llama3 = ["3B", "1B"] }' in _only(found, "unknown-flavor").hint
    assert 'converters = ["npu_rope", "npu_rms_norm"]' in _only(found, "unknown-converter").hint


_ROUTE = re.compile(r"\b(flavors|converters|model-registries) = (\{[^}]*\}|\[[^\]]*\])")


def _follow(root: Path, hints: list[str]) -> None:
    """Write the ``[tool.titan]`` lines the hints name into ``pyproject.toml``, as a user would."""
    pyproject = root / "pyproject.toml"
    text = pyproject.read_text() if pyproject.exists() else "[tool.titan]\n"
    table = tomllib.loads(text)["tool"]["titan"]
    for hint in hints:
        for key, value in _ROUTE.findall(hint):
            table[key] = tomllib.loads(f"v = {value}")["v"]
    lines = ["[tool.titan]"]
    for key, value in table.items():
        lines.append(f"{key} = {fork_names._toml_value(value)}")
    pyproject.write_text("\n".join(lines) + "\n")
    project.forget()


def test_following_the_hints_of_a_fork_folder_ends_clean(tmp_path):
    _write(
        tmp_path,
        {
            "pyproject.toml": '[tool.titan]\nextensions = ["tools/fork_ext.py"]\n',
            "tools/fork_ext.py": FORK_EXT,
            "configs/llama3_1b.toml": JOB,
            "configs/llama3_8b.toml": JOB.replace('"1B"', '"8B"').replace(
                "npu_rms_norm", "npu_rope"
            ),
        },
    )
    result = validate(tmp_path / "configs", "--format", "json")
    found = result.json()["diagnostics"]
    assert result.code == 1
    assert sorted(d["code"] for d in found) == ["unknown-converter"] * 2 + ["unknown-flavor"]
    # Each hint writes the whole line for its own name, so two hints about one key are
    # followed one run after the other, as a user re-running the check would.
    for _ in range(len(found)):
        _follow(tmp_path, [d["hint"] for d in found])
        result = validate(tmp_path / "configs", "--format", "json")
        assert len(result.json()["diagnostics"]) < len(found)
        found = result.json()["diagnostics"]
        if not found:
            break
    assert (result.code, found) == (0, [])
    declared = project.for_folder(tmp_path)
    assert declared.extensions[0].entry == "tools/fork_ext.py"  # the declaration was kept
    assert dict(declared.flavors) == {"llama3": ("1B",)}
    assert sorted(name for name, _ in declared.converters) == ["npu_rms_norm", "npu_rope"]
    assert dict(declared.model_registries) == {"llama3": "yourpkg.models.llama3"}


def test_following_the_unknown_model_hint_ends_clean(tmp_path):
    _write(tmp_path, {"job.toml": '[model]\nname = "bamba"\nflavor = "9B"\n'})
    found = _only(_findings(tmp_path / "job.toml"), "unknown-model")
    _follow(tmp_path, [found.hint])
    assert _findings(tmp_path / "job.toml") == []

"""Thousands of generated TOML documents never produce a traceback or an exit code outside {0, 1}.

Documents are valid ones built from the schema, near misses (mutated key names), wrong types,
and garbage text or bytes; every output format is exercised.
"""

from __future__ import annotations

import io
import json
import tempfile
import typing
from pathlib import Path

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.spec import SectionSpec

from titan.cli.validate import run

WORKDIR = Path(tempfile.mkdtemp(prefix="titan-fuzz-"))
FORMATS = st.sampled_from(["text", "json", "github", "sarif"])


def _leaves(spec: SectionSpec, prefix: tuple = ()) -> list[tuple[tuple[str, ...], typing.Any]]:
    out = []
    for field in spec.fields:
        if isinstance(field.annotation, SectionSpec):
            out += _leaves(field.annotation, (*prefix, field.name))
        else:
            out.append(((*prefix, field.name), field.annotation))
    return out


LEAVES = _leaves(LEGACY_SPEC)
text = st.text(max_size=12)
any_value = st.recursive(
    st.one_of(st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False), st.booleans(), text),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)),
    max_leaves=6,
)


def valid_value(annotation) -> st.SearchStrategy:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is bool:
        return st.booleans()
    if annotation is int:
        return st.integers(-4, 4096)
    if annotation is float:
        return st.floats(-10, 10, allow_nan=False)
    if annotation is str:
        return text
    if origin is typing.Literal:
        return st.sampled_from(args)
    if origin is list:
        return st.lists(valid_value(args[0]), max_size=3)
    options = [valid_value(a) for a in args if a is not type(None)]
    return st.one_of(*options)


def _set(document: dict, path: tuple[str, ...], value) -> None:
    node = document
    for part in path[:-1]:
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            return
    node[path[-1]] = value


@st.composite
def documents(draw) -> str:
    document: dict = {}
    for path, annotation in draw(st.lists(st.sampled_from(LEAVES), max_size=12)):
        kind = draw(st.sampled_from(["valid", "valid", "wrong", "near"]))
        if kind == "valid":
            _set(document, path, draw(valid_value(annotation)))
        elif kind == "wrong":
            _set(document, path, draw(any_value))
        else:
            name = list(path[-1])
            index = draw(st.integers(0, len(name) - 1))
            name[index] = draw(st.sampled_from("abcdefxyz_"))
            moved = draw(st.sampled_from([path[:-1], path[:1], ()]))
            _set(document, (*moved, "".join(name)) if moved or name else path, draw(any_value))
    return tomli_w.dumps(document)


def _check(source: bytes, fmt: str, *extra: str) -> int:
    path = WORKDIR / "job.toml"
    path.write_bytes(source)
    out, err = io.StringIO(), io.StringIO()
    code = run([str(path), "--format", fmt, *extra], stdout=out, stderr=err)
    assert "Traceback" not in out.getvalue() + err.getvalue()
    assert code in (0, 1), err.getvalue()
    return code


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(document=documents(), fmt=FORMATS, ngpu=st.sampled_from([None, "1", "8", "12"]))
def test_generated_documents(document, fmt, ngpu):
    _check(document.encode(), fmt, *(["--ngpu", ngpu] if ngpu else []))


@settings(max_examples=600, deadline=None)
@given(
    garbage=st.text(alphabet=st.sampled_from(list("[]{}=\"'#.,\n ab1_-+:tfe\\")), max_size=80),
    fmt=FORMATS,
)
def test_toml_like_garbage(garbage, fmt):
    _check(garbage.encode(), fmt)


@settings(max_examples=400, deadline=None)
@given(raw=st.binary(max_size=64), fmt=FORMATS)
def test_random_bytes(raw, fmt):
    _check(raw, fmt)


@st.composite
def valid_documents(draw) -> str:
    document: dict = {}
    for path, annotation in draw(st.lists(st.sampled_from(LEAVES), max_size=15)):
        _set(document, path, draw(valid_value(annotation)))
    return tomli_w.dumps(document)


@settings(max_examples=300, deadline=None)
@given(document=valid_documents())
def test_values_of_the_right_type_raise_no_schema_findings(document):
    path = WORKDIR / "valid.toml"
    path.write_text(document, encoding="utf-8")
    out = io.StringIO()
    run([str(path), "--format", "json"], stdout=out, stderr=io.StringIO())
    schema_codes = {"unknown-key", "moved-key", "wrong-type", "invalid-choice", "toml-syntax"}
    found = [d for d in json.loads(out.getvalue())["diagnostics"] if d["code"] in schema_codes]
    assert not found, (document, found)

"""Tests for ``titan.schemas.spans``: exact positions, agreement with ``tomllib``, totality, speed."""

from __future__ import annotations

import datetime as dt
import pathlib
import random
import re
import sys
import tomllib
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from titan.schemas.spans import KeySpan, locate_keys

from tests.helpers import legacy_tomls
from tests.reference import CORPUS, REPO, require

BARE = re.compile(r"[A-Za-z0-9_-]+")


# --------------------------------------------------------------------------- helpers


def flatten(obj: Any, prefix: tuple = ()) -> set[tuple]:
    """Every table and key path of a loaded document; list elements add an index component."""
    paths: set[tuple] = set()
    if isinstance(obj, dict):
        for key, value in obj.items():
            paths.add((*prefix, key))
            paths |= flatten(value, (*prefix, key))
    elif isinstance(obj, list):
        for index, value in enumerate(obj):
            paths |= flatten(value, (*prefix, index))
    return paths


def span_text(text: str, span: KeySpan) -> str:
    lines = text.split("\n")
    line = lines[span.line - 1]
    if span.line == 1:
        line = line.removeprefix("\ufeff")
    return line[span.col - 1 : span.end_col - 1]


def token_decodes_to(token: str, key: str) -> bool:
    if token[:1] in ("'", '"'):
        return list(tomllib.loads(f"{token} = 0")) == [key]
    return token == key


def check_against_tomllib(text: str) -> dict:
    """Assert that the keys found are exactly tomllib's keys and each span holds its key."""
    spans = locate_keys(text)
    expected = flatten(tomllib.loads(text.removeprefix("\ufeff")))
    found = {path for path in spans if not isinstance(path[-1], int)}
    assert found == expected
    for path in expected:
        token = span_text(text, spans[path])
        assert token_decodes_to(token, path[-1]), (path, token, spans[path])
    return spans


def pos(spans: dict, *path: Any) -> tuple[int, int, int]:
    span = spans[path]
    return span.line, span.col, span.end_col


# --------------------------------------------------------------------------- hand-written cases


def test_empty_and_blank_files() -> None:
    assert locate_keys("") == {}
    assert locate_keys("\n\n# only a comment\r\n  \t\n") == {}
    assert locate_keys("\ufeff") == {}


def test_table_headers_record_each_component_once() -> None:
    text = "[a.b.c]\nx = 1\n[a.d]\ny = 2\n[ a . b ]\nz = 3\n"
    spans = check_against_tomllib(text)
    assert pos(spans, "a") == (1, 2, 3)
    assert pos(spans, "a", "b") == (1, 4, 5)
    assert pos(spans, "a", "b", "c") == (1, 6, 7)
    assert pos(spans, "a", "d") == (3, 4, 5)
    assert pos(spans, "a", "b", "z") == (6, 1, 2)
    assert spans["a",].value_line is None
    assert spans["a", "b", "c", "x"] == KeySpan(2, 1, 2, 2)


def test_header_whitespace_and_quoted_components() -> None:
    text = '[ "x.y" . z ]\nk = 1\n[\t\'lit.eral\'\t.\t"q"\t]\n'
    spans = check_against_tomllib(text)
    assert pos(spans, "x.y") == (1, 3, 8)
    assert pos(spans, "x.y", "z") == (1, 11, 12)
    assert pos(spans, "lit.eral") == (3, 3, 13)
    assert pos(spans, "lit.eral", "q") == (3, 16, 19)


def test_keys_in_tables_and_dotted_keys() -> None:
    text = "top = 1\n[t]\na.b = 1\na.c = 2\n  a . d = 3\n"
    spans = check_against_tomllib(text)
    assert spans["top",] == KeySpan(1, 1, 4, 1)
    assert pos(spans, "t", "a") == (3, 1, 2)  # the first dotted key wins the prefix
    assert pos(spans, "t", "a", "b") == (3, 3, 4)
    assert pos(spans, "t", "a", "c") == (4, 3, 4)
    assert pos(spans, "t", "a", "d") == (5, 7, 8)
    assert spans["t", "a"].value_line == 3


def test_inline_tables_nest() -> None:
    text = "[t]\nx = {a = 1, b.c = 2, d = {e = {f = 'g'}}}\n"
    spans = check_against_tomllib(text)
    assert pos(spans, "t", "x") == (2, 1, 2)
    assert pos(spans, "t", "x", "a") == (2, 6, 7)
    assert pos(spans, "t", "x", "b") == (2, 13, 14)
    assert pos(spans, "t", "x", "b", "c") == (2, 15, 16)
    assert pos(spans, "t", "x", "d", "e", "f") == (2, 32, 33)


def test_arrays_give_inline_tables_an_index() -> None:
    text = "x = [1, {a = 1}, [ {b = 2} ]]\n"
    spans = check_against_tomllib(text)
    assert pos(spans, "x", 1, "a") == (1, 10, 11)
    assert pos(spans, "x", 2, 0, "b") == (1, 21, 22)


def test_multiline_array_with_comments_and_trailing_comma() -> None:
    text = (
        "x = [ # [ { a = 1 } ]\n  1, # ,\n  # {b = 2}\n  { c = 3 },\n"
        "  [\n    {d = 4},\n  ],\n]\ny = 1\n"
    )
    spans = check_against_tomllib(text)
    assert pos(spans, "x", 1, "c") == (4, 5, 6)
    assert spans["x", 1, "c"].value_line == 4
    assert pos(spans, "x", 2, 0, "d") == (6, 6, 7)
    assert pos(spans, "y") == (9, 1, 2)


def test_arrays_of_tables() -> None:
    text = (
        "[[srv]]\nname = 'a'\n[srv.cfg]\nport = 1\n"
        "[[srv]]\nname = 'b'\n[srv.cfg]\nport = 2\n[[srv.sub]]\nk = 1\n[[srv.sub]]\nk = 2\n"
        "[[srv]]\n[[srv.sub]]\nk = 3\n"
    )
    spans = check_against_tomllib(text)
    assert pos(spans, "srv") == (1, 3, 6)
    assert pos(spans, "srv", 0) == (1, 3, 6)
    assert pos(spans, "srv", 1) == (5, 3, 6)
    assert pos(spans, "srv", 0, "name") == (2, 1, 5)
    assert pos(spans, "srv", 1, "name") == (6, 1, 5)
    assert pos(spans, "srv", 0, "cfg") == (3, 6, 9)
    assert pos(spans, "srv", 1, "cfg", "port") == (8, 1, 5)
    assert pos(spans, "srv", 1, "sub", 1, "k") == (12, 1, 2)
    assert pos(spans, "srv", 2, "sub", 0) == (14, 7, 10)
    assert pos(spans, "srv", 2, "sub", 0, "k") == (15, 1, 2)


def test_comments_everywhere() -> None:
    text = "# a = 1\n[t] # [u]\n# b = 2\nc = 1 # d = 2\ne = 'f' # g\n\t# h = 3\n"
    spans = check_against_tomllib(text)
    assert pos(spans, "t", "c") == (4, 1, 2)
    assert pos(spans, "t", "e") == (5, 1, 2)


def test_comment_after_scalar_in_array() -> None:
    spans = check_against_tomllib("x = [1 # ] , {\n, {k = 1}]\n")
    assert pos(spans, "x", 1, "k") == (2, 4, 5)


def test_strings_that_look_like_toml() -> None:
    text = (
        'a = "x\\"y = [1] # z"\n'
        "b = 'c:\\\\path\\' # not = a comment'\n"
        'c = """\nd = 1\n[e]\n# f\n\\"""\ng = 2 ""\n"""\n'
        "h = '''\ni = 3\n[[j]]\n'''''\n"
        'k = """two extra quotes"""""\n'
        'l = """\\\n   continued"""\n'
        "m = 1\n"
    )
    spans = check_against_tomllib(text)
    assert set(spans) == {(key,) for key in "abchklm"}
    assert pos(spans, "h") == (10, 1, 2)
    assert pos(spans, "k") == (14, 1, 2)
    assert pos(spans, "m") == (17, 1, 2)


def test_closing_delimiter_may_hold_extra_quotes() -> None:
    text = 'x = ["""a"""", {k = "v"}, \'\'\'b\'\'\'\', {m = 1}, """""c""""", {n = 2}]\n'
    spans = check_against_tomllib(text)
    assert tomllib.loads(text)["x"][::2] == ['a"', "b'", '""c""']
    assert pos(spans, "x", 1, "k") == (1, 17, 18)
    assert pos(spans, "x", 3, "m") == (1, 38, 39)
    assert pos(spans, "x", 5, "n") == (1, 60, 61)


def test_scalars() -> None:
    text = (
        "a = 1_000\nb = 0x1F\nc = +inf\nd = nan\ne = 1e-8\nf = -0.5\ng = true\nh = false\n"
        "i = 1979-05-27T07:32:00Z\nj = 1979-05-27 07:32:00\nk = 1979-05-27 07:32:00-07:00\n"
        "l = 1979-05-27\nm = 07:32:00.999\nn = [1979-05-27 07:32:00, {o = 1}]\np = 0o17\nq = 0b11\n"
    )
    spans = check_against_tomllib(text)
    assert pos(spans, "n", 1, "o") == (14, 28, 29)
    assert pos(spans, "q") == (16, 1, 2)


def test_crlf_bom_and_tabs() -> None:
    text = '\ufeff[t]\r\n\ta\t=\t1\r\n"b" = { c = 2 }\r\n'
    spans = check_against_tomllib(text)
    assert pos(spans, "t") == (1, 2, 3)  # the BOM takes no column
    assert pos(spans, "t", "a") == (2, 2, 3)  # a tab is one column
    assert pos(spans, "t", "b") == (3, 1, 4)
    assert pos(spans, "t", "b", "c") == (3, 9, 10)


def test_quoted_and_non_ascii_keys() -> None:
    text = (
        '"é" = 1\n"日本" = { "ß" = 2 }\n"a\\"b" = 3\n"\\u00e9\\U0001F600" = 4\n'
        "'l\\t' = 5\n\"\" = 6\n"
    )
    spans = check_against_tomllib(text)
    assert pos(spans, "é") == (1, 1, 4)
    assert pos(spans, "日本") == (2, 1, 5)
    assert pos(spans, "日本", "ß") == (2, 10, 13)  # columns count characters, not bytes
    assert pos(spans, 'a"b') == (3, 1, 7)
    assert pos(spans, "é\U0001f600") == (4, 1, 19)
    assert pos(spans, "l\\t") == (5, 1, 6)
    assert pos(spans, "") == (6, 1, 3)


def test_value_line() -> None:
    spans = locate_keys("[t]\nx = [\n  {a = 1},\n]\n")
    assert spans["t",].value_line is None
    assert spans["t", "x"].value_line == 2
    assert spans["t", "x", 0, "a"].value_line == 3


# Pathological inputs of size n (each read at its full size, the second number, too).
PATHOLOGICAL = {
    "open brackets after a key": (lambda n: "a=" + "[" * n, 100_000),
    "nested inline tables": (lambda n: "a = " + "{b=" * n, 50_000),
    "open brackets": (lambda n: "[" * n, 100_000),
    "quotes": (lambda n: '"' * n, 100_000),
    "quotes after a key": (lambda n: "a = " + '"' * n, 100_000),
    "open triple quote": (lambda n: 'a = """' + '""x' * n, 50_000),
    "triple single quotes": (lambda n: "a = '''\n" * n, 20_000),
    "backslashes": (lambda n: 'a = "\\' * n, 50_000),
    "dotted key": (lambda n: "a." * n + "=1", 50_000),
    "open array": (lambda n: "a = [" + "1," * n, 100_000),
    "comments": (lambda n: "# x\n" * n, 50_000),
}


def calls(func: Any, arg: Any) -> int:
    """How many Python and C calls ``func(arg)`` makes: a count of the work that does not
    depend on how loaded the machine is."""
    count = 0

    def profile(frame, event, _arg) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        func(arg)
    finally:
        sys.setprofile(None)
    return count


@pytest.mark.parametrize(("build", "full"), PATHOLOGICAL.values(), ids=list(PATHOLOGICAL))
def test_pathological_input_is_linear_and_total(build, full) -> None:
    locate_keys(build(full))  # the full size is read without an error
    small, large = calls(locate_keys, build(full // 40)), calls(locate_keys, build(full // 10))
    # four times the input, about four times the work (quadratic would be sixteen)
    assert large <= 5 * small + 1_000, (small, large)


def test_hundred_line_config_is_linear() -> None:
    def config(sections: int) -> str:
        lines = []
        for section in range(sections):
            lines.append(f"[section_{section}.sub] # comment")
            lines += [f'key_{k} = "value {k}" # why' for k in range(4)]
            lines += ["list = [1, 2, 3]", "inline = { a = 1, b.c = 'x' }"]
            lines += ["dt = 1979-05-27 07:32:00", "", "# ---"]
        return "\n".join(lines) + "\n"

    text = config(10)
    assert len(text.splitlines()) == 100
    check_against_tomllib(text)
    small, large = calls(locate_keys, text), calls(locate_keys, config(40))
    assert large <= 5 * small, (small, large)  # four times the lines, about four times the work


# --------------------------------------------------------------------------- property tests

TZ = st.sampled_from([None, dt.UTC, dt.timezone(dt.timedelta(hours=-7, minutes=-30))])
KEYS = st.one_of(st.from_regex(r"[A-Za-z0-9_-]{1,8}", fullmatch=True), st.text(max_size=6))
SCALARS = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(["a = [1]", "#x", '""', "'''", "\n[t]\n", 'x"""', "k.v = {"]),
    st.dates(),
    st.times(),
    st.datetimes(timezones=TZ),
)
VALUES = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=3),
    max_leaves=12,
)
DOCS = st.dictionaries(KEYS, VALUES, max_size=5)


def quote_key(key: str, rnd: random.Random) -> str:
    if BARE.fullmatch(key) and rnd.random() < 0.7:
        return key
    literal_ok = all(c == "\t" or (c >= " " and c != "\x7f") for c in key) and "'" not in key
    if literal_ok and rnd.random() < 0.5:
        return f"'{key}'"
    out = []
    for c in key:
        if c in '"\\':
            out.append("\\" + c)
        elif c < " " or c == "\x7f" or (c > "~" and rnd.random() < 0.3):
            out.append(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def dotted(keys: list[str], rnd: random.Random) -> str:
    return rnd.choice([".", " . ", "\t.", ". "]).join(quote_key(k, rnd) for k in keys)


def render_scalar(value: Any, rnd: random.Random) -> str:
    literal_ok = all(c in "\t\n" or (c >= " " and c != "\x7f") for c in str(value))
    if isinstance(value, str) and "'''" not in value and literal_ok and rnd.random() < 0.3:
        return "'''\n" + value + "'''"  # the newline after the opener is trimmed
    if type(value) is int and value >= 0 and rnd.random() < 0.3:
        return rnd.choice([hex(value), f"{value:_d}"])
    line = tomli_w.dumps({"x": value}, multiline_strings=rnd.random() < 0.5)
    return line.removeprefix("x = ").removesuffix("\n")


def render_value(value: Any, rnd: random.Random, in_inline: bool) -> str:
    if isinstance(value, dict):
        body = ", ".join(f"{dotted(k, rnd)} = {v}" for k, v in entries(value, rnd, inline=True))
        return "{ " + body + " }" if body else "{}"
    if isinstance(value, list):
        items = [render_value(v, rnd, in_inline) for v in value]
        if not in_inline and items and rnd.random() < 0.5:
            inner = "".join(f"  {item}, # , ] = {{\n  # [x]\n" for item in items)
            return "[ # [\n" + inner + "]"
        return "[" + ", ".join(items) + "]"
    return render_scalar(value, rnd)


def entries(table: dict, rnd: random.Random, inline: bool) -> list[tuple[list[str], str]]:
    """``(key path, rendered value)`` pairs; non-empty sub-tables may become dotted keys."""
    out = []
    for key, value in table.items():
        if isinstance(value, dict) and value and rnd.random() < 0.5:
            out += [([key, *keys], v) for keys, v in entries(value, rnd, inline)]
        else:
            out.append(([key], render_value(value, rnd, inline)))
    return out


def dump_alt(doc: dict, rnd: random.Random) -> str:
    """Another serialization than tomli_w's: dotted keys, inline tables, comments, odd spacing."""
    lines: list[str] = []
    later: list[tuple[str, str, Any]] = []
    for key, value in doc.items():
        is_aot = isinstance(value, list) and value and all(isinstance(v, dict) for v in value)
        if (isinstance(value, dict) or is_aot) and rnd.random() < 0.5:
            later.append(("table" if isinstance(value, dict) else "array", key, value))
            continue
        lines += [f"{dotted(k, rnd)} = {v} # = [x]" for k, v in entries({key: value}, rnd, False)]
    for kind, key, value in later:
        for table in [value] if kind == "table" else value:
            quoted = quote_key(key, rnd)
            header = f"[ {quoted} ]" if kind == "table" else f"[[{quoted}]]"
            lines += ["", "# [comment]", header]
            lines += [f"\t{dotted(k, rnd)}\t=\t{v}" for k, v in entries(table, rnd, False)]
    return rnd.choice(["\n", "\r\n"]).join(lines) + "\n"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=DOCS)
def test_tomli_w_output_round_trips(doc: dict) -> None:
    check_against_tomllib(tomli_w.dumps(doc))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(doc=DOCS, seed=st.integers(), bom=st.booleans())
def test_alternative_serialization_round_trips(doc: dict, seed: int, bom: bool) -> None:
    text = dump_alt(doc, random.Random(seed))
    check_against_tomllib("\ufeff" + text if bom else text)


TOMLISH = st.text(alphabet="[]{}\"'=.,#\\\n\r\t abé1-_:+", max_size=200)


@settings(max_examples=1000, deadline=None)
@given(text=st.one_of(st.text(max_size=300), TOMLISH))
def test_fuzz_never_raises(text: str) -> None:
    spans = locate_keys(text)
    for span in spans.values():
        assert span.line >= 1
        assert 1 <= span.col < span.end_col


# --------------------------------------------------------------------------- real configs


def _config_files() -> list[Any]:
    files = sorted(CORPUS.rglob("*.toml")) if CORPUS.is_dir() else []
    files += legacy_tomls()
    if not CORPUS.is_dir():
        files.append(None)  # stands for the missing corpus: the test skips (or fails under CI)
    return files


@pytest.mark.parametrize(
    "path", _config_files(), ids=lambda p: str(p.relative_to(REPO.parent)) if p else "corpus"
)
def test_real_configs(path: pathlib.Path | None) -> None:
    if path is None:
        require(CORPUS)
    text = path.read_text(encoding="utf-8")
    spans = check_against_tomllib(text)
    assert spans  # every real config has at least one key

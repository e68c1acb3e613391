"""json, github and sarif outputs are well-formed (SARIF 2.1.0 shape) and carry the same findings
as text, with the same exit code, on fixtures, on hostile keys and on real configs."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from tests.helpers import legacy_config_count, validate, write
from tests.reference import REPO, corpus_files

FORMATS = ("text", "json", "github", "sarif")
SEVERITIES = {"error", "warning", "info"}

FINDINGS = """\
[job]
description = "every kind of finding in one file"
[training]
stpes = 10
tensor_parallel_degree = 2
seq_len = "2048"
[activation_checkpoint]
mode = "selectiv"
[checkpoint]
keep_latest_k = 1
[model]
tokenizer_path = "./tok"
"""
INERT = '[quantize.linear.float8]\nrecipe_name = "rowwise"\n'
KEEP_MODULE = """\
from dataclasses import dataclass, field


@dataclass
class Checkpoint:
    keep_latest_k: int = 1


@dataclass
class JobConfig:
    checkpoint: Checkpoint = field(default_factory=Checkpoint)
"""
LONG_KEY = "k" * 3000
HOSTILE_KEYS = [
    "[bold red]x[/]",
    "pct%0Akey%25",
    "com,ma:colon",
    "ünïcødé_ключ_🔥",
    "[link=https://example.com]click[/link]",
    LONG_KEY,
]
HOSTILE = f"""\
[training]
"[bold red]x[/]" = "[bold red]v[/]"
"pct%0Akey%25" = "a%0Ab"
"com,ma:colon" = "x,y:z"
"ünïcødé_ключ_🔥" = "值"
"[link=https://example.com]click[/link]" = 1
{LONG_KEY} = 1
"esc\\u001b[31mred" = "\\u001b[31mv"
"new\\nline" = "multi\\nline"
"cr\\rret" = 1
[bold]
x = "[/]"
[parallelism]
tensor_parallel_degree = "[red]2[/red]"
"""


def fixture_dir(tmp_path):
    write(tmp_path, "findings.toml", FINDINGS)
    write(tmp_path, "broken.toml", '[training\nsteps = 1\ndataset = "c4"\n')
    write(tmp_path, "warn.toml", INERT)
    write(tmp_path, "clean.toml", "[training]\nsteps = 5\n")
    write(tmp_path, "odd ,name:%0A.toml", "[trainig]\nsteps = 5\n")
    write(tmp_path, "ext/keep_module_fmt.py", KEEP_MODULE)
    write(tmp_path, "ext/keep.toml", '[job]\ncustom_config_module = "keep_module_fmt"\n')
    return tmp_path


# --- parsers: each format back to a multiset of (file, line, col, code, severity) ---------------

_HEADER = re.compile(
    r"^(?:(?P<file>.+):(?P<line>\d+):(?P<col>\d+)|<config>): "
    r"(?P<sev>error|warning|info)\[(?P<code>[a-z0-9-]+)\] ",
    re.MULTILINE,
)
_GH_LINE = re.compile(r"^::(error|warning|notice) ([^:]*)::(.*)$")
_GH_ESCAPES = {"%25": "%", "%0A": "\n", "%0D": "\r", "%3A": ":", "%2C": ","}
_GH_SUMMARY = re.compile(r"^titan-validate: (\d+) errors, (\d+) warnings in (\d+) files$")


def gh_decode(text: str) -> str:
    return re.sub(r"%(25|0A|0D|3A|2C)", lambda m: _GH_ESCAPES[m.group(0)], text)


def from_text(out: str) -> Counter:
    found = Counter()
    for m in _HEADER.finditer(out):
        line, col = (int(m["line"]), int(m["col"])) if m["line"] else (None, None)
        found[(m["file"], line, col, m["code"], m["sev"])] += 1
    return found


def from_json(report: dict) -> Counter:
    assert report["tool"] == "titan-validate"
    found = Counter()
    for d in report["diagnostics"]:
        assert d["severity"] in SEVERITIES and d["message"]
        found[(d["file"], d["line"], d["col"], d["code"], d["severity"])] += 1
    return found


def from_github(out: str, summary: dict) -> tuple[Counter, list[str]]:
    lines = out.splitlines()
    assert out.endswith("\n")
    assert _GH_SUMMARY.match(lines[-1]), lines[-1]
    assert [int(n) for n in _GH_SUMMARY.match(lines[-1]).groups()] == [
        summary["errors"],
        summary["warnings"],
        summary["files"],
    ]
    found, messages = Counter(), []
    level = {"error": "error", "warning": "warning", "notice": "info"}
    for line in lines[:-1]:
        m = _GH_LINE.match(line)
        assert m, f"not one annotation per line: {line[:200]!r}"
        props = dict(p.split("=", 1) for p in m.group(2).split(","))
        title = gh_decode(props["title"])
        code = re.fullmatch(r"titan-validate \(([a-z0-9-]+)\)", title).group(1)
        file = gh_decode(props["file"]) if "file" in props else None
        line_no = int(props["line"]) if "line" in props else None
        col = int(props["col"]) if "col" in props else None
        if "endColumn" in props:
            assert int(props["endColumn"]) > col
        found[(file, line_no, col, code, level[m.group(1)])] += 1
        messages.append(gh_decode(m.group(3)))
    return found, messages


def from_sarif(log: dict) -> Counter:
    from urllib.parse import unquote

    assert log["version"] == "2.1.0"
    assert "sarif" in log["$schema"] and "2.1.0" in log["$schema"]
    assert len(log["runs"]) == 1
    driver = log["runs"][0]["tool"]["driver"]
    assert driver["name"] == "titan-validate"
    ids = [rule["id"] for rule in driver["rules"]]
    assert len(ids) == len(set(ids)) and all(ids)
    found = Counter()
    for result in log["runs"][0]["results"]:
        assert result["ruleId"] in ids
        assert ids[result["ruleIndex"]] == result["ruleId"]
        assert result["level"] in {"error", "warning", "note"}
        assert isinstance(result["message"]["text"], str) and result["message"]["text"]
        file = line = col = None
        if "locations" in result:
            location = result["locations"][0]["physicalLocation"]
            file = unquote(location["artifactLocation"]["uri"])
            region = location["region"]
            line, col = region["startLine"], region["startColumn"]
            assert line >= 1 and col >= 1
            if "endColumn" in region:
                assert region["endLine"] >= line and region["endColumn"] > col
        severity = {"note": "info"}.get(result["level"], result["level"])
        found[(file, line, col, result["ruleId"], severity)] += 1
    return found


def all_formats(*args) -> dict:
    """Run every format; check each is well-formed and all agree; return the parsed pieces."""
    runs = {fmt: validate(*args, "--format", fmt, "--color", "never") for fmt in FORMATS}
    codes = {fmt: r.code for fmt, r in runs.items()}
    assert set(codes.values()) <= {0, 1} and len(set(codes.values())) == 1, codes
    for fmt, r in runs.items():
        assert "Traceback" not in r.out + r.err and "internal error" not in r.err, fmt
    report = runs["json"].json()
    expected = from_json(report)
    summary = report["summary"]
    severities = Counter(d["severity"] for d in report["diagnostics"])
    assert summary["errors"] == severities["error"]
    assert summary["warnings"] == severities["warning"]
    assert summary["infos"] == severities["info"]
    failing = summary["errors"] + (summary["warnings"] if "--strict" in args else 0)
    assert codes["json"] == (1 if failing else 0)
    github, messages = from_github(runs["github"].out, summary)
    assert github == expected
    assert from_sarif(json.loads(runs["sarif"].out)) == expected
    assert from_text(runs["text"].out) == expected
    if not report["diagnostics"]:
        assert "All checks passed" in runs["text"].out
    else:
        assert f"Found {summary['errors']} error" in runs["text"].out
    return {"runs": runs, "report": report, "messages": messages, "code": codes["json"]}


# --- agreement ------------------------------------------------------------------------------------


def test_fixture_findings_agree_across_formats(tmp_path):
    done = all_formats(fixture_dir(tmp_path))
    assert done["code"] == 1
    report = done["report"]
    assert report["summary"]["files"] == 6
    found = {(d["code"], d["severity"]) for d in report["diagnostics"]}
    assert {
        ("unknown-key", "error"),
        ("moved-key", "error"),
        ("wrong-type", "error"),
        ("invalid-choice", "error"),
        ("keep-latest-k", "error"),
        ("toml-syntax", "error"),
        ("inert-section", "warning"),
        ("deprecated-key", "warning"),
    } <= found
    odd = [d for d in report["diagnostics"] if d["file"] and "odd ," in d["file"]]
    assert [(d["code"], d["line"], d["col"]) for d in odd] == [("unknown-key", 1, 2)]
    assert str(tmp_path / "odd ,name:%0A.toml") == odd[0]["file"]


def test_project_legacy_configs_agree_across_formats():
    done = all_formats(REPO / "legacy_configs")
    assert done["code"] == 0 and done["report"]["summary"]["files"] == legacy_config_count()


def test_upstream_corpus_agrees_across_formats():
    files = corpus_files()
    done = all_formats(*files)
    assert done["report"]["summary"]["files"] == len(files)
    assert done["code"] == 1 and done["report"]["summary"]["errors"] >= 1


def test_messages_and_hints_survive_github_escaping(tmp_path):
    done = all_formats(write(tmp_path, "job.toml", FINDINGS))
    expected = [
        d["message"] + (f" ({d['hint']})" if d["hint"] else "")
        for d in done["report"]["diagnostics"]
    ]
    assert done["messages"] == expected
    sarif = json.loads(done["runs"]["sarif"].out)["runs"][0]["results"]
    assert [r["message"]["text"] for r in sarif] == expected


# --- hostile content ----------------------------------------------------------------------------


def test_hostile_keys_and_values_never_break_any_format(tmp_path):
    path = write(tmp_path, "hostile.toml", HOSTILE)
    done = all_formats(path)
    assert done["code"] == 1  # findings, not a usage or internal error
    report = done["report"]
    paths = {d["path"] for d in report["diagnostics"]}
    for key in [*HOSTILE_KEYS, "esc\x1b[31mred", "new\nline", "cr\rret"]:
        assert f"training.{key}" in paths, key
    assert "bold" in paths and "parallelism.tensor_parallel_degree" in paths
    text = done["runs"]["text"].out
    for key in HOSTILE_KEYS:  # printed as written: rich markup is not interpreted
        assert f"unknown key `{key}` in [training]" in text, key[:40]
    assert '"[bold red]x[/]" = "[bold red]v[/]"' in text  # the source line too
    assert "click" in text and "[/link]" in text
    # every finding stays on one annotation line; decoded messages carry the raw keys
    assert len(done["runs"]["github"].out.splitlines()) == len(report["diagnostics"]) + 1
    for key in ["new\nline", "pct%0Akey%25", "com,ma:colon", LONG_KEY]:
        assert any(f"`{key}`" in m for m in done["messages"]), key[:40]


def test_hostile_file_with_color_always_does_not_crash(tmp_path):
    result = validate(write(tmp_path, "hostile.toml", HOSTILE), "--color", "always")
    assert result.code == 1 and result.err == ""
    assert "unknown key `" in result.out and "[bold red]x[/]" in result.out


def test_control_characters_in_keys_do_not_reach_the_terminal(tmp_path):
    # A TOML key may hold ESC; with --color never the report must still be free of escape codes
    # (else a config file can recolour or rewrite the reader's terminal).
    result = validate(write(tmp_path, "hostile.toml", HOSTILE), "--color", "never")
    assert result.code == 1
    assert "\x1b" not in result.out and "\r" not in result.out


# --- colour and --strict ------------------------------------------------------------------------


def test_color_never_is_plain_and_color_always_is_coloured(tmp_path):
    folder = fixture_dir(tmp_path)
    plain = validate(folder, "--color", "never")
    coloured = validate(folder, "--color", "always")
    assert plain.code == coloured.code == 1
    assert "\x1b" not in plain.out
    assert "\x1b[" in coloured.out
    strip = re.compile(r"\x1b\[[0-9;]*m")
    assert strip.sub("", coloured.out) == plain.out
    assert "\x1b" not in validate(folder).out  # auto: not a terminal


@pytest.mark.parametrize("fmt", FORMATS)
def test_strict_fails_a_warning_only_file_in_every_format(tmp_path, fmt):
    path = write(tmp_path, "warn.toml", INERT)
    lenient = validate(path, "--format", fmt, "--color", "never")
    strict = validate(path, "--format", fmt, "--color", "never", "--strict")
    assert (lenient.code, strict.code) == (0, 1)
    assert lenient.out == strict.out  # --strict changes the verdict, not the findings
    assert "inert-section" in strict.out


def test_strict_agrees_across_formats(tmp_path):
    path = write(tmp_path, "warn.toml", INERT)
    plain = all_formats(path)
    strict = all_formats(path, "--strict")
    assert plain["code"] == 0 and strict["code"] == 1
    assert plain["report"] == strict["report"]
    assert [d["severity"] for d in strict["report"]["diagnostics"]] == ["warning"]


@pytest.mark.parametrize(
    ("files", "located", "share"),
    [
        (1, ["job.toml"], "1 of 1 file failing"),
        (2, ["a.toml", "pyproject.toml"], "2 of 2 files failing"),
        # a declaration's finding: more files with errors than files checked
        (1, ["job.toml", "pyproject.toml"], "errors in 2 files, 1 file checked"),
        (1, ["job.toml", "pyproject.toml", "ext.py"], "errors in 3 files, 1 file checked"),
    ],
)
def test_the_summary_never_counts_more_failing_files_than_it_checked(files, located, share):
    import io

    from titan.schemas.diagnostics import Diagnostic, Severity, Span
    from titan.schemas.render import render

    found = [
        Diagnostic(
            code="unknown-key",
            severity=Severity.ERROR,
            path="x",
            message="m",
            hint=None,
            span=Span(file=name, line=1, col=1, end_line=None, end_col=None),
        )
        for name in located
    ]
    out = io.StringIO()
    render(found, format="text", files=files, out=out)
    assert out.getvalue().rstrip().endswith(f"({share}).")

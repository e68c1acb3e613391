"""``migrate/targets/upstream_spec_030.py`` is what ``titan.migrate.specgen.upstream_codegen`` reads from
the installed torchtitan 0.3.0 today, and that codegen fails loudly on a default it cannot write."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "migrate" / "targets" / "upstream_spec_030.py"
RUFF = Path(sys.executable).with_name("ruff")


def _in_upstream(upstream_python: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [str(upstream_python), *args], capture_output=True, text=True, env=env, cwd=REPO
    )


def _formatted(text: str) -> str:
    """``text`` as ``make schema-upstream`` leaves the file (ruff, with the project's settings)."""
    done = subprocess.run(
        [str(RUFF), "format", "--stdin-filename", str(SPEC), "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    return done.stdout


def test_the_committed_spec_is_current(upstream_python, tmp_path):
    out = tmp_path / "upstream_spec_030.py"
    done = _in_upstream(
        upstream_python, "-m", "titan.migrate.specgen.upstream_codegen", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert _formatted(out.read_text(encoding="utf-8")) == SPEC.read_text(encoding="utf-8"), (
        "stale: run `make schema-upstream`"
    )


def test_a_default_with_no_literal_form_names_its_class_and_field(upstream_python):
    # A config class beside the real roots whose defaults are a function and a Function.Config
    # (the type of Profiler.Config.trace_post_processor) wrapping one.
    script = (
        "import sys\n"
        "from dataclasses import dataclass, field\n"
        "from titan.migrate.specgen import upstream_codegen\n"
        "from torchtitan.config.function import Function\n"
        "@dataclass(kw_only=True)\n"
        "class Odd:\n"
        "    {field}\n"
        "upstream_codegen.ROOTS += ('__main__:Odd',)\n"
        "sys.exit(upstream_codegen.main(['--out', sys.argv[1]]))\n"
    )
    cases = {
        "hook: object = print": "__main__:Odd.hook: cannot write a default of type "
        "builtin_function_or_method",
        "post: Function.Config = field(default_factory=lambda: Function.Config(fn=len))": (
            "torchtitan.config.function:Function.Config.fn: cannot write a default of type "
            "builtin_function_or_method"
        ),
    }
    for line, message in cases.items():
        out = Path(os.devnull)
        done = _in_upstream(upstream_python, "-c", script.replace("{field}", line), str(out))
        assert done.returncode == 1, done.stdout
        assert message in done.stderr
        assert "Traceback" not in done.stderr


API = REPO / "migrate" / "targets" / "upstream_api_030.py"


def test_the_committed_api_table_is_current(upstream_python, tmp_path):
    """The table the static check of upstream registry modules reads (fields, types, choices,
    imports, signatures, flavor facts) is what the installed 0.3.0 has."""
    out = tmp_path / "upstream_api_030.py"
    done = _in_upstream(
        upstream_python, "-m", "titan.migrate.specgen.upstream_api_codegen", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert _formatted(out.read_text(encoding="utf-8")) == API.read_text(encoding="utf-8"), (
        "stale: run `make schema-upstream`"
    )

"""``titan-migrate``: every TOML we know becomes code that equals the live plan and validates.

The inputs are the project's ``legacy_configs/`` and, when present, the upstream v0.2.2 corpus in
``../shared/corpus``. For each one: the plan accounts for every input key, the generated module
compiles, imports and is ``ruff``-clean, each function's config equals the live config field by
field (classes included), ``titan-validate --config`` accepts it, and migrating again gives the
same bytes. The plan itself is checked against an expected config built independently of the
migrator (``tests/test_config_registry.py``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from titan.migrate.codegen.render_code import render_module
from titan.migrate.plan.build import build_plan
from titan.migrate.plan.legacy_values import flatten
from titan.migrate.plan.report import NOT_CARRIED
from titan.migrate.targets.live import instantiate

from tests.helpers import legacy_config_count
from tests.reference import require
from tests.test_config_registry import TOMLS as LEGACY_TOMLS
from tests.test_config_registry import assert_same_classes, expected_config
from titan.cli import migrate as cli

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
RUFF = Path(sys.executable).with_name("ruff")


def corpus_tomls() -> list[Path]:
    require(CORPUS)
    return sorted(CORPUS.rglob("*.toml"))


def load_module(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while decorating
    spec.loader.exec_module(module)
    return module


def same_config(actual: Any, expected: Any, path: str = "config") -> None:
    """Equal field by field with the same classes; generated classes (one from the module, one
    from the live renderer) are the same when their names, bases and fields are."""
    if dataclasses.is_dataclass(actual) and not isinstance(actual, type):
        a, e = type(actual), type(expected)
        if (
            a.__module__ == "titan.migrate.targets.live"
            or e.__module__ == "titan.migrate.targets.live"
        ):
            assert a.__qualname__ == e.__qualname__, f"{path}: {a} != {e}"
            assert [b.__qualname__ for b in a.__mro__] == [b.__qualname__ for b in e.__mro__]
        else:
            assert a is e, f"{path}: {a} != {e}"
        assert [f.name for f in dataclasses.fields(a)] == [f.name for f in dataclasses.fields(e)]
        for f in dataclasses.fields(a):
            same_config(getattr(actual, f.name), getattr(expected, f.name), f"{path}.{f.name}")
        return
    assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
    if isinstance(actual, list | tuple):
        assert len(actual) == len(expected), path
        for i, (x, y) in enumerate(zip(actual, expected, strict=True)):
            same_config(x, y, f"{path}[{i}]")
    elif isinstance(actual, dict):
        assert actual.keys() == expected.keys(), path
        for key in actual:
            same_config(actual[key], expected[key], f"{path}[{key!r}]")
    elif isinstance(actual, float) and actual != actual:
        assert expected != expected, path
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def migrate_all(tomls: list[Path], tmp_path: Path, name: str, **plan_options) -> tuple:
    plans = [build_plan(toml, **plan_options) for toml in tomls]
    code = render_module(plans)
    path = tmp_path / f"{name}.py"
    path.write_text(code, encoding="utf-8")
    return plans, code, path


def check_migration(
    tomls: list[Path], tmp_path: Path, name: str, unrunnable: dict[str, str] | None = None
) -> None:
    plans, code, path = migrate_all(tomls, tmp_path, name)
    assert all(p.ok for p in plans)
    # Every input key has an outcome, and the ones not carried are named in the report.
    for toml, plan in zip(tomls, plans, strict=True):
        import tomllib

        keys = set(flatten(tomllib.loads(toml.read_text(encoding="utf-8"))))
        assert set(plan.outcomes) == keys, f"{toml}: {keys ^ set(plan.outcomes)}"
        out = io.StringIO()
        from titan.migrate.plan.report import render_text

        render_text([plan], plan.diagnostics, out=out, color=False)
        for key, outcome in plan.outcomes.items():
            if outcome.status in NOT_CARRIED:
                assert key in out.getvalue(), f"{toml}: {key} is {outcome.status} but not reported"
    # Deterministic and idempotent.
    assert render_module([build_plan(t) for t in tomls]) == code
    module = load_module(path, name)
    from titan.migrate.codegen.render_code import function_names

    for plan, function in zip(plans, function_names(plans), strict=True):
        live = instantiate(plan)
        generated = getattr(module, function)()
        same_config(generated, live)
        from titan.cli import validate

        out, err = io.StringIO(), io.StringIO()
        status = validate.run(
            ["--registry", str(path), "--config", function], stdout=out, stderr=err
        )
        if function in (unrunnable or {}):  # the migration is faithful; the run cannot start
            assert status == 1 and unrunnable[function] in out.getvalue(), out.getvalue()
            continue
        assert status == 0, f"{function}: {out.getvalue()}{err.getvalue()}"
    done = subprocess.run(
        [str(RUFF), "format", "--check", "--diff", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(
        [str(RUFF), "check", "--no-cache", "--select", "E,F,I,B,UP", "--ignore", "E501", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,  # the project's ruff settings (line length 100, titan first-party)
    )
    assert done.returncode == 0, done.stdout + done.stderr


# --------------------------------------------------------------------------- the inputs we know


@pytest.mark.parametrize("toml", LEGACY_TOMLS, ids=lambda p: str(p.relative_to(REPO)))
def test_live_plan_equals_the_independent_expectation(toml):
    plan = build_plan(toml)
    config = instantiate(plan)
    expected = expected_config(toml)
    if toml.parent.name == "custom":
        # The hand-written registry names its subclass differently; compare the fields.
        assert [f.name for f in dataclasses.fields(config)] == [
            f.name for f in dataclasses.fields(expected)
        ]
        for f in dataclasses.fields(config):
            a, b = getattr(config, f.name), getattr(expected, f.name)
            if dataclasses.is_dataclass(a):
                assert dataclasses.asdict(a) == dataclasses.asdict(b), f.name
            else:
                assert a == b, f.name
        return
    assert config == expected
    assert_same_classes(config, expected)


def test_legacy_configs_migrate_one_module(tmp_path):
    check_migration(LEGACY_TOMLS, tmp_path, "migrated_legacy")


def test_each_legacy_config_alone(tmp_path):
    for i, toml in enumerate(LEGACY_TOMLS):
        plans, code, path = migrate_all([toml], tmp_path, f"alone_{i}")
        module = load_module(path, f"alone_{i}")
        same_config(getattr(module, plans[0].function)(), instantiate(plans[0]))
        assert "config = " not in code  # a single file is never derived


UNRUNNABLE = {
    # 4 pipeline stages on 1F1B fed local_batch_size 1 = one microbatch: torch's Schedule1F1B
    # refuses it, upstream as in titan-train.
    "llama4_17bx128e": "error[pipeline-layout] schedule '1F1B' needs at least as many microbatches",
}
"""Migrated upstream functions whose run cannot start, with the finding that says why."""


def test_corpus_migrates(tmp_path):
    check_migration(corpus_tomls(), tmp_path, "migrated_corpus", UNRUNNABLE)


def test_corpus_reports(tmp_path):
    corpus = {p.name if "llama3" not in str(p) else f"llama3/{p.name}": p for p in corpus_tomls()}
    plan = build_plan(corpus["llama3/llama3_405b.toml"])
    assert plan.outcomes["model.converters"].status == "dropped"
    assert {d.code for d in plan.diagnostics} >= {"unknown-converter", "inert-section"}
    assert not plan.lossless()
    fixed = build_plan(corpus["llama3/llama3_405b.toml"], fix_stale_names=True)
    assert fixed.outcomes["model.converters"].status == "renamed"
    converters = instantiate(fixed).model_converters.converters
    assert [type(c).__name__ for c in converters] == ["Config"]
    assert converters[0].enable_fsdp_float8_all_gather is True
    assert converters[0].filter_fqns == ["output"]
    codes = {d.code for d in fixed.diagnostics}
    assert {"stale-name", "behaviour-change"} <= codes  # TP 8 with float8 linears


# --------------------------------------------------------------------------- the command


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status = cli.run(list(argv), stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


DEBUG = str(REPO / "legacy_configs" / "llama3" / "debug_model.toml")


def test_stdout_is_the_module_and_stderr_the_report():
    status, out, err = run(DEBUG)
    assert status == 0, err
    assert "def llama3_debugmodel() -> Trainer.Config:" in out
    assert "lossless" in err and "llama3_debugmodel()" in err


def test_overrides_after_double_dash(tmp_path):
    status, out, err = run(DEBUG, "--", "--training.steps", "5", "--checkpoint.enable")
    assert status == 0, err
    assert "steps=5" in out and "enable=True" in out
    status, out, err = run(DEBUG, "--", "--training.stpes", "5")
    assert status == 1
    assert "training.steps" in err  # did you mean


def test_output_check_and_diff(tmp_path):
    target = tmp_path / "config_registry.py"
    assert run(DEBUG, "-o", str(target))[0] == 0
    assert run(DEBUG, "--check", str(target))[0] == 0
    target.write_text(target.read_text() + "# edited\n")
    status, out, err = run(DEBUG, "--check", str(target))
    assert status == 1 and "not what titan-migrate produces" in err
    status, out, err = run(DEBUG, "--check", str(target), "--diff")
    assert status == 1 and "-# edited" in out


def test_check_accepts_a_module_written_from_stdout(tmp_path):
    """``titan-migrate X > FILE`` names no -o in its docstring; --check FILE still holds it up
    to date, and still finds it stale once edited."""
    target = tmp_path / "config_registry.py"
    status, out, _ = run(DEBUG)
    assert status == 0
    target.write_text(out, encoding="utf-8")
    assert run(DEBUG, "--check", str(target))[0] == 0
    target.write_text(out.replace("Trainer.Config(", "Trainer.Config( ", 1), encoding="utf-8")
    status, _, err = run(DEBUG, "--check", str(target))
    assert status == 1 and "not what titan-migrate produces" in err


def test_strict_and_json_report():
    toml = str(REPO / "legacy_configs" / "llama4" / "debug_model.toml")
    status, out, err = run(toml, "--format", "json", "--strict")
    import json

    report = json.loads(err)
    (entry,) = report["files"]
    assert entry["lossless"] is (status == 0)
    assert set(entry["keys"]) == set(
        flatten(__import__("tomllib").loads(Path(toml).read_text(encoding="utf-8")))
    )


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("[training\nsteps = 1", "toml-syntax"),
        ("[training]\nsteps = 'ten'", "wrong-type"),
        ("[trainig]\nsteps = 1", "unknown-key"),
    ],
)
def test_bad_input_is_reported_without_traceback(tmp_path, content, needle):
    path = tmp_path / "bad.toml"
    path.write_text(content)
    status, out, err = run(str(path))
    assert status == 1
    assert needle in err and "Traceback" not in err


def test_missing_file_and_usage_errors(tmp_path):
    status, out, err = run(str(tmp_path / "nope.toml"))
    assert status == 1 and "unreadable-file" in err and out == ""
    assert run(DEBUG, "--diff")[0] == 2
    assert run()[0] == 2


def test_console_script_never_imports_torch():
    probe = (
        "import sys, io\nfrom titan.cli import migrate\n"
        f"status = migrate.run([{DEBUG!r}], stdout=io.StringIO(), stderr=io.StringIO())\n"
        "assert status == 0, status\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, env=os.environ
    )
    assert done.returncode == 0, done.stderr


def test_the_migrate_package_never_imports_titan():
    """``titan.migrate`` is the torch-free logic below the command: it may depend on
    ``titan.schemas`` but on nothing else of ``titan`` (whose package file imports nothing)."""
    probe = (
        "import sys, importlib, pkgutil, titan.migrate\n"
        "for info in pkgutil.walk_packages(titan.migrate.__path__, 'titan.migrate.'):\n"
        "    importlib.import_module(info.name)\n"
        "ours = ('titan.migrate', 'titan.schemas')\n"
        "other = [m for m in sys.modules if m.startswith('titan.')\n"
        "         and not any(m == o or m.startswith(o + '.') for o in ours)]\n"
        "assert not other, other\n"
        "assert 'torch' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, env=os.environ
    )
    assert done.returncode == 0, done.stderr


def test_python_dash_m_runs_the_command(tmp_path):
    target = tmp_path / "config_registry.py"
    done = subprocess.run(
        [sys.executable, "-m", "titan.cli.migrate", DEBUG, "-o", str(target), "-q"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert "def llama3_debugmodel() -> Trainer.Config:" in target.read_text(encoding="utf-8")


def test_validate_as_registry_checks_the_migrated_config(tmp_path):
    from titan.cli import validate

    def check(*argv: str) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        return validate.run(list(argv), stdout=out, stderr=err), out.getvalue() + err.getvalue()

    status, out = check(str(REPO / "legacy_configs"), "--as-registry")
    assert status == 0 and f"All checks passed: {legacy_config_count()} files" in out, out
    bad = tmp_path / "bad.toml"
    text = Path(DEBUG).read_text(encoding="utf-8")
    bad.write_text(text.replace("tensor_parallel_degree = 1", "tensor_parallel_degree = 3"))
    plain = check(str(bad))
    both = check(str(bad), "--as-registry")
    assert plain[0] == both[0] == 1
    assert plain[1].count("tp-heads") == both[1].count("tp-heads") == 1  # not repeated

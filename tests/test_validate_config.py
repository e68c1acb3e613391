"""``titan-validate --config``: registry functions, overrides, types and the shared rules."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap

import pytest

from titan.cli import validate

SCRIPT = os.path.join(os.path.dirname(sys.executable), "titan-validate")


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = validate.run(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def registry(folder, body: str, name: str = "config_registry.py"):
    path = folder / name
    header = (
        "from titan.config import ParallelismConfig, TrainingConfig\n"
        "from titan.models.llama3 import model_registry\n"
        "from titan.trainer import Trainer\n\n\n"
    )
    path.write_text(header + textwrap.dedent(body), encoding="utf-8")
    return path


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "name", ["llama3_8b", "qwen3_0_6b", "deepseek_v3_16b", "llama4_17bx16e", "llama3_debugmodel"]
)
def test_builtin_configs_are_clean(name):
    code, out, err = run("--config", name)
    assert (code, err) == (0, ""), out
    assert "All checks passed" in out


def test_console_script_checks_a_registry_config_without_torch(in_tmp):
    probe = (
        "import sys, runpy; sys.argv = ['titan-validate', '--config', 'qwen3_0_6b'];\n"
        "try:\n    runpy.run_module('titan.cli.validate', run_name='__main__')\n"
        "except SystemExit as e:\n    assert e.code == 0, e.code\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "All checks passed" in done.stdout
    script = subprocess.run(
        [SCRIPT, "--config", "llama3_8b", "--ngpu", "64"], capture_output=True, text=True
    )
    assert script.returncode == 0, script.stdout + script.stderr


def test_typo_inside_a_registry_function_points_at_the_keyword(in_tmp):
    path = registry(
        in_tmp,
        """\
        def mine():
            return Trainer.Config(
                model_spec=model_registry("debugmodel"),
                training=TrainingConfig(
                    stpes=3,
                ),
            )
        """,
    )
    code, out, err = run("--config", "mine")
    assert code == 1 and "Traceback" not in out + err
    line = path.read_text().splitlines().index("            stpes=3,") + 1
    assert f"{path.name}:{line}:13: error[unknown-key] TrainingConfig has no field `stpes`" in out
    assert "did you mean `steps`?" in out
    assert "^^^^^ did you mean `steps`?" in out  # the caret sits under the keyword


def test_world_size_rule_names_both_numbers():
    code, out, _ = run(
        "--config", "llama3_debugmodel", "--ngpu", "8", "--parallelism.tensor_parallel_degree", "3"
    )
    assert code == 1
    finding = next(line for line in out.splitlines() if "error[world-size]" in line)
    assert "8" in finding and "3" in finding


def test_unknown_config_suggests_the_close_name():
    code, out, _ = run("--config", "llama3_8")
    assert code == 1
    assert "error[unknown-config] no config function `llama3_8`" in out
    assert "`llama3_8b`" in out


def test_module_restricts_the_search():
    assert run("--module", "llama3", "--config", "llama3_8b")[0] == 0
    code, out, _ = run("--module", "qwen3", "--config", "llama3_8b")
    assert code == 1 and "unknown-config" in out


def test_wrong_value_type_is_reported_at_its_keyword(in_tmp):
    registry(
        in_tmp,
        """\
        def mine():
            return Trainer.Config(
                model_spec=model_registry("debugmodel"),
                training=TrainingConfig(steps="10", dtype="float16"),
            )
        """,
    )
    code, out, _ = run("--config", "mine", "--format", "json")
    assert code == 1
    found = {(d["code"], d["path"], d["line"]) for d in json.loads(out)["diagnostics"]}
    assert ("wrong-type", "training.steps", 9) in found
    assert ("invalid-choice", "training.dtype", 9) in found


def test_attribute_typo_after_construction(in_tmp):
    path = registry(
        in_tmp,
        """\
        def mine():
            config = Trainer.Config(model_spec=model_registry("debugmodel"))
            config.training.stpes = 3
            return config
        """,
    )
    code, out, _ = run("--config", "mine")
    assert code == 1
    assert f"{path.name}:8:" in out and "has no field `stpes`" in out and "`steps`" in out


def test_exception_and_syntax_error_in_registry_code(in_tmp):
    path = registry(in_tmp, "def boom():\n    return 1 / 0\n")
    code, out, err = run("--config", "boom")
    assert code == 1 and "Traceback" not in out + err
    assert f"{path.name}:7:" in out and "ZeroDivisionError while running boom()" in out
    path.write_text("def broken(:\n    pass\n")
    code, out, err = run("--config", "broken")
    assert code == 1 and "Traceback" not in out + err
    assert f"{path.name}:1:" in out and "syntax error" in out


def test_registry_flag_wins_over_cwd_and_builtins(in_tmp):
    registry(
        in_tmp,
        """\
        def llama3_8b():
            return Trainer.Config(
                model_spec=model_registry("debugmodel"),
                checkpoint=None,
            )
        """,
    )
    other = in_tmp / "other"
    other.mkdir()
    registry(
        other,
        """\
        def llama3_8b():
            return Trainer.Config(
                model_spec=model_registry("debugmodel"), parallelism=ParallelismConfig(
                    tensor_parallel_degree=0)
            )
        """,
        name="mine.py",
    )
    code, out, _ = run("--config", "llama3_8b")  # ./config_registry.py shadows the built-in
    assert code == 1 and "checkpoint" in out
    code, out, _ = run("--registry", str(other / "mine.py"), "--config", "llama3_8b")
    assert code == 1 and "out-of-range" in out


def test_missing_model_is_an_error(in_tmp):
    registry(in_tmp, "def bare():\n    return Trainer.Config()\n")
    code, out, _ = run("--config", "bare")
    assert code == 1 and "error[unknown-model]" in out


def test_bad_override_is_a_usage_error_without_traceback():
    code, out, err = run("--config", "llama3_debugmodel", "--training.steps", "many")
    assert code == 2 and "Traceback" not in out + err
    assert "steps" in out + err


def test_overrides_apply_and_help_is_typed(capsys):
    code, out, _ = run("--config", "llama3_debugmodel", "--checkpoint.keep_latest_k", "1")
    assert code == 1 and "keep-latest-k" in out
    code, out, _ = run("--config", "llama3_debugmodel", "--help")
    assert code == 0
    assert "--training.steps INT" in out and "Number of training steps." in out


def test_same_rule_fires_for_both_forms(in_tmp):
    (in_tmp / "job.toml").write_text("[checkpoint]\nkeep_latest_k = 1\n")
    toml_code, toml_out, _ = run("job.toml")
    registry(
        in_tmp,
        """\
        from titan.components.checkpoint import CheckpointManager


        def mine():
            return Trainer.Config(
                model_spec=model_registry("debugmodel"),
                checkpoint=CheckpointManager.Config(keep_latest_k=1),
            )
        """,
    )
    reg_code, reg_out, _ = run("--config", "mine")
    assert toml_code == reg_code == 1
    assert "error[keep-latest-k]" in toml_out and "error[keep-latest-k]" in reg_out


def test_every_code_of_the_config_mode_is_documented(in_tmp):
    from titan.schemas.diagnostics import CODES

    registry(in_tmp, "def boom():\n    return 1 / 0\n")
    seen = set()
    for argv in (["--config", "boom"], ["--config", "nope"], ["--config", "llama3_8b"]):
        code, out, _ = run(*argv, "--format", "json")
        seen |= {d["code"] for d in json.loads(out)["diagnostics"]}
    assert {"registry-error", "unknown-config"} <= seen <= set(CODES)

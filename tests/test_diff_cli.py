"""titan-diff: operands of every kind, the output, exit codes 0/1/2, no tracebacks."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from titan.cli.diff import main, run
from titan.config import manager
from titan.config.serialize import to_json, to_toml

REPO = Path(__file__).resolve().parents[1]

REGISTRY = """\
from titan.components.optimizer import OptimizersInBackwardContainer
from titan.components.quantization.float8 import Float8LinearConverter
from titan.config import TrainingConfig
from titan.protocols.model_converter import ModelConvertersContainer
from titan.trainer import Trainer


def base():
    return Trainer.Config()


def changed():
    return Trainer.Config(
        training=TrainingConfig(steps=20, max_norm=1),
        optimizer=OptimizersInBackwardContainer.Config(lr=3e-4),
        model_converters=ModelConvertersContainer.Config(
            converters=[Float8LinearConverter.Config(emulate=True)]
        ),
    )


def broken():
    sizes = {"small": 1}
    return sizes["large"]


def not_a_config():
    return 42
"""
BROKEN_LINE = REGISTRY.splitlines().index('    return sizes["large"]') + 1


@pytest.fixture
def reg(tmp_path, monkeypatch):
    """A registry file in the working directory, named ``reg.py``."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reg.py").write_text(REGISTRY)
    return "reg.py"


def titan_diff(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def script() -> str:
    path = Path(sys.executable).parent / "titan-diff"
    assert path.exists(), "titan-diff is not installed: pip install -e ."
    return str(path)


# --------------------------------------------------------------------------------------------
# The installed console script


def test_console_script_prints_the_differences(reg, tmp_path):
    result = subprocess.run(
        [script(), "reg.py:base", "reg.py:changed"], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout.splitlines() == [
        "A: reg.py:base (Trainer.Config)",
        "B: reg.py:changed (Trainer.Config)",
        "model_converters.converters[0]: <absent> -> Float8LinearConverter.Config("
        "enable_fsdp_float8_all_gather=False, precompute_float8_dynamic_scale_for_fsdp=False, "
        "recipe_name=None, filter_fqns=[], emulate=True)",
        "optimizer:                      OptimizersContainer.Config -> "
        "OptimizersInBackwardContainer.Config",
        "training.max_norm:              1.0 -> 1",
        "training.steps:                 10000 -> 20",
        "4 differences",
    ]
    assert result.stderr == "titan-diff: note: executed reg.py (user code)\n"  # said once


def test_console_script_is_quiet_when_the_reader_goes_away(reg, tmp_path):
    process = subprocess.Popen(
        [script(), "reg.py:base", "reg.py:changed"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    process.stdout.close()  # before the command writes anything
    stderr = process.stderr.read().decode()
    assert process.wait() == 1
    assert stderr == "titan-diff: note: executed reg.py (user code)\n"  # no error


# --------------------------------------------------------------------------------------------
# Operands


def test_identical_configs_exit_0(reg, capsys):
    code, out, _ = titan_diff(capsys, "reg.py:base", "reg.py:base")
    assert code == 0 and out.endswith("no differences\n")


def test_json_format_lists_path_kind_and_values(reg, capsys):
    code, out, _ = titan_diff(capsys, "--format", "json", "reg.py:base", "reg.py:changed")
    assert code == 1
    entries = json.loads(out)
    assert [(e["path"], e["kind"]) for e in entries] == [
        ("model_converters.converters[0]", "added"),
        ("optimizer", "class"),
        ("training.max_norm", "value"),
        ("training.steps", "value"),
    ]
    assert "left" not in entries[0] and entries[0]["right"]["emulate"] is True
    assert entries[1]["right"] == "titan.components.optimizer:OptimizersInBackwardContainer.Config"
    assert entries[2]["left"] == 1.0 and entries[2]["right"] == 1


def test_json_and_toml_dumps_compare_like_the_function(reg, tmp_path, capsys):
    changed = manager.load_file("reg.py").changed()
    (tmp_path / "changed.json").write_text(to_json(changed))
    (tmp_path / "changed.toml").write_text(to_toml(changed))
    assert titan_diff(capsys, "changed.json", "reg.py:changed")[0] == 0
    assert titan_diff(capsys, "changed.toml", "changed.json")[0] == 0
    code, out, _ = titan_diff(capsys, "reg.py:base", "changed.toml")
    assert code == 1 and "B: changed.toml (Trainer.Config)" in out and "4 differences" in out


def test_builtin_registry_names_and_module_paths(capsys):
    code, out, _ = titan_diff(
        capsys, "llama3_debugmodel", "titan.models.llama3.config_registry:llama3_debugmodel"
    )
    assert code == 0, out
    code, out, _ = titan_diff(capsys, "llama3_debugmodel", "llama3_8b")
    assert code == 1 and "model_spec.flavor:" in out and "'debugmodel' -> '8B'" in out


def test_unknown_builtin_name_suggests_close_names(capsys):
    code, _, err = titan_diff(capsys, "llama3_debugmodl", "llama3_debugmodel")
    assert code == 2 and "did you mean `llama3_debugmodel`" in err


def test_a_plain_name_is_looked_up_as_titan_train_does(reg, tmp_path, capsys):
    """./config_registry.py first, then the built-in registries, with did-you-mean over both."""
    (tmp_path / "config_registry.py").write_text(REGISTRY)
    code, out, _ = titan_diff(capsys, "base", "changed")
    assert code == 1 and "4 differences" in out
    code, _, err = titan_diff(capsys, "bsae", "base")
    assert code == 2 and "no config function `bsae`" in err and "did you mean `base`?" in err


def test_unknown_function_in_a_file_suggests_close_names(reg, capsys):
    code, _, err = titan_diff(capsys, "reg.py:base", "reg.py:chnged")
    assert code == 2
    assert "no config function `chnged` in reg.py\n  hint: did you mean `changed`?" in err


def test_an_exception_in_a_registry_function_points_at_its_line(reg, capsys):
    code, out, err = titan_diff(capsys, "reg.py:base", "reg.py:broken")
    assert code == 2 and out == ""
    assert f"reg.py:{BROKEN_LINE}:" in err and "KeyError" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["missing.toml", "reg.py:base"], "missing.toml: no such file"),
        (["reg.py", "reg.py:base"], "name the registry function too: reg.py:FUNCTION"),
        (["reg.py:not_a_config", "reg.py:base"], "not_a_config() returned int, not a config"),
        (["nowhere.py:base", "reg.py:base"], "nowhere.py does not exist"),
    ],
)
def test_usage_errors_exit_2(reg, capsys, argv, message):
    code, _, err = titan_diff(capsys, *argv)
    assert code == 2 and message in err


def test_argparse_errors_exit_2(capsys):
    assert main(["only-one"]) == 2
    assert "usage: titan-diff" in capsys.readouterr().err


def test_malformed_files_report_line_and_column(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text('{\n  "__class__": ,\n}')
    (tmp_path / "bad.toml").write_text("[training]\nsteps = 10\nsteps = = 3\n")
    (tmp_path / "plain.json").write_text('{"training": {}}')
    assert titan_diff(capsys, "bad.json", "bad.json")[2].startswith(
        "titan-diff: error: bad.json:2:16: invalid JSON: Expecting value"
    )
    assert "bad.toml:3:" in titan_diff(capsys, "bad.toml", "bad.toml")[2]
    assert "not a titan config dump" in titan_diff(capsys, "plain.json", "plain.json")[2]


def test_a_dump_naming_a_foreign_class_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evil.json").write_text('{"__class__": "os:system"}')
    code, _, err = titan_diff(capsys, "evil.json", "evil.json")
    assert code == 2 and "evil.json: the root: refusing to load 'os:system'" in err


# --------------------------------------------------------------------------------------------
# Legacy TOMLs


def test_two_legacy_tomls_compare_their_effective_values(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.toml").write_text("[training]\nsteps = 10000\nmax_norm = 2\n")
    (tmp_path / "b.toml").write_text(
        '[job]\ndescription = "b"\n[training]\nmax_norm = 2.0\n[optimizer]\nlrr = 1\n'
    )
    (tmp_path / "empty.toml").write_text("")
    assert titan_diff(capsys, "a.toml", "a.toml")[0] == 0
    code, out, _ = titan_diff(capsys, "a.toml", "b.toml")
    assert code == 1
    assert out.splitlines() == [
        "A: a.toml (legacy TOML)",
        "B: b.toml (legacy TOML)",
        "job.description:   'default job' -> 'b'",
        "training.max_norm: 2 -> 2.0",
        "optimizer.lrr:     <absent> -> 1",
        "3 differences",
    ]
    # Writing a default is the same as leaving it out.
    code, out, _ = titan_diff(capsys, "a.toml", "empty.toml")
    assert code == 1 and out.splitlines()[2:] == ["training.max_norm: 2 -> 1.0", "1 difference"]


def test_a_legacy_toml_is_migrated_to_compare_with_a_registry_config(capsys):
    """The TOML side is what titan-migrate makes of it (the live plan)."""
    debug = str(REPO / "legacy_configs" / "llama3" / "debug_model.toml")
    code, out, _ = titan_diff(capsys, debug, "llama3_debugmodel")
    assert code == 0 and "no differences" in out
    code, out, _ = titan_diff(capsys, debug, "llama3_debugmodel_float8")
    assert code == 1
    assert "model_converters.print_after_conversion: False -> True" in out


def test_a_legacy_toml_that_cannot_be_migrated_is_a_usage_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.toml").write_text("[training]\nsteps = 'ten'\n")
    code, _, err = titan_diff(capsys, "a.toml", "llama3_debugmodel")
    assert code == 2 and "a.toml cannot be migrated" in err and "must be an integer" in err


# --------------------------------------------------------------------------------------------
# Output edge cases


class _ClosedPipe(io.StringIO):
    def write(self, text: str) -> int:
        raise BrokenPipeError


def test_a_broken_pipe_is_not_an_error(reg):
    err = io.StringIO()
    assert run(["reg.py:base", "reg.py:changed"], stdout=_ClosedPipe(), stderr=err) == 1
    assert err.getvalue() == "titan-diff: note: executed reg.py (user code)\n"  # no error


def test_color_always_marks_up_the_lines(reg, capsys):
    code, out, _ = titan_diff(capsys, "--color", "always", "reg.py:base", "reg.py:changed")
    assert code == 1 and "\x1b[32m20\x1b[0m" in out

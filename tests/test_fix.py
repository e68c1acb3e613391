"""titan-validate --fix and --diff: legacy TOMLs rewritten in place, every other byte kept."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tomllib

import pytest

from tests.helpers import codes, validate, write
from tests.reference import REPO

FLOAT8_TABLE = """\
# A llama3 job from 2024
[model]
name = "llama3"
flavor = "debugmodel"

[training]
steps = 10

# float8 settings
[float8]  # fp8 options
enable_float8_linear = true
# shard the weights in float8
enable_fsdp_float8_all_gather = true
precompute_float8_dynamic_scale_for_fsdp = true   # one all-reduce

[parallelism]
data_parallel_shard_degree = -1
"""


def fix(tmp_path, text: str, *args: str, name: str = "job.toml"):
    """Write ``text``, run ``titan-validate --fix`` on it; the result and the new text."""
    path = write(tmp_path, name, text)
    result = validate("--fix", *args, path)
    return result, path.read_text(encoding="utf-8")


def test_a_float8_table_becomes_a_converter_and_the_quantize_table(tmp_path):
    result, text = fix(tmp_path, FLOAT8_TABLE)
    # The table's own keys stay in place under its new name, with their comments; the switch
    # joins model.converters (a new key after the last key of [model]).
    assert text == FLOAT8_TABLE.replace(
        'flavor = "debugmodel"\n',
        'flavor = "debugmodel"\nconverters = ["quantize.linear.float8"]\n',
    ).replace(
        "[float8]  # fp8 options\nenable_float8_linear = true\n",
        "[quantize.linear.float8]  # fp8 options\n",
    )
    assert result.code == 0, result.out
    assert "fixed 3 problems in" in result.err
    assert validate(write(tmp_path, "again.toml", text)).code == 0


def test_batch_size_is_renamed_on_its_own_line(tmp_path):
    original = "[training]\n# per device\nbatch_size   =   8  # tokens: 8 x 2048\nsteps = 10\n"
    result, text = fix(tmp_path, original)
    assert text == original.replace("batch_size", "local_batch_size")
    assert result.code == 0
    assert "fixed 1 problem in" in result.err


def test_a_converter_string_becomes_a_list_with_the_new_name(tmp_path):
    result, text = fix(tmp_path, '[model]\nname = "llama3"\nconverters = "float8"  # fp8\n')
    assert text == '[model]\nname = "llama3"\nconverters = ["quantize.linear.float8"]  # fp8\n'
    assert result.code == 0
    assert "fixed 2 problems" in result.err  # the list, and the name


def test_stale_names_in_a_multi_line_array_change_alone(tmp_path):
    original = '[model]\nconverters = [\n    "float8",  # dense layers\n    # more later\n]\n'
    result, text = fix(tmp_path, original)
    assert text == original.replace('"float8"', '"quantize.linear.float8"')
    assert result.code == 0


def test_an_unportable_key_is_left_where_it_is_and_reported(tmp_path):
    original = (
        "[float8]\n"
        "enable_fsdp_float8_all_gather = true\n"
        'scaling_type_input = "delayed"  # from 2024\n'
    )
    result, text = fix(tmp_path, original, "--format", "json")
    assert text == (
        "[float8]\n"
        'scaling_type_input = "delayed"  # from 2024\n'
        "\n"
        "[quantize.linear.float8]\n"
        "enable_fsdp_float8_all_gather = true\n"
    )
    assert result.code == 1
    assert "moved-key" in codes(result)
    assert [d["path"] for d in result.json()["diagnostics"] if d["code"] == "moved-key"] == [
        "float8.scaling_type_input"
    ]


def test_a_no_op_key_is_deleted_with_its_comment(tmp_path):
    original = (
        '[training]\nsteps = 1\n\n[float8]\n# always dynamic\nscaling_type_input = "dynamic"\n'
    )
    result, text = fix(tmp_path, original)
    assert text == "[training]\nsteps = 1\n"
    assert result.code == 0


def test_a_file_that_does_not_parse_is_not_touched(tmp_path):
    original = "[training]\nbatch_size = 8\nsteps = = 3\n"
    result, text = fix(tmp_path, original)
    assert text == original
    assert result.code == 1
    assert "not fixing" in result.err and "at line 3" in result.err
    assert "toml-syntax" in result.out


def test_a_file_whose_custom_module_cannot_be_read_is_not_touched(tmp_path):
    original = '[job]\ncustom_config_module = "no_such_module_here"\n[training]\nbatch_size = 8\n'
    result, text = fix(tmp_path, original)
    assert text == original
    assert result.code == 1
    assert "its custom config module cannot be read" in result.err


def test_a_key_a_custom_module_declares_is_not_old(tmp_path):
    write(
        tmp_path,
        "my_ext.py",
        "from dataclasses import dataclass, field\n\n"
        "@dataclass\nclass Training:\n    batch_size: int = 1\n\n"
        "@dataclass\nclass JobConfig:\n    training: Training = field(default_factory=Training)\n",
    )
    original = '[job]\ncustom_config_module = "my_ext"\n[training]\nbatch_size = 8\n'
    result, text = fix(tmp_path, original)
    assert text == original
    assert result.code == 0, result.out


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_a_read_only_file_is_an_error_and_stays_as_it_was(tmp_path):
    path = write(tmp_path, "job.toml", "[training]\nbatch_size = 8\n")
    path.chmod(0o444)
    result = validate("--fix", path)
    assert result.code == 74
    assert f"cannot fix {path}: the file is read-only (nothing was written)" in result.err
    assert path.read_text() == "[training]\nbatch_size = 8\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o444


def test_a_symlink_keeps_being_a_link_to_the_rewritten_file(tmp_path):
    target = write(tmp_path, "real/job.toml", "[training]\nbatch_size = 8\n")
    target.chmod(0o640)
    link = tmp_path / "job.toml"
    link.symlink_to(target)
    result = validate("--fix", link)
    assert result.code == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "[training]\nlocal_batch_size = 8\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in target.parent.iterdir()) == ["job.toml"]  # no temporary left


def test_diff_prints_a_unified_diff_and_writes_nothing(tmp_path):
    original = "[training]\nbatch_size = 8\nsteps = 10\n"
    path = write(tmp_path, "job.toml", original)
    result = validate("--diff", path)
    assert result.code == 1
    assert result.out == (
        f"--- {path}\n+++ {path}\n@@ -1,3 +1,3 @@\n [training]\n-batch_size = 8\n"
        "+local_batch_size = 8\n steps = 10\n"
    )
    assert "would fix 1 problem in 1 file" in result.err
    assert path.read_text() == original


def test_diff_of_a_clean_file_is_empty_and_exits_0(tmp_path):
    path = write(tmp_path, "job.toml", "[training]\nlocal_batch_size = 8\n")
    result = validate("--diff", path)
    assert (result.code, result.out, result.err) == (0, "", "")


def test_diff_exits_1_for_a_file_it_cannot_fix(tmp_path):
    path = write(tmp_path, "job.toml", "[training\n")
    result = validate("--diff", path)
    assert result.code == 1 and result.out == ""
    assert "not fixing" in result.err


def test_diff_marks_a_missing_final_newline(tmp_path):
    path = write(tmp_path, "job.toml", "[training]\nbatch_size = 8")
    result = validate("--diff", path)
    assert result.out.endswith(
        "-batch_size = 8\n\\ No newline at end of file\n+local_batch_size = 8\n\\ No newline at end of file\n"
    )


def test_fix_rewrites_several_files_and_reports_what_remains(tmp_path):
    first = write(tmp_path, "a.toml", "[training]\nbatch_size = 8\n")
    second = write(tmp_path, "b.toml", "[training]\nstpes = 1\ncompile = true\n")
    clean = write(tmp_path, "c.toml", "[training]\nsteps = 1\n")
    before = clean.stat().st_mtime_ns
    result = validate("--fix", "--format", "json", tmp_path)
    assert first.read_text() == "[training]\nlocal_batch_size = 8\n"
    assert second.read_text() == (
        '[training]\nstpes = 1\n\n[compile]\nenable = true\ncomponents = ["model", "loss"]\n'
    )
    assert clean.stat().st_mtime_ns == before  # nothing to fix: not written
    assert result.code == 1
    assert codes(result) == ["unknown-key"]  # the typo is not a fix with one right answer
    assert (
        f"fixed 1 problem in {first}" in result.err and f"fixed 1 problem in {second}" in result.err
    )


def test_crlf_line_endings_are_kept(tmp_path):
    path = tmp_path / "job.toml"
    path.write_bytes(b"[training]\r\nbatch_size = 8\r\ntensor_parallel_degree = 2\r\n")
    assert validate("--fix", path).code == 0
    assert path.read_bytes() == (
        b"[training]\r\nlocal_batch_size = 8\r\n\r\n[parallelism]\r\ntensor_parallel_degree = 2\r\n"
    )


def test_dotted_keys_and_inline_tables(tmp_path):
    original = (
        "training.batch_size = 8  # bs\n"
        "training.steps = 10\n"
        "metrics = { rank_0_only = true, log_freq = 5 }\n"
        "\n"
        "[parallelism]\n"
        "data_parallel_shard_degree = -1\n"
        "\n"
        "[experimental]\n"
        "context_parallel_degree = 2\n"
    )
    result, text = fix(tmp_path, original)
    assert text == (
        "training.local_batch_size = 8  # bs\n"
        "training.steps = 10\n"
        "metrics = {  log_freq = 5, save_for_all_ranks = false}\n"
        "\n"
        "[parallelism]\n"
        "data_parallel_shard_degree = -1\n"
        "context_parallel_degree = 2\n"
    )
    assert result.code == 0, result.out


def test_a_key_moving_into_an_existing_table_lands_after_its_last_key(tmp_path):
    original = (
        "[training]\n"
        "  # four-way TP\n"
        "  tensor_parallel_degree=4  # heads / 4\n"
        "  steps=10\n"
        "\n"
        "# parallel settings\n"
        "[parallelism]\n"
        "    data_parallel_shard_degree = -1\n"
        "\n"
        "# the end\n"
    )
    result, text = fix(tmp_path, original)
    assert text == (
        "[training]\n"
        "  steps=10\n"
        "\n"
        "# parallel settings\n"
        "[parallelism]\n"
        "    data_parallel_shard_degree = -1\n"
        "  # four-way TP\n"
        "    tensor_parallel_degree=4  # heads / 4\n"
        "\n"
        "# the end\n"
    )
    assert tomllib.loads(text)["parallelism"]["tensor_parallel_degree"] == 4


def test_an_emptied_table_goes_and_its_header_comment_stays(tmp_path):
    original = (
        "[model]\n"
        'name = "llama3"\n'
        "\n"
        "[float8]  # fp8\n"
        "enable_float8_linear = true\n"
        "\n"
        "[training]\n"
        "steps = 1\n"
    )
    result, text = fix(tmp_path, original)
    assert text == (
        "[model]\n"
        'name = "llama3"\n'
        'converters = ["quantize.linear.float8"]\n'
        "\n"
        "# fp8\n"
        "[training]\n"
        "steps = 1\n"
    )


def test_a_py_registry_module_is_not_rewritten(tmp_path):
    module = write(tmp_path, "config_registry.py", "x = 1\n")
    result = validate("--fix", module)
    assert module.read_text() == "x = 1\n"
    assert "is a registry module; --fix rewrites TOML files only" in result.err


@pytest.mark.parametrize("flag", ["--fix", "--diff"])
def test_output_file_with_fix_is_a_usage_error(tmp_path, flag):
    path = write(tmp_path, "job.toml", "[training]\nbatch_size = 8\n")
    result = validate(flag, "-o", tmp_path / "report.txt", path)
    assert result.code == 2
    assert "-o names a report file" in result.err
    assert path.read_text() == "[training]\nbatch_size = 8\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["--fix", "a.toml"],
        ["a.toml", "--diff"],
        ["--fix", "--diff", "a.toml", "b.toml"],
        ["--fix", "--strict", "--format", "json", "a.toml"],
    ],
)
def test_the_fast_parser_reads_fix_and_diff_as_argparse_does(argv):
    from titan.cli.validate_args import build_parser, parse_common

    fast = parse_common(argv)
    assert fast is not None
    full = vars(build_parser().parse_args(argv))
    assert vars(fast) == {name: full[name] for name in vars(fast)}
    assert (fast.fix, fast.diff) == ("--fix" in argv, "--diff" in argv)


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)


def test_fix_never_imports_torch_and_a_plain_check_never_imports_tomlkit(tmp_path):
    path = write(tmp_path, "job.toml", FLOAT8_TABLE)
    fixing = _run_python(
        "import sys\nfrom titan.cli.validate import run\n"
        f"assert run(['--fix', {str(path)!r}]) == 0\n"
        "assert 'tomlkit' in sys.modules\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    assert fixing.returncode == 0, fixing.stderr
    assert "quantize.linear.float8" in path.read_text()
    checking = _run_python(
        "import sys\nfrom titan.cli.validate import run\n"
        f"run([{str(path)!r}, {str(REPO / 'legacy_configs')!r}])\n"
        "assert 'tomlkit' not in sys.modules, 'tomlkit was imported'\n"
    )
    assert checking.returncode == 0, checking.stderr

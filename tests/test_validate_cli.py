"""titan-validate on real files: findings, exit codes and locations."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import codes, legacy_config_count, only, validate, write
from tests.reference import REPO, corpus_files

LEGACY = REPO / "legacy_configs"


def test_the_projects_legacy_configs_are_clean():
    result = validate(LEGACY)
    assert result.code == 0, result.out
    assert f"All checks passed: {legacy_config_count()} files" in result.out


def test_misspelt_key_points_at_the_key_and_suggests_the_right_one(tmp_path):
    path = write(tmp_path, "job.toml", '[job]\ndescription = "x"\n[training]\nstpes = 10\n')
    result = validate(path)
    assert result.code == 1
    assert f"{path}:4:1: error[unknown-key] unknown key `stpes` in [training]" in result.out
    assert "did you mean `training.steps`?" in result.out
    assert "stpes = 10\n   | ^^^^^ did you mean" in result.out  # caret under the key


def test_key_on_line_three_is_reported_at_3_1(tmp_path):
    path = write(tmp_path, "job.toml", "[training]\nsteps = 10\nstpes = 10\n")
    assert f"{path}:3:1:" in validate(path).out


def test_misspelt_section_suggests_parallelism(tmp_path):
    path = write(tmp_path, "job.toml", "[parallelizm]\ntensor_parallel_degree = 2\n")
    result = validate(path, "--format", "json")
    diagnostic = only(result.json()["diagnostics"])
    assert (diagnostic["code"], diagnostic["line"], diagnostic["col"]) == ("unknown-key", 1, 2)
    assert diagnostic["hint"] == "did you mean `parallelism`?"


def old_key_findings(path) -> list[dict]:
    """The findings on a one-key file of an older era, less what its era says of the keys it
    omits: its tokenizer (a .model file v0.2.2 cannot say: ``era-default-lost``, tested in
    test_measured_outcomes) and its debug flavor (``era-flavor``, tested in test_flavor_eras)."""
    found = validate(path, "--format", "json").json()["diagnostics"]
    return [d for d in found if d["code"] not in ("era-default-lost", "era-flavor")]


def test_key_from_an_older_era_says_where_it_moved(tmp_path):
    path = write(tmp_path, "job.toml", "[training]\ntensor_parallel_degree = 2\n")
    diagnostic = only(old_key_findings(path))
    assert diagnostic["code"] == "moved-key"
    assert "parallelism.tensor_parallel_degree" in diagnostic["hint"]


@pytest.mark.parametrize(
    ("text", "old", "new"),
    [
        ("[float8]\nenable_fsdp_float8_all_gather = true\n", "float8", "quantize.linear.float8"),
        ("[training]\ncompile = true\n", "training.compile", "compile.enable"),
        (
            "[training]\nenable_checkpoint = true\n",
            "training.enable_checkpoint",
            "checkpoint.enable",
        ),
        (
            "[checkpoint]\nenable_checkpoint = true\n",
            "checkpoint.enable_checkpoint",
            "checkpoint.enable",
        ),
        (
            "[training]\ndata_parallel_shard_degree = 2\n",
            "",
            "parallelism.data_parallel_shard_degree",
        ),
        ("[training]\npipeline_parallel_degree = 2\n", "", "parallelism.pipeline_parallel_degree"),
        ("[training]\ncontext_parallel_degree = 2\n", "", "parallelism.context_parallel_degree"),
    ],
)
def test_moved_keys_table(tmp_path, text, old, new):
    found = old_key_findings(write(tmp_path, "job.toml", text))
    # the old key's own finding; a cross-field rule may judge the value it writes at the same
    # place (the float8 option's table is inert without its converter)
    first = (found[0]["line"], found[0]["col"])
    (diagnostic,) = [
        d for d in found if (d["line"], d["col"]) == first and d["code"] == "moved-key"
    ]
    assert new in diagnostic["hint"]


def test_deprecated_keys_warn_and_point_to_the_new_key(tmp_path):
    path = write(
        tmp_path,
        "job.toml",
        '[model]\ntokenizer_path = "./tok"\n[experimental]\ncustom_args_module = "x"\n',
    )
    result = validate(path, "--format", "json")
    assert result.code == 0  # warnings only
    hints = {d["path"]: d["hint"] for d in result.json()["diagnostics"]}
    assert "model.hf_assets_path" in hints["model.tokenizer_path"]
    assert "job" in hints["experimental.custom_args_module"]
    assert validate(path, "--strict").code == 1


def test_wrong_types_are_not_coerced(tmp_path):
    path = write(
        tmp_path,
        "job.toml",
        '[training]\nsteps = "10"\nmax_norm = true\n[model]\nconverters = "quantize.linear.float8"\n'
        '[activation_checkpoint]\nmode = "seletive"\n[parallelism]\nmodule_fqns_per_model_part = [["a"], [1]]\n',
    )
    result = validate(path, "--format", "json")
    by_path = {d["path"]: d for d in result.json()["diagnostics"]}
    assert by_path["training.steps"]["code"] == "wrong-type"
    assert by_path["training.steps"]["hint"] == "use `steps = 10`: without quotes"
    assert by_path["training.max_norm"]["code"] == "wrong-type"
    assert by_path["model.converters"]["hint"] == (
        'use `converters = ["quantize.linear.float8"]`: a TOML array'
    )
    assert by_path["activation_checkpoint.mode"]["code"] == "invalid-choice"
    assert by_path["activation_checkpoint.mode"]["hint"] == 'did you mean "selective"?'
    assert by_path["parallelism.module_fqns_per_model_part"]["code"] == "wrong-type"
    assert by_path["training.steps"]["line"] == 2


def test_every_problem_is_reported_in_one_pass(tmp_path):
    path = write(
        tmp_path,
        "job.toml",
        '[training]\nstpes = 1\nseq_len = "x"\n[parallelizm]\n[checkpoint]\nkeep_latest_k = 1\n',
    )
    assert sorted(codes(validate(path, "--format", "json"))) == [
        "keep-latest-k",
        "unknown-key",
        "unknown-key",
        "wrong-type",
    ]


def test_malformed_toml_gives_line_and_column_and_no_traceback(tmp_path):
    path = write(tmp_path, "bad.toml", "[training]\nsteps = 10\nseq_len = = 3\n")
    result = validate(path)
    assert result.code == 1
    assert f"{path}:3:" in result.out and "toml-syntax" in result.out
    assert "Traceback" not in result.out + result.err


@pytest.mark.parametrize(
    "raw",
    [b"\xff\xfe[training]\n", b"\xef\xbb\xbf[training]\nsteps = 1\n", b"[a]\x00\n", b"x = '''\n"],
)
def test_undecodable_or_odd_bytes_are_findings_not_crashes(tmp_path, raw):
    path = tmp_path / "odd.toml"
    path.write_bytes(raw)
    result = validate(path, "--format", "json")
    assert result.code == 1
    assert codes(result) == ["toml-syntax"]


def test_missing_file_is_reported(tmp_path):
    result = validate(tmp_path / "nope.toml")
    assert result.code == 1 and "unreadable-file" in result.out


def test_usage_errors_exit_2():
    assert validate().code == 2
    assert validate("--ngpu", "zero", LEGACY).code == 2
    assert validate("--format", "yaml", LEGACY).code == 2


def test_directories_are_searched_recursively_and_non_job_tomls_skipped(tmp_path):
    write(tmp_path, "a/b/job.toml", "[training]\nsteps = 1\n")
    write(tmp_path, "a/pyproject.toml", "[project]\nname = 'x'\n")
    write(tmp_path, ".hidden/job.toml", "[bogus]\n")
    result = validate(tmp_path)
    assert result.code == 0 and "1 file" in result.out


def test_corpus_validates_except_where_v022_itself_failed():
    files = corpus_files()
    failing = {}
    for file in files:
        result = validate(file, "--format", "json")
        errors = [d for d in result.json()["diagnostics"] if d["severity"] == "error"]
        assert result.code == (1 if errors else 0)
        if errors:
            failing[file.name if "transformers" not in str(file) else "tmb/" + file.name] = errors
    assert sorted(failing) == [
        "llama3_405b.toml",
        "llama4_17bx128e.toml",
        "tmb/debug_model.toml",
        "tmb/full.toml",
    ]
    # 4 pipeline stages on 1F1B fed one microbatch: torch's Schedule1F1B refuses it.
    pipeline = only(failing["llama4_17bx128e.toml"])
    assert (
        pipeline["code"] == "pipeline-layout"
        and "microbatches as stages (4)" in pipeline["message"]
    )
    converter = only(failing["llama3_405b.toml"])
    assert converter["code"] == "unknown-converter" and converter["line"] == 21
    assert '"quantize.linear.float8"' in converter["hint"]
    for name in ("tmb/debug_model.toml", "tmb/full.toml"):
        section = only(failing[name])
        assert section["path"] == "hf_transformers"
        assert "--extension transformers_modeling_backend" in section["hint"]


def test_transformers_backend_files_pass_with_their_extension():
    for file in corpus_files():
        if "transformers_modeling_backend" in str(file):
            assert validate(file, "--extension", "transformers_modeling_backend").code == 0


def test_ngpu_checks_the_parallel_degrees(tmp_path):
    path = write(tmp_path, "job.toml", "[parallelism]\ntensor_parallel_degree = 2\n")
    assert validate(path).code == 0
    result = validate(path, "--ngpu", "7", "--format", "json")
    diagnostic = only(result.json()["diagnostics"])
    assert diagnostic["code"] == "world-size" and diagnostic["line"] == 2
    assert "7" in diagnostic["message"] and "2" in diagnostic["message"]
    assert validate(path, "--ngpu", "8").code == 0


def test_tensor_parallel_must_divide_the_heads(tmp_path):
    text = "[training]\nseq_len = 3072\n[parallelism]\ntensor_parallel_degree = 3\n"
    diagnostic = only(
        validate(write(tmp_path, "job.toml", text), "--format", "json").json()["diagnostics"]
    )
    assert diagnostic["code"] == "tp-heads" and "16" in diagnostic["message"]


def test_validating_a_toml_never_imports_torch():
    code = (
        "import sys\n"
        "from titan.cli.validate import run\n"
        f"run([{str(LEGACY)!r}, {str(LEGACY / 'custom')!r}, '--format', 'sarif'])\n"
        "import importlib, pkgutil, schemas, migrate\n"
        "for pkg in (schemas, migrate):\n"
        "    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(info.name)\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_console_script_runs(tmp_path):
    path = write(tmp_path, "job.toml", "[training]\nstpes = 1\n")
    done = subprocess.run(
        [sys.executable, "-m", "titan.cli.validate", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "did you mean `training.steps`?" in done.stdout
    assert "Traceback" not in done.stderr


def test_output_file(tmp_path):
    path = write(tmp_path, "job.toml", "[training]\nstpes = 1\n")
    report = tmp_path / "report.json"
    result = validate(path, "--format", "json", "-o", report)
    assert result.code == 1 and result.out == ""
    assert report.read_text().count('"unknown-key"') == 1

"""TorchForge apps as Forge writes them: the SFT recipe's top-level sections are checked and migrated
like a TOML's; the trainer actor's own arguments and Forge's spawner blocks are reported as what
they are, never as sections to scaffold; ``hf://`` folders are found at their keys and keep a
migration from being lossless. The fixtures in ``tests/data/forge`` are in the shape of Forge's
apps of each era (the header of each says which)."""

from __future__ import annotations

import io
import json
import runpy
import textwrap
from pathlib import Path

import pytest
from titan.migrate.legacy_config import trainer_config
from titan.schemas.yaml_source import parse

from tests.helpers import validate, write

ROOT = Path(__file__).resolve().parents[1]
FORGE = ROOT / "tests" / "data" / "forge"
SFT = FORGE / "sft_qwen3.yaml"
SFT_2025_09 = FORGE / "sft_alpaca_2025_09.yaml"
GRPO_HF = FORGE / "grpo_hf_2025_09.yaml"
RL_2025_08 = FORGE / "rl_llama3_2025_08.yaml"


def check(path: Path, *args: str) -> tuple[int, list[dict]]:
    """``titan-validate --format json ARGS PATH``: exit code and findings."""
    result = validate("--format", "json", *args, path)
    assert "Traceback" not in result.err, result.err
    # what the app's flavor was in its torchtitan is tested with the flavor eras
    return result.code, [d for d in result.json()["diagnostics"] if d["code"] != "era-flavor"]


def located(found: list[dict]) -> list[tuple]:
    """The findings as (severity, code, path, line, col)."""
    return [(d["severity"], d["code"], d["path"], d["line"], d["col"]) for d in found]


def migrate(*args: object) -> tuple[int, dict, str]:
    """``titan-migrate --format json ARGS``: exit code, the report of the one file, the module."""
    from titan.cli import migrate as cli

    out, err = io.StringIO(), io.StringIO()
    code = cli.run(["--format", "json", *(str(a) for a in args)], stdout=out, stderr=err)
    report = json.loads(err.getvalue() if "-o" not in args else out.getvalue())
    (file,) = report["files"]
    return code, file, out.getvalue() if "-o" not in args else ""


def edited(tmp_path: Path, source: Path, old: str, new: str, name: str = "app.yaml") -> Path:
    """A copy of ``source`` with ``old`` (written once) replaced by ``new``."""
    text = source.read_text()
    assert text.count(old) == 1, old
    return write(tmp_path, name, text.replace(old, new))


def local_folders(tmp_path: Path, source: Path, name: str = "app.yaml") -> Path:
    """A copy of ``source`` whose hf:// folders are local ones."""
    app = edited(
        tmp_path, source, "assets_path: hf://${model_name}", "assets_path: ./tests/assets/tokenizer"
    )
    return edited(
        tmp_path, app, "load_path: hf://${model_name}", "load_path: /data/qwen3_0_6b", name
    )


# --------------------------------------------------------------------------- the SFT layout


def test_sft_app_is_read_where_its_recipe_reads_the_sections():
    source = parse(SFT.read_text(), file="app.yaml")
    assert source.layout == "top" and source.problem is None
    # The app's own keys (processes, model_name, metric_logging) never reach the checker.
    assert set(source.document) == {
        "comm",
        "model",
        "optimizer",
        "lr_scheduler",
        "training",
        "parallelism",
        "checkpoint",
        "activation_checkpoint",
    }
    assert source.document["model"]["hf_assets_path"] == "hf://Qwen/Qwen3-0.6B"
    assert source.app["processes"] == {"procs": 4, "with_gpus": True}
    code, found = check(SFT, "--ngpu", "4")
    assert code == 0
    assert {d["code"] for d in found} == {"hub-path"}  # nothing is an unknown section


@pytest.mark.parametrize(
    ("old", "new", "path", "line", "col", "hint"),
    [
        ("  steps: 500\n", "  stpes: 500\n", "training.stpes", 31, 3, "training.steps"),
        ("  lr: 2e-5\n", "  lrr: 2e-5\n", "optimizer.lrr", 21, 3, "optimizer.lr"),
        ("parallelism:\n", "paralelism:\n", "paralelism", 33, 1, "parallelism"),
        ("  warmup_steps: 50\n", "  warmup_step: 50\n", "lr_scheduler.warmup_step", 25, 3,
         "lr_scheduler.warmup_steps"),
        ("  trace_buf_size: 0\n", "  trace_buf_sise: 0\n", "comm.trace_buf_sise", 6, 3,
         "comm.trace_buf_size"),
    ],
)  # fmt: skip
def test_sft_app_typo_is_found_at_its_line(tmp_path, old, new, path, line, col, hint):
    app = edited(tmp_path, SFT, old, new)
    code, found = check(app)
    assert code == 1
    (finding,) = [d for d in found if d["code"] == "unknown-key"]
    assert (finding["path"], finding["line"], finding["col"]) == (path, line, col)
    assert hint in finding["hint"]
    assert "scaffold" not in finding["hint"]


def test_sft_app_values_and_cross_field_rules_are_checked(tmp_path):
    app = edited(tmp_path, SFT, "  steps: 500\n", "  steps: five hundred\n")
    code, found = check(app)
    assert code == 1 and ("error", "wrong-type", "training.steps", 31, 3) in located(found)
    app = edited(tmp_path, SFT, "  interval: 100\n", "  keep_latest_k: 1\n")
    assert ("error", "keep-latest-k", "checkpoint.keep_latest_k", 45, 3) in located(check(app)[1])
    # tensor parallel 3 does not fit 4 GPUs: the layout rule points at the SFT app's line.
    app = edited(tmp_path, SFT, "  tensor_parallel_degree: 1\n", "  tensor_parallel_degree: 3\n")
    code, found = check(app, "--ngpu", "4")
    assert code == 1 and any(d["code"] == "world-size" and d["line"] == 36 for d in found)


def test_sft_app_of_2025_09_keeps_its_recipe_blocks_to_itself():
    # metrics (Forge's metric logger), dataset/dataset_val are the recipe's; validation is a
    # JobConfig section ForgeJobConfig never had, which the recipe read itself: said so, and
    # its freq of -1 (the recipe's "never") is not checked as titan's validator.
    code, found = check(SFT_2025_09)
    assert code == 0
    (finding,) = found
    assert located([finding]) == [("info", "forge-app", "validation", 25, 1)]
    assert "validation loop" in finding["message"] and "scaffold" not in finding["hint"]
    document = parse(SFT_2025_09.read_text(), file="app.yaml").document
    assert "metrics" not in document and "dataset" not in document
    assert document["checkpoint"]["folder"] == "/tmp/sft_runs/llama3_debug"


def test_sft_app_with_metrics_of_jobconfig_checks_them(tmp_path):
    # A [metrics] table in JobConfig's words is a legacy section (the engine never read it in
    # Forge): reported as such, where Forge's logger block (logger/freq) is the app's own.
    app = write(
        tmp_path,
        "app.yaml",
        "model:\n  name: llama3\n  flavor: debugmodel\nmetrics:\n  log_freq: 10\n",
    )
    assert located(check(app)[1]) == [("info", "forge-app", "metrics", 4, 1)]


def test_app_with_no_sections_anywhere_is_still_refused(tmp_path):
    # A generator-only app (tests/sandbox/vllm's shape): nothing to check, said as before.
    app = write(
        tmp_path,
        "app.yaml",
        "policy:\n  engine_args: {model: x}\nservices:\n  policy: {procs: 1, num_replicas: 1}\n",
    )
    code, found = check(app)
    assert code == 1 and [d["code"] for d in found] == ["no-trainer"]
    assert "top level" in found[0]["hint"]


def test_sft_app_migrates_as_its_sections(tmp_path):
    app = local_folders(tmp_path, SFT, "sft.yaml")
    code, report, _ = migrate(app, "-o", tmp_path / "config_registry.py")
    assert code == 0, report
    keys = report["keys"]
    assert keys["training.steps"]["status"] == "carried"
    assert keys["comm.trace_buf_size"]["status"] == "carried"
    assert not any(key.startswith(("processes", "model_name", "metric_logging")) for key in keys)
    module = runpy.run_path(str(tmp_path / "config_registry.py"))
    config = module["qwen3_sft"]()
    assert config == trainer_config(app)
    assert (config.training.steps, config.optimizer.lr, config.comm.trace_buf_size) == (
        500,
        2e-5,
        0,
    )


# --------------------------------------------------------------------------- Forge's own keys


def test_early_grpo_trainer_block_is_forges_actor_not_sections():
    code, found = check(GRPO_HF)
    assert code == 0
    assert located(found) == [
        ("info", "forge-app", "model_name", 32, 3),
        ("info", "forge-app", "learning_rate", 33, 3),
        ("info", "forge-app", "service", 34, 3),
    ]
    by_path = {d["path"]: d for d in found}
    assert "optimizer.lr" in by_path["learning_rate"]["hint"]
    assert "service spawner" in by_path["service"]["message"]
    assert all("scaffold" not in d["hint"] for d in found)


def test_rl_trainer_processes_block_is_the_spawners(tmp_path):
    code, found = check(RL_2025_08)
    assert code == 0 and located(found) == [("info", "forge-app", "processes", 10, 3)]
    # The sections beside it are still checked.
    app = edited(tmp_path, RL_2025_08, "    steps: 5\n", "    stepz: 5\n")
    code, found = check(app)
    assert code == 1
    assert ("error", "unknown-key", "training.stepz", 21, 5) in located(found)


@pytest.mark.parametrize(
    "name", ["use_vllm_builtin_load: true", "vllm_tp_DEPRECATED: 2", "dcp_path: forge_dcp_tmp",
             "use_dcp: false", "state_dict_key: model_state_dict", "beta: 0.1", "epsilon: 0.2",
             "dp_rank: 0", "device: cuda"],
)  # fmt: skip
def test_trainer_actor_arguments_of_each_era_are_known(tmp_path, name):
    app = write(
        tmp_path,
        "app.yaml",
        f"trainer:\n  model:\n    name: llama3\n    flavor: debugmodel\n  {name}\n",
    )
    code, found = check(app)
    assert code == 0
    (finding,) = found
    assert (finding["severity"], finding["code"], finding["line"]) == ("info", "forge-app", 5)
    assert finding["path"] == name.partition(":")[0]


def test_scaffold_never_declares_forges_own_keys(tmp_path):
    from titan.cli import migrate as cli

    out, err = io.StringIO(), io.StringIO()
    cli.run(["--scaffold-extension", str(GRPO_HF)], stdout=out, stderr=err)
    for name in ("learning_rate", "model_name", "service", "procs_per_replica"):
        assert name not in out.getvalue(), out.getvalue()


def test_trainer_block_of_only_forges_actor_is_not_a_lossless_migration(tmp_path):
    code, report, _ = migrate(GRPO_HF)
    assert code == 0
    assert not report["lossless"]
    assert any("no JobConfig" in text for text in report["todos"][""])
    # An RL app's spawner block alone costs nothing: the sections are all carried.
    code, report, _ = migrate(RL_2025_08)
    assert code == 0 and report["lossless"], report["todos"]


# --------------------------------------------------------------------------- hf:// folders


def test_hub_paths_are_found_at_their_keys():
    code, found = check(SFT)
    assert code == 0
    assert located(found) == [
        ("warning", "hub-path", "model.hf_assets_path", 13, 3),
        ("warning", "hub-path", "checkpoint.initial_load_path", 42, 3),
    ]
    assert "huggingface-cli download Qwen/Qwen3-0.6B" in found[0]["hint"]
    assert "local" in found[0]["message"]


def test_hub_paths_in_a_toml_are_found_too(tmp_path):
    toml = write(
        tmp_path,
        "job.toml",
        '[model]\nname = "llama3"\ntokenizer_path = "hf://meta-llama/Llama-3.1-8B"\n',
    )
    code, found = check(toml)
    assert ("warning", "hub-path", "model.tokenizer_path", 3, 1) in located(found)


def test_hub_paths_keep_a_migration_from_being_lossless(tmp_path):
    code, report, module = migrate(SFT)
    assert code == 0 and not report["lossless"]
    todos = [text for texts in report["todos"].values() for text in texts]
    assert any("model.hf_assets_path" in text for text in todos)
    assert "TODO(titan-migrate): checkpoint.initial_load_path" in module
    # The same file with local folders is lossless again.
    assert migrate(local_folders(tmp_path, SFT))[1]["lossless"]


@pytest.mark.slow
def test_registry_check_finds_a_migrated_hub_path(tmp_path):
    registry = tmp_path / "config_registry.py"
    code, _, _ = migrate(SFT, "-o", registry)
    assert code == 0
    result = validate("--format", "json", registry)
    found = result.json()["diagnostics"]
    assert {d["path"] for d in found if d["code"] == "hub-path"} >= {"hf_assets_path"}, found


def test_library_reads_an_sft_app(tmp_path):
    app = write(
        tmp_path,
        "app.yaml",
        textwrap.dedent(
            """\
            processes: {procs: 1, with_gpus: false}
            model: {name: llama3, flavor: debugmodel, hf_assets_path: ./tests/assets/tokenizer}
            training: {steps: 3, local_batch_size: 2, seq_len: 64}
            """
        ),
    )
    config = trainer_config(app)
    assert (config.training.steps, config.training.seq_len) == (3, 64)

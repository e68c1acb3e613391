"""titan-train on one process: both forms give the same losses bit for bit, resume is exact, a
save killed by SIGKILL leaves the previous checkpoint, HF export/import and float8 (emulated).

Every run is a real ``titan-train`` process on the llama3 debug model and the shipped c4_test set
(sequence 64, batch 2); the generated registry is what ``titan-migrate`` writes for the TOML.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training_runs import (
    DEBUG_TOML,
    REPO,
    SEED,
    SMALL,
    Launch,
    both_forms,
    child_env,
    hf_round_trip,
    loss_bits,
    run_train,
    titan_train,
    titan_trains,
)

pytestmark = pytest.mark.slow  # every test here trains for real


def test_both_forms_give_identical_loss_bits_over_ten_steps(generated_registry, tmp_path):
    toml, code = both_forms(generated_registry, tmp_path, ["--training.steps", "10"])
    assert [m["step"] for m in toml.metrics] == list(range(1, 11))  # log_freq = 1 in the TOML
    assert loss_bits(toml.losses) == loss_bits(code.losses)
    assert toml.losses[-1] < toml.losses[0] - 0.5  # it learns: the debug set is learnable
    assert "running the legacy TOML" in toml.stderr
    assert "running the registry config llama3_debugmodel" in code.stderr


def test_the_same_seed_repeats_a_run_and_an_unset_seed_is_named(tmp_path):
    args = ["--config", "llama3_debugmodel", *SMALL, "--training.steps", "2"]
    first = titan_train(args, dump_folder=tmp_path / "a", legacy=False).check()
    assert "debug.seed is unset; this run's seed is" in first.stderr
    seed = first.stderr.split("this run's seed is ")[1].split()[0]
    again = titan_train([*args, "--debug.seed", seed], dump_folder=tmp_path / "b", legacy=False)
    assert loss_bits(again.check().losses) == loss_bits(first.losses)


def _checkpointed(steps: int) -> list[str]:
    return [
        "--training.steps",
        str(steps),
        "--checkpoint.enable",
        "--checkpoint.interval",
        "5",
        "--checkpoint.keep_latest_k",
        "0",
    ]  # the debug config already keeps the whole state at the last save


def _dcp_tensors(folder: Path) -> dict:
    """Every tensor of a DCP checkpoint folder, loaded without a model."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    target = folder.parent / f"{folder.name}.pt"
    dcp_to_torch_save(str(folder), str(target))
    return torch.load(target, weights_only=False)


def _flat(value, prefix=""):
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flat(item, f"{prefix}{key}.")
    else:
        yield prefix.rstrip("."), value


def _same_bits(a: dict, b: dict) -> list[str]:
    import torch

    left, right = dict(_flat(a)), dict(_flat(b))
    assert left.keys() == right.keys()
    differ = []
    for key, value in left.items():
        other = right[key]
        if isinstance(value, torch.Tensor):
            if value.dtype != other.dtype or not torch.equal(value, other):
                differ.append(key)
        elif key.startswith("dataloader") or key.startswith("train_state"):
            if value != other:
                differ.append(key)
    return differ


def test_resume_is_exact_ten_straight_equals_five_resume_five(tmp_path):
    args = ["--job.config_file", str(DEBUG_TOML), *SMALL, *SEED, *_checkpointed(10)]
    straight = titan_train(args, dump_folder=tmp_path / "a", legacy=True).check()
    # The same 10-step run, stopped for good in its save after step-5's (held mid-write there,
    # so the kill lands after the step-5 checkpoint and before any later one, however loaded the
    # machine) ...
    folder = tmp_path / "b" / "checkpoint"
    _killed_mid_save([*args, "--job.dump_folder", str(tmp_path / "b")], "step-10", tmp_path)
    assert (folder / "step-5").exists()
    assert not (folder / "step-10").exists()  # the save at 10 is the next one after 5
    (tmp_path / "b" / "metrics.jsonl").unlink()
    # ... and a new process that resumes it.
    resumed = titan_train(args, dump_folder=tmp_path / "b", legacy=True).check()
    start, *steps = resumed.metrics
    assert start["event"] == "run_start" and start["step"] == 5
    assert start["resumed_from"] == str(folder / "step-5")
    assert [m["step"] for m in steps] == [6, 7, 8, 9, 10]
    assert loss_bits(resumed.losses) == loss_bits(straight.losses[5:])
    final_a = _dcp_tensors(tmp_path / "a" / "checkpoint" / "step-10")
    final_b = _dcp_tensors(tmp_path / "b" / "checkpoint" / "step-10")
    assert _same_bits(final_a, final_b) == []
    assert any(key.startswith("optimizer") for key in final_a)
    assert any(key.startswith("layers.0.attention.wq") for key in final_a)


HELD_SAVE = Path(__file__).parent / "held_save.py"


def _killed_mid_save(args: list[str], save: str, tmp_path: Path) -> str:
    """``titan-train ARGS``, killed (SIGKILL) in the middle of its save of ``save`` ("step-N"):
    the run holds after the first shard it writes into that step's folder and says so
    (``tests/held_save.py``), and the kill follows that line. Returns the held folder's name."""
    process = subprocess.Popen(
        [sys.executable, str(HELD_SAVE), *args],
        cwd=REPO,
        env=child_env(TITAN_TEST_HOLD=str(tmp_path), TITAN_TEST_HOLD_SAVE=save),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    try:
        for line in process.stderr:
            lines.append(line)
            if line.startswith(f"held: {save}."):
                process.kill()
                break
        else:
            raise AssertionError(f"the run ended before its {save} save:\n{''.join(lines)}")
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()
    assert process.returncode == -signal.SIGKILL, "".join(lines)[-4000:]
    return lines[-1].removeprefix("held: ").strip()


def test_sigkill_during_a_save_restarts_from_the_previous_checkpoint(tmp_path):
    args = [
        "--config",
        "llama3_debugmodel",
        *SMALL,
        *SEED,
        "--training.steps",
        "3",
        "--checkpoint.enable",
        "--checkpoint.interval",
        "1",
        "--dump_folder",
        str(tmp_path / "run"),
    ]
    folder = tmp_path / "run" / "checkpoint"
    torn = _killed_mid_save(args, "step-2", tmp_path)
    assert (folder / "step-1").exists() and not (folder / "step-2").exists(), _ls(folder)
    assert (folder / torn).is_dir()  # the torn save the restart must clear
    killed = (tmp_path / "run" / "metrics.jsonl").read_text(encoding="utf-8").splitlines()

    restarted = run_train(args)
    assert restarted.returncode == 0, restarted.stderr[-4000:]
    # The torn step-2 save is reported and removed; the run resumes from step 1.
    assert re.search(
        r"removed \S*step-2\.\S*, left by a save that did not finish", restarted.stderr
    )
    assert re.search(r"loaded .* from \S*/checkpoint/step-1 in", restarted.stderr)
    import json

    after = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    first_run = [json.loads(line) for line in killed]
    # The restart is marked, so that a reader can tell the repeated step 2 from the first one.
    start, *second_run = after[len(first_run) :]
    assert (start["event"], start["step"]) == ("run_start", 1)
    assert [m["step"] for m in second_run] == [2, 3]
    # The step the killed run had logged before its save is repeated with the same bits.
    step2 = [m["loss"] for m in first_run if m["step"] == 2]
    assert loss_bits(step2) == loss_bits([second_run[0]["loss"]])
    assert sorted(p.name for p in _ls(folder)) == ["step-1", "step-2", "step-3"]


def _ls(folder: Path) -> list[Path]:
    return list(folder.iterdir()) if folder.exists() else []


def test_float8_emulated_trains_on_cpu_with_a_falling_loss(tmp_path):
    run = titan_train(
        ["--config", "llama3_debugmodel_float8", *SMALL, *SEED, "--training.steps", "10"],
        dump_folder=tmp_path,
        legacy=False,
    ).check()
    assert "Float8Linear" in run.stderr  # print_after_conversion shows the converted model
    assert run.losses[-1] < run.losses[0] - 0.5


def test_hf_safetensors_export_then_import_gives_identical_parameters(tmp_path, monkeypatch):
    import torch
    from safetensors.torch import load_file

    from titan.models.llama3.config_registry import llama3_debugmodel

    monkeypatch.chdir(REPO)  # hf_assets_path is ./tests/assets/tokenizer

    def config():
        c = llama3_debugmodel()
        c.training.steps, c.training.seq_len, c.training.local_batch_size = 3, 64, 2
        c.debug.seed = 7
        return c

    done = hf_round_trip(config, tmp_path)
    trained, loaded = done.trained, done.loaded
    hf = load_file(str(done.folder / "model.safetensors"))
    assert "model.layers.0.self_attn.q_proj.weight" in hf and "lm_head.weight" in hf
    assert len(hf) == len(trained)
    assert (done.folder / "config.json").exists()
    assert loaded.keys() == trained.keys()
    differ = [k for k in trained if not torch.equal(trained[k], loaded[k])]
    assert differ == []
    # It did not just keep a fresh init: the import changed every tensor it loaded.
    fresh_config = config()
    fresh_config.dump_folder = str(tmp_path / "fresh")
    fresh = fresh_config.build()
    try:
        initial = fresh.parts.model.state_dict()
        assert all(not torch.equal(initial[k], trained[k]) for k in trained if "norm" not in k)
    finally:
        fresh.close()


def test_gradient_accumulation_matches_one_big_batch(tmp_path):
    """global_batch_size 4 as 2 micro-batches of 2 vs one batch of 4: the same step, to rounding."""
    common = ["--config", "llama3_debugmodel", "--training.seq_len", "64", *SEED]
    common += ["--training.steps", "3", "--training.global_batch_size", "4"]
    # float32 compute (no bf16 autocast), so the two differ only in summation order.
    common += ["--training.mixed_precision_param", "float32"]
    launches = [
        Launch([*common, "--training.local_batch_size", "2"], dump_folder=tmp_path / "a"),
        Launch([*common, "--training.local_batch_size", "4"], dump_folder=tmp_path / "b"),
    ]
    accumulated, whole = (run.check() for run in titan_trains(launches))
    assert "2 micro-batch(es) of 2×64" in accumulated.stderr
    assert "1 micro-batch(es) of 4×64" in whole.stderr
    for a, b in zip(accumulated.metrics, whole.metrics, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-6)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-5)


def test_in_backward_optimizer_and_tensorboard_through_the_legacy_flags(tmp_path):
    run = titan_train(
        [
            "--job.config_file",
            str(DEBUG_TOML),
            *SMALL,
            *SEED,
            "--training.steps",
            "4",
            "--optimizer.early_step_in_backward",
            "--metrics.enable_tensorboard",
        ],
        dump_folder=tmp_path,
        legacy=True,
    ).check()
    assert [m["grad_norm"] for m in run.metrics] == [0.0] * 4  # no gradient outlives backward
    assert run.losses[-1] < run.losses[0]
    events = list((tmp_path / "tb").rglob("events.out.tfevents.*"))
    assert events, list(tmp_path.rglob("*"))


def test_compiled_model_and_loss_train_like_eager(tmp_path):
    """torch.compile of every block and of the loss (aot_eager: traced, no C++ codegen here)."""
    args = ["--config", "llama3_debugmodel", *SMALL, *SEED, "--training.steps", "3"]
    launches = [
        Launch(args, dump_folder=tmp_path / "eager"),
        Launch(
            [*args, "--compile.enable", "--compile.backend", "aot_eager"],
            dump_folder=tmp_path / "compiled",
        ),
    ]
    eager, compiled = (run.check() for run in titan_trains(launches))
    assert compiled.losses == pytest.approx(eager.losses, rel=1e-5)


def test_activation_checkpointing_modes_recompute_the_same_numbers(tmp_path):
    """Recomputation in backward must not change a bit: none, full and selective (the debug
    config's every-2nd-block) give the same losses."""
    args = ["--config", "llama3_debugmodel", *SMALL, *SEED, "--training.steps", "3"]
    modes = ("none", "full", "selective")
    launches = [
        Launch([*args, "--activation_checkpoint.mode", mode], dump_folder=tmp_path / mode)
        for mode in modes
    ]
    runs = {mode: run.check() for mode, run in zip(modes, titan_trains(launches), strict=True)}
    assert loss_bits(runs["full"].losses) == loss_bits(runs["none"].losses)
    assert loss_bits(runs["selective"].losses) == loss_bits(runs["none"].losses)


def test_a_seed_checkpoint_fixes_the_initial_weights_of_later_runs(tmp_path):
    """``create_seed_checkpoint`` writes step-0 (model only, no training); runs that start from it
    begin with its weights whatever their own seed, and run normally from step 1."""
    base = ["--config", "llama3_debugmodel", *SMALL, "--training.steps", "2", "--checkpoint.enable"]
    seeded = titan_train(
        [*base, "--checkpoint.create_seed_checkpoint", "--debug.seed", "1"],
        dump_folder=tmp_path / "seed",
        legacy=False,
    ).check()
    assert "seed checkpoint written" in seeded.stderr and seeded.metrics == []
    step0 = tmp_path / "seed" / "checkpoint" / "step-0"
    assert (step0 / ".metadata").exists()
    from_seed = [
        Launch(
            [*base, "--debug.seed", seed, "--checkpoint.initial_load_path", str(step0)],
            dump_folder=tmp_path / f"run{seed}",
        )
        for seed in ("2", "3")
    ]
    unseeded = Launch([*base, "--debug.seed", "2"], dump_folder=tmp_path / "x")
    *runs, unseeded_run = (run.check() for run in titan_trains([*from_seed, unseeded]))
    for run in runs:
        assert re.search(r"loaded .*step-0", run.stderr)
        assert [m["step"] for m in run.metrics] == [1, 2]
    # The same weights and the same data give the same first loss; only the init differs
    # between seeds otherwise (the model has no dropout).
    assert loss_bits(runs[0].losses[:1]) == loss_bits(runs[1].losses[:1])
    assert loss_bits(unseeded_run.losses[:1]) != loss_bits(runs[0].losses[:1])


# The debug model with one layer: a finite dataset is read to its end, and through the six
# layers those 40K tokens cost 4 times the CPU time (39 s against 11 s, measured).
ONE_LAYER_REGISTRY = """\
from titan.models.llama3.config_registry import llama3_debugmodel


def one_layer_debugmodel():
    config = llama3_debugmodel()
    config.model_spec.model.n_layers = 1
    return config
"""


def test_a_finite_dataset_that_runs_out_stops_the_run_cleanly(tmp_path):
    registry = tmp_path / "config_registry.py"
    registry.write_text(ONE_LAYER_REGISTRY, encoding="utf-8")
    run = titan_train(
        [
            "--registry",
            str(registry),
            "--config",
            "one_layer_debugmodel",
            *SEED,
            "--training.seq_len",
            "512",
            "--training.local_batch_size",
            "8",
            "--training.steps",
            "50",
            "--dataloader.dataset",
            "c4_test_validation",  # about 40K tokens: 9 batches of 8 × 513
            "--dataloader.no-infinite",
            "--training.mixed_precision_param",
            "float32",  # bfloat16 is emulated, and slow, on most CPUs
        ],
        dump_folder=tmp_path / "run",
        legacy=False,
    ).check()
    last = run.metrics[-1]["step"]
    assert 5 <= last < 50
    assert f"the training data ran out after step {last} of 50; stopping there" in run.stderr


def test_the_debug_config_runs_from_any_folder(tmp_path):
    """Its hf_assets_path and dataset are repository-relative: found under titan's checkout."""
    run = titan_train(
        ["--job.config_file", str(DEBUG_TOML), *SMALL, *SEED, "--training.steps", "1"],
        dump_folder=tmp_path / "out",
        legacy=True,
        cwd=tmp_path,
    ).check()
    assert "hf_assets_path './tests/assets/tokenizer' is not under the working folder" in run.stderr
    assert len(run.losses) == 1

"""titan-train on bad input: a clear message that names the problem, the promised exit code, never
a Python traceback, and nothing of the user's lost.

Exit codes: 0 finished, 1 the config or the run failed, 2 a malformed command line, 130
interrupted. Every case is a real ``titan-train`` process; the cases the config check refuses
cost a fraction of a second, those refused while the run is built a few seconds each.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests import training_runs
from tests.training_runs import DEBUG_TOML, SMALL, child_env

TOML = str(DEBUG_TOML)
ONE_STEP = [*SMALL, "--training.steps", "1"]


def titan_train(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``titan-train ARGS`` exactly as given (no dump folder added), as one process."""
    return training_runs.run_train(list(args), env=env, timeout=300)


def assert_refused(done: subprocess.CompletedProcess, code: int, *wanted: str) -> None:
    """Exit ``code``, no traceback, and every ``wanted`` text in the output."""
    shown = f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr[-5000:]}"
    assert done.returncode == code, shown
    assert "Traceback" not in done.stderr + done.stdout, shown
    for text in wanted:
        assert text in done.stderr + done.stdout, f"{text!r} missing\n{shown}"


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """A folder of bad TOML files: a syntax error, and a misspelt key."""
    folder = tmp_path_factory.mktemp("inputs")
    (folder / "syntax.toml").write_text('[job]\ndump_folder = "x"\n[training\nsteps = 3\n')
    (folder / "typo.toml").write_text('[job]\ndump_folder = "x"\n[training]\nstpes = 3\n')
    return folder


# (id, arguments with {inputs} for the fixture's folder, exit code, texts the output must hold)
CONFIG_REFUSALS = [
    ("no-arguments", [], 2, ["usage:", "titan-train: error: name a config to run"]),
    ("config-without-value", ["--config"], 2, ["titan-train: error: --config requires a value"]),
    (
        "unknown-registry-name",
        ["--config", "llama3_debugmodle"],
        1,
        ["no config function `llama3_debugmodle`", "did you mean `llama3_debugmodel`"],
    ),
    (
        "two-configs",
        ["--config", "llama3_debugmodel", "--job.config_file", TOML],
        2,
        ["--job.config_file and --config name two configs; give one of them"],
    ),
    (
        "missing-toml",
        ["--job.config_file", "{inputs}/absent.toml"],
        1,
        ["{inputs}/absent.toml", "cannot read the file: No such file or directory"],
    ),
    (
        "malformed-toml",
        ["--job.config_file", "{inputs}/syntax.toml"],
        1,
        ["{inputs}/syntax.toml:3:10: error[toml-syntax] invalid TOML: expected ']'"],
    ),
    (
        "unknown-toml-key",
        ["--job.config_file", "{inputs}/typo.toml"],
        1,
        ["typo.toml:4:1", "unknown key `stpes` in [training]", "did you mean `training.steps`?"],
    ),
    (
        "wrong-typed-legacy-flag",
        ["--job.config_file", TOML, "--training.steps", "abc"],
        2,
        ['`--training.steps` must be an integer, got "abc"', " 1 | --training.steps abc"],
    ),
    (
        "unknown-legacy-flag",
        ["--job.config_file", TOML, "--training.stpes", "3"],
        2,
        ["`--training.stpes` is an unknown flag", "did you mean `--training.steps`?"],
    ),
    (
        "unknown-registry-flag",
        ["--config", "llama3_debugmodel", "--training.stpes", "3"],
        2,
        ["Unrecognized options: --training.stpes", "Perhaps you meant", "--training.steps INT"],
    ),
    (
        "wrong-typed-registry-flag",
        ["--config", "llama3_debugmodel", "--training.steps", "abc"],
        2,
        ["Error parsing --training.steps", "'abc'"],
    ),
    (
        "pipeline-parallel-on-one-process",
        ["--job.config_file", TOML, "--parallelism.pipeline_parallel_degree", "2"],
        1,
        [
            "error[world-size] 1 GPU cannot be split by pipeline_parallel_degree=2",
            "run on a multiple of 2 GPUs",
        ],
    ),
    (
        "context-parallel-beyond-the-world-size",
        ["--config", "llama3_debugmodel", "--parallelism.context_parallel_degree", "2"],
        1,
        [
            "error[world-size] 1 GPU cannot be split by context_parallel_degree=2",
            "run on a multiple of 2 GPUs",
        ],
    ),
    (
        "expert-parallel",
        ["--job.config_file", TOML, "--parallelism.expert_parallel_degree", "2"],
        1,
        ["expert parallel is not supported by titan-train yet"],
    ),
    (
        "degrees-beyond-the-world-size",
        ["--job.config_file", TOML, "--parallelism.tensor_parallel_degree", "4"],
        1,
        [
            "<command line>:1:1: error[world-size] 1 GPU cannot be split by "
            "tensor_parallel_degree=4",
            "run on a multiple of 4 GPUs",
        ],
    ),
    (
        "encoder-that-is-not-local",
        ["--config", "flux_debugmodel", *ONE_STEP, "--dump_folder", "{inputs}/flux"],
        1,
        [
            "titan-train: error: encoder.t5_encoder = 'google/t5-v1_1-xxl' is neither a local "
            "folder nor a model in the Hugging Face cache"
        ],
    ),
]


@pytest.mark.parametrize(
    ("args", "code", "wanted"),
    [case[1:] for case in CONFIG_REFUSALS],
    ids=[case[0] for case in CONFIG_REFUSALS],
)
def test_a_bad_command_line_or_config_is_refused_with_a_message(inputs, args, code, wanted):
    done = titan_train(*(arg.format(inputs=inputs) for arg in args))
    assert_refused(done, code, *(text.format(inputs=inputs) for text in wanted))
    if "not supported by titan-train yet (parallelism" in " ".join(wanted):
        assert "world-size" not in done.stderr  # moot while the degree must be 1


def test_help_prints_the_usage_on_stdout_in_both_forms():
    for args in (["--help"], ["--job.config_file", TOML, "--help"]):
        done = titan_train(*args)
        assert_refused(done, 0, "usage:", "titan-train --config llama3_debugmodel")
        assert done.stdout.startswith("usage:") and not done.stderr


def test_a_dump_folder_that_is_a_file_is_refused_and_the_file_kept(tmp_path):
    precious = tmp_path / "results.txt"
    precious.write_bytes(b"three weeks of notes\n")
    legacy = titan_train("--job.config_file", TOML, *ONE_STEP, "--job.dump_folder", str(precious))
    assert_refused(
        legacy, 1, f"job.dump_folder '{precious}' is a file, not a folder", "was not touched"
    )
    inside = precious / "run"
    registry = titan_train("--config", "llama3_debugmodel", *ONE_STEP, "--dump_folder", str(inside))
    assert_refused(registry, 1, f"dump_folder '{inside}' cannot be created: '{precious}' is a file")
    assert precious.read_bytes() == b"three weeks of notes\n"


def test_an_unwritable_dump_folder_is_refused(tmp_path):
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o500)
        target = folder / "run"
    else:
        # root writes where mode bits forbid it; sysfs refuses new entries even to root.
        target = Path("/sys/titan-train-dump")
        if not Path("/sys").is_dir() or target.exists():
            pytest.skip("as root, only a Linux /sys gives a folder nobody can write")
    done = titan_train("--config", "llama3_debugmodel", *ONE_STEP, "--dump_folder", str(target))
    assert_refused(done, 1, f"dump_folder '{target}' is not writable", "choose a folder")


# Refused while the run is built: each case starts torch and builds part of the run.
BUILD_REFUSALS = [
    (
        "missing-hf-assets-folder",
        ["--config", "llama3_debugmodel", "--hf_assets_path", "{tmp}/no-assets"],
        ["no tokenizer at '{tmp}/no-assets'", "the folder does not exist", "Set hf_assets_path"],
    ),
    (
        "dataloader-workers",
        ["--config", "llama3_debugmodel", "--dataloader.num_workers", "2"],
        ["dataloader.num_workers=2", "resume it exactly", "set num_workers = 0"],
    ),
    (
        "initial-load-path-missing",
        ["--job.config_file", TOML, "--checkpoint.enable"]
        + ["--checkpoint.initial_load_path", "{tmp}/nothing"],
        ["checkpoint.initial_load_path '{tmp}/nothing' is not a folder: it does not exist"],
    ),
    (
        "initial-load-path-not-a-checkpoint",
        ["--job.config_file", TOML, "--checkpoint.enable"]
        + ["--checkpoint.initial_load_path", "{tmp}"],
        ["checkpoint.initial_load_path: {tmp} is not a DCP checkpoint folder (no .metadata"],
    ),
    (
        "model-family-titan-cannot-train",
        ["--job.config_file", TOML, "--model.name", "vlm", "--model.flavor", "debugmodel"]
        + ["--training.dataset", "obelics"],  # a dataset vlm registered, so the model is next
        ["vlm 'debugmodel': titan has no `vlm` model family; pick one of"],
    ),
]


@pytest.mark.parametrize(
    ("args", "wanted"),
    [case[1:] for case in BUILD_REFUSALS],
    ids=[case[0] for case in BUILD_REFUSALS],
)
def test_a_run_that_cannot_be_built_is_refused_with_a_message(tmp_path, args, wanted):
    (tmp_path / "stray.txt").write_text("not a checkpoint")
    dump = "--job.dump_folder" if args[0] == "--job.config_file" else "--dump_folder"
    done = titan_train(
        *(arg.format(tmp=tmp_path) for arg in args), *ONE_STEP, dump, str(tmp_path / "run")
    )
    wanted = [text.format(tmp=tmp_path) for text in wanted]
    assert_refused(done, 1, f"titan-train: error: {wanted[0]}", *wanted[1:])


@pytest.mark.parametrize("form", ["--job.config_file", "--config"])
def test_an_unknown_dataset_is_refused_before_the_run_with_a_suggestion(tmp_path, form):
    legacy = form == "--job.config_file"
    config = TOML if legacy else "llama3_debugmodel"
    dump = "--job.dump_folder" if legacy else "--dump_folder"
    dataset = "--training.dataset" if legacy else "--dataloader.dataset"
    done = titan_train(form, config, dataset, "c4_tset", *ONE_STEP, dump, str(tmp_path / "run"))
    assert done.returncode == 1, done.stderr
    assert 'dataset "c4_tset" is not registered' in done.stderr
    assert 'did you mean "c4_test"?' in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "run").exists()


def test_a_hub_dataset_without_the_datasets_package_names_the_package(tmp_path):
    # Whether or not `datasets` is installed here, the child sees it missing.
    shadow = tmp_path / "shadow" / "datasets"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named datasets')\n")
    env = child_env(PYTHONPATH=str(shadow.parent))
    done = titan_train(
        "--job.config_file",
        TOML,
        *ONE_STEP,
        "--training.dataset",
        "c4",
        "--job.dump_folder",
        str(tmp_path / "run"),
        env=env,
    )
    assert_refused(
        done, 1, "dataset 'c4' (allenai/c4)", "needs the `datasets` package", "pip install datasets"
    )


HOSTILE = "line one\nline two \x1b[31mred\x1b[0m \"double\" 'single' \\back $HOME `tick` héllo ✓"


@pytest.mark.parametrize(
    "form",
    [
        ["--config", "llama3_debugmodel", "--description", HOSTILE]
        + ["--debug.save_config_file", "cfg.json", "--dump_folder"],
        ["--job.config_file", TOML, "--job.description", HOSTILE]
        + ["--job.save_config_file", "cfg.json", "--job.dump_folder"],
    ],
    ids=["registry", "legacy"],
)
def test_hostile_strings_run_and_reach_the_saved_config_verbatim(tmp_path, form):
    done = titan_train(*ONE_STEP, *form, str(tmp_path))
    assert_refused(done, 0, "training done after step 1")
    saved = json.loads((tmp_path / "cfg.json").read_text(encoding="utf-8"))
    assert saved["description"] == HOSTILE
    # The log shows the description, with the escape sequence that would colour the terminal
    # written out instead of sent.
    assert "\x1b" not in done.stderr and "\\x1b[31mred" in done.stderr


@pytest.mark.slow
def test_sigint_during_training_exits_130_and_keeps_the_saved_checkpoints(tmp_path):
    args = [
        "--config",
        "llama3_debugmodel",
        *SMALL,
        "--training.steps",
        "10000",
        "--checkpoint.enable",
        "--checkpoint.interval",
        "2",
        "--dump_folder",
        str(tmp_path),
    ]
    process = training_runs.launch(args, stderr=subprocess.PIPE)
    checkpoints = tmp_path / "checkpoint"
    training_runs.signal_when(
        process,
        (checkpoints / "step-2").is_dir,
        signal.SIGINT,
        poll=0.05,
        timeout=training_runs.HANG_SECONDS,
    )
    _, stderr = process.communicate(timeout=training_runs.HANG_SECONDS)
    assert process.returncode == 130, stderr[-4000:]
    assert "Traceback" not in stderr
    assert re.fullmatch(
        r"titan-train: interrupted by SIGINT after step \d+; its newest checkpoint is \S+; a new "
        r"run with this dump folder resumes there",
        stderr.rstrip().splitlines()[-1],
    )
    finished = [p for p in checkpoints.iterdir() if re.fullmatch(r"step-\d+", p.name)]
    assert finished and all((p / ".metadata").is_file() for p in finished)


@pytest.mark.slow
def test_a_failure_on_the_ranks_of_torchrun_is_named_per_rank(tmp_path):
    done = training_runs.titan_train(
        ["--config", "llama3_debugmodel", *ONE_STEP, "--dataloader.num_workers", "2"],
        dump_folder=tmp_path,
        legacy=False,
        nproc=2,
    )
    assert done.returncode == 1, done.stderr[-5000:]
    assert re.search(r"^titan-train rank [01]: error: dataloader.num_workers=2", done.stderr, re.M)
    # torchrun's own summary (after its launcher's traceback) quotes the failed rank's message.
    assert re.search(r"traceback : titan-train rank [01]: error: dataloader", done.stderr)
    ours, _, launcher = done.stderr.partition("Traceback")
    assert "ChildFailedError" in launcher and "Traceback" not in launcher, done.stderr[-5000:]


# In-process: the ways a run can stop once it is built, with stand-ins for the trainer.


class _Trainer:
    def __init__(self, error: BaseException | None, closed: list[str]) -> None:
        self.error, self.closed = error, closed

    def train(self) -> None:
        if self.error is not None:
            raise self.error

    def close(self) -> None:
        self.closed.append("closed")


class _Config:
    def __init__(self, error: BaseException | None, dump_folder: Path) -> None:
        self.error, self.dump_folder, self.closed = error, str(dump_folder), []

    def build(self) -> _Trainer:
        return _Trainer(self.error, self.closed)


@pytest.mark.parametrize(
    ("error", "code", "wanted"),
    [
        (None, 0, ""),
        (KeyboardInterrupt(), 130, "titan-train: interrupted\n"),
        (
            FileNotFoundError(2, "No such file or directory", "/data/shard-3"),
            1,
            "titan-train: error: No such file or directory: /data/shard-3\n",
        ),
        (ValueError("training.steps \x1b[2J"), 1, "titan-train: error: training.steps \\x1b[2J\n"),
    ],
    ids=["finished", "interrupted", "missing-file", "value-error"],
)
def test_run_turns_each_ending_into_its_exit_code_and_closes_the_trainer(
    tmp_path, error, code, wanted
):
    from titan.train import run
    from titan.training.errors import RunFailure

    config, stderr = _Config(error, tmp_path), io.StringIO()
    assert run(config, failure=RunFailure(stderr=stderr)) == code
    assert stderr.getvalue() == wanted
    assert config.closed == ["closed"]  # pending checkpoint saves are finished either way


def test_an_unexpected_crash_is_one_line_with_the_traceback_saved(tmp_path, monkeypatch):
    from titan.train import run
    from titan.training.errors import RunFailure

    monkeypatch.delenv("TITAN_DEBUG", raising=False)
    error_file = tmp_path / "error.json"
    stderr = io.StringIO()
    failure = RunFailure(rank=1, world_size=2, error_file=str(error_file), stderr=stderr)
    config = _Config(RuntimeError("CUDA error: an illegal memory access"), tmp_path / "run")
    assert run(config, failure=failure) == 1
    text = stderr.getvalue()
    assert text.startswith(
        "titan-train rank 1: error: the run stopped on an unexpected RuntimeError: "
        "CUDA error: an illegal memory access\n"
    )
    assert "Traceback" not in text
    saved = Path(re.search(r"the traceback is in (\S+);", text)[1])
    assert saved.parent == tmp_path / "run" and saved.name.startswith("traceback_rank1_")
    assert "Traceback" in saved.read_text() and "illegal memory access" in saved.read_text()
    # torchrun reads the same message back for its failure summary.
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    read = ProcessFailure(local_rank=1, pid=1, exitcode=1, error_file=str(error_file))
    assert read.message["message"] == text.rstrip("\n")

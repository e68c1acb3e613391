"""``titan-train --preflight`` finds every problem a run refuses before its first step, with the
run's own message: each case runs pre-flight and a real one-step CPU run on the same config (both
as ``titan-train`` processes) and compares the first line each says about the problem.

The classes: the dataset, the tokenizer, the checkpoint folder (a file, found by a run only at
its first save), its ``step-N`` entries (a file is not a checkpoint folder; a run would skip it
and resume from an older step), the output folders and their files, and settings refused by the
components a run builds after the config check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.training_runs import DEBUG_TOML, SEED, SMALL, child_env, run_train

REGISTRY = ["--config", "llama3_debugmodel"]
LEGACY = ["--job.config_file", str(DEBUG_TOML)]
ONE_STEP = [*SMALL, *SEED, "--training.steps", "1"]
CHECKPOINTS = ["--checkpoint.enable"]
LEGACY_CHECKPOINTS = ["--checkpoint.enable"]

# About 7 s a case on two cores: two processes each, one of them importing torch and the model.
pytestmark = pytest.mark.slow


def titan_train(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """``titan-train ARGS`` as a process of its own in ``cwd``."""
    return run_train(list(args), cwd=cwd)


def problem(stderr: str) -> str:
    """The first line that names a problem: not a log line, not a blank one."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith("[titan rank")]
    assert said, f"nothing said about a problem:\n{stderr}"
    return said[0]


def trained(cwd: Path) -> bool:
    """Whether a run under ``cwd`` logged a training step (a loss in a metrics.jsonl)."""
    files = [path for path in cwd.rglob("metrics.jsonl") if path.is_file()]
    return any('"loss"' in path.read_text(encoding="utf-8") for path in files)


def both(cwd: Path, args: list[str]) -> tuple[subprocess.CompletedProcess, ...]:
    """Pre-flight, then a real run, of the same command line."""
    return titan_train(cwd, "--preflight", *args), titan_train(cwd, *args)


def assert_same_refusal(cwd: Path, args: list[str], wanted: str) -> None:
    """Both refuse with the same first problem line, which contains ``wanted``."""
    checked, ran = both(cwd, args)
    assert checked.returncode == 1, f"pre-flight passed:\n{checked.stdout}{checked.stderr}"
    assert ran.returncode == 1, f"exit {ran.returncode}\n{ran.stderr[-4000:]}"
    assert problem(checked.stderr) == problem(ran.stderr)
    assert wanted in problem(ran.stderr), ran.stderr[-4000:]
    for result in (checked, ran):
        assert "Traceback" not in result.stderr
    assert not trained(cwd)  # refused before its first step
    assert checked.stdout == ""


# Each case: (form's arguments, a function of (tmp_path, dump folder) that prepares the files and
# returns the extra arguments, the words the message must contain).
Case = tuple[list[str], Callable[[Path, Path], list[str]], str]


def _tokenizer_folder(tmp: Path, files: dict[str, str]) -> str:
    folder = tmp / "assets"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return str(folder)


def _real_tokenizer_with(tmp: Path, config: str) -> str:
    source = Path(__file__).parent / "assets" / "tokenizer" / "tokenizer.json"
    return _tokenizer_folder(
        tmp, {"tokenizer.json": source.read_text(encoding="utf-8"), "tokenizer_config.json": config}
    )


def _dataset(tmp: Path, files: dict[str, str]) -> str:
    folder = tmp / "data"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return str(folder)


def _checkpoint_entry(make: Callable[[Path], None], folder: str = "checkpoint"):
    def prepare(_tmp: Path, dump: Path) -> list[str]:
        root = dump / folder
        root.mkdir(parents=True)
        make(root)
        return []

    return prepare


def _file(path: Path, text: str = "not a checkpoint\n") -> None:
    path.write_text(text, encoding="utf-8")


CASES: dict[str, Case] = {
    # The dataset.
    "unknown dataset name": (
        REGISTRY,
        lambda tmp, dump: ["--dataloader.dataset", "c4_tset"],
        '"c4_tset" is not registered',
    ),
    "unknown dataset name, legacy TOML": (
        LEGACY,
        lambda tmp, dump: ["--training.dataset", "c5"],
        '"c5" is not registered',
    ),
    "dataset_path that does not exist": (
        REGISTRY,
        lambda tmp, dump: ["--dataloader.dataset_path", str(tmp / "gone" / "data.jsonl")],
        "does not exist",
    ),
    "dataset folder without dataset files": (
        REGISTRY,
        lambda tmp, dump: ["--dataloader.dataset_path", _dataset(tmp, {"notes.md": "hi\n"})],
        "has no dataset files",
    ),
    "dataset folder without a train split": (
        REGISTRY,
        lambda tmp, dump: [
            "--dataloader.dataset_path",
            _dataset(tmp, {"validation.jsonl": '{"text": "a"}\n'}),
        ],
        "has no train files",
    ),
    "dataset file of an unknown kind": (
        REGISTRY,
        lambda tmp, dump: [
            "--dataloader.dataset_path",
            str(Path(_dataset(tmp, {"data.csv": "text\na\n"})) / "data.csv"),
        ],
        "a dataset file must end in one of",
    ),
    "dataset whose first record is not JSON": (
        REGISTRY,
        lambda tmp, dump: [
            "--dataloader.dataset_path",
            _dataset(tmp, {"train.jsonl": '{"text": "fine"}\n{"text": broken\n'}),
        ],
        "train.jsonl:2: not a JSON line",
    ),
    "dataset whose records have no text, legacy TOML": (
        LEGACY,
        lambda tmp, dump: [
            "--training.dataset_path",
            str(Path(_dataset(tmp, {"docs.json": '[{"body": "no text here"}]'})) / "docs.json"),
        ],
        'must be an object with a "text" string',
    ),
    # The tokenizer.
    "hf_assets_path that does not exist": (
        REGISTRY,
        lambda tmp, dump: ["--hf_assets_path", str(tmp / "no_such_assets")],
        "no tokenizer at",
    ),
    "hf_assets_path that does not exist, legacy TOML": (
        LEGACY,
        lambda tmp, dump: ["--model.hf_assets_path", str(tmp / "elsewhere")],
        "the folder does not exist",
    ),
    "assets folder without tokenizer.json": (
        REGISTRY,
        lambda tmp, dump: ["--hf_assets_path", _tokenizer_folder(tmp, {"config.json": "{}"})],
        "has no tokenizer.json",
    ),
    "tokenizer.json that is not a tokenizer": (
        REGISTRY,
        lambda tmp, dump: [
            "--hf_assets_path",
            _tokenizer_folder(tmp, {"tokenizer.json": '{"not": "a tokenizer"}'}),
        ],
        "is not a tokenizer.json the Hugging Face tokenizers library can read",
    ),
    "tokenizer_config.json naming a token the tokenizer lacks": (
        REGISTRY,
        lambda tmp, dump: [
            "--hf_assets_path",
            _real_tokenizer_with(tmp, '{"eos_token": "<|no such token|>"}'),
        ],
        "names the special token '<|no such token|>'",
    ),
    # The checkpoint folder is a file (a run found it only at its first save).
    "checkpoint folder that is a file": (
        [*REGISTRY, *CHECKPOINTS],
        lambda tmp, dump: (dump.mkdir(), _file(dump / "checkpoint"), [])[-1],
        "checkpoint folder",
    ),
    "checkpoint.folder of another name that is a file": (
        [*REGISTRY, *CHECKPOINTS, "--checkpoint.folder", "saved"],
        lambda tmp, dump: (dump.mkdir(), _file(dump / "saved"), [])[-1],
        "is a file, not a folder",
    ),
    "checkpoint folder that is a file, legacy TOML, load only": (
        [*LEGACY, *LEGACY_CHECKPOINTS, "--checkpoint.load_only"],
        lambda tmp, dump: (dump.mkdir(), _file(dump / "checkpoint"), [])[-1],
        "is a file, not a folder",
    ),
    "checkpoint folder that is a link to a file": (
        [*REGISTRY, *CHECKPOINTS],
        lambda tmp, dump: (
            dump.mkdir(),
            _file(tmp / "target"),
            os.symlink(tmp / "target", dump / "checkpoint"),
            [],
        )[-1],
        "target is a file, not a folder",
    ),
    # step-N entries that are not checkpoint folders.
    "step-N that is a file": (
        [*REGISTRY, *CHECKPOINTS],
        _checkpoint_entry(lambda root: _file(root / "step-3")),
        "step-3 (a file): named like a checkpoint but not a folder",
    ),
    "step-N that is a file beside a good-looking older step": (
        [*LEGACY, *LEGACY_CHECKPOINTS],
        _checkpoint_entry(
            lambda root: (
                (root / "step-10").mkdir(),
                _file(root / "step-10" / ".metadata"),
                _file(root / "step-20"),
            )
        ),
        "step-20 (a file)",
    ),
    "step-N.tmp that is a file": (
        [*REGISTRY, *CHECKPOINTS],
        _checkpoint_entry(lambda root: _file(root / "step-7.tmp")),
        "step-7.tmp (a file)",
    ),
    "step-N that is a dangling link": (
        [*REGISTRY, *CHECKPOINTS],
        _checkpoint_entry(lambda root: os.symlink(root / "nowhere", root / "step-2")),
        "step-2 (a symlink to",
    ),
    "step-N folder without DCP metadata": (
        [*REGISTRY, *CHECKPOINTS],
        _checkpoint_entry(lambda root: ((root / "step-4").mkdir(), _file(root / "step-4" / "x"))),
        "not a checkpoint titan can load",
    ),
    "load_step naming a step that is a file": (
        [*REGISTRY, *CHECKPOINTS, "--checkpoint.load_step", "5"],
        _checkpoint_entry(lambda root: _file(root / "step-5")),
        "step-5 (a file)",
    ),
    # The resume step and the initial load.
    "load_step the folder does not hold": (
        [*REGISTRY, *CHECKPOINTS, "--checkpoint.load_step", "5"],
        _checkpoint_entry(lambda root: None),
        "checkpoint.load_step = 5, but",
    ),
    "load_step with checkpointing off": (
        REGISTRY,
        lambda tmp, dump: ["--checkpoint.load_step", "3"],
        "checkpoint.load_step = 3, but checkpoint.enable is false",
    ),
    "initial_load_path that does not exist": (
        [*REGISTRY, *CHECKPOINTS],
        lambda tmp, dump: ["--checkpoint.initial_load_path", str(tmp / "no_such_run")],
        "checkpoint.initial_load_path",
    ),
    # The output folders and the files a run writes there.
    "dump folder that is a file": (
        REGISTRY,
        lambda tmp, dump: (_file(dump, "x\n"), [])[-1],
        "not a folder",
    ),
    "dump folder under a file": (
        REGISTRY,
        lambda tmp, dump: (_file(tmp / "plain"), ["--dump_folder", str(tmp / "plain" / "run")])[-1],
        "cannot be created",
    ),
    "metrics.jsonl that is a folder": (
        REGISTRY,
        lambda tmp, dump: ((dump / "metrics.jsonl").mkdir(parents=True), [])[-1],
        "metrics.jsonl is a folder",
    ),
    # Settings refused by the components built after the config check.
    "profiler warm-up longer than its cycle": (
        [*REGISTRY, "--profiling.enable_profiling"],
        lambda tmp, dump: ["--profiling.profiler_warmup", "20", "--profiling.profile_freq", "10"],
        "must fit in profile_freq (10)",
    ),
    "profiler without an active step": (
        [*REGISTRY, "--profiling.enable_profiling"],
        lambda tmp, dump: ["--profiling.profiler_active", "0"],
        "`profiling.profiler_active` is 0",
    ),
    "unknown compile backend": (
        [*REGISTRY, "--compile.enable"],
        lambda tmp, dump: ["--compile.backend", "nope"],
        "compile.backend 'nope' is not a torch.compile backend",
    ),
    "unknown compile backend, loss compiled alone, legacy TOML": (
        [*LEGACY, "--compile.enable", "--compile.components", "loss"],
        lambda tmp, dump: ["--compile.backend", "inductorr"],
        "compile.backend 'inductorr' is not a torch.compile backend",
    ),
    # The model's rotary tables cover training.seq_len positions, no more.
    "validation sequence longer than the model's max_seq_len": (
        REGISTRY,
        lambda tmp, dump: [
            "--validator.enable",
            "--validator.dataloader.dataset",
            "c4_test_validation",
            "--validator.seq_len",
            "4096",
        ],
        "validator.seq_len 4096 is longer than the model's max_seq_len",
    ),
    "validation sequence longer than the model's max_seq_len, legacy TOML": (
        LEGACY,
        lambda tmp, dump: ["--validation.enable", "--validation.seq_len", "4096"],
        "validation.seq_len 4096 is longer than the model's max_seq_len",
    ),
    "global batch that is not a multiple of the local batch": (
        REGISTRY,
        lambda tmp, dump: ["--training.global_batch_size", "3"],
        "is not a multiple of",
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_preflight_and_the_run_refuse_with_the_same_message(tmp_path, name):
    form, prepare, wanted = CASES[name]
    dump = tmp_path / "run"
    extra = prepare(tmp_path, dump)
    dump_flag = "--job.dump_folder" if form[0] == "--job.config_file" else "--dump_folder"
    args = [*form, *ONE_STEP, dump_flag, str(dump), *extra]
    assert_same_refusal(tmp_path, args, wanted)


def test_a_folder_another_run_holds_is_refused_by_both(tmp_path):
    dump = tmp_path / "run"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\n"
            "from titan.training.dump_lock import FolderLock\n"
            f"FolderLock.acquire({str(dump)!r})\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        args = [*REGISTRY, *ONE_STEP, "--dump_folder", str(dump)]
        assert_same_refusal(
            tmp_path, args, f"is in use by another titan-train run: pid {holder.pid}"
        )
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    # The probe took nothing: with the holder gone, pre-flight passes and a run trains.
    checked, ran = both(tmp_path, [*REGISTRY, *ONE_STEP, "--dump_folder", str(dump)])
    assert (checked.returncode, ran.returncode) == (0, 0), checked.stderr + ran.stderr[-4000:]


@pytest.mark.parametrize(
    "form",
    [
        [*REGISTRY, *CHECKPOINTS],
        [*LEGACY, "--training.global_batch_size", "4"],
    ],
)
def test_a_config_both_accept_trains(tmp_path, form):
    dump = tmp_path / "run"
    dump_flag = "--job.dump_folder" if form[0] == "--job.config_file" else "--dump_folder"
    args = [*form, *ONE_STEP, dump_flag, str(dump)]
    checked, ran = both(tmp_path, args)
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith("pre-flight passed: llama3 debugmodel, 1 GPU")
    assert ran.returncode == 0, ran.stderr[-4000:]
    assert trained(tmp_path)

"""``titan-train --preflight [--ngpu N]``: every check a run makes before it trains, for a job of
N processes, without starting one.

The checks are the run's own (``titan.training.run_checks``: the run's setup calls the same
functions, in the same order, before it starts its process group), so pre-flight and the run
refuse the same config with the same message. In the order a run meets them:

1. the config's findings at world size N (titan-validate's rules and titan-train's refusals of
   parallel degrees and of a dump folder it could not write), rendered as a run renders them;
2. the family's capability record, the parallel layout for N processes and the family's
   functions the run imports; the batch arithmetic (global vs local batch × data parallel);
   checkpoint, seed-checkpoint and metrics settings;
3. the tokenizer (its files must be here: a run reads them before its first step), the data
   loader of data-parallel rank 0 (the dataset's name, its files or Hub id; no batch is read),
   the model built on the meta device with its converters (float8 and its package), the EOS id
   of per-document attention, the parallelization's refusals, the optimizer and LR schedule,
   the Hugging Face state-dict adapter's assets, the validation loader;
4. the output folders: each can be created and written, no other run holds its lock, the
   files the run writes are files (not links, FIFOs or folders), and the checkpoint folder is
   a folder whose ``step-N`` entries are checkpoint folders, holding ``checkpoint.load_step``
   when one is set, or else the initial load's source;
5. the batches data-parallel rank 0 reads before its first step, when the dataset is local
   files (a record the loader cannot parse); a Hub dataset is located, not streamed.

Checks that depend on the hardware (float8's GPU, async tensor parallel's CUDA) judge this
machine, as a run here would: run pre-flight where the job will run to have them judged there.

Nothing is started or written: no process group, no device mesh, no dump folder, no lock, no
log file; no model weights are read, and no data beyond the first step's batches of a local
dataset.
A pass prints one line on stdout, e.g. ``pre-flight passed: qwen3 32B, 8 GPUs (FSDP 8),
32.8B parameters``, and exits 0; a finding or refusal prints the message a run would print and
exits 1; a malformed command line exits 2.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any, TextIO

from titan.cli.exits import FINDINGS, OK, UsageError

PREFLIGHT_FLAG = "--preflight"
NGPU_FLAG = "--ngpu"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PreflightRequest:
    """What a ``titan-train`` command line asks of pre-flight."""

    enabled: bool
    """Whether ``--preflight`` was given."""
    ngpu: int
    """The number of processes the job would run on (``--ngpu``, else ``WORLD_SIZE``, else 1)."""
    rest: list[str]
    """The command line without the pre-flight flags: the config and its overrides."""


def split_preflight(argv: Sequence[str]) -> PreflightRequest:
    """``--preflight`` and ``--ngpu N`` (or ``--ngpu=N``) taken out of ``argv``.

    :class:`UsageError` for ``--ngpu`` without ``--preflight`` (a run's world size is the
    launcher's, not a flag's), a missing or non-positive count, or a flag given twice.
    """
    rest: list[str] = []
    enabled = False
    ngpu: str | None = None
    args = list(argv)
    i = 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        if flag == PREFLIGHT_FLAG:
            if eq:
                raise UsageError(f"{PREFLIGHT_FLAG} takes no value")
            if enabled:
                raise UsageError(f"{PREFLIGHT_FLAG} is given twice")
            enabled = True
        elif flag == NGPU_FLAG:
            if not eq:
                if i + 1 >= len(args):
                    raise UsageError(f"{NGPU_FLAG} requires a number of GPUs")
                value = args[i + 1]
                i += 1
            if ngpu is not None:
                raise UsageError(f"{NGPU_FLAG} is given twice")
            ngpu = value
        else:
            rest.append(args[i])
        i += 1
    if ngpu is not None and not enabled:
        raise UsageError(
            f"{NGPU_FLAG} is for {PREFLIGHT_FLAG}: a run's world size is the number of "
            "processes torchrun starts"
        )
    return PreflightRequest(enabled=enabled, ngpu=_count(ngpu), rest=rest)


def _count(ngpu: str | None) -> int:
    """The world size to check: ``--ngpu``'s value, else ``WORLD_SIZE``, else 1."""
    source, text = (NGPU_FLAG, ngpu) if ngpu is not None else ("WORLD_SIZE", None)
    if text is None:
        text = os.environ.get("WORLD_SIZE", "1")
    digits = text.strip()
    if not (digits.isascii() and digits.isdigit()):  # int() takes other scripts' digits too
        raise UsageError(f"{source} must be a whole number of GPUs, got {text!r}")
    count = int(digits)
    if count < 1:
        raise UsageError(f"{source} must be at least 1, got {count}")
    return count


def preflight(args: list[str], *, ngpu: int, stdout: TextIO, stderr: TextIO) -> int:
    """Check the config ``args`` names for a job of ``ngpu`` processes; the exit code.

    Findings are rendered on ``stderr`` as a run renders them; a refusal is one
    ``titan-train: error:`` line, as a run's; a pass is one summary line on ``stdout``.
    """
    from titan.cli.streams import write
    from titan.cli.train_config import load
    from titan.training.errors import USER_ERRORS, RunFailure, describe, missing_extra

    # One process speaking for itself: no launcher's error file, no peers to tell.
    failure = RunFailure(stderr=stderr)
    try:
        loaded = load(args, world_size=ngpu, stdout=stdout, stderr=stderr)
    except UsageError as error:
        failure.report(str(error))
        return 2
    if loaded.config is None:
        return loaded.exit_code
    try:
        summary = _check_run(loaded.config, ngpu=ngpu)
    except USER_ERRORS as error:
        failure.report(describe(error))
        return FINDINGS
    except Exception as error:
        if missing_extra(error) is not None:  # titan installed without its training extra
            failure.report(missing_extra(error))
            return FINDINGS
        if os.environ.get("TITAN_DEBUG"):
            raise
        # A run saves the traceback in its dump folder; pre-flight writes nothing.
        failure.report(
            f"pre-flight stopped on an unexpected {type(error).__name__}: {error}\n"
            "  TITAN_DEBUG=1 prints its traceback; if the message does not point at your "
            "config, it is a bug in titan: please report it"
        )
        return FINDINGS
    write(f"pre-flight passed: {summary}\n", out=stdout)
    return OK


def _check_run(config: Any, *, ngpu: int) -> str:
    """The checks a run makes before its first step (``titan.training.run_checks``, which the
    run's setup calls too); the summary. Raises what the run would raise."""
    from titan.training.folder_checks import check_folders
    from titan.training.run_checks import check_config, check_first_batches
    from titan.training.setup import degrees_in_words

    checked = check_config(config, world_size=ngpu)
    check_folders(config, sd_adapter=checked.sd_adapter, probe_locks=True)
    check_first_batches(checked)  # last, as the run reads them: after its setup
    gpus = f"{ngpu} GPU" if ngpu == 1 else f"{ngpu} GPUs"
    # The degrees in the words of the run's own summary line.
    return (
        f"{checked.spec.name} {checked.spec.flavor}, {gpus} "
        f"({degrees_in_words(checked.parallel_dims)}), {_amount(checked.parameters)} parameters"
    )


def _amount(count: int) -> str:
    """A parameter count as people say it: 32.8B, 6.1M, 512."""
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if count >= scale:
            return f"{count / scale:.1f}{suffix}"
    return str(count)

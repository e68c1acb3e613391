"""Saves checkpoints of a run with a 128 MB buffer until it is killed (one process).

Usage: ``checkpoint_killed_save.py DUMP_FOLDER``. Before the save of step N every tensor is
filled with N, so the test that SIGKILLs this process in the middle of a save can tell exactly
which checkpoint a later load restored.
"""

from __future__ import annotations

import itertools
import sys

import torch

from tests.tiny_checkpoint_run import tiny_run

BALLAST = 32 * 1024 * 1024
"""Floats in the extra buffer: enough that writing one checkpoint takes a good fraction of a
second, so the test can observe (and interrupt) a save in progress."""


def fill(run, step: int) -> None:
    with torch.no_grad():
        for tensor in run.model.state_dict().values():
            tensor.fill_(step)
    run.train_state.value = step


def main(dump_folder: str) -> None:
    run = tiny_run(dump_folder, ballast=BALLAST, interval=1, keep_latest_k=0)
    for step in itertools.count(1):
        fill(run, step)
        run.manager.save(step)
        print(f"saved {step}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])

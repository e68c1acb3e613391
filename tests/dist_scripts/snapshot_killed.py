"""A push that is stopped inside its write: ``snapshot_killed.py FOLDER STAGE``.

Pushes version 1 whole, then version 2, stopping at STAGE: ``weights`` (half the safetensors
file written), ``marker`` (the files written, before the completion marker), ``rename`` (the
folder complete, before it is renamed into place) or ``pointer`` (renamed, before ``latest``
names it). There it prints ``STOPPED STAGE`` and waits on stdin for the parent to kill it.
"""

from __future__ import annotations

import os
import sys

import torch

from titan.rl import snapshots


def stop(stage: str) -> None:
    """Say where the push is and wait to be killed."""
    print(f"STOPPED {stage}", flush=True)
    sys.stdin.read()
    raise SystemExit("the parent did not kill this push")


def main() -> None:
    """Version 1 whole, version 2 stopped at the stage named on the command line."""
    folder, stage = sys.argv[1], sys.argv[2]
    weights = {"w": torch.arange(1000, dtype=torch.float32), "b": torch.ones(3)}
    snapshots.push(weights, folder, 1)
    print("PUSHED 1", flush=True)
    if stage == "weights":
        import safetensors.torch

        def half_written(tensors, path, metadata=None):
            """Write a torn file where the weights go, then stop."""
            with open(path, "wb") as handle:
                handle.write(b"\0" * 100)
                handle.flush()
                os.fsync(handle.fileno())
            stop(stage)

        safetensors.torch.save_file = half_written
    elif stage == "marker":
        original_files = snapshots._write_files

        def then_stop(*args, **kwargs):
            """The weights and config.json written, the marker not yet."""
            original_files(*args, **kwargs)
            stop(stage)

        snapshots._write_files = then_stop
    elif stage == "rename":
        original_rename = os.rename
        os.rename = lambda source, target: stop(stage) or original_rename(source, target)
    elif stage == "pointer":
        snapshots._point = lambda root, version: stop(stage)
    snapshots.push({"w": torch.zeros(1000), "b": torch.zeros(3)}, folder, 2)


if __name__ == "__main__":
    main()

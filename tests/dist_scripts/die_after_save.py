"""``titan-train`` that ends its own process with SIGKILL right after the checkpoint of step
``TITAN_DIE_AFTER_STEP`` is saved (every rank, as a crash of the whole job would), so that a
test can resume from exactly that checkpoint. Usage: as ``python -m titan.train``'s arguments,
under torchrun or alone."""

from __future__ import annotations

import os
import signal
import sys

from titan.components.checkpoint import CheckpointManager

DIE_AFTER = int(os.environ["TITAN_DIE_AFTER_STEP"])
_save = CheckpointManager.save


def save_then_die(self, step, *args, **kwargs):
    """Save as the run would, then die at the chosen step."""
    result = _save(self, step, *args, **kwargs)
    if step == DIE_AFTER:
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    return result


CheckpointManager.save = save_then_die

if __name__ == "__main__":
    from titan.train import main

    sys.exit(main(sys.argv[1:]))

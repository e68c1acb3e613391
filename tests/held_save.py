"""``titan-train`` on a file system that stalls once the run is stopping: run as
``python tests/held_save.py TITAN-TRAIN-ARGS`` with ``TITAN_TEST_HOLD`` naming a folder.

The first checkpoint shard write that starts after the run received a stop signal writes its
first item, then holds: it prints ``held: step-N.tmp`` to stderr and waits for signals until a
signal handler raises (the product's second-signal handling ends the save that way). A test
can then signal the run at a point the run reported, mid-save, instead of guessing how long a
save takes.

With ``TITAN_TEST_HOLD_SAVE=step-N`` the hold is instead the first write into step N's folder
(``step-N.tmp``), signal or not: a test can kill the run in the middle of that save.

Nothing else changes: the signal handling, the save and the way a second signal ends it are the
product's own; the hold only stands in for a slow disk, in the test's process tree alone.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
import threading
from pathlib import Path


def install(hold: Path, *, save: str | None = None) -> None:
    """Make the first shard write after a stop request hold as described above (with ``save``,
    ``"step-N"``: the first write into that step's folder, stop request or not)."""
    import torch.distributed.checkpoint.filesystem as filesystem

    from titan.training.stopping import StopRequests

    state = {"stopping": False, "held": False}
    request = StopRequests._request

    @functools.wraps(request)
    def noted(self, signum, frame):
        state["stopping"] = True  # set before the product's handler, which may raise
        return request(self, signum, frame)

    write_item = filesystem._write_item

    @functools.wraps(write_item)
    def stalling(*args, **kwargs):
        result = write_item(*args, **kwargs)
        folder = os.path.basename(os.path.dirname(args[1].name))
        due = state["stopping"] if save is None else folder.startswith(f"{save}.")
        if due and not state["held"]:
            state["held"] = True
            sys.stderr.write(f"held: {folder}\n")
            sys.stderr.flush()
            # The write runs in the main thread (one writer thread), where Python runs signal
            # handlers: each pause ends when a signal arrives and its handler has run.
            assert threading.current_thread() is threading.main_thread()
            while True:
                signal.pause()
        return result

    StopRequests._request = noted
    filesystem._write_item = stalling


if __name__ == "__main__":
    install(Path(os.environ["TITAN_TEST_HOLD"]), save=os.environ.get("TITAN_TEST_HOLD_SAVE"))
    from titan.train import main

    sys.exit(main())

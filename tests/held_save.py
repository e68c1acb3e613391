"""``titan-train`` on a file system that stalls once the run is stopping: run as
``python tests/held_save.py TITAN-TRAIN-ARGS`` with ``TITAN_TEST_HOLD`` naming a folder.

The first checkpoint shard write that starts after the run received a stop signal writes its
first item, then holds: it prints ``held: step-N.tmp`` to stderr and waits until the file
``release`` appears in the hold folder (or a signal handler raises). A test can then signal the
run at a point the run reported, mid-save, instead of guessing how long a save takes.

Nothing else changes: the signal handling, the save and the way a second signal ends it are the
product's own; the hold only stands in for a slow disk, in the test's process tree alone.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from pathlib import Path


def install(hold: Path) -> None:
    """Make the first shard write after a stop request hold as described above."""
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
        if state["stopping"] and not state["held"]:
            state["held"] = True
            folder = os.path.basename(os.path.dirname(args[1].name))
            sys.stderr.write(f"held: {folder}\n")
            sys.stderr.flush()
            while not (hold / "release").exists():
                time.sleep(0.01)  # a signal's handler runs here, and may end the save
        return result

    StopRequests._request = noted
    filesystem._write_item = stalling


if __name__ == "__main__":
    install(Path(os.environ["TITAN_TEST_HOLD"]))
    from titan.train import main

    sys.exit(main())

"""How a distributed check script ends: with its own status, without the interpreter's teardown.

A rank that has passed its last barrier and closed its process group can still be aborted while
Python tears down (gloo's and the store's C++ threads: "terminate called without an active
exception", SIGABRT), which turns a passing check into a failed launch. titan-train leaves the
same way (``titan.train.main``)."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import Any


def run_and_leave(main: Callable[..., Any], *args: Any) -> None:
    """Run ``main(*args)`` and end the process with its status: 0, a ``SystemExit``'s code, or
    1 after printing the traceback of anything else it raised."""
    try:
        main(*args)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 - the check's own failure, reported as Python would
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

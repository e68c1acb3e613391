"""How titan's side of the registry worker tells a process that ended from one that closed its
pipe: a process closes its files a moment before it can be waited for, and that moment must not
read as "the module closed titan's pipe".

The workers here are small stand-ins started in place of titan's own worker: each writes what a
real one writes at the point in question, then ends (or does not) the way the case needs. They
hold the gap between closing the pipe and ending open on purpose, so a classification that
depends on winning that race fails every time rather than once in a while.
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys

import pytest

from titan.cli import registry_child
from titan.cli.registry_child import Worker

ANNOUNCE = (
    "import json, os, sys, time\n"
    "replies = json.loads(sys.argv[1])['replies']\n"
    "os.write(replies, json.dumps({'ev': 'ending', 'how': 'os.abort()', 'frames': []}).encode()"
    " + b'\\n')\n"
)
"""What the worker sends when user code ends its process (``titan.cli.registry_worker``)."""

CLOSE = "os.close(replies)\n"


def outcome_of(monkeypatch, code: str, *, limit: float = 30.0):
    """The outcome titan gives a worker running ``code`` (with ``limit`` for its next event)."""
    monkeypatch.setattr(registry_child, "boot", lambda upstream: code)
    worker = Worker(timeout=1.0, memory_limit=None, stderr=io.StringIO())
    worker.limit = limit
    try:
        return worker.check({"shown": "m/config_registry.py", "path": "m/config_registry.py"})
    finally:
        worker.kill()


def test_an_announced_ending_after_the_pipe_closed_is_the_ending_not_a_closed_pipe(monkeypatch):
    """The worker said user code ends the process, its pipe closed, and it ended 0.3 s later."""
    outcome = outcome_of(monkeypatch, ANNOUNCE + CLOSE + "time.sleep(0.3)\nos.abort()\n")
    assert outcome.ended is not None
    assert (outcome.ended.how, outcome.ended.said) == ("signal", "os.abort()")
    assert outcome.ended.status == signal.SIGABRT


def test_a_pipe_closed_by_a_living_process_reads_as_closed_at_once(monkeypatch):
    """A worker that closed its pipe and lives on is named at once, not after its time limit."""
    code = "import json, os, sys, time\nos.close(json.loads(sys.argv[1])['replies'])\n"
    outcome = outcome_of(monkeypatch, code + "time.sleep(3600)\n", limit=600.0)
    assert outcome.ended is not None and outcome.ended.how == "closed"


def test_an_announced_ending_that_never_comes_is_bounded_by_the_time_limit(monkeypatch):
    """The module said it ends the process (a signal it then handles) and lives on: titan stops
    it at the time limit rather than waiting for ever."""
    outcome = outcome_of(monkeypatch, ANNOUNCE + CLOSE + "time.sleep(3600)\n", limit=1.0)
    assert outcome.ended is not None and outcome.ended.how == "closed"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_exiting_mark_is_read_from_the_kernel():
    """A living process is not exiting; one that has ended (not yet waited for) is."""
    worker = Worker(timeout=1.0, memory_limit=None, stderr=io.StringIO())
    worker.process = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE
    )
    try:
        assert worker._exiting() is False
        worker.process.stdin.close()
        os.waitid(os.P_PID, worker.process.pid, os.WEXITED | os.WNOWAIT)
        assert worker._exiting() is True
    finally:
        worker.process.wait()
        worker.process = None

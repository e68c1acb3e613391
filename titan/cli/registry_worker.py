"""The process that runs registry modules' code for ``titan-validate``, apart from titan's own.

``titan.cli.registry_child`` starts one per run and sends it one JSON request a line on a private
pipe; the worker checks the module (``titan.cli.registry_run``), or, in another interpreter where
upstream torchtitan is installed, builds its configs (``titan.cli.upstream_run``), and answers one
JSON event a line on another private pipe:

- ``{"ev": "step", "doing": ..., "name": ...}`` before the import (``name`` null), each registry
  function (its name) and each ``atexit`` handler (``""``): titan's time limit starts again;
- ``{"ev": "found", "diagnostics": [...], "declared": [...]}``: findings as soon as known;
- ``{"ev": "stuck", "doing": ..., "frames": [[file, line], ...]}``: the time limit passed and
  this is where the code was (innermost first); titan then stops the process;
- ``{"ev": "ending", "how": ..., "frames": [...]}``: user code is ending the process itself
  (``os._exit``, ``os.abort``, a signal to itself), and where;
- ``{"ev": "built", "name": ..., "config": ..., "returned_type": ...}`` or ``{"ev": "built",
  "name": ..., "error": {...}}``: what an upstream function (``name``; null: the import) built;
- ``{"ev": "done", "deps": [...], "cacheable": ..., "retire": ...}``: the module is done;
- ``{"ev": "bye", "threads": [...]}``: the answer to ``{"op": "bye"}``, just before it exits.

What user code writes to its standard output and error goes to a pipe titan copies to its own
standard error, so nothing a module does to its streams reaches titan's report. The worker never
runs its own ``atexit`` handlers and leaves with ``os._exit``; the time limit is watched by a
thread here (no signal, so a bare ``except:`` or an ignored SIGALRM cannot stop it) and enforced
by titan, which kills the process group.

This module, and all it imports, needs nothing but the standard library: in an upstream run it is
imported by an interpreter that has torchtitan but none of titan's dependencies.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

_exit = os._exit
"""The real ``os._exit`` (the module's own calls go through :func:`_ending`)."""

FAILED = 70
"""Exit status of a worker whose own code failed (``EX_SOFTWARE``)."""


class Channel:
    """The worker's two private pipes; a copy of the process made by ``fork`` has none."""

    def __init__(self, requests: int, replies: int) -> None:
        self.owner = os.getpid()
        self.requests, self.replies = requests, replies
        self.buffer = b""
        self.lock = threading.Lock()

    def send(self, **event: Any) -> None:
        """Write one event; a worker that can no longer reach titan has nothing left to do."""
        if os.getpid() != self.owner:  # a forked copy came back into titan's loop
            _exit(0)
        data = (json.dumps(event) + "\n").encode()
        with self.lock:
            try:
                while data:
                    data = data[os.write(self.replies, data) :]
            except OSError:
                _exit(FAILED)

    def receive(self) -> dict | None:
        """The next request, ``None`` once titan closed the pipe."""
        while b"\n" not in self.buffer:
            try:
                chunk = os.read(self.requests, 1 << 16)
            except OSError:
                return None
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def forked(self) -> None:
        """In a process the module forked: let go of titan's pipes (so that titan sees the
        worker end when it ends, and never reads the copy's words as the worker's)."""
        for fd in (self.requests, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass


class Watchdog:
    """Reports, once, where user code is when a step runs past the time limit."""

    def __init__(self, channel: Channel, timeout: float) -> None:
        self.channel, self.timeout = channel, timeout
        self.main = threading.main_thread().ident
        self.deadline: float | None = None
        self.doing = ""
        self.changed = threading.Condition()
        threading.Thread(target=self._watch, name="titan-watchdog", daemon=True).start()

    def arm(self, doing: str) -> None:
        with self.changed:
            self.doing, self.deadline = doing, time.monotonic() + self.timeout
            self.changed.notify()

    def disarm(self) -> None:
        self.deadline = None  # the watcher finds it so when it wakes

    def _watch(self) -> None:
        with self.changed:
            while True:
                if self.deadline is None:
                    self.changed.wait()
                    continue
                left = self.deadline - time.monotonic()
                if left > 0:
                    self.changed.wait(left)
                    continue
                frame = sys._current_frames().get(self.main)
                self.channel.send(ev="stuck", doing=self.doing, frames=frames(frame))
                return


def frames(frame: Any) -> list[list]:
    """``[[file, line], ...]`` of a stack, innermost first (at most 200)."""
    found = []
    while frame is not None and len(found) < 200:
        found.append([os.path.abspath(frame.f_code.co_filename), frame.f_lineno])
        frame = frame.f_back
    return found


def _hooks(channel: Channel, atexits: list) -> None:
    """Tell titan where user code ends the process itself; keep the module's ``atexit``
    handlers to run after it (titan's own, and libraries', are left to ``atexit``)."""
    import atexit
    import signal

    from titan.cli.registry_errors import installed_roots

    def ending(how: str) -> None:
        if os.getpid() == channel.owner:
            channel.send(ev="ending", how=how, frames=frames(sys._getframe(2)))

    def exit_(code: int) -> None:
        ending(f"os._exit({code!r})")
        _exit(code)

    real_abort, real_kill, real_raise = os.abort, os.kill, signal.raise_signal

    def abort() -> None:
        ending("os.abort()")
        real_abort()

    def kill(pid: int, sig: int) -> None:
        if pid == os.getpid() and sig:
            ending(f"os.kill(os.getpid(), {_signal_name(sig)})")
        real_kill(pid, sig)

    def raise_signal(sig: int) -> None:
        ending(f"signal.raise_signal({_signal_name(sig)})")
        real_raise(sig)

    os._exit, os.abort, os.kill, signal.raise_signal = exit_, abort, kill, raise_signal
    installed, real_register, real_unregister = (
        installed_roots(),
        atexit.register,
        atexit.unregister,
    )

    def register(function: Any, *args: Any, **kwargs: Any) -> Any:
        file = getattr(getattr(function, "__code__", None), "co_filename", None)
        if file and not os.path.abspath(file).startswith(installed):
            atexits.append((function, args, kwargs))
            return function
        return real_register(function, *args, **kwargs)

    def unregister(function: Any) -> None:
        atexits[:] = [entry for entry in atexits if entry[0] != function]
        real_unregister(function)

    atexit.register, atexit.unregister = register, unregister


def _signal_name(sig: int) -> str:
    import signal

    try:
        return signal.Signals(sig).name
    except ValueError:
        return str(sig)


def _fresh_streams(output: int) -> None:
    """Standard output and error on titan's pipe again, whatever the last module did to them."""
    import io

    for fd in (1, 2):
        os.dup2(output, fd)
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
        line_buffering=True, write_through=True,
    )  # fmt: skip
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
        line_buffering=True, write_through=True,
    )  # fmt: skip


def _limit_memory(size: int | None) -> None:
    if not size:
        return
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        size = min(size, hard)
    resource.setrlimit(resource.RLIMIT_AS, (size, hard))


def _private(fd: int) -> int:
    """``fd`` moved high, out of the way of the descriptors user code opens, and not inherited
    by the programs it runs."""
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 100)
    os.close(fd)
    return moved


def serve(setup: dict) -> None:
    """The worker's life: requests in, events out, until titan says bye or goes away."""
    channel = Channel(_private(setup["requests"]), _private(setup["replies"]))
    os.register_at_fork(after_in_child=channel.forked)
    output = _private(os.dup(1))
    atexits: list = []
    if setup.get("upstream"):
        from titan.cli import upstream_run as run  # stdlib only: this interpreter is not titan's

        run.prepare()  # torchtitan's config tree, before any module (and the memory limit)
    else:
        from titan.cli import registry_run as run  # titan's config tree, before any module needs it

    from titan.cli import processes

    processes.become_subreaper()  # what the modules start stays below this process
    _hooks(channel, atexits)
    watchdog = Watchdog(channel, setup["timeout"])
    _limit_memory(setup.get("memory_limit"))
    while True:
        request = channel.receive()
        if request is None:
            _exit(0)
        if request.get("op") == "bye":
            main = threading.main_thread()
            left = [
                t.name
                for t in threading.enumerate()
                if t is not main and not t.daemon and t.is_alive()
            ]
            channel.send(ev="bye", threads=left)
            _exit(0)
        _fresh_streams(output)
        request["memory_limit"] = setup.get("memory_limit")
        send = _ending_processes(channel, request["shown"])
        run.ModuleRun(request, send=send, watchdog=watchdog, atexits=atexits).run()
        atexits.clear()


def _ending_processes(channel: Channel, shown: str) -> Any:
    """``channel.send``, which before a module's ``done`` ends the processes the module left
    running and sends the finding that names them."""

    def send(**event: Any) -> None:
        if event.get("ev") == "done":
            finding = _left_running(shown)
            if finding is not None:
                channel.send(ev="found", diagnostics=[finding], declared=[])
                event["cacheable"] = False  # what runs may depend on more than the file
        channel.send(**event)

    return send


def _left_running(shown: str) -> dict | None:
    """The finding for the processes below the worker that still run once a module is done
    (after killing them), ``None`` when there are none."""
    from titan.cli import processes
    from titan.cli.registry_errors import to_dict
    from titan.schemas.diagnostics import Diagnostic, Severity, Span

    def below() -> set[int]:
        return processes.descendants([os.getpid()], processes.table())

    if not processes.has_children():  # the usual case, without reading /proc
        return None
    procs = processes.table()
    running = processes.alive(processes.descendants([os.getpid()], procs), procs)
    if not running:
        return None
    named = processes.described(running)
    processes.end(below)
    return to_dict(
        Diagnostic(
            code="registry-error",
            severity=Severity.ERROR,
            path="",
            message=f"{shown} left {len(running)} process(es) running once it was checked: "
            f"{named}; titan killed them",
            hint="a registry function only builds and returns its config: wait for the "
            "processes the module starts (Popen.wait(), os.waitpid) before it returns, or do "
            "not start any",
            span=Span(file=shown, line=1, col=1),
        )
    )


def main() -> None:
    """Entry point: ``sys.argv[1]`` is the JSON setup (pipes, sys.path, limits; an upstream
    run keeps its interpreter's own path)."""
    try:
        setup = json.loads(sys.argv[1])
        if "path" in setup:
            sys.path[:] = setup["path"]
        serve(setup)
    except BaseException:  # titan's own code here failed (out of memory, a closed pipe)
        _exit(FAILED)
    _exit(0)

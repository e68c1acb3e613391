"""titan's side of the worker process that runs registry modules (``titan.cli.registry_worker``).

One :class:`Worker` serves a ``titan-validate`` run: it is started when the first module needs
its code run, reused for the next ones, and replaced by a fresh one when it ends. What its user
code prints is copied to titan's standard error as it comes. However it ends (an exit status, a
signal, ``os._exit``, running past ``--timeout`` or ``--memory-limit``, a closed or garbled pipe)
becomes an :class:`Ended` that ``titan.cli.registry_endings`` turns into a finding.

The worker runs in a session of its own, so a Ctrl-C at the terminal reaches titan only. It is
the child subreaper of what its modules start, and titan is one too (``titan.cli.processes``):
when the worker is done with or stopped, titan kills every process below it, those it adopted
from a worker that ended first, and the worker's process group and session, then the worker, so
no process a module started outlives the run (where Linux's ``/proc`` is missing, the process
group alone).

With ``python=`` the worker runs in another interpreter, one where upstream torchtitan is
installed, and builds the module's configs there (``titan.cli.upstream_run``). That interpreter
keeps its own ``sys.path`` (titan's site-packages would shadow its torch and torchtitan): titan's
package is loaded from its folder by file, so nothing beside it (a checkout's other folders, or
the site-packages titan was installed in) comes onto that path.
"""

from __future__ import annotations

import codecs
import dataclasses
import json
import os
import re
import select
import signal
import sys
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    import subprocess

_PF_EXITING = 0x4
"""The flag Linux sets on a process (``/proc/PID/stat``, field 9) once it has begun to exit."""

GRACE_S = 5.0
"""How long past its time limits titan waits for the worker's own report of where the code was
before it stops the process without one (the report normally comes at the limit)."""


@dataclasses.dataclass
class Ended:
    """How a worker ended while it was on a module."""

    how: str
    """``timeout``, ``exit``, ``signal``, ``garbage``, ``closed`` or ``failed``."""
    doing: str
    name: str | None
    """The registry function it was on (``None``: the import; ``""``: an atexit handler)."""
    frames: list = dataclasses.field(default_factory=list)
    """``[[file, line], ...]`` innermost first, when known."""
    status: int | None = None
    """The exit status, or the signal number for ``signal``."""
    said: str = ""
    """What user code called to end it (``os._exit(0)``), when it said so."""


@dataclasses.dataclass
class Outcome:
    """What the worker reported for one module."""

    found: list = dataclasses.field(default_factory=list)
    declared: list = dataclasses.field(default_factory=list)
    deps: list = dataclasses.field(default_factory=list)
    cacheable: bool = True
    imported: bool = False
    finished: list = dataclasses.field(default_factory=list)
    """Functions whose step ended (their findings are in ``found``)."""
    ended: Ended | None = None
    retire: bool = False
    """The worker ran out of memory and retired itself: the rest needs a fresh one."""
    built: list = dataclasses.field(default_factory=list)
    """The ``built`` events of an upstream run (``titan.cli.upstream_run``), as sent."""


class Worker:
    """The worker process of one run (see the module docstring)."""

    def __init__(
        self,
        *,
        timeout: float,
        memory_limit: int | None,
        stderr: TextIO,
        python: str | None = None,
    ) -> None:
        self.timeout, self.memory_limit, self.stderr = timeout, memory_limit, stderr
        self.python = python  # another interpreter (an upstream torchtitan run), or titan's
        # How long titan waits for the next event: a step may hold two timed parts (the call,
        # then checking what it returned), each stopped by the worker's own watchdog first.
        self.limit = 2 * timeout + GRACE_S
        self.process: subprocess.Popen | None = None
        self.threads: list[str] = []
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def start(self) -> None:
        """Start a worker now (it imports titan's config tree while titan reads the files)."""
        if self.process is not None:
            return
        import subprocess  # here: a run answered from the cache starts no process

        from titan.cli import processes

        self.was_subreaper = processes.is_subreaper()
        processes.become_subreaper()  # what outlives a worker that ends is titan's to end

        requests_r, self.requests = os.pipe()
        self.replies, replies_w = os.pipe()
        self.output, output_w = os.pipe()
        for fd in (self.requests, self.replies, self.output):
            os.set_inheritable(fd, False)
        setup: dict = {
            "requests": requests_r,
            "replies": replies_w,
            "timeout": self.timeout,
            "memory_limit": self.memory_limit,
        }
        if self.python is None:
            setup["path"] = sys.path
        else:  # its own path: titan's would shadow its torch and torchtitan
            setup.update(upstream=True, titan=titan_init())
        try:
            self.process = subprocess.Popen(
                [*interpreter(self.python), "-c", boot(self.python is not None), json.dumps(setup)],
                stdin=subprocess.DEVNULL,
                stdout=output_w,
                stderr=output_w,
                pass_fds=(requests_r, replies_w),
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:  # another interpreter that cannot be run: nothing is left open
            for fd in (self.requests, self.replies, self.output):
                os.close(fd)
            raise
        finally:
            for fd in (requests_r, replies_w, output_w):
                os.close(fd)
        from titan.cli import processes

        self.started = getattr(processes.stat(self.process.pid), "start", 0)
        try:
            self.pidfd: int | None = os.pidfd_open(self.process.pid)
        except (AttributeError, OSError):  # not Linux 5.3+: a closed pipe says it ended
            self.pidfd = None
        self.buffer = b""

    def check(self, request: dict) -> Outcome:
        """Send one module and gather its events until it is done or the worker ends."""
        self.start()
        outcome, step = Outcome(), {"doing": f"importing {request['shown']}", "name": None}
        data = (json.dumps(request) + "\n").encode()
        try:
            while data:  # the worker reads it whole: it waits for nothing else between modules
                data = data[os.write(self.requests, data) :]
        except OSError:
            pass  # it ended already: reading says how
        deadline = time.monotonic() + self.limit
        ending: dict = {}
        while True:
            events, gone = self._read(deadline, announced=bool(ending))
            for event in events:
                kind = event.get("ev") if isinstance(event, dict) else None
                if kind not in _SHAPES or not _SHAPES[kind](event):
                    return self._ended(outcome, "garbage", step)
                if kind == "step":
                    if step["name"] is not None:
                        outcome.finished.append(step["name"])
                    step, ending = event, {}
                    outcome.imported = True
                    deadline = time.monotonic() + self.limit
                elif kind == "found":
                    outcome.found += event["diagnostics"]
                    outcome.declared += event["declared"]
                elif kind == "ending":
                    ending = event
                elif kind == "built":
                    outcome.built.append(event)
                elif kind == "done":
                    if step["name"] is not None:
                        outcome.finished.append(step["name"])
                    outcome.deps, outcome.cacheable = event["deps"], event["cacheable"]
                    outcome.retire = bool(event["retire"])
                    if event["retire"]:
                        self.close()
                    return outcome
                elif kind == "stuck":
                    where = {"doing": event.get("doing") or step["doing"], "name": step["name"]}
                    return self._ended(outcome, "timeout", where, frames=event.get("frames", []))
                else:
                    return self._ended(outcome, "garbage", step)
            if gone is not None:
                how, status = gone
                return self._ended(
                    outcome,
                    how,
                    step,
                    frames=ending.get("frames", []),
                    status=status,
                    said=ending.get("how", ""),
                )
            if time.monotonic() >= deadline:
                return self._ended(outcome, "timeout", step)

    def _ended(self, outcome: Outcome, how: str, step: dict, **facts) -> Outcome:
        outcome.ended = Ended(how=how, doing=step["doing"], name=step["name"], **facts)
        outcome.cacheable = False
        status = facts.get("status")
        if (
            self.memory_limit
            and not facts.get("said")
            and (how == "failed" or how == "signal" and status in _MEMORY_SIGNALS)
        ):  # what running out of memory looks like when titan's own part of it met the limit
            outcome.ended.how = f"{how}-memory"
        self.kill()
        return outcome

    def _read(
        self, deadline: float, *, announced: bool = False
    ) -> tuple[list, tuple[str, int | None] | None]:
        """Events that arrived before ``deadline`` (output copied on the way), and
        ``(how, status)`` once the worker has ended or closed its pipe (``announced``: the
        worker said its user code is ending the process)."""
        watched = [self.replies, self.output] + ([self.pidfd] if self.pidfd is not None else [])
        ready, _, _ = select.select(watched, [], [], max(0.0, deadline - time.monotonic()))
        if self.output in ready:
            self._copy_output()
        dead = self.pidfd is not None and self.pidfd in ready
        closed = False
        if self.replies in ready or dead:
            os.set_blocking(self.replies, not dead and self.replies in ready)
            while True:  # all of it once the worker is gone; what one read gives otherwise
                try:
                    chunk = os.read(self.replies, 1 << 20)
                except BlockingIOError:
                    break
                closed = closed or not chunk
                self.buffer += chunk
                if not chunk or not dead:
                    break
        events: list = []
        while b"\n" in self.buffer:
            line, _, self.buffer = self.buffer.partition(b"\n")
            try:
                events.append(json.loads(line))
            except ValueError:
                events.append(None)  # garbage on titan's pipe
                break
        if dead or closed:
            self._copy_output()
            # A process that ends closes its pipe a moment before it can be waited for: the
            # pipe closed by the module itself is told apart by the worker's own word that it
            # is ending, or by the kernel's mark on a process that is exiting.
            announced = announced or any(
                isinstance(event, dict) and event.get("ev") == "ending" for event in events
            )
            if not dead and self.pidfd is not None and (announced or self._exiting()):
                left = max(0.0, deadline - time.monotonic())
                dead = bool(select.select([self.pidfd], [], [], left)[0])
            return events, self._status(wait_for_it=dead or self.pidfd is None)
        return events, None

    def _exiting(self) -> bool:
        """Whether the worker is on its way out (Linux marks such a process ``PF_EXITING``
        before it closes its files)."""
        assert self.process is not None
        try:
            with open(f"/proc/{self.process.pid}/stat", "rb") as stat:
                fields = stat.read().rpartition(b")")[2].split()
        except OSError:
            return False
        try:
            state, flags = fields[0], int(fields[6])
        except (IndexError, ValueError):
            return False
        return state in (b"Z", b"X", b"x") or bool(flags & _PF_EXITING)

    def _status(self, *, wait_for_it: bool) -> tuple[str, int | None]:
        """How the ended (or pipe-closing) worker ended, without reaping it (so that its
        process group is still its own when :meth:`kill` ends it)."""
        assert self.process is not None
        flags = os.WEXITED | os.WNOWAIT | (0 if wait_for_it else os.WNOHANG)
        try:
            info = os.waitid(os.P_PID, self.process.pid, flags)
        except ChildProcessError:
            info = None
        if info is None and not wait_for_it:  # alive, but it closed titan's pipe
            return "closed", None
        if info is None:
            return "exit", self.process.wait()
        if info.si_code == os.CLD_EXITED:
            status = info.si_status
            return ("failed" if status == FAILED_STATUS else "exit"), status
        return "signal", info.si_status

    def _copy_output(self) -> None:
        """What user code printed, to titan's standard error (non-blocking: a process the module
        started may hold the pipe open for ever)."""
        from titan.cli.streams import write

        os.set_blocking(self.output, False)
        while True:
            try:
                chunk = os.read(self.output, 1 << 16)
            except BlockingIOError:
                return
            text = self._decoder.decode(chunk, final=not chunk)
            if text:
                write(text, out=self.stderr)
            if not chunk:
                return

    def close(self) -> None:
        """Say bye (noting threads the modules left running), then end the process group."""
        if self.process is None:
            return
        try:
            os.write(self.requests, b'{"op": "bye"}\n')
            deadline = time.monotonic() + self.limit
            while time.monotonic() < deadline:
                events, gone = self._read(deadline)
                bye = [e for e in events if isinstance(e, dict) and e.get("ev") == "bye"]
                if bye:
                    self.threads += [str(t) for t in bye[0].get("threads", [])]
                    break
                if gone is not None or None in events:
                    break
        except OSError:
            pass
        self.kill()

    def kill(self) -> None:
        """End every process below the worker, the worker, and its group; forget it."""
        from titan.cli import processes

        process, self.process = self.process, None
        if process is None:
            return
        left = lambda: processes.started_by(process.pid, since=self.started)  # noqa: E731
        processes.end(left)  # first, while what it started still hangs below it
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except OSError:  # the group is gone already
            pass
        process.wait()
        processes.end(left)  # what it started between the two, now titan's
        if self.was_subreaper is False:  # titan as a library: a longer-lived process's again
            processes.stop_subreaping()
        self._copy_output()
        for fd in (self.requests, self.replies, self.output, self.pidfd):
            if fd is not None:
                os.close(fd)


def interpreter(python: str | None) -> list[str]:
    """The command line that starts a worker's interpreter: titan's own with titan's flags
    (``-X``, ``-W``, ``-E``... as titan runs), or ``python`` with those of them that leave its
    path alone (``-I``, ``-E``, ``-s``, ``-S`` and ``-P`` would hide where its torchtitan is)."""
    import subprocess

    flags = subprocess._args_from_interpreter_flags()
    if python is None:
        return [sys.executable, *flags]
    return [python, *(f for f in flags if not _PATH_FLAG.fullmatch(f))]


def titan_init() -> str:
    """titan's ``__init__.py``, which another interpreter loads by file (see the module
    docstring); titan's ``__init__`` finds ``titan.schemas`` and ``titan.migrate`` from there."""
    import titan

    return os.path.abspath(titan.__file__)


def boot(upstream: bool) -> str:
    """The ``-c`` code that starts a worker (``sys.argv[1]``: the JSON setup)."""
    if not upstream:
        return (
            "import sys, json; sys.path[:] = json.loads(sys.argv[1])['path']; "
            "from titan.cli.registry_worker import main; main()"
        )
    return UPSTREAM_BOOT + "from titan.cli.registry_worker import main; main()"


UPSTREAM_BOOT = """\
import importlib.util, json, os, sys
_setup = json.loads(sys.argv[1])
sys.path[:] = [p for p in sys.path if p]
_spec = importlib.util.spec_from_file_location(
    "titan", _setup["titan"], submodule_search_locations=[os.path.dirname(_setup["titan"])]
)
_titan = sys.modules["titan"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_titan)
del _setup, _spec, _titan
"""
"""How another interpreter's worker (and ``titan.cli.upstream_build``'s probe of it) begins:
titan's package loaded by file, the interpreter's own path kept, less the working folder ``-c``
puts first (a folder named like a module there would shadow it)."""

_PATH_FLAG = re.compile(r"-[IEsSP]+")


def _built(e: dict) -> bool:
    """A ``built`` event: a function's (or the import's) config or error, and nothing else."""
    if not set(e) <= {"ev", "name", "config", "returned_type", "error"} or "name" not in e:
        return False
    if not isinstance(e["name"], str | None) or ("config" in e) == ("error" in e):
        return False
    if not e["name"] and "config" in e:  # the import and atexit handlers build nothing
        return False
    if "config" in e:
        return isinstance(e.get("returned_type"), str)
    if "returned_type" in e:
        return False
    error = e["error"]
    return (
        isinstance(error, dict)
        and set(error) == {"type", "message", "frames"}
        and isinstance(error["type"], str)
        and isinstance(error["message"], str)
        and isinstance(error["frames"], list)
        and all(
            isinstance(f, list)
            and len(f) == 2
            and isinstance(f[0], str)
            and isinstance(f[1], int)
            and not isinstance(f[1], bool)
            for f in error["frames"]
        )
    )


_SHAPES = {
    "step": lambda e: isinstance(e.get("doing"), str) and isinstance(e.get("name", 0), str | None),
    "found": lambda e: (
        isinstance(e.get("diagnostics"), list) and isinstance(e.get("declared"), list)
    ),
    "ending": lambda e: isinstance(e.get("frames"), list),
    "done": lambda e: (
        isinstance(e.get("deps"), list)
        and isinstance(e.get("cacheable"), bool)
        and isinstance(e.get("retire"), bool)
    ),
    "stuck": lambda e: isinstance(e.get("frames"), list),
    "built": _built,
}
"""The events a worker sends, and what each must hold; anything else on the pipe is garbage."""

_MEMORY_SIGNALS = {signal.SIGKILL, signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS}

FAILED_STATUS = 70
"""``titan.cli.registry_worker.FAILED``: the worker's own code failed."""

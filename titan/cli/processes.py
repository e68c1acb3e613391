"""Processes that registry code starts: found, named and ended, so that none outlives a check.

A registry module may fork, run ``subprocess.Popen(..., start_new_session=True)``, or fork twice
and call ``os.setsid()``: such a process leaves its parent's process group and session, and once
its parent is gone Linux hands it to the nearest *child subreaper* above it (else to init). The
process that runs registry code therefore makes itself a subreaper (:func:`become_subreaper`):
everything its code starts stays below it, and :func:`descendants` finds it by walking the
parent links in ``/proc``. :func:`end` kills what was found (through a pidfd, so a recycled pid
is never hit), looks again until nothing new turns up, and waits until each is dead.

Elsewhere than Linux there is no ``/proc`` and no subreaper: nothing is found here, and the
callers' process-group kill is what remains.

This module needs nothing but the standard library (an upstream run's worker imports it).
"""

from __future__ import annotations

import dataclasses
import os
import select
import signal
import time
from collections.abc import Callable, Iterable

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37

WAIT_S = 5.0
"""How long :func:`end` waits for killed processes to be gone (SIGKILL normally takes
microseconds; a process stuck in the kernel may take longer)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Proc:
    """One line of ``/proc/PID/stat``: what telling processes apart needs."""

    pid: int
    ppid: int
    group: int
    session: int
    state: str
    start: int
    """Clock ticks after boot at which it started (a recycled pid starts later)."""

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X", "x")


def become_subreaper() -> bool:
    """Make this process the child subreaper of everything it starts (Linux); ``False``
    where that is not possible."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError, ImportError, TypeError):  # no prctl: not Linux
        return False


def is_subreaper() -> bool | None:
    """Whether this process is a child subreaper now; ``None`` where that cannot be asked."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        flag = ctypes.c_int(0)
        if libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0) != 0:
            return None
        return bool(flag.value)
    except (OSError, AttributeError, ImportError, TypeError):
        return None


def stop_subreaping() -> None:
    """This process no longer adopts the orphans below it (they go to init again), for a
    process that runs on after its check (titan's own, when called as a library)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
    except (OSError, AttributeError, ImportError, TypeError):
        pass


def has_children() -> bool:
    """Whether this process has a child, running or not (a subreaper without one has nothing
    below it: no need to walk ``/proc``)."""
    try:
        os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return False
    except (AttributeError, OSError):  # no waitid here: say yes, and let /proc answer
        pass
    return True


def stat(pid: int) -> Proc | None:
    """The process ``pid`` as ``/proc`` shows it now, ``None`` once it is gone (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            text = file.read()
    except OSError:
        return None
    fields = text.rpartition(b")")[2].split()
    try:
        return Proc(
            pid=pid,
            ppid=int(fields[1]),
            group=int(fields[2]),
            session=int(fields[3]),
            state=fields[0].decode("ascii", "replace"),
            start=int(fields[19]),
        )
    except (IndexError, ValueError):
        return None


def table() -> dict[int, Proc]:
    """Every process ``/proc`` shows (empty where there is none)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    found = {}
    for name in names:
        if name.isdigit():
            proc = stat(int(name))
            if proc is not None:
                found[proc.pid] = proc
    return found


def descendants(
    roots: Iterable[int], procs: dict[int, Proc], *, groups: Iterable[int] = ()
) -> set[int]:
    """The processes below ``roots`` (not the roots themselves), with those of the process
    groups and sessions ``groups`` and theirs."""
    children: dict[int, list[int]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc.pid)
    groups = set(groups)
    tops = set(roots)
    found = {p.pid for p in procs.values() if p.group in groups or p.session in groups} - tops
    todo = list(tops | found)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found and child not in tops:
                found.add(child)
                todo.append(child)
    return found


def started_by(worker: int, *, since: int) -> set[int]:
    """The processes a child ``worker`` of this process (which started at tick ``since``)
    started, wherever they are now: below it, in its process group or session, or adopted by
    this process once the worker ended (its children that started later). Not the worker."""
    procs = table()
    adopted = {
        p.pid
        for p in procs.values()
        if p.ppid == os.getpid() and p.pid != worker and p.start >= since
    }
    found = descendants({worker, *adopted}, procs, groups=[worker]) | adopted
    return found - {worker}


def alive(pids: Iterable[int], procs: dict[int, Proc]) -> list[int]:
    """Those of ``pids`` that still run (not zombies), in order."""
    return sorted(pid for pid in pids if pid in procs and procs[pid].alive)


def command_line(pid: int) -> str:
    """What ``pid`` runs, as ``ps`` shows it (its name in brackets when it has no arguments)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            words = file.read().rstrip(b"\0").split(b"\0")
    except OSError:
        words = []
    text = " ".join(w.decode("utf-8", "replace") for w in words if w)
    if not text:
        try:
            with open(f"/proc/{pid}/comm", "rb") as file:
                text = "[" + file.read().strip().decode("utf-8", "replace") + "]"
        except OSError:
            text = "?"
    return text if len(text) <= 80 else text[:77] + "..."


def described(pids: Iterable[int], *, most: int = 5) -> str:
    """``pid 12 (sleep 100), pid 13 (python -c ...)`` for the first ``most`` of ``pids``."""
    pids = list(pids)
    text = ", ".join(f"pid {pid} ({command_line(pid)})" for pid in pids[:most])
    return text + (f" and {len(pids) - most} more" if len(pids) > most else "")


def end(find: Callable[[], set[int]], *, wait_s: float = WAIT_S) -> list[int]:
    """Kill what ``find`` answers, asking again until it names nothing new (a process may have
    forked before its kill landed), wait until all of it is dead, and reap those that are this
    process's children. Returns the pids killed."""
    killed: dict[int, int | None] = {}
    for _ in range(1000):  # each round kills all it sees; a kill stops any further fork
        new = find() - set(killed) - {os.getpid()}
        if not new:
            break
        for pid in new:
            killed[pid] = _kill(pid)
    _wait([fd for fd in killed.values() if fd is not None], wait_s)
    for pid, fd in killed.items():
        if fd is not None:
            os.close(fd)
        reap(pid)
    return sorted(killed)


def reap(pid: int) -> None:
    """Collect ``pid``'s exit status if it is this process's child and dead."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except OSError:  # not a child of this process (or reaped already)
        pass


def _kill(pid: int) -> int | None:
    """SIGKILL ``pid`` through a pidfd (kept to wait on); ``None`` when it is gone already."""
    before = stat(pid)
    try:
        fd = os.pidfd_open(pid)
    except AttributeError:
        _plain_kill(pid)
        return None
    except OSError:
        return None
    after = stat(pid)
    if before is None or after is None or after.start != before.start:
        os.close(fd)  # gone, or the pid was given to another process meanwhile
        return None
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    except OSError:
        pass
    return fd


def _plain_kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _wait(fds: list[int], wait_s: float) -> None:
    """Until every pidfd says its process ended, or ``wait_s`` passed."""
    deadline = time.monotonic() + wait_s
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    waiting = set(fds)
    while waiting:
        left = deadline - time.monotonic()
        if left <= 0:
            return
        for fd, _ in poller.poll(left * 1000):
            poller.unregister(fd)
            waiting.discard(fd)


class Started:
    """The processes that code run in this process from now on starts (this process is made
    their subreaper): its children that were not there before, and all below them."""

    def __init__(self) -> None:
        self.was_subreaper = is_subreaper()
        become_subreaper()
        self.before = {(p.pid, p.start) for p in table().values() if p.ppid == os.getpid()}

    def find(self) -> set[int]:
        """Every such process, running or not."""
        return self._find(table())

    def running(self) -> list[int]:
        """Those that still run (not zombies)."""
        procs = table()
        return alive(self._find(procs), procs)

    def _find(self, procs: dict[int, Proc]) -> set[int]:
        me = os.getpid()
        roots = {
            p.pid for p in procs.values() if p.ppid == me and (p.pid, p.start) not in self.before
        }
        return descendants(roots, procs) | roots

    def release(self) -> None:
        """Stop being their subreaper, unless this process was one before (call once they are
        all ended)."""
        if self.was_subreaper is False:
            stop_subreaping()

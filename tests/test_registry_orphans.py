"""No process a registry module starts outlives ``titan-validate``: forked, forked twice into a
session of its own, started with ``start_new_session=True``, or deaf to SIGTERM, it is named in
an error at the module (or the function) and killed before titan returns, in the folder mode
and in ``--config NAME`` mode alike.

Each process the module starts writes its pid to a file and then waits for ever; the module
waits for those files before it returns, so every pid is known before titan-validate can
return, and what is checked afterwards is only whether ``/proc/PID`` still runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import PROCESS_SAFETY_S as SAFETY_S
from tests.helpers import validate_process

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="needs /proc and child subreapers"
)

"""A safety net only: the modules below return as soon as their processes are started."""

HEAD = '''\
import os, signal, subprocess, sys, time
from titan.models.llama3 import model_registry
from titan.trainer import Trainer

HERE = os.path.dirname(os.path.abspath(__file__))


def _mark(name):
    """In a started process: let go of titan's streams, say its pid, wait for ever."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    tmp = os.path.join(HERE, name + ".tmp")
    with open(tmp, "w") as file:
        file.write(str(os.getpid()))
    os.rename(tmp, os.path.join(HERE, name + ".pid"))
    while True:
        signal.pause()


def _wait_for(*names):
    for name in names:
        while not os.path.exists(os.path.join(HERE, name + ".pid")):
            time.sleep(0.01)


def _fork():
    if os.fork() == 0:
        _mark("forked")
    _wait_for("forked")


def _double_fork():
    first = os.fork()
    if first == 0:
        os.setsid()
        if os.fork() == 0:
            _mark("detached")
        os._exit(0)
    os.waitpid(first, 0)
    _wait_for("detached")


def _new_session():
    code = f"import sys; sys.path[:0] = {sys.path!r}; import config_registry as m; m._mark('session')"
    subprocess.Popen(
        [sys.executable, "-c", code], cwd=HERE, start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    _wait_for("session")


def _deaf_grandchild():
    if os.fork() == 0:
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            _mark("deaf")
        _mark("parent")
    _wait_for("deaf", "parent")

'''

FUNCTION = """
def job() -> Trainer.Config:
    {starts}()
    return Trainer.Config(model_spec=model_registry("debugmodel"))
"""

STARTS = {
    "fork": ("_fork", ["forked"]),
    "double fork and setsid": ("_double_fork", ["detached"]),
    "Popen in a new session": ("_new_session", ["session"]),
    "grandchild ignoring SIGTERM": ("_deaf_grandchild", ["deaf", "parent"]),
}


def validate(*args: str, cwd: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    return validate_process(*args, cwd=cwd, cache=tmp_path / "cache")


def running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie has ended: only its exit status is left)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def pids(folder: Path, names: list[str]) -> list[int]:
    return [int((folder / f"{name}.pid").read_text()) for name in names]


@pytest.fixture
def project(tmp_path: Path):
    """A folder for the module; whatever a failing run left running is killed afterwards."""
    folder = tmp_path / "project"
    folder.mkdir()
    yield folder
    for file in folder.glob("*.pid"):
        try:
            os.kill(int(file.read_text()), signal.SIGKILL)
        except (OSError, ValueError):
            pass


MODES = {
    "folder": lambda: ["--no-cache", "config_registry.py"],
    "--config": lambda: ["--config", "job"],
}


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("how", list(STARTS))
def test_processes_a_function_starts_are_named_and_killed(
    project: Path, tmp_path: Path, how: str, mode: str
) -> None:
    starts, names = STARTS[how]
    (project / "config_registry.py").write_text(HEAD + FUNCTION.format(starts=starts))
    done = validate(*MODES[mode](), cwd=project, tmp_path=tmp_path)
    started = pids(project, names)
    assert [pid for pid in started if running(pid)] == [], done.stdout + done.stderr
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"left {len(started)} process(es) running" in done.stdout, done.stdout
    for pid in started:
        assert f"pid {pid} (" in done.stdout, done.stdout
    line = "1:1" if mode == "folder" else f"{len(HEAD.splitlines()) + 2}:1"
    assert f"config_registry.py:{line}: error[registry-error]" in done.stdout, done.stdout


@pytest.mark.parametrize("how", ["fork", "double fork and setsid", "grandchild ignoring SIGTERM"])
def test_processes_outlive_no_module_that_ends_its_worker(
    project: Path, tmp_path: Path, how: str
) -> None:
    """The module ends the worker itself (``os._exit``) with its processes still running: they
    were adopted by titan, which kills them too."""
    starts, names = STARTS[how]
    source = HEAD + f"\n{starts}()\nos._exit(3)\n" + FUNCTION.format(starts="tuple")
    (project / "config_registry.py").write_text(source)
    done = validate("--no-cache", "config_registry.py", cwd=project, tmp_path=tmp_path)
    started = pids(project, names)
    assert [pid for pid in started if running(pid)] == [], done.stdout + done.stderr
    assert done.returncode == 1, done.stdout + done.stderr
    assert "os._exit(3)" in done.stdout, done.stdout


def test_a_module_that_waits_for_its_processes_is_clean(project: Path, tmp_path: Path) -> None:
    """Processes that ended before the module returned are no finding, in either mode."""
    source = HEAD + FUNCTION.format(starts="_waited")
    source += """
def _waited():
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    child = os.fork()
    if child == 0:
        os._exit(0)
    os.waitpid(child, 0)
"""
    (project / "config_registry.py").write_text(source)
    for args in MODES.values():
        done = validate(*args(), cwd=project, tmp_path=tmp_path)
        assert "process(es) running" not in done.stdout, done.stdout
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("mode", list(MODES))
def test_titan_as_a_library_stops_adopting_orphans_when_its_check_is_done(
    project: Path, tmp_path: Path, mode: str
) -> None:
    """``titan.cli.validate.run`` in a longer-lived process (a test runner, a service): the
    processes a module started are killed, and the caller is no child subreaper afterwards
    (else every orphan below it, from anywhere, would be left to it as a zombie)."""
    code = "import sys\nfrom titan.cli import processes\nfrom titan.cli.validate import run\n"
    code += "print('before', processes.is_subreaper())\n"
    code += f"print('exit', run({MODES[mode]()!r}, stdout=sys.stderr, stderr=sys.stderr))\n"
    code += "print('after', processes.is_subreaper())\n"
    (project / "config_registry.py").write_text(HEAD + FUNCTION.format(starts="_fork"))
    env = dict(os.environ, TITAN_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=SAFETY_S,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["before", "False", "exit", "1", "after", "False"], (
        done.stdout + done.stderr
    )
    assert [pid for pid in pids(project, ["forked"]) if running(pid)] == []

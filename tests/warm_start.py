"""Warm starts for the suite's single-process ``titan-train`` runs.

A fresh ``python -m titan.train`` spends about two of the three and a half CPU seconds of a short
debug run importing torch and what a run needs, and the suite starts hundreds of them on a
2-core machine. A warm start forks the run from a server that has imported those modules and
done nothing else (no config read, no thread started, no tensor made), then runs
``titan.train`` as ``python -m titan.train`` does: as ``__main__``, with the run's arguments,
working folder, environment, standard streams and the signal dispositions of a new process. The
run is a real process of its own: its exit status (or the signal that ended it) and everything
it writes are its own.

Only plain starts use it (``tests.training_runs.start`` with the environment of ``child_env()``):
a test of how a process starts or ends under a launcher (torchrun, signals sent by the test, the
interpreter's flags) starts it cold. ``TITAN_TEST_COLD=1`` starts every run cold, and
``tests/test_warm_start.py`` checks that a warm run prints and logs what a cold one does.

The server is ``python -m tests.warm_start FD`` (one per pytest process, started on first use),
speaking over the ``SOCK_SEQPACKET`` socket ``FD``: a request is the run's JSON (argv, cwd, env)
with its stdout and stderr descriptors attached; the replies are ``{"pid": N}`` when a run
starts and ``{"exited": N, "code": C}`` when it ends (C as ``subprocess``'s returncode).
"""

from __future__ import annotations

import atexit
import importlib
import importlib.util
import json
import os
import pkgutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PRELOAD = (
    "torch",
    "torch._dynamo",
    "torch.distributed",
    "torch.distributed.fsdp",
    "torch.distributed.tensor",
    "torch.distributed.checkpoint",
    "torch.distributed.checkpoint._fsspec_filesystem",
    "torch.distributed.checkpoint.state_dict",
    "torch.nn.attention.flex_attention",
    "torch.profiler",
    "safetensors.torch",
    "tokenizers",
    "rich.console",
    "titan.cli.console",
    "titan.cli.output",
    "titan.cli.train_config",
    "titan.cli.train_preflight",
    "titan.components.checkpoint.hf",
    "titan.components.checkpoint.initial",
    "titan.components.checkpoint.resume",
    "titan.components.checkpoint.writer",
    "titan.components.loss",
    "titan.components.metric_sinks",
    "titan.components.quantization.float8",
    "titan.config.check",
    "titan.migrate.plan.build",
    "titan.schemas.document_checker",
    "titan.trainer",
    "titan.training.setup",
    "titan.training.step_api",
    "titan.models",
)
"""What the server imports: the modules of torch and titan that runs import, up to (not
including) ``titan.train``, which each run executes afresh as ``__main__``; and each model
family's model module (``FAMILY_MODULES``)."""

FAMILY_MODULES = ("model", "state_dict_adapter")
"""The modules of each family under ``titan/models`` that the server imports where they exist."""

IMPORT_TIME_VARIABLES = ("PYTHON", "OMP_", "MKL_", "TORCH", "LD_", "CUDA", "KMP_")
"""Environment variables read when the interpreter starts or torch is imported: a run whose
values differ from the server's starts cold."""

MESSAGE_BYTES = 1 << 20


# --- the server --------------------------------------------------------------------------------


def serve(channel: socket.socket) -> tuple[dict, list[int]] | None:
    """Import ``PRELOAD``, then fork one run per request until the client hangs up. Returns, in
    a forked run only, its request and descriptors; returns None in the server when it is done."""
    import selectors
    import signal

    for name in PRELOAD:
        importlib.import_module(name)
    import titan.models

    for family in pkgutil.iter_modules(titan.models.__path__):
        for module in FAMILY_MODULES:
            name = f"titan.models.{family.name}.{module}"
            if family.ispkg and importlib.util.find_spec(name) is not None:
                importlib.import_module(name)
    threads = len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else 1
    if threading.active_count() != 1 or threads != 1:
        _send(channel, {"refused": f"{threads} threads after the imports: forking is not safe"})
        return None
    _send(channel, {"ready": os.getpid()})

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_write)
    selector = selectors.DefaultSelector()
    selector.register(channel, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj is channel:
                message, fds, _, _ = socket.recv_fds(channel, MESSAGE_BYTES, 2)
                if not message:  # the client is gone
                    return None
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.close(wake_read)
                    os.close(wake_write)
                    channel.close()
                    return json.loads(message), fds
                for fd in fds:
                    os.close(fd)
                _send(channel, {"pid": pid})
            else:
                try:
                    while os.read(wake_read, 512):
                        pass
                except BlockingIOError:
                    pass
                _reap(channel)


def _reap(channel: socket.socket) -> None:
    """Report every run that has ended."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send(channel, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def _send(channel: socket.socket, message: dict) -> None:
    channel.sendall(json.dumps(message).encode())


def become_the_run(request: dict, fds: list[int]) -> None:
    """In the forked run: take the run's streams, folder and environment, and the signal
    dispositions and random state of a new process, then run ``titan.train`` as ``-m`` does."""
    import random
    import runpy
    import signal

    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in fds:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    random.seed()  # a new process draws its own seed; forked runs must not share the server's
    sys.argv = ["-m", *request["argv"]]
    sys.path[0] = os.getcwd()
    runpy.run_module("titan.train", run_name="__main__", alter_sys=True)


# --- the client --------------------------------------------------------------------------------


class WarmServer:
    """The server of this pytest process, and the runs it started."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.ended: dict[int, int] = {}
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The imports must print nothing: a warning printed here would be missing from every
        # run's own output (Python prints each warning once per process).
        said = tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.warm_start", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=said,
        )
        theirs.close()
        reply = self._receive(None)
        said.seek(0)
        printed = said.read()
        said.close()
        if reply is None or "ready" not in reply or printed:
            self.close()
            raise RuntimeError(f"the warm-start server did not start: {reply} {printed[-2000:]}")

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a run with ``env`` can start here: the variables read at start-up match."""

        def startup(values: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in values.items() if k.startswith(IMPORT_TIME_VARIABLES)}

        return self.process.poll() is None and startup(env) == startup(self.env)

    def start(self, argv: list[str], *, cwd: Path, env: dict[str, str], stdout, stderr) -> WarmRun:
        request = json.dumps({"argv": argv, "cwd": str(cwd), "env": env}).encode()
        socket.send_fds(self.channel, [request], [stdout.fileno(), stderr.fileno()])
        while True:
            reply = self._receive(None)
            if reply is None:
                raise RuntimeError("the warm-start server ended")
            if "pid" in reply:
                return WarmRun(self, reply["pid"])

    def wait_for(self, pid: int, timeout: float | None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while pid not in self.ended:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"warm titan-train {pid}", timeout)
            if self._receive(left) is None and pid not in self.ended:
                raise RuntimeError("the warm-start server ended before the run")
        return self.ended[pid]

    def _receive(self, timeout: float | None) -> dict | None:
        """One reply (an ended run is recorded on the way); None once the server is gone."""
        self.channel.settimeout(timeout)
        try:
            message = self.channel.recv(MESSAGE_BYTES)
        except (TimeoutError, BlockingIOError):  # nothing yet
            return {}
        if not message:
            return None
        reply = json.loads(message)
        if "exited" in reply:
            self.ended[reply["exited"]] = reply["code"]
        return reply

    def close(self) -> None:
        self.channel.close()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class WarmRun:
    """A run the server started: what ``titan_trains`` uses of ``subprocess.Popen``."""

    def __init__(self, server: WarmServer, pid: int) -> None:
        self.server = server
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            while self.pid not in self.server.ended:
                if self.server._receive(0) in (None, {}):
                    break
            self.returncode = self.server.ended.get(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.server.wait_for(self.pid, timeout)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not yet reaped by the server, so the pid is still the run's
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(9)


_server: WarmServer | None = None
_unavailable: str | None = None


def server_for(env: dict[str, str]) -> WarmServer | None:
    """This pytest process's server, when it can start a run with ``env``; None to start cold."""
    global _server, _unavailable
    if os.environ.get("TITAN_TEST_COLD") or _unavailable is not None:
        return None
    if _server is None:
        try:
            _server = WarmServer(env)
        except (OSError, RuntimeError) as error:
            _unavailable = str(error)
            warnings.warn(f"titan-train runs start cold: {error}", stacklevel=2)
            return None
        atexit.register(_server.close)
    return _server if _server.serves(env) else None


if __name__ == "__main__":
    forked = serve(socket.socket(fileno=int(sys.argv[1])))
    if forked is not None:
        become_the_run(*forked)

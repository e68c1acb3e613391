"""Warm starts for the suite's ``titan-train`` runs and torchrun ranks.

A fresh ``python -m titan.train`` spends about two of the three and a half CPU seconds of a short
debug run importing torch and what a run needs, and the suite starts hundreds of them, on one
process and as torchrun's ranks, on a 2-core machine. A warm start forks the run from a server
that has imported those modules and done nothing else (no config read, no thread started, no
tensor made), then runs it as the interpreter would: ``titan.train`` (or a check script) as
``__main__``, with the run's arguments, working folder, environment, ``sys.path``, standard
streams (unbuffered under torchrun's ``-u``) and the signal dispositions and random state of a
new process. The run is a real process of its own: its exit status (or the signal that ended it)
and everything it writes are its own.

Who uses it: ``tests.training_runs`` (``start``, ``run_module``, ``run_train``, ``titan_trains``
and ``parallel_check``). One process is forked at the test's request; so is torchrun's agent,
whose workers are ``tests.warm_worker``: each asks the server for its rank and stands in for it
towards torchrun (signals forwarded, the same exit). A run whose start-up environment differs from the server's
(``IMPORT_TIME_VARIABLES``) starts cold, and so does every run under ``TITAN_TEST_COLD=1``. Tests
of how titan fails and stops under torchrun start their ranks themselves, cold.
``tests/test_warm_start.py`` checks that warm runs print, write, train, fail and take signals as
cold ones do.

The server is ``python -m tests.warm_start FD ADDRESS`` (one per pytest process, started on
first use). Requests are the run's JSON (argv, cwd, env; ``module`` or ``script``) with its
standard streams' descriptors attached, on the ``SOCK_SEQPACKET`` socket ``FD`` from the test,
or on a connection to the socket ``ADDRESS`` from a torchrun worker. The replies are
``{"pid": N}`` when a run starts, ``{"cold": WHY}`` when it cannot, and ``{"exited": N, "code":
C}`` when it ends (C as ``subprocess``'s returncode).
"""

from __future__ import annotations

import atexit
import gc
import importlib
import importlib.util
import json
import os
import pkgutil
import shutil
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
    "torch.distributed.launcher.api",
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
including) the modules runs execute afresh as ``__main__`` (``titan.train``, torchrun's
``torch.distributed.run``: runpy warns of a module it runs that is imported already); and each
model family's model module (``FAMILY_MODULES``)."""

FAMILY_MODULES = ("model", "state_dict_adapter")
"""The modules of each family under ``titan/models`` that the server imports where they exist."""

IMPORT_TIME_VARIABLES = ("PYTHON", "OMP_", "MKL_", "KMP_", "LD_", "CUDA", "TORCH")
"""Environment variables read when the interpreter starts or torch is imported: a run whose
values differ from the server's starts cold. Except ``RUN_TIME_VARIABLES``."""

RUN_TIME_VARIABLES = ("PYTHONPATH", "TORCHELASTIC_", "TORCH_NCCL_ASYNC_ERROR_HANDLING")
"""Variables of those prefixes that are read later: torchrun's, set for each worker, and
``PYTHONPATH``, whose folders a run gets in ``sys.path`` where the interpreter puts them."""

ADDRESS_VARIABLE = "TITAN_TEST_WARM_ADDRESS"
"""Where torchrun's workers (``tests.warm_worker``) find the server of the test that launched
torchrun."""

MESSAGE_BYTES = 1 << 20


# --- the server --------------------------------------------------------------------------------


def serve(channel: socket.socket, address: str) -> tuple[dict, list[int]] | None:
    """Import ``PRELOAD``, then fork one run per request until the client hangs up. Requests come
    from the client on ``channel`` and from torchrun's workers (``tests.warm_worker``), one per
    connection to ``address``. Returns, in a forked run only, its request and descriptors;
    returns None in the server when it is done."""
    import selectors
    import signal

    started_with = _startup(dict(os.environ))  # before torch's imports set variables of theirs
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
    # What the imports made is kept out of the collector's sight: no run pays for scanning it,
    # in its collections or at its exit (about 0.7 CPU s of a run's teardown), and the pages
    # stay shared with the server instead of being copied when the collector touches them.
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(address)
    listener.listen(64)
    _send(channel, {"ready": os.getpid()})

    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    signal.set_wakeup_fd(wake_write)
    selector = selectors.DefaultSelector()
    selector.register(channel, selectors.EVENT_READ)
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    workers: dict[socket.socket, int | None] = {}  # a worker's connection: the run it asked for
    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                connection, _ = listener.accept()
                workers[connection] = None
                selector.register(connection, selectors.EVENT_READ)
                continue
            if key.fileobj is wake_read:
                try:
                    while os.read(wake_read, 512):
                        pass
                except BlockingIOError:
                    pass
                _reap(channel, workers)
                continue
            asker = key.fileobj
            message, fds, _, _ = socket.recv_fds(asker, MESSAGE_BYTES, 3)
            if not message:
                if asker is channel:  # the client is gone
                    return None
                # A worker that hung up before its run ended was killed (by torchrun, or by the
                # test): so is its run, as if it had been the worker itself.
                selector.unregister(asker)
                run = workers.pop(asker)
                asker.close()
                if run is not None:
                    _kill(run)
                continue
            request = json.loads(message)
            theirs, ours = _startup(request["env"]), started_with
            if theirs != ours:
                for fd in fds:
                    os.close(fd)
                differ = sorted(
                    name for name in {*theirs, *ours} if theirs.get(name) != ours.get(name)
                )
                _send(asker, {"cold": f"its start-up environment differs: {', '.join(differ)}"})
                continue
            pid = os.fork()
            if pid == 0:
                selector.close()
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_read)
                os.close(wake_write)
                for connection in [channel, listener, *workers]:
                    connection.close()
                return request, fds
            for fd in fds:
                os.close(fd)
            if asker is not channel:
                workers[asker] = pid
            _send(asker, {"pid": pid})


def _startup(env: dict[str, str]) -> dict[str, str]:
    """The variables of ``env`` read when a process starts (``IMPORT_TIME_VARIABLES``)."""
    return {
        name: value
        for name, value in env.items()
        if name.startswith(IMPORT_TIME_VARIABLES) and not name.startswith(RUN_TIME_VARIABLES)
    }


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def _reap(channel: socket.socket, workers: dict[socket.socket, int | None]) -> None:
    """Report every run that has ended, to whoever asked for it."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        asker = next((worker for worker, run in workers.items() if run == pid), channel)
        if asker is not channel:
            workers[asker] = None
        try:
            _send(asker, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})
        except OSError:  # the worker is gone
            pass


def _send(channel: socket.socket, message: dict) -> None:
    channel.sendall(json.dumps(message).encode())


def become_the_run(request: dict, fds: list[int]) -> None:
    """In the forked run: take the run's streams (stdin too when given; else ``/dev/null``),
    folder and environment, the signal dispositions and random state of a new process, and
    ``-u``'s unbuffered streams when asked; then run the module (``python -m``) or the script
    (``python SCRIPT``)."""
    import io
    import random
    import runpy
    import signal

    if len(fds) == 2:
        null = os.open(os.devnull, os.O_RDONLY)
        fds = [null, *fds]
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    if request.get("unbuffered"):
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            unbuffered = io.TextIOWrapper(
                io.FileIO(stream.fileno(), "w", closefd=False),
                encoding=stream.encoding,
                errors=stream.errors,
                write_through=True,
            )
            setattr(sys, name, unbuffered)
            setattr(sys, f"__{name}__", unbuffered)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    random.seed()  # a new process draws its own seed; forked runs must not share the server's
    script = request.get("script")
    # sys.path as the interpreter makes it: the script's folder (the working folder for -m),
    # then PYTHONPATH's folders, then the server's own (the standard library, site-packages).
    sys.path[0] = os.getcwd() if script is None else os.path.dirname(os.path.abspath(script))
    sys.path[1:1] = [
        folder for folder in os.environ.get("PYTHONPATH", "").split(os.pathsep) if folder
    ]
    if script is None:
        sys.argv = ["-m", *request["argv"]]
        runpy.run_module(request.get("module", "titan.train"), run_name="__main__", alter_sys=True)
    else:
        sys.argv = [script, *request["argv"]]
        runpy.run_path(script, run_name="__main__")


# --- the client --------------------------------------------------------------------------------


class WarmServer:
    """The server of this pytest process, and the runs it started."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.ended: dict[int, int] = {}
        self.folder = tempfile.mkdtemp(prefix="titan-warm-")
        self.address = os.path.join(self.folder, "server")
        self.channel, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        # The imports must print nothing: a warning printed here would be missing from every
        # run's own output (Python prints each warning once per process).
        said = tempfile.TemporaryFile("w+")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.warm_start", str(theirs.fileno()), self.address],
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

    def start(
        self,
        argv: list[str],
        *,
        module: str = "titan.train",
        cwd: Path,
        env: dict[str, str],
        stdout,
        stderr,
    ):
        """``python -m MODULE ARGV`` forked by the server: a ``WarmRun``, or None when the
        server cannot start it (its start-up environment differs)."""
        request = {"module": module, "argv": argv, "cwd": str(cwd), "env": env}
        request = json.dumps(request).encode()
        socket.send_fds(self.channel, [request], [stdout.fileno(), stderr.fileno()])
        while True:
            reply = self._receive(None)
            if reply is None:
                raise RuntimeError("the warm-start server ended")
            if "cold" in reply:
                return None
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
        shutil.rmtree(self.folder, ignore_errors=True)


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


def server() -> WarmServer | None:
    """This pytest process's server (started on first use), or None to start runs cold: asked
    for by ``TITAN_TEST_COLD``, or the server could not start (a warning says why)."""
    global _server, _unavailable
    if os.environ.get("TITAN_TEST_COLD") or _unavailable is not None:
        return None
    if _server is None:
        from tests.training_runs import child_env

        try:
            _server = WarmServer(child_env())
        except (OSError, RuntimeError) as error:
            _unavailable = str(error)
            warnings.warn(f"titan-train runs start cold: {error}", stacklevel=2)
            return None
        atexit.register(_server.close)
    return _server if _server.process.poll() is None else None


if __name__ == "__main__":
    forked = serve(socket.socket(fileno=int(sys.argv[1])), sys.argv[2])
    if forked is not None:
        become_the_run(*forked)

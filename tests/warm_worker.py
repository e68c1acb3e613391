"""torchrun's worker for warm-started ranks: ``python -m tests.warm_worker (MODULE | --script
SCRIPT) ARGS...``, launched by torchrun in place of ``-m MODULE ARGS`` or ``SCRIPT ARGS``.

It imports nothing heavy: it hands its arguments, working folder, environment (torchrun's rank
variables included) and standard streams to the warm-start server of the test that launched
torchrun (``tests.warm_start``; its address is in ``ADDRESS_VARIABLE``), which forks
the rank from its imported torch; then it stands in for the rank towards torchrun: the signals
torchrun sends it go to the rank, and it ends as the rank ended (the same exit status, or killed
by the same signal). When it is killed itself (SIGKILL), the server kills the rank. Without a
server, or one that cannot start this rank, it becomes the rank itself (``exec``). What differs
from a cold launch is only torchrun's own report of a failed worker, which names this module
instead of ``titan.train``; titan's messages, exit statuses and files are the rank's own.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

from tests.warm_start import ADDRESS_VARIABLE, MESSAGE_BYTES

FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--script"]:
        target, args = {"script": argv[1]}, argv[2:]
        cold = [sys.executable, "-u", argv[1], *args]
    else:
        target, args = {"module": argv[0]}, argv[1:]
        cold = [sys.executable, "-u", "-m", argv[0], *args]
    run = _warm_start(target, args)
    if run is None:
        os.execv(sys.executable, cold)
    connection, pid = run

    def forward(signum: int, frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for sig in FORWARDED:
        signal.signal(sig, forward)
    while True:
        message = connection.recv(MESSAGE_BYTES)
        if not message:  # the server is gone; the rank with it
            os._exit(1)
        reply = json.loads(message)
        if "exited" in reply:
            break
    code = reply["code"]
    sys.stdout.flush()
    sys.stderr.flush()
    if code < 0:  # killed by a signal: so is this stand-in
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def _warm_start(target: dict, args: list[str]) -> tuple[socket.socket, int] | None:
    address = os.environ.get(ADDRESS_VARIABLE)
    if not address:
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        connection.connect(address)
    except OSError:
        return None
    request = {**target, "argv": args, "cwd": os.getcwd(), "env": dict(os.environ)}
    # torchrun starts its workers with -u (or PYTHONUNBUFFERED is set): the rank's streams too
    request["unbuffered"] = sys.stdout.write_through
    socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
    reply = json.loads(connection.recv(MESSAGE_BYTES) or b"{}")
    if "pid" not in reply:
        connection.close()
        return None
    return connection, reply["pid"]


if __name__ == "__main__":
    main(sys.argv[1:])

"""Build an upstream torchtitan registry module's configs in the interpreter ``--python`` names.

titan cannot import a module written for upstream torchtitan 0.3.0 (titan's own torch and
packages are not torchtitan's), so ``titan-validate --python PATH`` builds it in PATH, an
interpreter where torchtitan 0.3.0 is installed, inside titan's sandboxed worker
(``titan.cli.registry_child`` with ``python=PATH``; ``titan.cli.upstream_run`` there). What each
function built comes back as plain JSON, and every way the worker can end (``--timeout``,
``--memory-limit``, ``os._exit``, a crash) is an :class:`~titan.cli.registry_child.Ended` that
``titan.cli.registry_endings`` turns into a finding; a fresh worker goes on with the functions
after the one it ended on.

:func:`upstream_python_problem` says, before any of that, whether PATH can serve at all.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from titan.cli.registry_child import Ended, Worker

if TYPE_CHECKING:
    from titan.schemas.diagnostics import Diagnostic

UPSTREAM_VERSION = "0.3.0"
"""The torchtitan release whose modules are built (the one ``--target torchtitan==0.3.0``
writes for)."""

PROBE_TIMEOUT_S = 60.0
"""How long the interpreter may take to say what it is (importing torchtitan's package only
reads its version, but a cold disk or a busy machine is slow)."""

_PROBE = """
try:
    import titan.cli.registry_worker, titan.cli.upstream_run
    titan_error = None
except BaseException as error:
    titan_error = f"{type(error).__name__}: {error}"
try:
    import torchtitan
    version, torchtitan_error = str(getattr(torchtitan, "__version__", "")), None
except BaseException as error:
    version, torchtitan_error = None, f"{type(error).__name__}: {error}"
print("\\ntitan-probe " + json.dumps({
    "python": list(sys.version_info[:2]), "titan": titan_error,
    "torchtitan": version, "torchtitan_error": torchtitan_error,
}))
"""
"""What the probe asks the interpreter, after the worker's own start (``UPSTREAM_BOOT``): the
same path, so what it finds is what the worker will find."""


@dataclasses.dataclass
class Built:
    """What an upstream module's functions built."""

    functions: dict[str, dict] = dataclasses.field(default_factory=dict)
    """By name: ``{"config": DUMP, "returned_type": "module:Qual.Name"}`` or ``{"error":
    {"type", "message", "frames": [[file, line], ...]}}`` (innermost first), as the worker
    sent them. A function the worker ended on is absent (its ending is in :attr:`endings`)."""
    import_error: dict | None = None
    """The import's ``{"type", "message", "frames"}`` when it raised (no function was built)."""
    endings: list[Ended] = dataclasses.field(default_factory=list)
    """Each time the worker ended (on the import, a function or an ``atexit`` handler), in order."""
    atexit_errors: list[dict] = dataclasses.field(default_factory=list)
    """What the module's own ``atexit`` handlers raised (``{"type", "message", "frames"}``)."""
    problem: str | None = None
    """Why the interpreter could not be started at all (then nothing else is filled in)."""
    threads: list[str] = dataclasses.field(default_factory=list)
    """Threads the module left running (the worker did not wait for them)."""
    path: str = ""
    """The module, as :func:`build_module` was given it (with ``shown``, the limits: what
    :meth:`ending_findings` says)."""
    shown: str = ""
    timeout: float = 0.0
    memory_limit: int | None = None

    @property
    def ended(self) -> Ended | None:
        """The first ending, if the worker ended at all."""
        return self.endings[0] if self.endings else None

    def ending_findings(
        self, *, text: str | None = None, declared: Mapping[str, Any] | None = None
    ) -> list[Diagnostic]:
        """Each ending as a ``Diagnostic`` at the module's line where it ended, else at its
        function (``declared``: name -> something with ``line`` and ``col``), else line 1."""
        from titan.cli.registry_endings import ending_finding

        declared = declared or {}
        found = []
        for ended in self.endings:
            suffix = ""
            if ended.name is None and declared:
                count = len(declared)
                suffix = (
                    f"; none of its {count} registry functions were built"
                    if count != 1
                    else f"; its registry function `{next(iter(declared))}` was not built"
                )
            found.append(
                ending_finding(
                    ended,
                    full=os.path.abspath(self.path),
                    shown=self.shown,
                    text=text,
                    default=declared.get(ended.name or ""),
                    timeout=self.timeout,
                    memory_limit=self.memory_limit,
                    suffix=suffix,
                )
            )
        return found


def build_module(
    path: str,
    shown: str,
    names: Sequence[str],
    *,
    python: str,
    package: str | None,
    timeout: float,
    memory_limit: int | None,
    stderr: TextIO,
    module_path: Sequence[str] = (),
) -> Built:
    """Import ``path`` in ``python`` and call each of ``names`` there (``package``: the dotted
    package the file belongs to, so its relative imports work). What the module prints goes to
    ``stderr``. Run :func:`upstream_python_problem` first: an interpreter that starts but is no
    Python with torchtitan reads here as a worker that ended on the import."""
    built = Built(path=path, shown=shown, timeout=timeout, memory_limit=memory_limit)
    request = {
        "path": path,
        "shown": shown,
        "functions": list(names),
        "package": package,
        "module_path": [os.path.abspath(folder) for folder in module_path],
        "skip": [],
    }
    worker = Worker(timeout=timeout, memory_limit=memory_limit, stderr=stderr, python=python)
    try:
        worker.start()
    except OSError as error:  # no such program, not executable, not a format this system runs
        built.problem = upstream_python_problem(python) or f"cannot run {python}: {_why(error)}"
        return built
    try:
        _gather(worker, request, built)
    except BaseException:  # Ctrl-C, SIGTERM: the worker may be busy, so no goodbye
        worker.kill()
        raise
    worker.close()
    built.threads = worker.threads
    return built


def _gather(worker: Any, request: dict, built: Built) -> None:
    """Run the request, and again in a fresh worker for the functions left each time the worker
    ends on one (or retires after running out of memory)."""
    wanted, skip = set(request["functions"]), request["skip"]
    while True:
        outcome = worker.check(request)
        done = _collect(outcome.built, built, wanted=wanted)
        ended = outcome.ended
        if ended is not None:
            built.endings.append(ended)
            if not ended.name:  # the import, or an atexit handler after every function
                return
            done.append(ended.name)
        elif not outcome.retire:
            return
        new = [name for name in dict.fromkeys(done) if name in wanted and name not in skip]
        skip += new
        if not new or wanted <= set(skip):
            return  # all done, or nothing moved on: the same request would end the same


def _collect(events: list, built: Built, *, wanted: set[str]) -> list[str]:
    """File the ``built`` events (those of functions that were asked for); the functions'
    names."""
    names = []
    for event in events:
        name = event["name"]
        if name is None:
            built.import_error = event["error"]
        elif name == "":
            built.atexit_errors.append(event["error"])
        elif name in wanted:
            keys = ("config", "returned_type", "error")
            built.functions[name] = {key: event[key] for key in keys if key in event}
            names.append(name)
    return names


def upstream_python_problem(python: str) -> str | None:
    """Why ``python`` cannot build upstream torchtitan 0.3.0 modules (``None``: it can): no
    such file, not a program, no Python, no torchtitan in it, or another release of it."""
    import shutil

    give = f"give the Python interpreter of an environment with torchtitan {UPSTREAM_VERSION}"
    if os.sep not in python:  # a command's name (python3): on PATH, where the worker finds it
        found = shutil.which(python)
        if found is None:
            return f"--python {python}: no such command on PATH; {give} (such as .venv/bin/python)"
        python = found
    if not os.path.lexists(python):
        return f"--python {python}: no such file; {give} (such as .venv/bin/python)"
    if os.path.isdir(python):
        return f"--python {python} is a folder; {give} (such as {python}/bin/python)"
    if not os.access(python, os.X_OK):
        return f"--python {python} is not executable; {give}"
    answer, why = _probe(python)
    if answer is None:
        return f"--python {python} is not a Python interpreter: {why}; {give}"
    return _answer_problem(python, answer)


def _answer_problem(python: str, answer: dict) -> str | None:
    install = f"`{python} -m pip install torchtitan=={UPSTREAM_VERSION}`"
    major, minor = answer["python"]
    if (major, minor) < (3, 10):
        return (
            f"--python {python} is Python {major}.{minor}; torchtitan {UPSTREAM_VERSION} needs "
            "Python 3.10 or later"
        )
    if answer["titan"] is not None:
        return f"--python {python} cannot run titan's worker: {answer['titan']}"
    if answer["torchtitan"] is None:
        return (
            f"--python {python} cannot import torchtitan ({answer['torchtitan_error']}); install "
            f"it there: {install}"
        )
    if not re.fullmatch(re.escape(UPSTREAM_VERSION) + r"(\+[\w.]+)?", answer["torchtitan"]):
        return (
            f"--python {python} has torchtitan {answer['torchtitan'] or '(no version)'}; its "
            f"modules are built with torchtitan {UPSTREAM_VERSION}: {install}"
        )
    return None


def _probe(python: str) -> tuple[dict | None, str]:
    """What ``python`` says of itself, or ``None`` and why it said nothing usable."""
    import subprocess

    from titan.cli.registry_child import UPSTREAM_BOOT, interpreter, titan_init

    setup = json.dumps({"titan": titan_init()})
    try:
        process = subprocess.Popen(
            [*interpreter(python), "-c", UPSTREAM_BOOT + _PROBE, setup],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as error:
        return None, f"it cannot be run ({_why(error)})"
    try:
        out, _ = process.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        return None, f"it answered nothing in {PROBE_TIMEOUT_S:g} s"
    except BaseException:  # Ctrl-C, SIGTERM
        _kill_group(process)
        raise
    for line in reversed(out.decode("utf-8", "replace").splitlines()):
        if line.startswith("titan-probe "):
            try:
                answer = json.loads(line.removeprefix("titan-probe "))
            except ValueError:
                break
            if _answer_shape(answer):
                return answer, ""
            break
    return None, f"run with -c, it answered nothing and exited with status {process.returncode}"


def _kill_group(process: Any) -> None:
    """End the probe and every process of its group (not yet reaped, so the group is still
    its own): one it started must not hold the pipe open."""
    import signal

    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        pass
    process.communicate()


def _answer_shape(answer: Any) -> bool:
    return (
        isinstance(answer, dict)
        and isinstance(answer.get("python"), list)
        and len(answer["python"]) == 2
        and all(isinstance(n, int) for n in answer["python"])
        and isinstance(answer.get("titan"), str | None)
        and isinstance(answer.get("torchtitan"), str | None)
        and isinstance(answer.get("torchtitan_error"), str | None)
    )


def _why(error: OSError) -> str:
    return error.strerror or str(error)

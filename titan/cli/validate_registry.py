"""``titan-validate config_registry.py``: check every registry function a module defines.

For each registry module named on the command line (or met in a folder):

1. its source is read and parsed, and the registry functions are found in the syntax tree
   (``titan.config.scan``); a syntax error, a name defined twice, a function that needs arguments
   and a ``TODO(titan-migrate)`` note are findings before anything runs;
2. in a worker process of its own (``titan.cli.registry_child``, one per run, reused from module
   to module), the module is imported as ``titan-train --registry FILE`` imports it (its folder
   on ``sys.path`` while it imports), and each registry function is called, nothing else
   (``titan.cli.registry_run``); an import that fails, a function that raises, exits, runs past
   ``--timeout`` or ``--memory-limit``, ends the process or returns something other than a
   ``Trainer.Config`` is a finding at its line;
3. each config goes through the checks of ``titan-validate --config`` (``titan.config.check``):
   field types, value ranges and the cross-field rules, with ``--ngpu``; findings point at the
   keyword or assignment that sets the value.

Nothing a module does reaches titan's process: not its exits, signals, streams, threads or
``atexit`` handlers. When the worker ends on a module (``os._exit``, a crash, a kill at the time
or memory limit), that is a finding where it ended (``titan.cli.registry_endings``) and a fresh
worker goes on with the module's remaining functions and the other modules. The files a module
imported from its own project (a neighbour ``common.py``) are forgotten after it, so a second
folder's ``common.py`` is imported afresh. Nothing here imports torch: titan's config tree does
not, and a registry module that does pays for its own import. Results are cached by content
(``titan.cli.registry_cache``).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import os
from collections.abc import Sequence
from typing import Any, TextIO

from titan.cli import registry_cache
from titan.cli.registry_errors import from_dict, selected, to_dict
from titan.config.scan import Scan, scan
from titan.schemas.diagnostics import Diagnostic, Severity, Span

__all__ = ["TIME_LIMIT_S", "Checked", "Workers", "check_module", "check_modules", "selected"]

TIME_LIMIT_S = 60.0
"""How long importing a registry module, or one registry function call, may take by default
(``--timeout``)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Checked:
    """One registry module's findings."""

    diagnostics: list[Diagnostic]
    text: str | None
    """The module's source (to quote lines), when it could be read."""
    declared: list[str]
    """Every registry function name the module declares (``--select`` matches against these)."""
    imported: bool = False
    """Whether the module's code ran (this run, not from the cache)."""


def check_modules(
    files: Sequence[tuple[str, str]],
    *,
    ngpu: int | None,
    select: Sequence[str],
    use_cache: bool,
    stderr: TextIO,
    timeout: float = TIME_LIMIT_S,
    module_path: Sequence[str] = (),
    memory_limit: int | None = None,
    python: str | None = None,
) -> list[Checked]:
    """Check each ``(path, shown)`` registry module, with the ``module_path`` folders first on
    ``sys.path`` while they are imported (``--module-path``); user code runs in one worker
    process for them all, limited to ``memory_limit`` bytes of address space when given."""
    workers = Workers(timeout=timeout, memory_limit=memory_limit, stderr=stderr)
    with workers:
        return [
            check_module(
                path,
                shown,
                ngpu=ngpu,
                select=select,
                use_cache=use_cache,
                stderr=stderr,
                timeout=timeout,
                module_path=module_path,
                workers=workers,
                python=python,
                memory_limit=memory_limit,
            )
            for path, shown in files
        ]


class Workers:
    """A run's worker process, started when a module first needs its code run (a run answered
    from the cache starts none), and ended with the run."""

    def __init__(self, *, timeout: float, memory_limit: int | None, stderr: TextIO) -> None:
        self.options = {"timeout": timeout, "memory_limit": memory_limit, "stderr": stderr}
        self.worker: Any = None

    def get(self) -> Any:
        """The :class:`~titan.cli.registry_child.Worker`."""
        if self.worker is None:
            from titan.cli.registry_child import Worker

            self.worker = Worker(**self.options)
        return self.worker

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, kind: type | None, *_: object) -> None:
        if self.worker is None:
            return
        if kind is not None:  # Ctrl-C, SIGTERM: the worker may be busy, so no goodbye
            self.worker.kill()
            return
        self.worker.close()
        threads = self.worker.threads
        if threads:  # the worker did not wait for them, as titan would not have
            from titan.cli.exits import say

            say(
                f"titan-validate: note: not waiting for {len(threads)} thread(s) the checked "
                f"code started ({', '.join(threads[:3])})",
                stream=self.options["stderr"],
            )


def check_module(
    path: str,
    shown: str,
    *,
    ngpu: int | None,
    select: Sequence[str],
    use_cache: bool,
    stderr: TextIO,
    timeout: float = TIME_LIMIT_S,
    module_path: Sequence[str] = (),
    workers: Workers | None = None,
    python: str | None = None,
    memory_limit: int | None = None,
) -> Checked:
    """The findings of one registry module (see the module docstring); ``workers`` holds the
    run's worker process (one for this module alone when not given)."""
    from titan.schemas.toml_source import read_bytes

    raw, problem = read_bytes(path, shown=shown)
    if raw is None:
        return Checked([problem], None, [])
    text, problem = _decode(raw, shown=shown)
    if text is None:
        return Checked([problem], None, [])
    if python is None:
        from titan.schemas import project

        python = project.for_file(path).upstream_python
    key = None
    if use_cache and python is None:  # a build's answer depends on that environment
        options: dict = {"ngpu": ngpu, "select": sorted(set(select))}
        if module_path:  # other folders may hold other modules of the names it imports
            options["module_path"] = [os.path.abspath(folder) for folder in module_path]
        key = registry_cache.key(path=path, shown=shown, content=raw, options=options)
        entry = registry_cache.load(key)
        if entry is not None:
            found = [from_dict(d) for d in entry["diagnostics"]]
            return Checked(found, text, list(entry["declared"]))
    own = workers is None
    workers = workers or Workers(timeout=timeout, memory_limit=None, stderr=stderr)
    with workers if own else contextlib.nullcontext():
        worker = workers.get()
        worker.start()  # it imports titan's config tree while the module is parsed here
        run = _Run(path=path, shown=shown, text=text, ngpu=ngpu, select=select)
        run.python, run.timeout, run.memory_limit, run.stderr = (
            python,
            timeout,
            memory_limit,
            stderr,
        )
        run.check(worker, module_path=module_path)
    if key is not None and run.cacheable:
        entry = {"diagnostics": [to_dict(d) for d in run.found], "declared": run.declared}
        registry_cache.store(key, entry, deps=run.deps)
    return Checked(run.found, text, run.declared, imported=run.imported)


def _decode(raw: bytes, *, shown: str) -> tuple[str | None, Diagnostic | None]:
    """Python source text, decoded as Python does (a coding cookie, else UTF-8)."""
    import tokenize

    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
        return raw.decode(encoding), None
    except (SyntaxError, LookupError, UnicodeDecodeError) as error:
        start = getattr(error, "start", 0)
        line = raw[:start].count(b"\n") + 1
        col = start - (raw.rfind(b"\n", 0, start) + 1) + 1
        return None, Diagnostic(
            code="registry-error",
            severity=Severity.ERROR,
            path="",
            message=f"the module cannot be decoded: {error}",
            hint="save the file as UTF-8 (or declare its encoding in a coding comment)",
            span=Span(file=shown, line=line, col=col),
        )


class _Run:
    """One cold check of one module: the static findings here, the rest by the worker."""

    def __init__(
        self, *, path: str, shown: str, text: str, ngpu: int | None, select: Sequence[str]
    ) -> None:
        self.path, self.full, self.shown, self.text = path, os.path.abspath(path), shown, text
        self.ngpu, self.select = ngpu, select
        self.found: list[Diagnostic] = []
        self.declared: list[str] = []
        self.deps: list[str] = []
        self.imported = False
        self.cacheable = True
        self.scan: Scan | None = None
        self.python: str | None = None
        """``--python``: an interpreter with torchtitan, where upstream modules are built."""
        self.timeout, self.memory_limit, self.stderr = TIME_LIMIT_S, None, None

    def check(self, worker: Any, *, module_path: Sequence[str]) -> None:
        try:
            tree = ast.parse(self.text, filename=self.shown)
        except SyntaxError as error:
            self._error(
                f"invalid Python: {error.msg}",
                line=error.lineno or 1,
                col=error.offset or 1,
                hint=f"fix the syntax; `python -m py_compile {self.shown}` shows the same error",
            )
            return
        except ValueError as error:  # a NUL byte
            self._error(f"invalid Python: {error}", line=1, col=1, hint="remove the NUL bytes")
            return
        except (RecursionError, MemoryError):  # Python cannot compile it either
            self._error(
                "the module nests expressions too deeply for Python to compile",
                line=1,
                col=1,
                hint="split the long expression into several statements",
            )
            return
        found = scan(tree, self.text)
        self.scan = found
        self.declared = found.names()
        self._static_findings(found)
        upstream = _upstream_import(tree)
        if upstream is not None:  # upstream torchtitan's registry: read, never imported here
            self._upstream_module(tree, found)
            return
        wanted = [f for f in found.functions if selected(f.name, self.select)]
        if not wanted:
            return  # nothing to run: the module's code is not imported for nothing
        self._in_worker(worker, found, wanted, module_path=module_path)
        self.found = sorted(self.found, key=Diagnostic.sort_key)

    def _in_worker(self, worker: Any, found: Scan, wanted: list, *, module_path: Sequence[str]):
        """Import and call in the worker; when it ends on a function, the finding says where
        and a fresh worker goes on with the functions after it."""
        from titan.cli.registry_endings import ending_finding

        request = {
            "path": self.path,
            "shown": self.shown,
            "text": self.text,
            "ngpu": self.ngpu,
            "select": list(self.select),
            "module_path": [os.path.abspath(folder) for folder in module_path],
            "skip": [],
        }
        by_name = {f.name: f for f in wanted}
        while True:
            outcome = worker.check(request)
            self.imported = self.imported or outcome.imported
            self.cacheable = self.cacheable and outcome.cacheable
            self.deps += [d for d in outcome.deps if isinstance(d, str)]
            try:
                self.found += [from_dict(d) for d in outcome.found]
            except (KeyError, TypeError, ValueError, IndexError):  # not what titan's worker sends
                outcome.ended = outcome.ended or _garbage(outcome)
            self.declared += [
                n for n in outcome.declared if isinstance(n, str) and n not in self.declared
            ]
            ended = outcome.ended
            if ended is None:
                return
            names = found.names()
            suffix = ""
            if ended.name is None and names:
                suffix = (
                    f"; none of its {len(names)} registry functions were checked"
                    if len(names) != 1
                    else f"; its registry function `{names[0]}` was not checked"
                )
            self.found.append(
                ending_finding(
                    ended,
                    full=self.full,
                    shown=self.shown,
                    text=self.text,
                    default=by_name.get(ended.name or ""),
                    timeout=worker.timeout,
                    memory_limit=worker.memory_limit,
                    suffix=suffix,
                )
            )
            if not ended.name:  # the import, or an atexit handler after every function
                return
            request["skip"] += [*outcome.finished, ended.name]
            if all(name in request["skip"] for name in by_name):
                return

    def _static_findings(self, found: Scan) -> None:
        for duplicate in found.duplicates:
            if not selected(duplicate.name, self.select):
                continue
            self._error(
                f"`{duplicate.name}` is defined twice (also at line {duplicate.first_line}); only "
                "this later definition is registered",
                line=duplicate.line,
                col=duplicate.col,
                end_col=duplicate.col + len(duplicate.name),
                code="duplicate-config",
                path=duplicate.name,
                hint="rename one of them: the earlier definition can never be run",
            )
        for todo in found.todos:
            self.found.append(
                Diagnostic(
                    code="migration-todo",
                    severity=Severity.WARNING,
                    path="",
                    message=f"left by titan-migrate: {todo.text}",
                    hint="settle it by hand, then delete the TODO comment (--strict fails on it)",
                    span=Span(file=self.shown, line=todo.line, col=todo.col),
                )
            )

    def _upstream_module(self, tree: ast.Module, found: Scan) -> None:
        """A module written for upstream torchtitan 0.3.0: checked statically against 0.3.0's
        generated tables (``titan.migrate.registry_check``), without torchtitan."""
        from titan.migrate.registry_check import check_tree

        wanted = [
            (f.name, f.line, f.col)
            for f in found.functions
            if (f.certain or not f.needs) and selected(f.name, self.select)
        ]
        built = self._build(wanted) if self.python is not None and wanted else None
        self.found += check_tree(
            tree,
            path=self.path,
            shown=self.shown,
            functions=wanted,
            ngpu=self.ngpu,
            built=built,
            text=self.text,
        )
        self.found = sorted(self.found, key=Diagnostic.sort_key)

    def _build(self, wanted: list[tuple[str, int, int]]) -> Any:
        """Build the functions in the ``--python`` interpreter (titan's sandboxed worker, with
        ``--timeout`` and ``--memory-limit``); a problem of that interpreter is one finding."""
        from titan.cli.upstream_build import build_module, upstream_python_problem
        from titan.migrate.registry_check import Built, package_of

        assert self.python is not None
        self.cacheable = False
        problem = upstream_python_problem(self.python)
        if problem is not None:
            self._error(
                f"cannot build it with {self.python}: {problem}",
                line=1,
                col=1,
                code="upstream-build",
                hint="name an interpreter where torchtitan 0.3.0 is installed "
                "(`make test-upstream` makes .venv-upstream/bin/python), or drop --python "
                "for the static check alone",
            )
            return None
        package = package_of(self.path)
        # A torchtitan checkout's own module is built with that checkout importable.
        above = os.path.abspath(self.path).split(os.sep)
        root = os.sep.join(above[: len(above) - 1 - package.count(".") - 1]) if package else None
        result = build_module(
            self.path,
            self.shown,
            [name for name, _, _ in wanted],
            python=self.python,
            package=package,
            module_path=[root] if root else [],
            timeout=self.timeout,
            memory_limit=self.memory_limit,
            stderr=self.stderr,
        )
        self.imported = True
        if result.problem is not None:
            self._error(
                f"cannot build it with {self.python}: {result.problem}",
                line=1,
                col=1,
                code="upstream-build",
                hint="check that the interpreter starts and has torchtitan 0.3.0",
            )
        declared = {f.name: f for f in self.scan.functions} if self.scan is not None else None
        self.found += result.ending_findings(text=self.text, declared=declared)
        return Built(dict(result.functions), result.import_error)

    def _error(
        self,
        message: str,
        *,
        line: int,
        col: int,
        hint: str,
        code: str = "registry-error",
        path: str = "",
        end_col: int | None = None,
    ) -> None:
        self.found.append(
            Diagnostic(
                code=code,
                severity=Severity.ERROR,
                path=path,
                message=message,
                hint=hint,
                span=Span(file=self.shown, line=line, col=col, end_col=end_col),
            )
        )


def _upstream_import(tree: ast.Module) -> ast.stmt | None:
    """The module's first top-level import of upstream ``torchtitan``, if any."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] == "torchtitan":
                return node
        elif isinstance(node, ast.Import):
            if any(alias.name.split(".")[0] == "torchtitan" for alias in node.names):
                return node
    return None


def _garbage(outcome: Any) -> Any:
    """An ending for findings that are not what titan's worker sends."""
    from titan.cli.registry_child import Ended

    return Ended(how="garbage", doing="sending its findings", name="")

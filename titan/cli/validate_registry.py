"""``titan-validate config_registry.py``: check every registry function a module defines.

For each registry module named on the command line (or met in a folder):

1. its source is read and parsed, and the registry functions are found in the syntax tree
   (``titan.config.scan``); a syntax error, a name defined twice, a function that needs arguments
   and a ``TODO(titan-migrate)`` note are findings before anything runs;
2. the module is imported as ``titan-train --registry FILE`` imports it (its folder on
   ``sys.path`` while it imports), and each registry function is called, nothing else; an import
   that fails, a function that raises, exits, runs past the time limit or returns something
   other than a ``Trainer.Config`` is a finding at its line;
3. each config goes through the checks of ``titan-validate --config`` (``titan.config.check``):
   field types, value ranges and the cross-field rules, with ``--ngpu``; findings point at the
   keyword or assignment that sets the value.

Nothing here imports torch: titan's config tree does not, and a registry module that does pays
for its own import. Modules are checked one after another in this process; the files a module
imported from its own project (a neighbour ``common.py``) are forgotten after it, so a second
folder's ``common.py`` is imported afresh. Results are cached by content
(``titan.cli.registry_cache``).
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import fnmatch
import io
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from titan.cli import registry_cache
from titan.config.scan import Declared, Scan, scan
from titan.schemas.diagnostics import Diagnostic, Severity, Span

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
) -> list[Checked]:
    """Check each ``(path, shown)`` registry module, with the ``module_path`` folders first on
    ``sys.path`` while they are imported (``--module-path``)."""
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
        )
        for path, shown in files
    ]


def selected(name: str, select: Sequence[str]) -> bool:
    """Whether ``--select`` (names or shell patterns; none means all) takes function ``name``."""
    return not select or any(fnmatch.fnmatchcase(name, pattern) for pattern in select)


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
) -> Checked:
    """The findings of one registry module (see the module docstring)."""
    from titan.schemas.toml_source import read_bytes

    raw, problem = read_bytes(path, shown=shown)
    if raw is None:
        return Checked([problem], None, [])
    text, problem = _decode(raw, shown=shown)
    if text is None:
        return Checked([problem], None, [])
    key = None
    if use_cache:
        options: dict = {"ngpu": ngpu, "select": sorted(set(select))}
        if module_path:  # other folders may hold other modules of the names it imports
            options["module_path"] = [os.path.abspath(folder) for folder in module_path]
        key = registry_cache.key(path=path, shown=shown, content=raw, options=options)
        entry = registry_cache.load(key)
        if entry is not None:
            found = [_from_dict(d) for d in entry["diagnostics"]]
            return Checked(found, text, list(entry["declared"]))
    run = _Run(
        path=path,
        shown=shown,
        text=text,
        ngpu=ngpu,
        select=select,
        stderr=stderr,
        timeout=timeout,
    )
    from titan.cli.module_path import importable

    with importable(module_path):
        run.check()
    if key is not None and run.cacheable:
        entry = {
            "diagnostics": [_to_dict(d) for d in run.found],
            "declared": run.declared,
        }
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


class _TimeLimit(BaseException):
    """Raised in user code that runs past the time limit (a BaseException so that a registry's
    ``except Exception`` cannot swallow it)."""


class _Run:
    """One cold check of one module."""

    def __init__(
        self,
        *,
        path: str,
        shown: str,
        text: str,
        ngpu: int | None,
        select: Sequence[str],
        stderr: TextIO,
        timeout: float,
    ) -> None:
        self.timeout = timeout
        self.path, self.full, self.shown, self.text = path, os.path.abspath(path), shown, text
        self.ngpu, self.select, self.stderr = ngpu, select, stderr
        self.found: list[Diagnostic] = []
        self.declared: list[str] = []
        self.deps: list[str] = []
        self.imported = False
        self.cacheable = True

    def check(self) -> None:
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
        found = scan(tree, self.text)
        self.declared = found.names()
        self._static_findings(found)
        upstream = _upstream_import(tree)
        if upstream is not None:  # upstream torchtitan's registry: not titan's to import
            self._upstream_module(upstream)
            return
        wanted = [f for f in found.functions if selected(f.name, self.select)]
        if not wanted:
            return  # nothing to run: the module's code is not imported for nothing
        before, cwd = set(sys.modules), os.getcwd()
        try:
            self._import_and_call(wanted, found)
        finally:
            self._forget_project_modules(before)
            if os.getcwd() != cwd:  # a module that changed folder would move every later path
                os.chdir(cwd)
        self.found = sorted(self.found, key=Diagnostic.sort_key)

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

    def _upstream_module(self, node: ast.stmt) -> None:
        self.found.append(
            Diagnostic(
                code="upstream-module",
                severity=Severity.WARNING,
                path="",
                message="a registry module of upstream torchtitan (it imports torchtitan): "
                "titan-validate checks titan's registry configs, so it was not imported and its "
                "functions were not checked",
                hint="check the TOMLs it was migrated from with `titan-validate --as-registry "
                "--target torchtitan==0.3.0`, and build its functions where torchtitan is "
                "installed",
                span=Span(file=self.shown, line=node.lineno, col=node.col_offset + 1),
            )
        )
        self.found = sorted(self.found, key=Diagnostic.sort_key)

    def _import_and_call(self, wanted: list[Declared], found: Scan) -> None:
        from titan.config import manager

        captured = io.StringIO()
        try:
            with self._user_code(captured, doing=f"importing {self.shown}"):
                module = self._load()
        except manager.RegistryError as error:
            self.cacheable = False  # an import can fail on what lies around the file
            names = found.names()
            unchecked = (
                f"; none of its {len(names)} registry functions were checked"
                if len(names) != 1
                else f"; its registry function `{names[0]}` was not checked"
            )
            self._finding(error, suffix=unchecked if names else "", hint=_import_hint(error))
            return
        finally:
            self._echo(captured)
        self.imported = True
        from titan.config.check import check_config
        from titan.config.locate import locator, node_locator

        for declared in wanted:
            function = self._callable(declared, module)
            if function is None:
                continue
            try:
                with self._user_code(captured, doing=f"running {declared.name}()"):
                    config = manager.call(manager.RegistryFunction(declared.name, function, module))
            except manager.RegistryError as error:
                self._finding(error, hint=_call_hint(error), path=declared.name)
                continue
            finally:
                self._echo(captured)
            if declared.name not in self.declared:
                self.declared.append(declared.name)  # a maybe: its annotation said so
            if not _is_trainer_config(config):
                what = type(config).__qualname__
                self._error(
                    f"`{declared.name}()` returned {what}, not a Trainer.Config",
                    line=declared.line,
                    col=declared.col,
                    code="registry-error",
                    path=declared.name,
                    hint="a registry function returns a Trainer.Config (or the Config of a "
                    "Trainer subclass)",
                )
                continue
            node = found.nodes.get(declared.name)
            same_code = getattr(function, "__code__", None)  # not a wrapper from elsewhere
            if (
                node is not None
                and same_code is not None
                and os.path.abspath(same_code.co_filename) == self.full
                and same_code.co_name == declared.name
            ):
                locate = node_locator(node, file=self.full)
            else:
                locate = locator(function)
            for finding in check_config(config, ngpu=self.ngpu, locate=locate):
                self.found.append(self._placed(finding, default=declared))

    def _load(self) -> Any:
        """Import the module: by its dotted name when its folder is a package (so relative
        imports work, as with ``titan-train --module pkg.config_registry``), else as a file
        with its folder on ``sys.path`` (``titan-train --registry FILE``)."""
        import importlib

        from titan.config import manager

        dotted, top = _package_name(self.full)
        if dotted is None or dotted in sys.modules:
            return manager.load_file(self.path)
        sys.path.insert(0, top)
        try:
            module = importlib.import_module(dotted)
        except ModuleNotFoundError as error:
            if error.name is not None and dotted.startswith(error.name):
                return manager.load_file(self.path)  # the package is not importable by name
            raise manager.user_code_error(
                error, files={self.full}, doing=f"importing {self.shown}"
            ) from None
        except Exception as error:
            raise manager.user_code_error(
                error, files={self.full}, doing=f"importing {self.shown}"
            ) from None
        finally:
            sys.path.remove(top)
        if os.path.abspath(getattr(module, "__file__", "") or "") != self.full:
            return manager.load_file(self.path)  # another module of that name came first
        return module

    def _callable(self, declared: Declared, module: Any) -> Any:
        """The function object to call, or ``None`` after reporting why there is none."""
        if declared.needs:
            params = ", ".join(declared.needs)
            self._error(
                f"`{declared.name}()` needs arguments ({params}); a registry function is called "
                "with none",
                line=declared.line,
                col=declared.col,
                end_col=declared.col + len(declared.name),
                code="registry-signature",
                path=declared.name,
                hint="give every parameter a default, or rename it `_"
                f"{declared.name}` (a helper) and add a function without parameters that calls it",
            )
            return None
        if declared.is_async:
            self._error(
                f"`{declared.name}` is `async def`; a registry function is called, not awaited",
                line=declared.line,
                col=declared.col,
                code="registry-signature",
                path=declared.name,
                hint="define it with a plain `def`",
            )
            return None
        function = getattr(module, declared.name, None)
        if not callable(function):
            self._error(
                f"`{declared.name}` is defined here, but the module rebinds the name to "
                f"{type(function).__qualname__}",
                line=declared.line,
                col=declared.col,
                code="registry-error",
                path=declared.name,
                hint="keep one meaning per name: rename the function or the later assignment",
            )
            return None
        if not declared.certain and not _returns_trainer_config(function):
            return None  # annotated with something that is not a trainer config: a helper
        return function

    @contextlib.contextmanager
    def _user_code(self, captured: io.StringIO, *, doing: str) -> Iterator[None]:
        """Run user code: its prints kept off the report, nothing to read on stdin (a prompt
        would wait forever in a hook), ``sys.exit`` and the time limit turned into
        :class:`~titan.config.manager.RegistryError`."""
        from titan.cli.registry import exit_is_an_error
        from titan.config import manager

        stdin = sys.stdin
        sys.stdin = io.StringIO()
        try:
            with (
                contextlib.redirect_stdout(captured),
                _time_limit(self.timeout),
                exit_is_an_error(doing),
            ):
                yield
        except _TimeLimit as stop:
            self.cacheable = False
            raise manager.RegistryError(
                f"no answer after {self.timeout:g} s while {doing}",
                code="registry-error",
                hint="a registry function only builds a config: look for a loop or a wait at "
                "this line",
                span=_innermost(stop, self.full),
            ) from None
        finally:
            sys.stdin = stdin

    def _echo(self, captured: io.StringIO) -> None:
        """What user code printed goes to stderr (stdout carries the report)."""
        text = captured.getvalue()
        if text:
            from titan.cli.streams import write

            write(text, out=self.stderr)
            captured.seek(0)
            captured.truncate()

    def _forget_project_modules(self, before: set[str]) -> None:
        """Drop the modules this module imported from its own project (recorded as cache
        dependencies) so that another folder's module of the same name is imported afresh."""
        installed = _installed_roots()
        for name in set(sys.modules) - before:
            file = getattr(sys.modules.get(name), "__file__", None)
            if not file or name.startswith("_titan_registry_"):
                continue
            file = os.path.abspath(file)
            if any(file.startswith(root) for root in installed):
                continue
            self.deps.append(file)
            del sys.modules[name]

    def _finding(
        self, error: Any, *, suffix: str = "", hint: str | None = None, path: str = ""
    ) -> None:
        span = error.span or Span(file=self.full, line=1, col=1)
        self.found.append(
            self._placed(
                Diagnostic(
                    code=error.code,
                    severity=Severity.ERROR,
                    path=path,
                    message=error.message + suffix,
                    hint=error.hint or hint,
                    span=span,
                ),
                default=None,
            )
        )

    def _placed(self, finding: Diagnostic, *, default: Declared | None) -> Diagnostic:
        """``finding`` with its file named as the user named it, and a hint when it had none."""
        span = finding.span
        if span is None:
            line, col = (default.line, default.col) if default else (1, 1)
            span = Span(file=self.full, line=line, col=col)
        span = dataclasses.replace(span, file=self._shown(span.file))
        hint = finding.hint or _generic_hint(finding)
        return dataclasses.replace(finding, span=span, hint=hint)

    def _shown(self, file: str) -> str:
        if os.path.abspath(file) == self.full:
            return self.shown
        relative = os.path.relpath(file) if os.path.isabs(file) else file
        return file if relative.startswith(os.pardir) else relative

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


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`_TimeLimit` in the code below after ``seconds`` (main thread, POSIX)."""
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise _TimeLimit()

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _innermost(error: BaseException, file: str) -> Span | None:
    """The last line of ``file`` the traceback passed through."""
    import linecache

    best = None
    tb = error.__traceback__
    while tb is not None:
        name = os.path.abspath(tb.tb_frame.f_code.co_filename)
        if name == file:
            text = linecache.getline(name, tb.tb_lineno)
            best = Span(file=name, line=tb.tb_lineno, col=len(text) - len(text.lstrip()) + 1)
        tb = tb.tb_next
    return best


def _package_name(file: str) -> tuple[str | None, str]:
    """``("pkg.sub.config_registry", top folder)`` for a file in a package (folders with
    ``__init__.py``), else ``(None, "")``."""
    folder, parts = os.path.dirname(file), [os.path.splitext(os.path.basename(file))[0]]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        parts.append(os.path.basename(folder))
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    if len(parts) == 1 or not all(p.isidentifier() for p in parts):
        return None, ""
    return ".".join(reversed(parts)), folder


def _installed_roots() -> tuple[str, ...]:
    """Folders whose modules are installed code, not the project's own (titan, the standard
    library, site-packages)."""
    import sysconfig

    import titan

    roots = {os.path.dirname(os.path.dirname(os.path.abspath(titan.__file__)))}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        found = sysconfig.get_paths().get(key)
        if found:
            roots.add(os.path.abspath(found))
    roots.update(os.path.abspath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix))
    return tuple(root.rstrip(os.sep) + os.sep for root in roots)


def _is_trainer_config(value: Any) -> bool:
    from titan.trainer import Trainer

    return isinstance(value, Trainer.Config)


def _returns_trainer_config(function: Any) -> bool:
    """Whether a function's (evaluated) return annotation is a ``Trainer.Config`` subclass."""
    import typing

    from titan.trainer import Trainer

    try:
        annotation = typing.get_type_hints(function).get("return")
    except Exception:  # an annotation that does not evaluate says nothing
        return False
    return isinstance(annotation, type) and issubclass(annotation, Trainer.Config)


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


def _import_hint(error: Any) -> str:
    if "ModuleNotFoundError" in error.message or "ImportError" in error.message:
        return (
            "install what it imports or fix the import: the module is imported as titan-train "
            "--registry imports it, with its own folder on sys.path"
        )
    return "fix the error at this line: every registry function of the module depends on it"


def _call_hint(error: Any) -> str:
    if "ModuleNotFoundError" in error.message or "ImportError" in error.message:
        return "install what the function imports, or fix the import"
    return "a registry function only builds and returns its config: fix the code at this line"


def _generic_hint(finding: Diagnostic) -> str:
    if finding.code in ("wrong-type", "invalid-choice"):
        return "change the value here to the type the field declares"
    return "change the value set here"


def _to_dict(d: Diagnostic) -> dict:
    span = None
    if d.span is not None:
        s = d.span
        span = [s.file, s.line, s.col, s.end_line, s.end_col]
    return {
        "code": d.code,
        "severity": d.severity.value,
        "path": d.path,
        "message": d.message,
        "hint": d.hint,
        "span": span,
    }


def _from_dict(data: dict) -> Diagnostic:
    span = data["span"]
    return Diagnostic(
        code=data["code"],
        severity=Severity(data["severity"]),
        path=data["path"],
        message=data["message"],
        hint=data["hint"],
        span=None
        if span is None
        else Span(file=span[0], line=span[1], col=span[2], end_line=span[3], end_col=span[4]),
    )

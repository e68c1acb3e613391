"""Import one registry module and call its registry functions, inside the worker process.

This is the part of ``titan-validate config_registry.py`` that runs user code
(``titan.cli.registry_worker`` calls :func:`run_module`; ``titan.cli.validate_registry`` does the
static part and the cache in titan's own process). The module is imported as ``titan-train
--registry FILE`` imports it, each registry function is called with nothing to read on stdin, and
each config goes through ``titan.config.check``. Every finding is sent as soon as it is known,
so that what was found before the process is stopped is kept.

Whatever the module does becomes a finding at its line: an exception of any kind (also
``KeyboardInterrupt``, ``GeneratorExit`` and bare ``BaseException``), ``sys.exit``, running out of
memory under ``--memory-limit``, an ``atexit`` handler that fails. Afterwards the process is put
back as it was for the next module: the modules the registry imported from its own project are
forgotten (recorded as cache dependencies), and ``sys.path``, the working folder and the standard
streams are restored.
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

from titan.cli.registry_errors import (
    forget_project_modules,
    innermost,
    load_module,
    placed,
    returns_trainer_config,
    unexpected,
)
from titan.config import manager
from titan.config.check import check_config
from titan.config.locate import locator, node_locator
from titan.config.scan import Declared, scan
from titan.schemas.diagnostics import Diagnostic, Severity, Span

Send = Callable[..., None]


class ModuleRun:
    """One module's import and calls; ``send`` reports each event to titan's process."""

    def __init__(self, request: dict, *, send: Send, watchdog: Any, atexits: list) -> None:
        self.path, self.shown, self.text = request["path"], request["shown"], request["text"]
        self.full = os.path.abspath(self.path)
        self.ngpu, self.select = request["ngpu"], request["select"]
        self.skip = set(request.get("skip", ()))
        self.memory_limit = request.get("memory_limit")
        self.module_path = tuple(request.get("module_path", ()))
        self.send, self.watchdog, self.atexits = send, watchdog, atexits
        self.deps: list[str] = []
        self.cacheable = True
        self.retire = False

    def run(self) -> None:
        """Import, call and check; then send ``done``."""
        from titan.cli.module_path import importable
        from titan.cli.registry_errors import selected

        found = scan(ast.parse(self.text, filename=self.shown), self.text)
        wanted = [f for f in found.functions if selected(f.name, self.select)]
        before, path, cwd = set(sys.modules), list(sys.path), os.getcwd()
        try:
            with importable(self.module_path):
                self._import_and_call([f for f in wanted if f.name not in self.skip], found)
        finally:
            self.deps += forget_project_modules(before)
            sys.path[:] = path
            if os.getcwd() != cwd:  # a module that changed folder would move every later path
                os.chdir(cwd)
        self.send(ev="done", deps=self.deps, cacheable=self.cacheable, retire=self.retire)

    def _import_and_call(self, wanted: list[Declared], found: Any) -> None:
        names = found.names()
        self.send(ev="step", doing=f"importing {self.shown}", name=None)
        try:
            with self._user_code(f"importing {self.shown}"):
                module = load_module(self.path, self.full, self.shown)
        except manager.RegistryError as error:
            self.cacheable = False  # an import can fail on what lies around the file
            unchecked = (
                f"; none of its {len(names)} registry functions were checked"
                if len(names) != 1
                else f"; its registry function `{names[0]}` was not checked"
            )
            self._report(error, suffix=unchecked if names else "", hint=_import_hint(error))
            return
        for declared in wanted:
            self.send(ev="step", doing=f"running {declared.name}()", name=declared.name)
            findings, config_declared = self._function(declared, module, found)
            if findings or config_declared:
                self.send(
                    ev="found",
                    diagnostics=[_to_dict(d) for d in findings],
                    declared=[declared.name] if config_declared else [],
                )
            if self.retire:
                break  # out of memory: the rest is checked by a fresh process
        self._run_atexits()

    def _function(self, declared: Declared, module: Any, found: Any) -> tuple[list, bool]:
        """One function's findings, and whether it returned a config (a maybe that is one)."""
        function = self._callable(declared, module)
        if isinstance(function, Diagnostic):
            return [function], False
        if function is None:
            return [], False
        doing = f"running {declared.name}()"
        try:
            with self._user_code(doing):
                config = manager.call(manager.RegistryFunction(declared.name, function, module))
        except manager.RegistryError as error:
            return [self._finding(error, hint=_call_hint(error), path=declared.name)], False
        from titan.trainer import Trainer

        if not isinstance(config, Trainer.Config):
            what = type(config).__qualname__
            return [
                self._error(
                    f"`{declared.name}()` returned {what}, not a Trainer.Config",
                    declared,
                    hint="a registry function returns a Trainer.Config (or the Config of a "
                    "Trainer subclass)",
                )
            ], True
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
        doing = f"checking the config {declared.name}() returned"
        try:
            with self._user_code(doing):  # its values may be user objects with code of their own
                checked = list(check_config(config, ngpu=self.ngpu, locate=locate))
        except manager.RegistryError as error:
            return [self._finding(error, hint=_call_hint(error), path=declared.name)], True
        return [self._placed(f, default=declared) for f in checked], True

    def _callable(self, declared: Declared, module: Any) -> Any:
        """The function object to call, ``None`` (a helper), or the finding why there is none."""
        if declared.needs:
            params = ", ".join(declared.needs)
            return self._error(
                f"`{declared.name}()` needs arguments ({params}); a registry function is called "
                "with none",
                declared,
                code="registry-signature",
                end_col=declared.col + len(declared.name),
                hint="give every parameter a default, or rename it `_"
                f"{declared.name}` (a helper) and add a function without parameters that calls it",
            )
        if declared.is_async:
            return self._error(
                f"`{declared.name}` is `async def`; a registry function is called, not awaited",
                declared,
                code="registry-signature",
                hint="define it with a plain `def`",
            )
        function = getattr(module, declared.name, None)
        if not callable(function):
            return self._error(
                f"`{declared.name}` is defined here, but the module rebinds the name to "
                f"{type(function).__qualname__}",
                declared,
                hint="keep one meaning per name: rename the function or the later assignment",
            )
        if not declared.certain and not returns_trainer_config(function):
            return None  # annotated with something that is not a trainer config: a helper
        return function

    def _run_atexits(self) -> None:
        """The ``atexit`` handlers the module registered, last first, as the module expects
        at the end of its process (the worker itself never runs them)."""
        while self.atexits:
            function, args, kwargs = self.atexits.pop()
            name = getattr(function, "__qualname__", None) or type(function).__name__
            doing = f"running the atexit handler {name}() of {self.shown}"
            self.send(ev="step", doing=doing, name="")
            try:
                with self._user_code(doing):
                    function(*args, **kwargs)
            except manager.RegistryError as error:
                self.send(
                    ev="found",
                    diagnostics=[_to_dict(self._finding(error, hint=_ATEXIT_HINT))],
                    declared=[],
                )

    @contextlib.contextmanager
    def _user_code(self, doing: str) -> Iterator[None]:
        """Run user code with nothing to read on stdin (a prompt would wait forever in a hook);
        whatever it raises becomes a :class:`~titan.config.manager.RegistryError`."""
        from titan.cli.registry import exit_is_an_error

        self.watchdog.arm(doing)
        stdin = sys.stdin
        sys.stdin = io.StringIO()
        try:
            with exit_is_an_error(doing):
                yield
        except manager.RegistryError as error:
            if isinstance(error.__context__, MemoryError) and self.memory_limit:
                raise self._out_of_memory(error.__context__, doing) from None
            raise
        except MemoryError as error:
            if self.memory_limit:
                raise self._out_of_memory(error, doing) from None
            raise unexpected(error, doing=doing, file=self.full) from None
        except BaseException as error:  # KeyboardInterrupt, GeneratorExit, BaseException...
            raise unexpected(error, doing=doing, file=self.full) from None
        finally:
            sys.stdin = stdin
            self.watchdog.disarm()

    def _out_of_memory(self, error: BaseException, doing: str) -> manager.RegistryError:
        from titan.cli.registry_errors import memory_text

        self.retire = True  # a process that ran out of memory is not trusted with another module
        self.cacheable = False
        return manager.RegistryError(
            f"out of memory under --memory-limit {memory_text(self.memory_limit)} while {doing}",
            code="registry-error",
            hint="a registry function only builds a config: look for what grows at this line, "
            "or raise --memory-limit if the module really needs more",
            span=innermost(error, self.full),
        )

    def _report(self, error: Any, *, suffix: str = "", hint: str | None = None) -> None:
        self.send(
            ev="found",
            diagnostics=[_to_dict(self._finding(error, suffix=suffix, hint=hint))],
            declared=[],
        )

    def _finding(
        self, error: Any, *, suffix: str = "", hint: str | None = None, path: str = ""
    ) -> Diagnostic:
        span = error.span or Span(file=self.full, line=1, col=1)
        return self._placed(
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

    def _placed(self, finding: Diagnostic, *, default: Declared | None) -> Diagnostic:
        return placed(finding, default=default, full=self.full, shown=self.shown)

    def _error(
        self,
        message: str,
        declared: Declared,
        *,
        hint: str,
        code: str = "registry-error",
        end_col: int | None = None,
    ) -> Diagnostic:
        return Diagnostic(
            code=code,
            severity=Severity.ERROR,
            path=declared.name,
            message=message,
            hint=hint,
            span=Span(file=self.shown, line=declared.line, col=declared.col, end_col=end_col),
        )


_ATEXIT_HINT = (
    "an atexit handler of a registry module runs when the module's process ends: fix the code "
    "at this line, or do not register it"
)


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


def _to_dict(d: Diagnostic) -> dict:
    from titan.cli.registry_errors import to_dict

    return to_dict(d)

"""Pieces shared by both sides of a registry module check: findings as JSON, where user code was,
how a module is imported and forgotten again, and how ``--memory-limit`` sizes are read and shown.

``titan.cli.validate_registry`` (titan's process) and ``titan.cli.registry_run`` (the worker
process that runs user code) both use them; nothing here runs user code itself.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import re
import sys
from collections.abc import Sequence
from typing import Any

from titan.schemas.diagnostics import Diagnostic, Severity, Span

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1000,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1000**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1000**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1000**4,
    "tib": 1024**4,
}
"""``--memory-limit`` suffixes (case does not matter): K/M/G/T and KiB... are powers of 1024,
KB/MB/GB/TB powers of 1000, no suffix bytes."""


def memory_bytes(text: str) -> int | None:
    """``4GiB``, ``512M``, ``1.5G``, ``2000000000`` as bytes; ``None`` when it is not a size."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*", text)
    if match is None or match.group(2).lower() not in _UNITS:
        return None
    value = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    return value if value > 0 else None


def memory_text(size: int) -> str:
    """A byte count as people write it (``4 GiB``, ``1.5 GiB``, ``300 MiB``)."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor:
            return f"{size / factor:.4g} {unit}"
    return f"{size} bytes"


def selected(name: str, select: Sequence[str]) -> bool:
    """Whether ``--select`` (names or shell patterns; none means all) takes function ``name``."""
    return not select or any(fnmatch.fnmatchcase(name, pattern) for pattern in select)


def to_dict(d: Diagnostic) -> dict:
    """A finding as JSON (the cache's entries and the worker's messages)."""
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


def from_dict(data: dict) -> Diagnostic:
    """:func:`to_dict` read back."""
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


def column(text: str | None, line: int) -> int:
    """The column of the first non-blank character of ``line`` in ``text`` (1 when unknown)."""
    lines = (text or "").splitlines()
    if not 1 <= line <= len(lines):
        return 1
    return len(lines[line - 1]) - len(lines[line - 1].lstrip()) + 1


def innermost(error: BaseException, file: str) -> Span | None:
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


_UNEXPECTED_HINTS = {
    KeyboardInterrupt: "the module raised KeyboardInterrupt itself (nobody pressed Ctrl-C): raise "
    "an Exception subclass to report a problem",
    GeneratorExit: "GeneratorExit belongs to generators' own shutdown: raise an Exception "
    "subclass to report a problem",
}
_BASE_HINT = (
    "raise an Exception subclass, not a BaseException, to report a problem; a registry "
    "function only builds and returns its config"
)


def unexpected(error: BaseException, *, doing: str, file: str) -> Any:
    """A ``RegistryError`` for what user code raised that is no ``Exception`` (or that titan's
    usual description of it could not handle)."""
    from titan.config import manager

    try:
        said = str(error)
    except BaseException:  # an exception whose own text fails
        said = ""
    name = type(error).__name__
    hint = next((h for kind, h in _UNEXPECTED_HINTS.items() if isinstance(error, kind)), None)
    if hint is None and isinstance(error, Exception):
        hint = "fix the code at this line: a registry function only builds and returns its config"
    return manager.RegistryError(
        f"{name} while {doing}" + (f": {said}" if said else ""),
        code="registry-error",
        hint=hint or _BASE_HINT,
        span=innermost(error, file),
    )


def placed(finding: Diagnostic, *, default: Any, full: str, shown: str) -> Diagnostic:
    """``finding`` with its file named as the user named it, and a hint when it had none."""
    span = finding.span
    if span is None:
        line, col = (default.line, default.col) if default else (1, 1)
        span = Span(file=full, line=line, col=col)
    span = dataclasses.replace(span, file=shown_as(span.file, full=full, shown=shown))
    hint = finding.hint or _generic_hint(finding)
    return dataclasses.replace(finding, span=span, hint=hint)


def shown_as(file: str, *, full: str, shown: str) -> str:
    """``file`` as the report names it: the module as the user named it, others relative to the
    working folder when they are under it."""
    if os.path.abspath(file) == full:
        return shown
    relative = os.path.relpath(file) if os.path.isabs(file) else file
    return file if relative.startswith(os.pardir) else relative


def _generic_hint(finding: Diagnostic) -> str:
    if finding.code in ("wrong-type", "invalid-choice"):
        return "change the value here to the type the field declares"
    return "change the value set here"


def load_module(path: str, full: str, shown: str) -> Any:
    """Import the module: by its dotted name when its folder is a package (so relative
    imports work, as with ``titan-train --module pkg.config_registry``), else as a file
    with its folder on ``sys.path`` (``titan-train --registry FILE``)."""
    import importlib

    from titan.config import manager

    dotted, top = _package_name(full)
    if dotted is None or dotted in sys.modules:
        return manager.load_file(path)
    sys.path.insert(0, top)
    try:
        module = importlib.import_module(dotted)
    except ModuleNotFoundError as error:
        if error.name is not None and dotted.startswith(error.name):
            return manager.load_file(path)  # the package is not importable by name
        raise manager.user_code_error(error, files={full}, doing=f"importing {shown}") from None
    except Exception as error:
        raise manager.user_code_error(error, files={full}, doing=f"importing {shown}") from None
    finally:
        if top in sys.path:
            sys.path.remove(top)
    if os.path.abspath(getattr(module, "__file__", "") or "") != full:
        return manager.load_file(path)  # another module of that name came first
    return module


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


def forget_project_modules(before: set[str]) -> list[str]:
    """Drop every module imported since ``before`` that is not installed code (titan's packages,
    the standard library, site-packages), so that another folder's module of the same name is
    imported afresh; returns the files the cache's entry depends on
    (``titan.cli.cache_files``: the user's own package installed with ``pip install -e`` too)."""
    from titan.cli.cache_files import imported_dependencies, is_dependency

    deps = imported_dependencies()
    for name in set(sys.modules) - before:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if name.startswith("_titan_registry_"):
            del sys.modules[name]  # the registry module itself: not a dependency
            continue
        if not file:  # a namespace package: the user's when none of its folders is installed
            folders = [os.path.join(p, "") for p in getattr(module, "__path__", None) or ()]
            if folders and all(is_dependency(f) for f in folders):
                del sys.modules[name]
            continue
        if is_dependency(file):
            del sys.modules[name]
    return deps


def installed_roots() -> tuple[str, ...]:
    """Folders whose modules are installed code, not the project's own: titan's own package
    folders (not the checkout around them, where a user's project may live), the standard
    library and site-packages."""
    import sysconfig

    import titan
    import titan.migrate
    import titan.schemas

    roots = {
        os.path.dirname(os.path.abspath(titan.__file__)),
        *(os.path.abspath(p) for p in titan.schemas.__path__),
        *(os.path.abspath(p) for p in titan.migrate.__path__),
    }
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        found = sysconfig.get_paths().get(key)
        if found:
            roots.add(os.path.abspath(found))
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix}:  # dist-packages, lib-dynload
        roots.update(os.path.join(prefix, lib) for lib in ("lib", "lib64", "local/lib"))
    return tuple(root.rstrip(os.sep) + os.sep for root in roots)


def returns_trainer_config(function: Any) -> bool:
    """Whether a function's (evaluated) return annotation is a ``Trainer.Config`` subclass."""
    import typing

    from titan.trainer import Trainer

    try:
        annotation = typing.get_type_hints(function).get("return")
    except Exception:  # an annotation that does not evaluate says nothing
        return False
    return isinstance(annotation, type) and issubclass(annotation, Trainer.Config)

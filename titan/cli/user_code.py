"""The project's own code: the consent titan needs to import it, and the record of what ran.

Two kinds of user code reach titan's commands:

- code a command is asked to run by name: a registry function (``--config NAME``, a
  ``titan-diff`` operand, the registry modules of a folder walk). ``--config NAME`` imports
  ``./config_registry.py`` whenever it exists, even for a built-in name, as titan-train does;
- code a migrated TOML needs to be built: the package of a model family the project declares
  (``[tool.titan] model-registries``, ``--model-registry``) and the classes of its declared
  converters. A checking command (``titan-validate --as-registry``, ``titan-diff``) imports it
  only with ``--allow-import``; without it the command says which package it would import and
  how to allow it. titan-train imports it, since training the model is running it.

Whatever ran is named once per file, as it happens: a note on stderr (``note: executed FILE``),
and ``"executed"`` in a JSON report (:func:`executed`).
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, TextIO

_executed: list[str] = []
"""The user files executed by the current command, first first."""
_stream: list[TextIO | None] = [None]
"""Where :func:`record` says so (``None``: only recorded, for a JSON report)."""
_prog: list[str] = ["titan"]


def start(*, prog: str, stream: TextIO | None) -> None:
    """Begin a command: nothing executed yet; notes go to ``stream`` (``None``: JSON only)."""
    _executed.clear()
    _stream[0], _prog[0] = stream, prog


def record(path: str) -> None:
    """Note that the user file ``path`` was executed (once per file)."""
    shown = _shown(path)
    if shown in _executed:
        return
    _executed.append(shown)
    if _stream[0] is not None:
        from titan.cli.exits import say

        say(f"{_prog[0]}: note: executed {shown} (user code)", stream=_stream[0])


def executed() -> list[str]:
    """The user files executed so far, as the report names them."""
    return list(_executed)


def record_modules(before: set[str]) -> None:
    """Record the files of the modules imported since ``before`` (a ``sys.modules`` snapshot)
    that are the user's: not titan's own, not the standard library's nor an installed
    dependency's."""
    for name in [n for n in sys.modules if n not in before]:
        file = getattr(sys.modules.get(name), "__file__", None)
        if file and _users(file):
            record(file)


def _users(file: str) -> bool:
    """Whether ``file`` is the user's code rather than titan's or an installed package's."""
    full = os.path.abspath(file)
    roots = _not_users()
    if full.startswith(roots):
        return False
    return not os.path.realpath(full).startswith(roots)


@functools.cache
def _not_users() -> tuple[str, ...]:
    """The folders (each ending in a separator, as written and resolved) whose modules are not
    the user's: titan's own packages, the standard library, installed packages (the user site
    too)."""
    import site
    import sysconfig

    titan_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    checkout = os.path.dirname(titan_root)
    folders = [titan_root, *(os.path.join(checkout, d) for d in ("schemas", "migrate"))]
    folders += [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    folders += [site.getusersitepackages()] if site.ENABLE_USER_SITE else []
    both = {form(f) for f in folders for form in (os.path.abspath, os.path.realpath)}
    return tuple(f.rstrip(os.sep) + os.sep for f in sorted(both))


def _shown(path: str) -> str:
    full = os.path.abspath(path)
    relative = os.path.relpath(full)
    return full if relative.startswith(os.pardir) else relative


# ---------------------------------------------------------------------------------------------
# Building a migrated config


class ImportNotAllowed(Exception):
    """Building the config imports the project's own modules and ``--allow-import`` was not
    given."""

    def __init__(self, modules: list[tuple[str, str]]) -> None:
        super().__init__(", ".join(m for m, _ in modules))
        self.modules = modules
        """(module, config path that needs it) pairs."""


class ImportFailed(Exception):
    """A module of the project's own could not be imported (missing, or its code raised)."""

    def __init__(self, module: str, path: str, *, message: str, hint: str, span: Any) -> None:
        super().__init__(message)
        self.module, self.path, self.message, self.hint, self.span = (
            module,
            path,
            message,
            hint,
            span,
        )


def modules_of(plan: Any) -> list[tuple[str, str]]:
    """The project's own modules building ``plan``'s config imports, with the config path
    of the first field that needs each: declared model families' packages, declared converter
    classes' modules (everything but titan's own)."""
    from titan.migrate.plan.extension_classes import is_generated
    from titan.migrate.targets.config_objects import Call, Obj, RegistryCall

    found: dict[str, str] = {}

    def add(module: str, path: str) -> None:
        if module != "titan" and not module.startswith("titan."):
            found.setdefault(module, path)

    def walk(value: Any, path: str) -> None:
        if isinstance(value, Obj):
            if not is_generated(value.cls):
                add(value.cls.partition(":")[0], path)
            for name, item in value.fields.items():
                walk(item, f"{path}.{name}" if path else name)
        elif isinstance(value, RegistryCall):
            add(value.package, path)
            walk(value.model, path)
            for item in value.kwargs.values():
                walk(item, path)
        elif isinstance(value, Call):
            add(value.module, path)
            for item in (*value.args, *value.kwargs.values()):
                walk(item, path)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item, path)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item, path)

    for name, value in getattr(plan, "locals", {}).items():
        walk(value, name)
    walk(plan.root, "")
    for spec in getattr(plan, "classes", ()):
        if spec.base:
            add(spec.base.partition(":")[0], "")
    return list(found.items())


def build(plan: Any, *, allow_import: bool, toml: str | os.PathLike[str]) -> Any:
    """``plan``'s config (migrated from the file ``toml``) as titan objects, importing the
    project's own modules only when ``allow_import``: :class:`ImportNotAllowed` without it,
    :class:`ImportFailed` for a module that cannot be imported. They are looked up in the folder
    of the project's ``pyproject.toml`` first, where the checks found them, then on Python's
    path."""
    from titan.migrate.targets.live import instantiate
    from titan.schemas.project import for_file

    modules = modules_of(plan)
    if modules and not allow_import:
        raise ImportNotAllowed(modules)
    if not modules:
        return instantiate(plan)
    declaration = for_file(toml)
    folder = declaration.root if declaration.file is not None else None
    if folder is not None:
        sys.path.insert(0, folder)
    try:
        for module, path in modules:
            _import(module, path)
    finally:
        if folder is not None:
            sys.path.remove(folder)
    return instantiate(plan)


def _import(module: str, path: str) -> None:
    """Import one of the project's modules, recording the user files it ran."""
    import importlib

    before = set(sys.modules)
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is not None and (module + ".").startswith(error.name + "."):
            raise ImportFailed(
                module,
                path,
                message=f"cannot import `{module}`: there is no module `{error.name}` here",
                hint="install the package where titan runs, or add the folder that holds it "
                "with --module-path DIR",
                span=None,
            ) from None
        _failed(error, module, path)
    except Exception as error:
        _failed(error, module, path)
    finally:
        record_modules(before)


def _failed(error: Exception, module: str, path: str) -> None:
    from titan.config import manager

    found = manager.user_code_error(error, files=None, doing=f"importing {module}")
    raise ImportFailed(
        module,
        path,
        message=found.message,
        hint=found.hint or f"fix the code of {module}: titan imports it to build the config",
        span=found.span,
    ) from None


def not_allowed_text(modules: list[tuple[str, str]], *, prog: str) -> str:
    """What ``prog`` says when building needs modules it may not import."""
    names = ", ".join(f"`{m}`" for m, _ in modules)
    return (
        f"building the migrated config imports the project's own code ({names}); {prog} "
        "imports it only with --allow-import"
    )

"""Find a registry function, call it, and apply ``--section.field`` overrides with tyro.

Lookup order for ``--config NAME``: the file given with ``--registry FILE``, then
``./config_registry.py``, then titan's built-in registries (``titan.models.<family>.config_registry``).
``--module M`` restricts the search to one built-in family (or any importable module). A name found
in several built-in registries must be disambiguated with ``--module``.

Every mistake a user can make here (an unknown name, a registry file that does not import, a
function that raises) becomes a :class:`RegistryError` carrying a message, a hint and, when it
comes from user code, the file:line:col to point at.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from titan.schemas.diagnostics import Span

REGISTRY_FILE = "config_registry.py"
"""The file name looked up in the working directory."""


class RegistryError(Exception):
    """A user mistake while finding or running a registry function."""

    def __init__(
        self, message: str, *, code: str, hint: str | None = None, span: Span | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.hint = hint
        self.span = span


@dataclasses.dataclass(frozen=True, slots=True)
class RegistryFunction:
    """A zero-argument function that returns a ``Trainer.Config``."""

    name: str
    """The function's name, as given to ``--config``."""
    function: Callable[[], Any]
    """The function itself."""
    module: ModuleType
    """The registry module defining it."""


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigArgs:
    """``--module``, ``--config`` and ``--registry`` split off a command line; the rest is kept."""

    config: str | None
    module: str | None
    registry: str | None
    rest: list[str]
    """Everything else: the ``--section.field value`` overrides and other flags."""


def split_args(argv: Sequence[str]) -> ConfigArgs:
    """Take ``--config``, ``--module`` and ``--registry`` (``--x v`` or ``--x=v``) out of argv."""
    found: dict[str, str | None] = {"config": None, "module": None, "registry": None}
    rest: list[str] = []
    args = list(argv)
    i = 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        key = flag[2:] if flag.startswith("--") else None
        if key in found:
            if not eq:
                if i + 1 >= len(args) or args[i + 1].startswith("--"):
                    raise RegistryError(
                        f"{flag} requires a value", code="usage", hint=f"write `{flag} VALUE`"
                    )
                value = args[i + 1]
                i += 1
            found[key] = value
        else:
            rest.append(args[i])
        i += 1
    return ConfigArgs(rest=rest, **found)


def builtin_modules() -> list[str]:
    """Module paths of titan's own registries, one per model family."""
    from titan.models import SUPPORTED_MODELS

    return [f"titan.models.{family}.config_registry" for family in SUPPORTED_MODELS]


def registry_functions(module: ModuleType) -> dict[str, Callable[[], Any]]:
    """The public functions a registry module defines itself (not the ones it imports)."""
    return {
        name: value
        for name, value in vars(module).items()
        if inspect.isfunction(value)
        and not name.startswith("_")
        and value.__module__ == module.__name__
    }


def load_file(path: str) -> ModuleType:
    """Import a registry file under a private module name, reporting errors at file:line."""
    full = os.path.abspath(path)
    if not os.path.isfile(full):
        raise RegistryError(
            f"registry file {path} does not exist",
            code="unreadable-file",
            hint="check the path: it is relative to the folder the command runs in",
        )
    try:
        with open(full, "rb") as handle:
            content = handle.read()
    except OSError as exc:
        raise RegistryError(
            f"cannot read {path}: {exc.strerror}",
            code="unreadable-file",
            hint="give this user read access to the file",
        ) from None
    # Keyed by path and content: loading the same file twice gives the same classes (so configs
    # from it compare equal), while an edited file is imported afresh.
    digest = hashlib.sha1(full.encode() + b"\0" + content).hexdigest()[:16]
    name = f"_titan_registry_{digest}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, full)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(full)
    sys.path.insert(0, folder)  # so the registry can import its neighbours, as a script could
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:
        del sys.modules[name]
        raise user_code_error(exc, files={full}, doing=f"importing {path}") from None
    finally:
        sys.path.remove(folder)
    return module


def import_module(name: str) -> ModuleType:
    """Import a registry module by dotted path, reporting errors inside it at file:line."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and name.startswith(exc.name):
            raise RegistryError(
                f"module {name} does not exist",
                code="unknown-config",
                hint="name a model family (llama3, qwen3...), an importable module, or a .py file",
            ) from None
        raise user_code_error(exc, files=None, doing=f"importing {name}") from None
    except BaseException as exc:
        raise user_code_error(exc, files=None, doing=f"importing {name}") from None


def _module_for(module: str) -> ModuleType:
    from titan.models import SUPPORTED_MODELS

    if module in SUPPORTED_MODELS:
        return import_module(f"titan.models.{module}.config_registry")
    if module.endswith(".py") or os.sep in module:
        return load_file(module)
    if module.partition(".")[0] == "torchtitan" and _has_spec(f"{module}.config_registry"):
        # upstream torchtitan's --module: NAME.config_registry first, as upstream looks
        return import_module(f"{module}.config_registry")
    imported = import_module(module)
    if not registry_functions(imported) and importlib.util.find_spec(f"{module}.config_registry"):
        return import_module(f"{module}.config_registry")
    return imported


def _has_spec(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def find(name: str, *, module: str | None = None, registry: str | None = None) -> RegistryFunction:
    """The registry function called ``name`` (see the module docstring for the search order)."""
    if module is not None:
        sources = [_module_for(module)]
    else:
        sources = []
        if registry is not None:
            sources.append(load_file(registry))
        if os.path.isfile(REGISTRY_FILE):
            sources.append(load_file(REGISTRY_FILE))
        for source in sources:  # the user's own registries win over titan's
            if name in registry_functions(source):
                return RegistryFunction(name, registry_functions(source)[name], source)
        builtin = [import_module(path) for path in builtin_modules()]
        owners = [m for m in builtin if name in registry_functions(m)]
        if len(owners) > 1:
            families = ", ".join(m.__name__.split(".")[-2] for m in owners)
            raise RegistryError(
                f"config `{name}` is defined by several model families: {families}",
                code="unknown-config",
                hint="choose one with --module",
            )
        sources += owners or builtin
    for source in sources:
        functions = registry_functions(source)
        if name in functions:
            return RegistryFunction(name, functions[name], source)
    known = sorted({f for source in sources for f in registry_functions(source)})
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    where = f" in {module}" if module is not None else ""  # as the user named it
    hint = (
        "did you mean " + " or ".join(f"`{c}`" for c in close) + "?"
        if close
        else "known configs: " + ", ".join(known)
    )
    raise RegistryError(f"no config function `{name}`{where}", code="unknown-config", hint=hint)


def call(found: RegistryFunction) -> Any:
    """Run a registry function; an exception inside it becomes a :class:`RegistryError`."""
    try:
        return found.function()
    except BaseException as exc:
        files = {os.path.abspath(found.module.__file__)} if found.module.__file__ else None
        raise user_code_error(exc, files=files, doing=f"running {found.name}()") from None


def user_code_error(exc: BaseException, *, files: set[str] | None, doing: str) -> RegistryError:
    """A :class:`RegistryError` for an exception raised by user code, located in that code."""
    if isinstance(exc, SyntaxError) and exc.filename:
        span = Span(file=exc.filename, line=exc.lineno or 1, col=exc.offset or 1)
        return RegistryError(
            f"syntax error while {doing}: {exc.msg}",
            code="registry-error",
            hint=f"fix the syntax here; `python -m py_compile {exc.filename}` shows the same error",
            span=span,
        )
    if not isinstance(exc, Exception):  # Ctrl-C, SIGTERM, sys.exit: the caller's to handle
        raise exc
    frame = _user_frame(exc, files)
    message = f"{type(exc).__name__} while {doing}: {exc}"
    if frame is None:
        return RegistryError(
            message,
            code="registry-error",
            hint="the exception comes from code the registry calls: call the function in Python "
            "to see its traceback",
        )
    span = Span(file=frame.filename, line=frame.lineno or 1, col=(frame.colno or 0) + 1)
    hint = None
    if isinstance(exc, TypeError):
        found = _unexpected_keyword(exc, frame)
        if found is not None:
            cls, keyword, node = found
            span = Span(
                file=frame.filename,
                line=node.lineno,
                col=node.col_offset + 1,
                end_col=node.col_offset + 1 + len(keyword),
            )
            names = [f.name for f in dataclasses.fields(cls)]
            close = difflib.get_close_matches(keyword, names, n=1, cutoff=0.6)
            message = f"{cls.__qualname__} has no field `{keyword}`"
            hint = f"did you mean `{close[0]}`?" if close else "fields: " + ", ".join(names)
            return RegistryError(message, code="unknown-key", hint=hint, span=span)
    target = _missing_attribute(exc, frame) if isinstance(exc, AttributeError) else None
    if target is not None:
        obj, name = target
        names = [f.name for f in dataclasses.fields(obj)]
        close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
        message = f"{type(obj).__qualname__} has no field `{name}`"
        hint = f"did you mean `{close[0]}`?" if close else "fields: " + ", ".join(names)
        return RegistryError(message, code="unknown-key", hint=hint, span=span)
    return RegistryError(message, code="registry-error", hint=hint, span=span)


@dataclasses.dataclass(frozen=True, slots=True)
class _Frame:
    filename: str
    lineno: int | None
    colno: int | None
    globals: dict[str, Any]
    locals: dict[str, Any] = dataclasses.field(default_factory=dict)


def _missing_attribute(exc: AttributeError, frame: _Frame) -> tuple[Any, str] | None:
    """For ``config.section.typo = x`` on a slotted config: the config object and the name."""
    obj, name = getattr(exc, "obj", None), getattr(exc, "name", None)
    if name is None:  # assignment to a missing slot sets neither .obj nor .name
        text = str(exc)
        marker = "object has no attribute '"
        if marker not in text:
            return None
        name = text.split(marker, 1)[1].rstrip("'")
        tree = _parse(frame.filename)
        for node in ast.walk(tree) if tree is not None else ():
            targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
            for target in targets:
                if (
                    isinstance(target, ast.Attribute)
                    and target.attr == name
                    and target.lineno == frame.lineno
                ):
                    obj = _static_value(target.value, {**frame.globals, **frame.locals})
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return obj, name
    return None


def _parse(filename: str) -> ast.Module | None:
    try:
        with open(filename, encoding="utf-8") as handle:
            return ast.parse(handle.read(), filename)
    except (OSError, SyntaxError, ValueError):
        return None


def _user_frame(exc: BaseException, files: set[str] | None) -> _Frame | None:
    """The innermost traceback frame in ``files`` (or, without files, outside titan)."""
    titan_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    best = None
    tb = exc.__traceback__
    while tb is not None:
        filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
        mine = filename in files if files is not None else not filename.startswith(titan_root)
        if mine and not filename.startswith("<"):
            position = next(
                (
                    p
                    for i, p in enumerate(tb.tb_frame.f_code.co_positions())
                    if i == tb.tb_lasti // 2
                ),
                None,
            )
            colno = position[2] if position else None
            best = _Frame(
                filename, tb.tb_lineno, colno, tb.tb_frame.f_globals, tb.tb_frame.f_locals
            )
        tb = tb.tb_next
    if best is None and files is None:
        summary = traceback.extract_tb(exc.__traceback__)
        if summary:
            last = summary[-1]
            return _Frame(last.filename, last.lineno, last.colno, {})
    return best


def _unexpected_keyword(exc: TypeError, frame: _Frame) -> tuple[type, str, ast.keyword] | None:
    """For ``Cls(bad=...)`` in user code: the dataclass, the keyword and its AST node."""
    text = str(exc)
    marker = "got an unexpected keyword argument '"
    if marker not in text:
        return None
    keyword = text.split(marker, 1)[1].rstrip("'")
    tree = _parse(frame.filename)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not (node.lineno <= (frame.lineno or 0)):
            continue
        if not (node.lineno <= (frame.lineno or 0) <= (node.end_lineno or node.lineno)):
            continue
        for kw in node.keywords:
            if kw.arg == keyword:
                cls = _static_value(node.func, {**frame.globals, **frame.locals})
                if isinstance(cls, type) and dataclasses.is_dataclass(cls):
                    return cls, keyword, kw
    return None


def _static_value(node: ast.expr, namespace: dict[str, Any]) -> Any:
    """The object a ``Name`` or ``Name.attr.attr`` expression denotes (nothing is called)."""
    if isinstance(node, ast.Name):
        return namespace.get(node.id)
    if isinstance(node, ast.Attribute):
        base = _static_value(node.value, namespace)
        return getattr(base, node.attr, None) if base is not None else None
    return None


def apply_overrides(config: Any, args: Sequence[str], *, prog: str) -> Any:
    """Apply ``--section.field value`` flags with tyro (``--help`` prints the typed help).

    Precedence is that of torchtitan: command line over the registry function's values over the
    dataclass defaults. tyro exits with status 2 on a bad flag, after printing its message.
    """
    import tyro

    from titan.cli.exits import UsageError

    for before, arg in zip(["", *args], args, strict=False):
        flag, _, value = arg.partition("=") if arg.startswith("--") else (before, "", arg)
        digits = value.lstrip("+-").replace("_", "")
        if len(digits) > MAX_INT_DIGITS and digits.isdigit():
            raise UsageError(
                f"{flag or 'an argument'} is a whole number of {len(digits)} digits; every "
                "integer setting must fit in a signed 64-bit integer (at most 19 digits)"
            )
    return tyro.cli(type(config), args=list(args), default=config, prog=prog)


MAX_INT_DIGITS = 4300
"""Python refuses to read an integer of more digits (``sys.get_int_max_str_digits``): tyro would
pass its advice to raise that limit on to the user."""

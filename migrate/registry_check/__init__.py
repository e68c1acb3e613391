"""The static check of registry modules written for upstream torchtitan 0.3.0.

``titan-validate config_registry.py`` on a module that imports ``torchtitan`` reads it here
without running it (``reader``), checks every call of a 0.3.0 config class, of a family's
``model_registry`` and of the package's config factories against the generated tables
(``migrate/targets/upstream_api_030.py``), and runs titan's cross-field rules and ranges on what
each registry function returns (``facts``). What cannot be read statically is one note per
function. Nothing here imports torchtitan or torch, or runs the module.
"""

from __future__ import annotations

import ast
import os
import re
from collections.abc import Sequence

from titan.migrate.registry_check.built import built_findings
from titan.migrate.registry_check.facts import rule_findings
from titan.migrate.registry_check.reader import Function, Reader
from titan.migrate.registry_check.values import At, Obj
from titan.schemas.diagnostics import Diagnostic, Severity, Span

__all__ = ["Built", "check_text", "check_tree", "package_of"]


class Built:
    """What building a module's functions in the real torchtitan gave: per function
    ``{"config": dump}`` or ``{"error": {"type", "message", "frames"}}``, and the import's
    error when the module did not import."""

    def __init__(self, functions: dict[str, dict], import_error: dict | None = None) -> None:
        self.functions, self.import_error = functions, import_error


def package_of(path: str) -> str | None:
    """The torchtitan package a module file sits in (``torchtitan.models.llama3`` for
    ``.../torchtitan/models/llama3/config_registry.py``), for its relative imports; ``None``
    for a module outside the package."""
    parts = os.path.abspath(path).split(os.sep)[:-1]
    if "torchtitan" not in parts:
        return None
    start = len(parts) - 1 - parts[::-1].index("torchtitan")
    return ".".join(parts[start:])


def check_tree(
    tree: ast.Module,
    *,
    path: str,
    shown: str,
    functions: Sequence[tuple[str, int, int]],
    ngpu: int | None,
    built: Built | None = None,
    text: str = "",
) -> list[Diagnostic]:
    """Every finding of the module's registry functions ``(name, line, col)``; ``built``: what
    building them in the real torchtitan gave (``--python``), checked too."""
    reader = Reader(tree, shown=shown, package=package_of(path))
    found: dict[tuple, Diagnostic] = {}
    builds: list[Diagnostic] = []
    for name, line, col in functions:
        function = reader.read_function(name)
        entry = built.functions.get(name) if built is not None else None
        if entry is not None and "config" in entry:
            results = built_findings(
                entry["config"],
                static=function.result,
                reader=reader,
                shown=shown,
                ngpu=ngpu,
                at=function.at,
                name=name,
            )
        else:
            results = _result_findings(function, reader, shown=shown, ngpu=ngpu)
        if entry is not None and "error" in entry:
            builds.append(
                _build_error(entry["error"], path=path, shown=shown, at=function.at, text=text)
            )
        # A rule finding about a helper's value is the same finding for every function built
        # on that helper: said once.
        for finding in results:
            found.setdefault((finding.code, finding.message, finding.span), finding)
        if function.unread and not (entry is not None and "config" in entry):
            note = _unread_note(function, shown, line, col)
            found[(note.code, note.path, note.span)] = note
    for at, why in reader.module_notes:
        found[("module", why)] = Diagnostic(
            code="upstream-unread",
            severity=Severity.INFO,
            path="",
            message=f"the module's top level: {why}",
            hint="names it defines after that point are not checked here",
            span=Span(file=shown, line=at.line, col=at.col),
        )
    own = reader.diagnostics()
    if built is not None and built.import_error is not None:
        builds.append(
            _build_error(built.import_error, path=path, shown=shown, at=At(1, 1), text=text)
        )
    # A build error on a line the static check already explains is that finding, said once.
    explained = {d.span.line for d in own if d.span is not None and d.severity is Severity.ERROR}
    for finding in builds:
        if finding.span is None or finding.span.line not in explained:
            found.setdefault((finding.code, finding.message, finding.span), finding)
    guarded = {d.span for d in own if d.code == "upstream-value"}
    # A class' own check and titan's range on the same value: the class' says it fails to build.
    rest = [d for d in found.values() if not (d.code == "out-of-range" and d.span in guarded)]
    return own + rest


def _result_findings(
    function: Function, reader: Reader, *, shown: str, ngpu: int | None
) -> list[Diagnostic]:
    from titan.migrate.registry_check import api
    from titan.migrate.registry_check.values import Unknown

    result = function.result
    if isinstance(result, Unknown):
        return []
    if isinstance(result, Obj):
        lineage = (
            reader.local_classes[result.cls]["bases"]
            if result.cls in reader.local_classes
            else (result.cls, *api.bases(result.cls))
        )
        if api.TRAINER in lineage or api.is_trainer(result.cls):
            return rule_findings(result, shown=shown, reader=reader, ngpu=ngpu, at=function.at)
        what = f"`{api.short(result.cls)}`"
    else:
        what = "None" if result is None else f"a {type(result).__name__}"
    return [
        Diagnostic(
            code="upstream-return",
            severity=Severity.ERROR,
            path=function.name,
            message=f"`{function.name}()` returns {what}, not a `Trainer.Config`",
            hint="return the Trainer.Config the function builds",
            span=Span(file=shown, line=function.at.line, col=function.at.col),
        )
    ]


def _build_error(error: dict, *, path: str, shown: str, at: At, text: str = "") -> Diagnostic:
    """A build's exception, at the innermost line of the module the traceback passed through
    (else the function's ``def``)."""
    full = os.path.realpath(path)
    line = at.line
    for frame in error.get("frames") or []:
        if (
            isinstance(frame, list | tuple)
            and len(frame) == 2
            and isinstance(frame[0], str)
            and isinstance(frame[1], int)
            and os.path.realpath(frame[0]) == full
        ):
            line = frame[1]
            break
    kind = str(error.get("type") or "an exception")[:80]
    message = str(error.get("message") or "").strip().splitlines()
    said = message[0][:300] if message else ""
    hardware = _HARDWARE.search(said) is not None
    return Diagnostic(
        code="upstream-build",
        severity=Severity.WARNING if hardware else Severity.ERROR,
        path="",
        message=f"building it in torchtitan {_version()} raised {kind}"
        + (f": {said}" if said else ""),
        hint=(
            "torchtitan checks the GPU when it builds this config, and this machine lacks the one "
            "it asks for: build it where the job runs (the static check found nothing wrong here)"
            if hardware
            else "fix the call on this line; the same error stops the run on the cluster"
        ),
        span=Span(file=shown, line=line, col=_indent(text, line) + 1),
    )


_HARDWARE = re.compile(
    r"Hopper|Blackwell|Ampere|compute capability|CUDA capability|\bSM ?\d{2,3}\b|requires? (a )?GPU",
    re.IGNORECASE,
)
"""A build error that is about the machine's GPU, not the config (``flex_flash`` on a CPU)."""


def _indent(text: str, line: int) -> int:
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        return 0
    return len(lines[line - 1]) - len(lines[line - 1].lstrip())


def _version() -> str:
    from titan.migrate.registry_check import api

    return api.VERSION


def _unread_note(function: Function, shown: str, line: int, col: int) -> Diagnostic:
    shown_items = [f"{why} (line {at.line})" for at, why in function.unread[:3]]
    more = len(function.unread) - len(shown_items)
    return Diagnostic(
        code="upstream-unread",
        severity=Severity.INFO,
        path=function.name,
        message=f"`{function.name}()`: not everything is read statically: "
        + "; ".join(shown_items)
        + (f"; and {more} more" if more > 0 else ""),
        hint="values that come from there are not checked here; `--python` with an "
        "interpreter that has torchtitan builds the function and checks what it returns",
        span=Span(file=shown, line=line, col=col),
    )


def check_text(text: str, *, shown: str, ngpu: int | None = None) -> list[Diagnostic]:
    """The static check of module source ``text`` (its public module-level functions that take
    no arguments are its registry functions): what ``titan-migrate --target torchtitan==0.3.0``
    runs on every module it writes, so that none can fail ``titan-validate``."""
    try:
        tree = ast.parse(text, filename=shown)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        return [
            Diagnostic(
                code="upstream-unread",
                severity=Severity.ERROR,
                path="",
                message=f"the module is not valid Python: {error}",
                hint="fix the syntax; `python -m py_compile FILE` shows the same error",
                span=Span(file=shown, line=getattr(error, "lineno", None) or 1, col=1),
            )
        ]
    functions = [
        (node.name, node.lineno, node.col_offset + 5)
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and not node.name.startswith("_")
        and not (node.args.args or node.args.posonlyargs or node.args.kwonlyargs)
    ]
    return check_tree(tree, path=shown, shown=shown, functions=functions, ngpu=ngpu, text=text)


def function_leaves(text: str, *, path: str, name: str) -> dict[str, object] | str:
    """A registry function's config as ``dotted path -> value`` (every field, defaults filled
    in from 0.3.0's table; what cannot be read statically shown as ``<not read statically>``),
    for ``titan-diff``; or why there is none."""
    from titan.migrate.registry_check.values import Spec, Unknown

    try:
        tree = ast.parse(text, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as error:
        return f"not valid Python: {error}"
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    if name not in defined:
        return f"defines no function `{name}`"
    reader = Reader(tree, shown=path, package=package_of(path))
    result = reader.read_function(name).result
    if not isinstance(result, Obj):
        return f"`{name}()` does not return a config that can be read statically"
    out: dict[str, object] = {}

    def show(value: object, depth: int = 0) -> object:
        from titan.migrate.registry_check import api

        if isinstance(value, Unknown) or depth > 20:
            return _Shown("<not read statically>")
        if isinstance(value, Spec):
            extra = "".join(f", {k}={show(v, depth + 1)!r}" for k, v in value.kwargs.items())
            return _Shown(f"{value.family}.model_registry({value.flavor!r}{extra})")
        if isinstance(value, Obj):
            written = ", ".join(f"{k}={show(v, depth + 1)!r}" for k, v in value.values.items())
            return _Shown(f"{api.short(value.cls)}({written})")
        if isinstance(value, list | tuple):
            shown = [show(v, depth + 1) for v in value]
            return shown if isinstance(value, list) else tuple(shown)
        return value

    def walk(obj: Obj, prefix: str, depth: int) -> None:
        from titan.migrate.registry_check import api

        names = list(obj.values)
        if reader._fields(obj) is not None:
            names = [*reader._fields(obj), *(n for n in names if n not in reader._fields(obj))]
        for field in names:
            value = reader._get_field(obj, field)
            dotted = f"{prefix}{field}"
            if isinstance(value, Obj) and depth < 30:
                out[dotted] = _Shown(f"{api.short(value.cls)}(...)")
                walk(value, dotted + ".", depth + 1)
            elif isinstance(value, list) and any(isinstance(v, Obj) for v in value):
                out[dotted] = _Shown(
                    "["
                    + ", ".join(
                        f"{api.short(v.cls)}(...)" if isinstance(v, Obj) else repr(show(v))
                        for v in value
                    )
                    + "]"
                )
            else:
                out[dotted] = show(value)

    walk(result, "", 0)
    return out


class _Shown(str):
    """A value shown as the code that builds it, not as a string."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)

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
from collections.abc import Sequence

from titan.migrate.registry_check.facts import rule_findings
from titan.migrate.registry_check.reader import Function, Reader
from titan.migrate.registry_check.values import Obj
from titan.schemas.diagnostics import Diagnostic, Severity, Span

__all__ = ["check_tree", "package_of"]


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
) -> list[Diagnostic]:
    """Every finding of the module's registry functions ``(name, line, col)``."""
    reader = Reader(tree, shown=shown, package=package_of(path))
    found: dict[tuple, Diagnostic] = {}
    for name, line, col in functions:
        function = reader.read_function(name)
        # A rule finding about a helper's value is the same finding for every function built
        # on that helper: said once.
        for finding in _result_findings(function, reader, shown=shown, ngpu=ngpu):
            found.setdefault((finding.code, finding.message, finding.span), finding)
        if function.unread:
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
    return reader.diagnostics() + list(found.values())


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

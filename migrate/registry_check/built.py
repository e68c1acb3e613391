"""Findings on what a registry function built in the real torchtitan (``titan-validate --python``).

The function ran in the other interpreter (``titan.cli.upstream_build``), which sent back the
returned config as plain data: ``{"__class__": "module:Qual.Name", field: value, ...}``, a model
spec as its family and flavor. That tree is checked as the static one is: each field's type
against 0.3.0's table, then titan's cross-field rules and ranges (``facts``). Where the
function writes a value is taken from the static reading of the same function, so a finding
stands at the keyword that set it; a value only the build knows stands at the ``def``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from titan.migrate.registry_check import api
from titan.migrate.registry_check.facts import rule_findings
from titan.migrate.registry_check.values import At, Obj, Spec
from titan.migrate.targets.upstream_types import accepts, spell
from titan.schemas.diagnostics import Diagnostic, Severity, Span


def tree_of(dump: Any, written: dict[str, At], path: str = "", depth: int = 0) -> Any:
    """The reader's values for a dumped config, with ``written`` (dotted path -> where the
    function writes it) as the objects' spans."""
    if depth > 60:
        return None
    if isinstance(dump, dict) and isinstance(dump.get("__class__"), str):
        cls = dump["__class__"]
        if cls == api.MODEL_SPEC or api.is_subclass(cls, api.MODEL_SPEC):
            return Spec(str(dump.get("name")), dump.get("flavor"), {}, written.get(path))
        made = Obj(cls, written.get(path))
        for key, value in dump.items():
            if key == "__class__":
                continue
            child = f"{path}.{key}" if path else key
            made.values[key] = tree_of(value, written, child, depth + 1)
            if child in written:
                made.spans[key] = written[child]
        return made
    if isinstance(dump, list):
        return [tree_of(v, written, path, depth + 1) for v in dump]
    if isinstance(dump, dict):
        return {k: tree_of(v, written, path, depth + 1) for k, v in dump.items()}
    return dump


def written_paths(value: Any, path: str = "", depth: int = 0) -> dict[str, At]:
    """Dotted path -> where the static reading saw it written, for a statically read config."""
    found: dict[str, At] = {}
    if depth > 60 or not isinstance(value, Obj):
        return found
    for key, child in value.values.items():
        at = value.spans.get(key)
        dotted = f"{path}.{key}" if path else key
        if at is not None:
            found[dotted] = at
        found.update(written_paths(child, dotted, depth + 1))
    return found


def built_findings(
    dump: Any,
    *,
    static: Any,
    reader: Any,
    shown: str,
    ngpu: int | None,
    at: At,
    name: str,
) -> list[Diagnostic]:
    """Findings on one function's built config."""
    root = tree_of(dump, written_paths(static))
    if not isinstance(root, Obj) or not (api.is_trainer(root.cls) or _own_trainer(root, static)):
        what = f"`{api.short(root.cls)}`" if isinstance(root, Obj) else "something else"
        return [
            Diagnostic(
                code="upstream-return",
                severity=Severity.ERROR,
                path=name,
                message=f"`{name}()` returned {what} when it was built, not a `Trainer.Config`",
                hint="return the Trainer.Config the function builds",
                span=Span(file=shown, line=at.line, col=at.col),
            )
        ]
    found = list(_types(root, "", shown=shown, at=at))
    if any(d.severity is Severity.ERROR for d in found):
        return found  # the rules compute with well-typed values only
    return found + rule_findings(root, shown=shown, reader=reader, ngpu=ngpu, at=at)


def _own_trainer(root: Obj, static: Any) -> bool:
    """The module's own subclass of ``Trainer.Config`` (a dataclass it defines), as the static
    reading saw it."""
    return (
        isinstance(static, Obj)
        and static.local is not None
        and api.TRAINER in static.local
        and root.cls.rpartition(".")[2].rpartition(":")[2] == static.cls.rpartition(":")[2]
    )


def _types(obj: Obj, path: str, *, shown: str, at: At, depth: int = 0) -> Iterator[Diagnostic]:
    if depth > 60:
        return
    fields = api.fields(obj.cls) if api.is_config_class(obj.cls) else {}
    for key, value in obj.values.items():
        dotted = f"{path}.{key}" if path else key
        if key in fields and isinstance(value, bool | int | float | str | type(None)):
            tp = fields[key]["type"]
            if accepts(tp, value, is_config=lambda v, p: None) is False:
                where = obj.spans.get(key) or at
                yield Diagnostic(
                    code="upstream-type",
                    severity=Severity.ERROR,
                    path=dotted,
                    message=f"the built config's `{dotted}` is {value!r} "
                    f"({type(value).__name__}), not {spell(tp)}",
                    hint=f"make the function set a value of type {spell(tp)}; dataclasses do "
                    "not check types, so the run would get this value as it is",
                    span=Span(file=shown, line=where.line, col=where.col, end_col=where.end_col),
                )
        children = value if isinstance(value, list) else [value]
        for child in children:
            if isinstance(child, Obj):
                yield from _types(child, dotted, shown=shown, at=at, depth=depth + 1)

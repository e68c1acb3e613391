"""Add what a scaffold finds missing to an extension module that exists, keeping every other byte.

``titan-migrate --scaffold-extension configs/*.toml -o fork_ext.py`` onto a module the fork
already has (hand-written docstrings, fields scaffolded earlier, its own comments) must not
replace it. The keys are collected as for a new module (``titan.migrate.codegen.scaffold``), then
the module is read twice, never run: its syntax tree gives each class's place, and the static
extension reader (``titan.schemas.extension_reader``) gives the fields it declares, with their
types. Then, section by section from ``JobConfig`` down:

- a key the class lacks becomes a field appended after the class's last statement, in the
  class's own indentation and line endings;
- a section the module lacks becomes a new dataclass and a field of its parent; the new classes
  go right before the first existing class that gains such a field (its
  ``field(default_factory=...)`` runs when the module is imported, so they must exist by then);
- a key the module declares is left alone when every value in the TOMLs fits its type;
- ``from dataclasses import ...`` is added after the module's imports when it lacks a name.

Nothing else in the file moves or changes. Where a declaration cannot be added safely the module
is refused as a whole (:class:`MergeRefused`), before anything is written: the module is not
Python, its ``JobConfig`` is not a dataclass titan can read statically, a declared field's type
does not fit a value of the TOMLs, a section's class lives in another module or is shared by two
sections (a field added to it would appear in both), or a class is written on one line.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from titan.migrate.codegen.pyfmt import nodes as py
from titan.migrate.codegen.pyfmt.printer import format_module
from titan.migrate.codegen.scaffold import Scaffold, _Section, _Seen, _Writer, collect
from titan.schemas import typecheck
from titan.schemas.builtin_extensions import ExtensionError
from titan.schemas.extension_reader import read_extension_source
from titan.schemas.spec import SectionSpec
from titan.schemas.toml_check import CheckOptions


class MergeRefused(Exception):
    """The module cannot take the new declarations safely; the message says why."""


class Merged:
    """The module with the new declarations added, and what was added."""

    __slots__ = ("result", "source", "added")

    def __init__(self, result: Scaffold) -> None:
        self.result = result
        """The scaffold's findings (keys left out, files that could not be read)."""
        self.source: str | None = None
        """The new text of the module; ``None`` when there was nothing to add."""
        self.added: list[str] = []
        """What was added, one entry per field or section, in the user's words."""


def scaffold_into(
    files: Sequence[str], *, path: str, text: str, options: CheckOptions | None = None
) -> Merged:
    """Add the declarations ``files`` need and the module at ``path`` (whose text is ``text``)
    lacks; raises :class:`MergeRefused` when they cannot be added safely."""
    result, sections = collect(files, options=options)
    merged = Merged(result)
    if result.problems:
        return merged
    module = _Module(path, text)
    writer = _Writer(sections, files=[str(f) for f in files], reserved=frozenset(module.bound))
    writer.field_function, writer.decorator = module.dataclasses_name("field", "dataclass")
    plan = _Plan(module, writer)
    plan.section((), module.root())
    result.not_declared += writer.left_out
    if plan.additions:
        merged.source, merged.added = plan.apply(), plan.added
    return merged


class _Target:
    """An existing class a section's new fields go into (``node`` ``None``: none can)."""

    __slots__ = ("node", "spec", "why")

    def __init__(self, node: ast.ClassDef | None, spec: SectionSpec, why: str | None) -> None:
        self.node, self.spec, self.why = node, spec, why


class _Module:
    """The existing module: its lines, syntax tree, top-level names and declared schema."""

    def __init__(self, path: str, text: str) -> None:
        self.path, self.text = path, text
        self.lines = text.splitlines(keepends=True)
        self.newline = "\r\n" if "\r\n" in text else "\n"
        try:
            self.tree = ast.parse(text, filename=path)
        except SyntaxError as error:
            raise MergeRefused(
                f"it is not Python titan can parse (line {error.lineno}: {error.msg})"
            ) from None
        try:
            self.spec = read_extension_source(Path(path), module=Path(path).stem).root
        except ExtensionError as error:
            raise MergeRefused(f"titan cannot read it as an extension module: {error}") from None
        self.bindings: dict[str, ast.stmt] = {}
        for node in self.tree.body:  # later statements rebind, as at runtime
            for name in _bound_names(node):
                self.bindings[name] = node
        self.bound = set(self.bindings)
        self.uses = Counter(  # how many fields name each class: a shared one gets no fields
            name
            for node in ast.walk(self.tree)
            if isinstance(node, ast.ClassDef)
            for statement in node.body
            if isinstance(statement, ast.AnnAssign)
            for name in [_annotation_name(statement.annotation)]
            if name
        )
        self.imports: list[str] = []
        self.future_annotations = any(
            isinstance(n, ast.ImportFrom)
            and n.module == "__future__"
            and any(a.name == "annotations" for a in n.names)
            for n in self.tree.body
        )

    def root(self) -> _Target:
        found = self.bindings.get("JobConfig")
        if isinstance(found, ast.ClassDef):
            return _Target(found, self.spec, None)
        return _Target(None, self.spec, "its `JobConfig` is not a class written in this file")

    def dataclasses_name(self, *wanted: str) -> list[str]:
        """How the module names each of ``dataclasses``' ``wanted`` functions; a missing one
        is imported (:attr:`imports`)."""
        names = []
        for name in wanted:
            local = self._imported(name)
            if local is None:
                if name in self.bindings:
                    raise MergeRefused(
                        f"`{name}` names something else in it, not dataclasses.{name}"
                    )
                self.imports.append(name)
                local = name
            names.append(local)
        return names

    def _imported(self, name: str) -> str | None:
        for local, node in self.bindings.items():
            if isinstance(node, ast.ImportFrom) and node.module == "dataclasses" and not node.level:
                if any(a.name == name and (a.asname or a.name) == local for a in node.names):
                    return local
        for local, node in self.bindings.items():
            if isinstance(node, ast.Import) and any(
                a.name == "dataclasses" and (a.asname or a.name) == local for a in node.names
            ):
                return f"{local}.{name}"
        return None

    def child(self, parent: _Target, key: str, spec: SectionSpec, dotted: str) -> _Target:
        """The class that declares the section ``key`` of ``parent``'s class."""
        if parent.node is None:
            return _Target(None, spec, parent.why)
        statement = self._field(parent.node, key, seen=set())
        name = statement and _annotation_name(statement.annotation)
        node = self.bindings.get(name or "")
        if not isinstance(node, ast.ClassDef):
            shown = ast.unparse(statement.annotation) if statement else "a base class"
            why = f"[{dotted}] is declared by `{shown}`, which is not a class of this file"
            return _Target(None, spec, why + " (add the keys where it is written)")
        if self.uses[node.name] > 1:
            why = f"class `{node.name}` declares [{dotted}] and another section"
            return _Target(None, spec, why + " (a field added to it would appear in both)")
        return _Target(node, spec, None)

    def _field(self, node: ast.ClassDef, key: str, *, seen: set) -> ast.AnnAssign | None:
        """The statement that declares ``key`` in ``node`` or a base class of this file."""
        for statement in reversed(node.body):
            if isinstance(statement, ast.AnnAssign) and _target_name(statement) == key:
                return statement
        seen.add(node.name)
        for base in node.bases:
            found = self.bindings.get(getattr(base, "id", ""))
            if isinstance(found, ast.ClassDef) and found.name not in seen:
                statement = self._field(found, key, seen=seen)
                if statement is not None:
                    return statement
        return None

    def start(self, node: ast.stmt) -> int:
        """The index of the first line of ``node``, with its decorators and the comments right
        above it."""
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
        while first > 0 and self.lines[first - 1].lstrip().startswith("#"):
            first -= 1
        return first

    def indent(self, node: ast.ClassDef) -> str:
        line = self.lines[node.body[0].lineno - 1]
        return line[: len(line) - len(line.lstrip())]


class _Plan:
    """The declarations to add, by the class they go into."""

    def __init__(self, module: _Module, writer: _Writer) -> None:
        self.module, self.writer = module, writer
        self.additions: dict[ast.ClassDef, list[Any]] = {}
        self.added: list[str] = []
        self.users: set[ast.ClassDef] = set()
        """The existing classes whose new fields name a new class."""

    def section(self, path: tuple[str, ...], target: _Target) -> None:
        """Plan the keys of the section ``path``, which ``target`` declares already."""
        found = self.writer.sections[path]
        extended = self.writer.extended(path)
        declared = {field.name for field in target.spec.fields}
        shadowed = {*declared, *found.keys, *extended}
        for key in sorted({*found.keys, *extended}):
            dotted = ".".join((*path, key))
            field = target.spec.field(key)
            if field is None:
                classes = len(self.writer.classes)
                statement = self.writer.statement(found, key, extended=extended, shadowed=shadowed)
                if statement is not None:
                    new = [c.name for c in self.writer.classes[classes:]]
                    self.add(target, statement, dotted=dotted, new=new)
                continue
            if isinstance(field.annotation, SectionSpec):
                child = (*path, key)
                if key not in extended:
                    self.tables(found, key, dotted=dotted)
                target_child = self.module.child(target, key, field.annotation, dotted)
                self.section(child, target_child)
                continue
            if key in extended:
                raise MergeRefused(
                    f"`{dotted}` is declared as {typecheck.type_name(field.annotation)}, but "
                    "the TOMLs make it a section with keys of its own"
                )
            for seen in found.keys[key]:
                if not typecheck.matches(seen.value, field.annotation):
                    raise MergeRefused(
                        f"`{dotted}` is declared as {typecheck.type_name(field.annotation)} "
                        f"(line {field.line}), but {seen.file} sets it to "
                        f"{typecheck.value_name(seen.value)}; make the two agree, then "
                        "scaffold again"
                    )

    def tables(self, found: _Section, key: str, *, dotted: str) -> None:
        """The keys of the tables ``key`` holds, as the section below ``found``."""
        path = (*found.path, key)
        child = self.writer.sections.setdefault(path, _Section(path, known=True))
        for seen in found.keys[key]:
            if not isinstance(seen.value, dict):
                raise MergeRefused(
                    f"`{dotted}` is declared as a section, but {seen.file} sets it to "
                    f"{typecheck.value_name(seen.value)}"
                )
            for name, value in seen.value.items():
                child.keys.setdefault(name, []).append(_Seen(seen.check, value))

    def add(self, target: _Target, statement: Any, *, dotted: str, new: list[str]) -> None:
        """Plan ``statement`` (the field for ``dotted``) at the end of ``target``'s class."""
        if target.node is None:
            raise MergeRefused(f"cannot add `{dotted}`: {target.why}")
        node = target.node
        if node.body[0].lineno == node.lineno:
            raise MergeRefused(f"class `{node.name}` is written on one line")
        names = _class_names(node) | {s.target for s in self.additions.get(node, [])}
        needed = {self.writer.field_function.split(".")[0], *new}
        if not self.module.future_annotations:  # annotations run in the class body too
            needed |= set(re.findall(r"[A-Za-z_]\w*", statement.annotation))
        hidden = names & needed
        if hidden:
            raise MergeRefused(
                f"class `{node.name}` has a field named `{sorted(hidden)[0]}`, which would hide "
                f"the name the new field `{dotted}` needs"
            )
        self.additions.setdefault(node, []).append(statement)
        if new:
            self.users.add(node)
        self.added.append(f"[{dotted}] (new class {new[-1]})" if new else f"`{dotted}`")

    def apply(self) -> str:
        """The module's text with every planned declaration inserted."""
        module, newline = self.module, self.module.newline
        lines = list(module.lines)
        inserts: dict[int, list[str]] = {}
        for node, statements in self.additions.items():
            text = format_module(py.Module([py.ClassDef("_", body=statements)]))
            indent = module.indent(node)
            body = [indent + line[4:] if line.strip() else line for line in _lines(text)[1:]]
            inserts.setdefault(node.body[-1].end_lineno, []).append("".join(body))
        if self.writer.classes:
            first = min(module.start(node) for node in self.users)
            text = format_module(py.Module(list(self.writer.classes)))
            inserts.setdefault(first, []).append(text + "\n\n")
        else:
            first = len(lines)
        added = "".join(chunk for chunks in inserts.values() for chunk in chunks)
        used = {  # an import the new lines do not use would be a lint error in the fork
            "dataclass": bool(self.writer.classes),
            "field": re.search(r"(?<![\w.])field\(", added) is not None,
        }
        missing = [name for name in module.imports if used[name]]
        if missing:
            at = self.import_line(first)
            line = f"from dataclasses import {', '.join(sorted(missing))}\n"
            inserts.setdefault(at, []).insert(0, line)
        if len(lines) in inserts and lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += newline  # the last line, which a field now follows, gets its end
        out = []
        for index in range(len(lines) + 1):
            out += [chunk.replace("\n", newline) for chunk in inserts.get(index, [])]
            if index < len(lines):
                out.append(lines[index])
        source = "".join(out)
        try:
            ast.parse(source)
        except SyntaxError as error:  # never write a module that does not parse
            raise MergeRefused(f"the declarations would not fit its syntax: {error.msg}") from None
        return source

    def import_line(self, before: int) -> int:
        """Where a new import line goes: after the last top-level import above line ``before``,
        else after the module docstring."""
        body = self.module.tree.body
        imports = [n for n in body if isinstance(n, ast.Import | ast.ImportFrom)]
        imports = [n for n in imports if n.end_lineno <= before]
        if imports:
            return imports[-1].end_lineno
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            return body[0].end_lineno
        return 0


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def _bound_names(node: ast.stmt) -> list[str]:
    """The module-level names one statement binds."""
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return [node.name]
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(node, ast.If | ast.Try):
        return [name for child in node.body for name in _bound_names(child)]
    return []


def _annotation_name(node: ast.expr) -> str | None:
    """The class an annotation names plainly (``Infra`` or ``"Infra"``), else ``None``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        text = node.value.strip()
        return text if re.fullmatch(r"[A-Za-z_]\w*", text) else None
    return node.id if isinstance(node, ast.Name) else None


def _target_name(statement: ast.AnnAssign) -> str | None:
    return statement.target.id if isinstance(statement.target, ast.Name) else None


def _class_names(node: ast.ClassDef) -> set[str]:
    """The names a class body binds (its fields hide module names in the defaults after them)."""
    return {name for statement in node.body for name in _bound_names(statement)}

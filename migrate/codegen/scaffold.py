"""Scaffold the extension module a fork declares: its own sections and keys, read from its TOMLs.

A fork adds sections and keys (``[infra]``, ``optimizer.swap_optimizer``) that torchtitan v0.2.2
does not have, in its own copy of the config classes. titan rejects them until the project
declares a module with those classes (``[tool.titan] extensions``, see ``titan.schemas.project``).
Writing that module by hand means collecting every key of every file, so this writes it from the
files themselves:

- every unknown section becomes a ``@dataclass`` (nested tables become nested dataclasses), and
  unknown keys of a known section become fields of a same-named dataclass, which the legacy merge
  folds into that section (v0.2.2's ``_merge_configs``: a ``Training`` with only the new fields);
- a field's type is inferred from its values in all files (``int`` and ``float`` together make
  ``float``; different kinds make a union, with a comment saying which file holds which), its
  default is the most common value (the first seen on a tie), and a comment above it lists the
  values and the files they come from;
- an unknown key that titan recognises is **not** declared: a typo of a real key (did-you-mean
  finds one), a key of an older torchtitan (``titan.schemas.moved_keys``) or of a built-in extension.
  Declaring those would freeze a mistake into the fork's schema; they are reported instead.
  So is a key that cannot be a dataclass field (``class``, ``__init__``) or that holds a date.

A table becomes a dataclass, inline or not, so that titan-migrate carries each of its keys. Only a
table below a section whose keys are data rather than names (``gpus = { "0" = "a100" }``) becomes a
``dict[str, ...]`` field. The module is printed by ``titan.migrate.codegen.pyfmt`` (so it is ``ruff
format``-clean) with ``from __future__ import annotations``: annotations stay text, so a field named
``list`` cannot break the ``list[str]`` of the fields after it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from titan.migrate.codegen import names
from titan.migrate.codegen import scaffold_types as types
from titan.migrate.codegen.pyfmt import nodes as py
from titan.migrate.codegen.pyfmt.imports import sort_imports
from titan.migrate.codegen.pyfmt.printer import format_module
from titan.schemas.diagnostics import Diagnostic
from titan.schemas.extension_fields import field_name_problem
from titan.schemas.spec import SectionSpec, schema_paths
from titan.schemas.suggest import FORK_SETTING, suggest
from titan.schemas.toml_check import CheckOptions, FileCheck, check_file

WIDTH = 88
"""Docstrings and comments are wrapped to ruff's default line length, which a fork may use."""

MAX_SHOWN = 3
"""How many values, and files per value, a field's comment lists before it says "and N more"."""

_STOPPING = ("toml-syntax", "unreadable-file", "too-deep", "extension-error")
"""Findings that leave a file's unknown keys unknowable (the schema or the document is missing)."""


class Scaffold:
    """The module text, and what was not declared."""

    __slots__ = ("source", "not_declared", "problems", "declaration")

    def __init__(self) -> None:
        self.source: str | None = None
        """The module, ``None`` when there was nothing to declare."""
        self.not_declared: list[str] = []
        """One line per unknown key left out, saying why (typo, older key, not a field name)."""
        self.problems: list[Diagnostic] = []
        """Why a file could not be scaffolded (unreadable, not TOML, a custom config module
        that cannot be read): its keys are left out."""
        self.declaration: list[Diagnostic] = []
        """What is wrong with the project declaration (``pyproject.toml``). Not a reason to stop:
        a declared module that cannot be read is most often the very file being scaffolded again
        (``> fork_ext.py`` empties it before titan runs), so its keys are declared again."""


class _Seen:
    """One value of a key in one file."""

    __slots__ = ("check", "value")

    def __init__(self, check: FileCheck, value: Any) -> None:
        self.check, self.value = check, value

    @property
    def file(self) -> str:
        return self.check.file


class _Section:
    """A dataclass to write: the values of its keys, by key, in the order first met."""

    __slots__ = ("path", "known", "keys")

    def __init__(self, path: tuple[str, ...], *, known: bool) -> None:
        self.path, self.known = path, known
        self.keys: dict[str, list[_Seen]] = {}


def scaffold(files: Sequence[str], *, options: CheckOptions | None = None) -> Scaffold:
    """The extension module for the unknown keys of ``files`` (checked as titan-validate would,
    with the modules the project already declares)."""
    result, sections = collect(files, options=options)
    writer = _Writer(sections, files=[str(f) for f in files])
    writer.section(())
    result.not_declared += writer.left_out
    if writer.classes:
        result.source = writer.module()
    return result


def collect(
    files: Sequence[str], *, options: CheckOptions | None = None
) -> tuple[Scaffold, dict[tuple[str, ...], _Section]]:
    """The unknown keys of ``files``, by the section they belong to (the root is ``()``), and
    the findings so far (the module itself is not written yet)."""
    result = Scaffold()
    sections: dict[tuple[str, ...], _Section] = {(): _Section((), known=True)}
    left_out: dict[str, list[str]] = {}
    for file in files:
        check = check_file(file, options or CheckOptions())
        for finding in check.diagnostics:  # located in pyproject.toml, not in the TOML
            if (
                finding.span
                and finding.span.file != check.file
                and finding not in result.declaration
            ):
                result.declaration.append(finding)
        stopping = [
            d for d in check.diagnostics if d.code in _STOPPING and d not in result.declaration
        ]
        if check.document is None or check.schema is None or stopping:
            result.problems += stopping or check.diagnostics[:1]
            continue
        paths = schema_paths(check.schema)
        for parts, value in _unknown(check.document, check.schema):
            why = _not_declared(parts, value, paths, check=check)
            if why is not None:
                left_out.setdefault(why, []).append(_where(check, parts))
                continue
            for end in range(1, len(parts)):
                sections.setdefault(parts[:end], _Section(parts[:end], known=True))
            seen = _Seen(check, value)
            sections[parts[:-1]].keys.setdefault(parts[-1], []).append(seen)
    for why, places in left_out.items():
        result.not_declared.append(f"not declared: {why} ({_capped(places)})")
    return result, sections


def _unknown(document: dict, schema: SectionSpec, parts: tuple[str, ...] = ()):
    """(key path, value) of every key the schema does not have, as the checker walks them."""
    for key, value in document.items():
        field = schema.field(key)
        if field is None:
            yield (*parts, key), value
        elif isinstance(field.annotation, SectionSpec) and isinstance(value, dict):
            yield from _unknown(value, field.annotation, (*parts, key))


def _not_declared(
    parts: tuple[str, ...], value: Any, paths: dict[str, bool], *, check: FileCheck
) -> str | None:
    """Why the unknown key ``parts`` is not declared, or ``None`` to declare it: asked exactly
    as titan-validate asks (with the value, the file and its schema), so whatever validate
    calls a fork's own setting is declared."""
    dotted = ".".join(parts)
    found = suggest(
        parts,
        paths,
        is_table=isinstance(value, dict),
        value=value,
        document=check.document,
        schema=check.schema,
    )
    if (found.hint or "").startswith(FORK_SETTING):  # its own checks say what it leaves out
        return None
    typo = re.fullmatch(r"did you mean `([^`]+)`\?", found.hint or "") or re.match(
        r"looks like a misspelling of `([^`]+)`", found.hint or ""
    )
    if typo:
        return f"`{dotted}` looks like a typo of `{typo[1]}`"
    if found.code == "moved-key":
        return f"`{dotted}` is a key of an older torchtitan: {found.hint}"
    return f"`{dotted}`: {found.hint}"


def _where(check: FileCheck, parts: tuple[str, ...]) -> str:
    span = check.spans.get(parts)
    return f"{check.file}:{span.line}:{span.col}" if span else check.file


def _wrap(text: str, *, indent: int = 0) -> str:
    """``text`` wrapped to :data:`WIDTH` paragraph by paragraph; indented lines (a TOML
    example) are kept as they are."""
    import textwrap

    width = WIDTH - indent - 3  # room for the quotes of a one-line docstring
    paragraphs = []
    for paragraph in text.split("\n\n"):
        if paragraph.startswith(" "):
            paragraphs.append(paragraph)
        else:
            paragraphs.append(
                textwrap.fill(
                    paragraph, width=width, break_on_hyphens=False, break_long_words=False
                )
            )
    return "\n\n".join(paragraphs)


def _capped(items: Sequence[str]) -> str:
    unique = list(dict.fromkeys(items))
    more = len(unique) - MAX_SHOWN
    return ", ".join(unique[:MAX_SHOWN]) + (f" and {more} more" if more > 0 else "")


class _Writer:
    """Turns the collected sections into dataclasses, children first."""

    def __init__(
        self,
        sections: dict[tuple[str, ...], _Section],
        *,
        files: list[str],
        reserved: frozenset[str] = frozenset(),
    ) -> None:
        self.sections = sections
        self.files = files
        self.classes: list[py.ClassDef] = []
        self.class_names: dict[tuple[str, ...], str] = {}
        self.left_out: list[str] = []
        self.reserved = reserved
        """Names a new class must not take (those of the module it is added to)."""
        self.decorator = "dataclass"
        """How the module names ``dataclasses.dataclass``."""
        self.field_names: set[str] = set()
        for section in sections.values():
            for key, seen in section.keys.items():
                self.field_names |= {key, *types.nested_keys([s.value for s in seen])}
        # A field named `field` would be called by the defaults after it, so the module then
        # calls `dataclasses.field`: the static reader knows a default by the name `field`.
        self.module_alias = next(
            name
            for name in ("dataclasses", "dataclasses_", "dataclasses_module")
            if name not in self.field_names
        )
        self.field_function = (
            f"{self.module_alias}.field" if "field" in self.field_names else "field"
        )

    def section(self, path: tuple[str, ...]) -> str | None:
        """Write the class of ``path`` (after the classes it holds); returns its name, or
        ``None`` when none of its keys could be declared."""
        found = self.sections[path]
        body: list[Any] = [py.Docstring(_wrap(self.doc(found), indent=4))]
        extended = self.extended(path)
        shadowed = {*found.keys, *extended}
        for key in sorted({*found.keys, *extended}):
            statement = self.statement(found, key, extended=extended, shadowed=shadowed)
            if statement is not None:
                body.append(statement)
        if len(body) == 1:
            return None
        name = self.class_name(path)
        self.classes.append(py.ClassDef(name, body=body, decorators=[py.Ref(self.decorator)]))
        return name

    def extended(self, path: tuple[str, ...]) -> set[str]:
        """The known sections right below ``path`` that get keys (each a field of its class)."""
        children = {p[-1] for p in self.sections if p[:-1] == path and len(p) == len(path) + 1}
        return children - set(self.sections[path].keys)

    def statement(
        self, found: _Section, key: str, *, extended: set[str], shadowed: set[str]
    ) -> Any:
        """The field statement for ``key`` of ``found`` (the classes it needs written first),
        or ``None`` when it cannot be declared (said in :attr:`left_out`)."""
        path = found.path
        if key in extended:
            name = self.section((*path, key))
            return None if name is None else py.AnnAssign(key, name, self.factory(py.Ref(name)))
        dotted = ".".join((*path, key))
        problem = field_name_problem(key)
        if problem is not None:
            places = _capped([_where(s.check, (*path, key)) for s in found.keys[key]])
            self.left_out.append(
                f"not declared: `{dotted}` cannot be a dataclass field: {problem}; rename "
                f"the key in the fork ({places})"
            )
            return None
        return self.key(found, key, shadowed=shadowed)

    def key(self, section: _Section, key: str, *, shadowed: set[str]) -> Any:
        """The field statement for ``key`` of ``section`` (a nested class written first)."""
        seen = section.keys[key]
        path, dotted = (*section.path, key), ".".join((*section.path, key))
        tables = [s for s in seen if isinstance(s.value, dict)]
        if tables and len(tables) != len(seen):
            other = next(s for s in seen if not isinstance(s.value, dict))
            self.left_out.append(
                f"not declared: `{dotted}` is a table in {tables[0].file} but "
                f"{types.shown_value(other.value)} in {other.file}; make the files agree"
            )
            return None
        if any(types.has_date(s.value) for s in seen):
            places = _capped([_where(s.check, path) for s in seen if types.has_date(s.value)])
            self.left_out.append(
                f"not declared: `{dotted}` holds a TOML date or time, which an extension read "
                f"from source cannot declare ({places})"
            )
            return None
        keys = {name for table in tables for name in table.value}
        if tables and (not section.path or all(name.isidentifier() for name in keys)):
            child = self.sections.setdefault(path, _Section(path, known=False))
            for table in seen:
                for name, value in table.value.items():
                    child.keys.setdefault(name, []).append(_Seen(table.check, value))
            name = self.section(path)
            if name is None:
                return None
            return py.AnnAssign(key, name, self.factory(py.Ref(name)))
        annotation = types.annotation([s.value for s in seen])
        counts: dict[str, int] = {}
        first: dict[str, Any] = {}
        for s in seen:
            value = types.coerce(s.value, annotation)
            counts[types.key(value)] = counts.get(types.key(value), 0) + 1
            first.setdefault(types.key(value), value)
        default = first[max(counts, key=counts.__getitem__)]  # max keeps the first on a tie
        comments = [self.values_comment(seen, annotation)]
        if " | " in annotation:
            comments.append(f"mixed types, so {annotation}: check which the fork reads")
        lists = [s.value for s in seen if isinstance(s.value, list)]
        if lists and not any(lists):
            comments.append("only empty lists seen: the element type str is a guess")
        comments = [_wrap(text, indent=4 + len("# ")) for text in comments]
        return py.AnnAssign(key, annotation, self.default(default, shadowed), comments=comments)

    def values_comment(self, seen: list[_Seen], annotation: str) -> str:
        by_value: dict[str, tuple[Any, list[str]]] = {}
        for s in seen:  # grouped as the type holds them, shown as the first file wrote it
            key = types.key(types.coerce(s.value, annotation))
            by_value.setdefault(key, (s.value, []))[1].append(s.file)
        shown = [
            f"{types.shown_value(value)} in {_capped(files)}"
            for value, files in list(by_value.values())[:MAX_SHOWN]
        ]
        more = len(by_value) - MAX_SHOWN
        return "; ".join(shown) + (f"; and {more} more values" if more > 0 else "")

    def default(self, value: Any, shadowed: set[str]) -> Any:
        if isinstance(value, list | dict):
            kind = type(value).__name__
            empty = not value and kind not in shadowed
            return self.factory(py.Ref(kind) if empty else py.Lambda(py.Lit(value)))
        if isinstance(value, float) and not math.isfinite(value) and "float" in shadowed:
            return self.factory(py.Lambda(py.Lit(value)))  # float("inf") would call the field
        return py.Lit(value)

    def factory(self, factory: Any) -> py.Call:
        return py.Call(py.Ref(self.field_function), [py.Arg(factory, name="default_factory")])

    def class_name(self, path: tuple[str, ...]) -> str:
        if not path:
            wanted = "JobConfig"
        else:
            wanted = "".join(part[:1].upper() + part[1:] for p in path for part in p.split("_"))
            wanted = wanted if wanted.isidentifier() else f"Section{wanted}"
        taken = {*self.class_names.values(), *self.field_names, self.module_alias, *self.reserved}
        name = wanted if not path else names.free_name(wanted, taken=taken | {"JobConfig"})
        self.class_names[path] = name
        return name

    def doc(self, section: _Section) -> str:
        if not section.path:
            return (
                "The sections the fork adds or extends; titan merges each into the legacy "
                "``JobConfig``, as v0.2.2 merged a custom config module's."
            )
        table = ".".join(section.path)
        if section.known:
            return f"Keys the fork adds to ``[{table}]``; titan merges them into that section."
        return f"The fork's ``[{table}]`` table."

    def module(self) -> str:
        sources = ", ".join(f"``{f}``" for f in self.files[:MAX_SHOWN])
        if len(self.files) > MAX_SHOWN:
            sources += f" and {len(self.files) - MAX_SHOWN} more files"
        docstring = (
            "Fork sections and keys that torchtitan v0.2.2 does not have, declared for titan.\n\n"
            f"Scaffolded by ``titan-migrate --scaffold-extension`` from {sources}. titan merges "
            "this module into every TOML of the project once ``pyproject.toml`` declares it "
            "(the path is relative to ``pyproject.toml``)::\n\n"
            "    [tool.titan]\n"
            '    extensions = ["fork_ext.py"]\n\n'
            "Each type and default was inferred from the values in those files, and the comment "
            "above each field says which file holds which value: review them, and write a "
            "docstring under each field saying what it does (titan shows it as the setting's "
            "help)."
        )
        imports: list[Any] = [
            py.ImportFrom("__future__", ["annotations"]),
            py.ImportFrom("dataclasses", ["dataclass", "field"]),
        ]
        if self.field_function != "field":
            alias = self.module_alias
            imports[1] = py.ImportFrom("dataclasses", ["dataclass"])
            imports.append(
                py.Import("dataclasses" + ("" if alias == "dataclasses" else f" as {alias}"))
            )
        return format_module(
            py.Module([py.Docstring(_wrap(docstring)), *sort_imports(imports), *self.classes])
        )

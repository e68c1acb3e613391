"""Read a legacy ``job.custom_config_module`` into an :class:`ExtensionSpec` without running it.

v0.2.2 imports that module and merges its ``JobConfig`` dataclass into the base schema
(manager_behaviour.md §3). A validator must not run a stranger's code to learn a schema, so by
default the module's AST is read: fields, annotations, literal defaults, the docstring under each
field. What cannot be resolved becomes ``typing.Any`` / ``MISSING`` plus a note (a warning later).
Importing is opt-in (``--allow-import``). The upstream modules ship as sources in
``known_extensions/`` and go through the same reader, so TOMLs naming them need no torchtitan; the
result is stored as data in ``titan.schemas.builtin_extensions_spec`` (``python -m titan.schemas.spec_codegen``)
so that the validator does not pay for this reader (nor ``ast`` and ``pathlib``) on every run.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import sys
import textwrap
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from titan.schemas.builtin_extensions import KNOWN_EXTENSIONS, ExtensionError, known_extension
from titan.schemas.spec import MISSING, ExtensionSpec, FieldSpec, SectionSpec

_KNOWN_DIR = Path(__file__).parent / "known_extensions"
_TYPING_MODULES = ("typing", "typing_extensions")
_BUILTIN_TYPES = {t.__name__: t for t in (int, float, str, bool, bytes, list, dict, tuple, set)}
_FACTORIES = {"list": list, "dict": dict, "tuple": tuple, "set": set}
_NOT_FIELDS = ("ClassVar", "InitVar", "KW_ONLY")  # annotations dataclasses makes no field of
_FUTURE_NOTE = (
    "{} uses `from __future__ import annotations`: v0.2.2's loader fails on such modules (tyro "
    "raises NameError on the merged string annotations); remove that import"
)


class _Unresolved(Exception):
    """An annotation or default the static reader cannot evaluate (becomes Any/MISSING + note)."""


# What evaluating an annotation can raise: ours, and what Python raises on nonsense such as
# `int[str]`, `typing.Nope`, a bad string annotation or an alias cycle (`A = B`, `B = A`).
_UNRESOLVABLE = (_Unresolved, TypeError, AttributeError, SyntaxError, RecursionError)


_TORCHTITAN_CONFIG = ("torchtitan.config", "torchtitan.config_manager")
"""Where torchtitan's config classes live: ``torchtitan.config`` (``job_config``) since #1442
(34d815c0, 2025-07), ``torchtitan.config_manager`` from the typed JobConfig of #767 (c1c2f55d,
2025-04) until then."""


def _is_builtin_schema(module: str | None) -> bool:
    # Bases from torchtitan's config module are titan's built-in sections: the builder already
    # has their fields and the merge adds only what the subclass declares, so never follow them.
    return bool(module) and any(
        module == root or module.startswith(f"{root}.")  # type: ignore[union-attr]
        for root in _TORCHTITAN_CONFIG
    )


def _binding_path(binding: tuple) -> str | None:
    """The dotted path an import binding names: ``("module", "a.b")`` -> ``a.b``,
    ``from a.b import C`` -> ``a.b.C``; ``None`` for anything else (relative imports too)."""
    if binding[0] == "module":
        return binding[1]
    if binding[0] == "from" and binding[1] == 0 and binding[2]:
        return f"{binding[2]}.{binding[3]}"
    return None


def _builtin_section(path: str | None) -> SectionSpec | None:
    """The legacy section a class of torchtitan's own config module is (``Parallelism`` of
    ``torchtitan.config.job_config`` or of ``torchtitan.config``), by its class name."""
    if path is None:
        return None
    module, _, name = path.rpartition(".")
    if not _is_builtin_schema(module):
        return None
    from titan.schemas.legacy_spec import LEGACY_SPEC

    return _section_named(LEGACY_SPEC, name)


def _section_named(section: SectionSpec, name: str) -> SectionSpec | None:
    for field in section.fields:
        if isinstance(field.annotation, SectionSpec):
            if field.annotation.name == name:
                return field.annotation
            found = _section_named(field.annotation, name)
            if found is not None:
                return found
    return None


def _terminal_name(node: ast.expr) -> str | None:
    """``dataclass``, ``dataclasses.dataclass`` and ``dataclass(...)`` all give ``dataclass``."""
    node = node.func if isinstance(node, ast.Call) else node
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", None)


def _string_statement(node: ast.stmt | None) -> str | None:
    """The tyro-style field docstring: a bare string literal statement."""
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
        return _cleandoc(node.value.value) if isinstance(node.value.value, str) else None
    return None


def _cleandoc(text: str) -> str:
    # inspect.cleandoc, without importing inspect (that import costs more than a whole check).
    first, _, rest = text.expandtabs().partition("\n")
    return "\n".join([first.strip(), textwrap.dedent(rest)]).strip()


def find_module_source(module: str, *, search_dirs: Sequence[Path]) -> Path | None:
    """Dotted path -> the ``.py`` file: for each dir, ``<dir>/a/b/__init__.py`` or ``<dir>/a/b.py``."""
    parts = module.split(".")
    if not all(part.isidentifier() for part in parts):
        return None
    for directory in search_dirs:
        base = Path(directory).joinpath(*parts)
        # Same precedence as Python's path finder: a package directory shadows a same-named module.
        for candidate in (base / "__init__.py", base.with_name(parts[-1] + ".py")):
            if candidate.is_file():
                return candidate
    return None


class _Context:
    """What one extension read shares across the files it follows: parsed modules and notes."""

    def __init__(self, search_dirs: Sequence[Path]) -> None:
        self.search_dirs = tuple(search_dirs)
        self.readers: dict[Path, _ModuleReader] = {}
        self.notes: list[str] = []

    def reader(self, path: Path, module: str) -> _ModuleReader:
        key = path.absolute()
        if key not in self.readers:
            self.readers[key] = _ModuleReader(self, path, module)
        return self.readers[key]

    def find(self, module: str) -> _ModuleReader | None:
        if module in KNOWN_EXTENSIONS:
            return self.reader(_KNOWN_DIR / f"{KNOWN_EXTENSIONS[module]}.py", module)
        path = find_module_source(module, search_dirs=self.search_dirs)
        return self.reader(path, module) if path else None

    def extension(self, path: Path, module: str, *, origin: str) -> ExtensionSpec:
        owner, binding = self.reader(path, module).lookup("JobConfig")
        if binding[0] == "from":
            raise ExtensionError(
                f"{module}.JobConfig is imported from {'.' * binding[1]}{binding[2] or ''}, whose "
                "source titan cannot find; pass --module-path DIR (the dir of its top package)"
            )
        if binding[0] == "unbound":
            raise ExtensionError(
                f"module {module!r} has no attribute 'JobConfig' ({path}); the legacy loader "
                "needs a dataclass named exactly JobConfig, defined or re-exported there"
            )
        if binding[0] != "class":
            raise ExtensionError(
                f"{module}.JobConfig ({path}) is not a class statement that titan can read; "
                "make it a @dataclass class, or pass --allow-import to import the module"
            )
        try:
            root = owner.section(binding[1])
        except _Unresolved:
            raise ExtensionError(
                f"{owner.path}:{binding[1].lineno}: {module}.JobConfig is not a dataclass; the "
                "legacy loader merges dataclass fields, so decorate it with @dataclass"
            ) from None
        return ExtensionSpec(module=module, root=root, origin=origin, notes=tuple(self.notes))


class _ModuleReader:
    """The module-level names of one source file, and evaluation of annotations and defaults."""

    def __init__(self, ctx: _Context, path: Path, module: str) -> None:
        self.ctx, self.path, self.module = ctx, path, module
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except SyntaxError as exc:
            raise ExtensionError(
                f"{path}:{exc.lineno}: syntax error in custom config module {module!r}: {exc.msg} "
                "(the legacy loader could not import it either; fix the module)"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ExtensionError(f"cannot read {path} for module {module!r}: {exc}") from None
        # name -> ("class", ClassDef) | ("expr", value) | ("from", level, module, attr)
        #         | ("module", dotted) | ("other",); later statements rebind, as at runtime.
        self.names: dict[str, tuple] = {}
        self.sections: dict[ast.ClassDef, SectionSpec | None] = {}  # None while being built
        # What a class statement's own name meant before it: `class Parallelism(Parallelism)`
        # subclasses the imported class its statement then rebinds.
        self.shadowed: dict[ast.ClassDef, tuple] = {}
        for node in tree.body:
            self._bind(node)

    def _bind(self, node: ast.stmt) -> None:
        if isinstance(node, ast.ClassDef):
            if node.name in self.names:
                self.shadowed[node] = self.names[node.name]
            self.names[node.name] = ("class", node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            self.names[node.name] = ("other",)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.names[target.id] = ("expr", node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            self.names[node.target.id] = ("expr", node.value)
        elif isinstance(node, ast.ImportFrom):
            if node.module == "__future__" and any(a.name == "annotations" for a in node.names):
                self.note(_FUTURE_NOTE.format(self.module))
            for alias in node.names:
                binding = ("from", node.level, node.module, alias.name)
                self.names[alias.asname or alias.name] = binding
        elif isinstance(node, ast.Import):
            for alias in node.names:  # `import a.b` binds `a`; `import a.b as m` binds m to a.b
                local = alias.asname or alias.name.split(".")[0]
                self.names[local] = ("module", alias.name if alias.asname else local)
        elif isinstance(node, (ast.If, ast.Try)):
            # `if TYPE_CHECKING:` / `try: from typing import X` imports: take the first branch.
            for child in node.body:
                self._bind(child)

    def note(self, text: str) -> None:
        if text not in self.ctx.notes:
            self.ctx.notes.append(text)

    def follow(self, level: int, module: str | None) -> _ModuleReader | None:
        """The reader for ``from <level dots><module> import ...``, or None if not found."""
        if level == 0:
            return self.ctx.find(module or "")
        parts, parents = self.module.split("."), self.path.absolute().parents
        if level > len(parents):
            return None
        package = parts[: max(0, len(parts) - level + (self.path.name == "__init__.py"))]
        base = parents[level - 1]
        target = find_module_source(module, search_dirs=[base]) if module else base / "__init__.py"
        if target is None or not target.is_file():
            return None
        return self.ctx.reader(target, ".".join(package + ([module] if module else [])))

    def lookup(self, name: str, depth: int = 0) -> tuple[_ModuleReader, tuple]:
        """Follow re-exports and ``X = Y`` aliases to the binding that defines ``name``."""
        binding = self.names.get(name)
        if binding is None or depth > 50:  # depth: an import cycle, which Python rejects too
            return self, ("unbound", name)
        return self.follow_binding(binding, depth)

    def follow_binding(self, binding: tuple, depth: int = 0) -> tuple[_ModuleReader, tuple]:
        """Follow one binding (an alias, a re-export) to the binding that defines it."""
        if depth > 50:
            return self, ("unbound", "")
        if binding[0] == "expr" and isinstance(binding[1], ast.Name):
            return self.lookup(binding[1].id, depth + 1)
        if binding[0] == "from":
            _, level, module, attr = binding
            followable = level > 0 or not (
                module in (*_TYPING_MODULES, "dataclasses") or _is_builtin_schema(module)
            )
            other = self.follow(level, module) if followable else None
            if other is not None and other is not self:
                return other.lookup(attr, depth + 1)
        return self, binding

    def annotation(self, node: ast.expr) -> Any:
        """An annotation's AST -> a typing object or a SectionSpec; raises one of _UNRESOLVABLE."""
        if isinstance(node, ast.Constant):
            if node.value is None or node.value is Ellipsis:
                return node.value
            if isinstance(node.value, str):  # a string annotation: parse it and go on
                return self.annotation(ast.parse(node.value.strip(), mode="eval").body)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            sides = (self._type_arg(side) for side in (node.left, node.right))
            left, right = (type(None) if side is None else side for side in sides)
            return left | right
        elif isinstance(node, ast.Subscript):
            origin = self.annotation(node.value)
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            if origin is typing.Literal:
                return typing.Literal[tuple(self.literal(item) for item in items)]
            if origin is typing.Annotated:
                return self.annotation(items[0])
            args = tuple(self._type_arg(item) for item in items)
            return origin[args[0] if len(args) == 1 else args]
        elif isinstance(node, ast.Name):
            owner, binding = self.lookup(node.id)
            builtin = _builtin_section(_binding_path(binding))
            if builtin is not None:
                return builtin  # `Parallelism` from torchtitan.config: that section, whole
            if binding[0] == "class":
                return owner.section(binding[1])
            if binding[0] == "expr":  # a type alias such as `Mode = Literal["a", "b"]`
                return owner.annotation(binding[1])
            if binding[0] == "unbound" and binding[1] in _BUILTIN_TYPES:
                return _BUILTIN_TYPES[binding[1]]
            if binding[0] == "from" and binding[1] == 0 and binding[2] in _TYPING_MODULES:
                return getattr(typing, binding[3])  # `from typing import Literal`
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            _, binding = self.lookup(node.value.id)
            if binding[0] == "module" and binding[1] in _TYPING_MODULES:
                return getattr(typing, node.attr)  # `typing.Literal`, `t.Literal`
        if isinstance(node, ast.Attribute):
            builtin = _builtin_section(self.dotted(node))  # `jc.Parallelism`
            if builtin is not None:
                return builtin
            found = self.attribute_class(node)
            if found is not None:
                return found[0].section(found[1])
        raise _Unresolved

    def dotted(self, node: ast.expr) -> str | None:
        """The dotted path an attribute chain names through this module's imports
        (``jc.Parallelism`` after ``import torchtitan.config.job_config as jc``)."""
        if isinstance(node, ast.Attribute):
            head = self.dotted(node.value)
            return None if head is None else f"{head}.{node.attr}"
        if isinstance(node, ast.Name):
            _, binding = self.lookup(node.id)
            return _binding_path(binding)
        return None

    def attribute_class(self, node: ast.Attribute) -> tuple[_ModuleReader, ast.ClassDef] | None:
        """The class statement ``module.Class`` names in another module titan can read."""
        path = self.dotted(node)
        if path is None or "." not in path:
            return None
        module, _, name = path.rpartition(".")
        if module in _TYPING_MODULES or _is_builtin_schema(module):
            return None
        reader = self.ctx.find(module)
        if reader is None:
            return None
        owner, binding = reader.lookup(name)
        return (owner, binding[1]) if binding[0] == "class" else None

    def _type_arg(self, node: ast.expr) -> Any:
        value = self.annotation(node)
        # A section inside a generic (`list[Section]`, `Section | None`) is not a table the legacy
        # merge understands; report it rather than build a half-typed object.
        if isinstance(value, SectionSpec):
            raise _Unresolved
        return value

    def literal(self, node: ast.expr) -> Any:
        """A literal value, allowing module-level constants (``x: int = DEFAULT``)."""
        if isinstance(node, ast.Name):
            owner, binding = self.lookup(node.id)
            if binding[0] != "expr":
                raise _Unresolved
            return owner.literal(binding[1])
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            kind = {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)]
            return kind(self.literal(element) for element in node.elts)
        try:
            return ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise _Unresolved from None

    def default(self, node: ast.expr | None, where: str) -> Any:
        if node is None:
            return MISSING
        if isinstance(node, ast.Call) and _terminal_name(node.func) == "field":
            keywords = {keyword.arg: keyword.value for keyword in node.keywords}
            if "default" in keywords:
                return self.default(keywords["default"], where)
            factory = keywords.get("default_factory")
            if factory is None:
                return MISSING
            if isinstance(factory, ast.Lambda):
                node = factory.body
            elif isinstance(factory, (ast.Name, ast.Attribute)) and _builtin_section(
                self.dotted(factory)
            ):
                return MISSING  # torchtitan's own section: the schema knows its defaults
            elif isinstance(factory, ast.Attribute) and self.attribute_class(factory):
                return MISSING  # a section of another module, as a class of this one
            elif isinstance(factory, ast.Name):
                owner, binding = self.lookup(factory.id)
                if binding[0] == "unbound" and factory.id in _FACTORIES:
                    return _FACTORIES[factory.id]()
                if binding[0] == "class" and owner.is_dataclass(binding[1]):
                    return MISSING  # a section: the schema builder knows its defaults
        try:
            return self.literal(node)
        except (_Unresolved, RecursionError):
            self.note(f"{where}: default `{ast.unparse(node)}` is not a literal; left unset")
            return MISSING

    @staticmethod
    def is_dataclass(node: ast.ClassDef) -> bool:
        return any(_terminal_name(decorator) == "dataclass" for decorator in node.decorator_list)

    def section(self, node: ast.ClassDef) -> SectionSpec:
        """A class of this module as a section; raises _Unresolved if it is not a dataclass."""
        if not self.is_dataclass(node) or (node in self.sections and not self.sections[node]):
            raise _Unresolved  # not a dataclass, or one that contains itself
        if node not in self.sections:
            self.sections[node] = None
            fields: dict[str, FieldSpec] = {}
            # Like dataclasses: base fields first (reversed MRO); a redefinition keeps its slot.
            for base in reversed(node.bases):
                fields.update(
                    (spec.name, spec) for spec in self._base_fields(base, node.name, node)
                )
            fields.update((spec.name, spec) for spec in self._own_fields(node))
            self.sections[node] = SectionSpec(
                name=node.name, fields=tuple(fields.values()), doc=ast.get_docstring(node)
            )
        return self.sections[node]  # type: ignore[return-value]

    def _base_fields(
        self, base: ast.expr, class_name: str, node: ast.ClassDef | None = None
    ) -> tuple[FieldSpec, ...]:
        if isinstance(base, ast.Attribute):
            if _is_builtin_schema(self.dotted(base.value)):
                return ()  # `jc.Parallelism`: titan's section already has those fields
            found = self.attribute_class(base)
            if found is not None:
                owner, statement = found
                if not owner.is_dataclass(statement):
                    return ()
                try:
                    return owner.section(statement).fields
                except _Unresolved:
                    pass
        if isinstance(base, ast.Name):
            if base.id == class_name and node in self.shadowed:
                owner, binding = self.follow_binding(self.shadowed[node])
            else:
                owner, binding = self.lookup(base.id)
            if binding[0] == "unbound" and base.id == "object":
                return ()
            if binding[0] == "class" and not owner.is_dataclass(binding[1]):
                return ()  # dataclasses collects fields from dataclass bases only
            if binding[0] == "class":
                try:
                    return owner.section(binding[1]).fields
                except _Unresolved:  # a base still being built: a cycle through a field type
                    pass
            if binding[0] == "from" and binding[1] == 0 and _is_builtin_schema(binding[2]):
                return ()
        self.note(
            f"{self.module}.{class_name}: base class `{ast.unparse(base)}` could not be read "
            "statically; its fields are not included"
        )
        return ()

    def _own_fields(self, node: ast.ClassDef) -> Iterator[FieldSpec]:
        for index, stmt in enumerate(node.body):
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            text = ast.unparse(stmt.annotation)
            if text.strip("'\"").split("[")[0].split(".")[-1] in _NOT_FIELDS:
                continue
            where = f"{self.module}.{node.name}.{stmt.target.id}"
            try:
                annotation = self.annotation(stmt.annotation)
            except _UNRESOLVABLE:
                annotation = Any
                self.note(
                    f"{where}: annotation `{text}` cannot be resolved statically; treated as Any"
                )
            after = node.body[index + 1] if index + 1 < len(node.body) else None
            yield FieldSpec(
                name=stmt.target.id,
                annotation=annotation,
                default=self.default(stmt.value, where),
                doc=_string_statement(after),
                line=stmt.lineno,
            )


def read_extension_source(
    path: Path, *, module: str, search_dirs: Sequence[Path] = ()
) -> ExtensionSpec:
    """Read one module file statically; absolute imports resolve through ``search_dirs`` and the
    directory that holds the module's top-level package (derived from ``path`` and ``module``)."""
    path = Path(path)
    depth = module.count(".") + (path.name == "__init__.py")
    parents = path.absolute().parents
    root = [parents[depth]] if depth < len(parents) else []
    return _Context([*search_dirs, *root]).extension(path, module, origin=str(path))


def read_builtin_source(short: str) -> ExtensionSpec | None:
    """Read a built-in module's source in ``known_extensions/`` by its short name (else None).

    ``known_extension`` serves the generated copy of this; ``titan.schemas.spec_codegen`` uses this to
    generate it."""
    modules = [module for module, name in KNOWN_EXTENSIONS.items() if name == short]
    if not modules:
        return None
    return _Context(()).extension(_KNOWN_DIR / f"{short}.py", modules[0], origin="built-in")


def _searched(search_dirs: Sequence[Path], *, shown: int = 3) -> str:
    """The folders searched, as a user can read them: existing folders only (``sys.path`` also
    holds zip files and import hooks), the first few by name, relative to the working folder."""
    import os

    folders = []
    for directory in search_dirs:
        if os.path.isdir(directory) and str(directory) not in folders:
            folders.append(str(directory))
    if not folders:
        return "no folder"
    named = []
    for folder in folders[:shown]:
        relative = os.path.relpath(folder)
        named.append(folder if relative.startswith(os.pardir) else relative)
    more = len(folders) - len(named)
    return ", ".join(named) + (f" and {more} more folder{'s' * (more != 1)}" if more else "")


def read_extension(module: str, *, search_dirs: Sequence[Path]) -> ExtensionSpec:
    """A built-in known module first, else the module's source in ``search_dirs``, read statically."""
    if module in KNOWN_EXTENSIONS:
        return known_extension(module)  # type: ignore[return-value]
    path = find_module_source(module, search_dirs=search_dirs)
    if path is None:
        relative = module.replace(".", "/")
        raise ExtensionError(
            f"custom config module {module!r} not found: no {relative}.py or "
            f"{relative}/__init__.py in {_searched(search_dirs)}; pass --module-path DIR, the "
            f"directory that holds `{module.split('.')[0]}`, or --extension NAME for a built-in "
            f"one ({', '.join(KNOWN_EXTENSIONS.values())})"
        )
    return _Context(search_dirs).extension(path, module, origin=str(path))


def import_extension(module: str, *, search_dirs: Sequence[Path]) -> ExtensionSpec:
    """``--allow-import``: import ``module`` with ``search_dirs`` first on ``sys.path`` and convert
    its ``JobConfig`` dataclass; docs and lines still come from the source when there is one.
    The spec's ``origin`` is the file that was imported."""
    expected = find_module_source(module, search_dirs=search_dirs)
    saved = list(sys.path)
    sys.path[:0] = [str(directory) for directory in search_dirs]
    try:
        importlib.invalidate_caches()  # files written since the last import must be visible
        loaded = importlib.import_module(module)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - anything user code raises, even exit()
        raise ExtensionError(
            f"importing custom config module {module!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        sys.path[:] = saved
    file = getattr(loaded, "__file__", None)
    origin = str(file) if file else "import"
    if expected is not None and file and Path(file).resolve() != expected.resolve():
        raise ExtensionError(
            f"custom config module {module!r} resolves to {file}, a module of that name Python "
            f"had already loaded, not to {expected}; give the custom module another name"
        )
    job_config = getattr(loaded, "JobConfig", None)
    if not (isinstance(job_config, type) and dataclasses.is_dataclass(job_config)):
        what = (
            "has no attribute 'JobConfig'" if job_config is None else "JobConfig is not a dataclass"
        )
        raise ExtensionError(
            f"module {module!r} ({origin}): {what}; the legacy loader needs that dataclass"
        )
    static, notes = None, []
    if str(file or "").endswith(".py"):
        try:
            read = read_extension_source(Path(file), module=module, search_dirs=search_dirs)
            static, notes = read.root, [n for n in read.notes if "from __future__ import" in n]
        except ExtensionError:
            pass  # only the docs are lost
    root = _section_from_class(job_config, static, notes)
    return ExtensionSpec(module=module, root=root, origin=origin, notes=tuple(notes))


def _section_from_class(
    cls: type, static: SectionSpec | None, notes: list[str], outer: tuple[type, ...] = ()
) -> SectionSpec:
    """``dataclasses.fields`` -> SectionSpec, taking docs and lines from the static twin."""
    fields = []
    for spec in dataclasses.fields(cls):
        twin = static.field(spec.name) if static else None
        where, annotation, default = f"{cls.__qualname__}.{spec.name}", spec.type, spec.default
        if default is dataclasses.MISSING:
            default = MISSING  # schemas has its own sentinel
        if isinstance(annotation, str):  # a string annotation, e.g. under __future__.annotations
            try:
                # Names resolve in the module, never among the class' own attributes: a field
                # named `float` must not turn a later `float` annotation into its default.
                module = vars(sys.modules[cls.__module__])
                annotation = typing.get_type_hints(cls, globalns=module, localns={})[spec.name]
            except Exception:  # noqa: BLE001 - NameError and friends from evaluating user text
                notes.append(f"{where}: annotation `{annotation}` cannot be evaluated; Any")
                annotation = Any
        if typing.get_origin(annotation) is typing.Annotated:  # as the static reader: keep X
            annotation = typing.get_args(annotation)[0]
        if annotation in (*outer, cls):  # a dataclass containing itself, as the static reader
            notes.append(f"{where}: section `{annotation.__name__}` contains itself; Any")
            annotation = Any
        elif isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
            child = twin.annotation if twin and isinstance(twin.annotation, SectionSpec) else None
            annotation = _section_from_class(annotation, child, notes, (*outer, cls))
            default = MISSING  # a section: the legacy merge rebuilds it from its own defaults
        elif spec.default_factory is not dataclasses.MISSING:
            try:
                default = spec.default_factory()
            except Exception as exc:  # noqa: BLE001 - user code
                notes.append(f"{where}: default_factory raised {type(exc).__name__}: {exc}")
                default = MISSING
        doc, line = (twin.doc, twin.line) if twin else (None, None)
        fields.append(
            FieldSpec(name=spec.name, annotation=annotation, default=default, doc=doc, line=line)
        )
    return SectionSpec(name=cls.__name__, fields=tuple(fields), doc=static.doc if static else None)

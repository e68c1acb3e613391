"""The flavors and converters a fork adds, as its project declares them, and the route to declare one.

A fork builds model flavors titan does not ship (``llama3`` ``1B``) and registers converters of its
own (``npu_rms_norm``). Both live in the fork's code, where no TOML check can see them, so the
project says them once in ``[tool.titan]`` (``titan.schemas.project`` reads the table)::

    [tool.titan]
    model-registries = { llama3 = "forkpkg.models.llama3" }   # builds the flavors titan lacks
    flavors = { llama3 = ["1B", "3B"] }                         # flavor names, per model family
    converters = ["npu_rms_norm"]                               # or { npu_rms_norm = "pkg.mod.Cls" }

A family's flavors are also read from the file of its declared model registry when that file is in
the project and its ``model_registry(flavor)`` looks the flavor up in one literal table of the same
module (``FLAVORS[flavor]``, ``if flavor not in FLAVORS``) and uses it in no other way; anything
else it might do with the name makes the table an incomplete answer, and then only the explicit
``flavors`` declaration counts.

:class:`ForkNames` is what the cross-field rules see of it (``titan.schemas.rules``: ``unknown-flavor``
and ``unknown-converter``), and it writes their hints: a did-you-mean when the name is a
misspelling of a shipped or declared one, otherwise the exact ``[tool.titan]`` line that declares
it, so that following a hint ends in a clean check.
"""

from __future__ import annotations

import os
from typing import Any

from titan.schemas._frozen import Frozen, _set

PYPROJECT = "pyproject.toml"


class ForkNames(Frozen):
    """The flavors and converters one project declares (empty outside a project)."""

    __slots__ = ("project", "flavors", "registries", "read", "converters")
    __match_args__ = ()

    project: str | None
    """``pyproject.toml`` as findings name it; ``None`` when the TOML has no project."""
    flavors: tuple[tuple[str, tuple[str, ...]], ...]
    """``[tool.titan] flavors``: (family, flavor names) pairs, in the order written."""
    registries: tuple[tuple[str, str], ...]
    """``[tool.titan] model-registries``: (family, ``package.module``) pairs."""
    read: tuple[tuple[str, tuple[str, ...] | None], ...]
    """(family, the flavors read from its registry's file, or ``None`` when they cannot be)."""
    converters: tuple[tuple[str, str | None], ...]
    """``[tool.titan] converters``: (name, ``package.module.Class`` or ``None``) pairs."""

    def __init__(
        self,
        *,
        project: str | None = None,
        flavors: tuple[tuple[str, tuple[str, ...]], ...] = (),
        registries: tuple[tuple[str, str], ...] = (),
        read: tuple[tuple[str, tuple[str, ...] | None], ...] = (),
        converters: tuple[tuple[str, str | None], ...] = (),
    ) -> None:
        _set(self, "project", project)
        _set(self, "flavors", flavors)
        _set(self, "registries", registries)
        _set(self, "read", read)
        _set(self, "converters", converters)

    # ----------------------------------------------------------------- flavors

    def declared_flavors(self, family: str) -> tuple[str, ...]:
        """The flavors ``family`` has beyond titan's: declared, then read from its registry."""
        names = [n for f, names in self.flavors if f == family for n in names]
        names += [n for f, found in self.read if f == family for n in found or ()]
        return tuple(dict.fromkeys(names))

    def registry(self, family: str) -> str | None:
        """The module declared to build ``family``'s models, if any."""
        return next((module for f, module in self.registries if f == family), None)

    def knows_family(self, family: str) -> bool:
        """Whether the project declares ``family`` (a model registry or flavors for it)."""
        return self.registry(family) is not None or any(f == family for f, _ in self.flavors)

    def family_meant(self, name: str) -> str | None:
        """The family the project declares that the unknown model ``name`` misspells (another
        case, a typo), or ``None``: its hint is then that family, never to declare ``name``."""
        from titan.schemas.misspelling import closest_name

        declared = [f for f, _ in self.registries] + [f for f, _ in self.flavors]
        return closest_name(name, tuple(dict.fromkeys(declared)))

    def family_hint(self, name: str) -> str | None:
        """``did you mean `family`?`` for a misspelt declared family, else ``None``."""
        meant = self.family_meant(name)
        if meant is None:
            return None
        return f"did you mean `{meant}`? ({self.where().removeprefix('in ')} declares it)"

    def builds(self, family: str, flavor: str) -> bool:
        """Whether the project answers for ``flavor`` of ``family``: it declares the flavor, or
        declares a registry for a family titan does not ship whose flavors nobody can list (its
        ``model_registry`` is then the only judge, at run time)."""
        if flavor in self.declared_flavors(family):
            return True
        from titan.schemas import flavors

        unlisted = not self.declared_flavors(family) and flavors.flavor_names(family) is None
        return unlisted and self.registry(family) is not None

    def flavor_hint(self, family: str, flavor: str, shipped: tuple[str, ...]) -> str:
        """For an ``unknown-flavor`` finding: the flavor meant, or how to declare this one."""
        from titan.schemas import model_names

        declared = self.declared_flavors(family)
        meant = model_names.flavor_hint(family, flavor, (*shipped, *declared))
        if meant.startswith("did you mean"):
            return meant
        route = (
            f"if your fork builds `{flavor}`, declare it {self.where()}: "
            f"[tool.titan] {self.flavors_line(family, flavor)}"
        )
        registry = self.registry(family)
        if registry is None:
            module = f"yourpkg.models.{_python_name(family)}"
            registries = {**dict(self.registries), family: module}
            route += (
                f" and {_toml_line('model-registries', registries)} (the module whose "
                f"model_registry({_toml_string(flavor)}) titan-migrate calls; for one run: "
                f"titan-migrate --model-registry {family}={module})"
            )
        elif any(f == family and found is None for f, found in self.read):
            route += f" (titan cannot read which flavors {registry}.model_registry builds)"
        known = [f"{family} flavors: {', '.join(shipped)}"] if shipped else []
        if declared:
            known.append(f"declared for {family}: {', '.join(declared)}")
        return "; ".join([route, *known])

    def flavors_line(self, family: str, flavor: str) -> str:
        """The whole ``flavors = {...}`` line with ``flavor`` added to ``family``."""
        table = {f: list(names) for f, names in self.flavors}
        table.setdefault(family, [])
        if flavor not in table[family]:
            table[family].append(flavor)
        return _toml_line("flavors", table)

    def registries_line(self, family: str, module: str) -> str:
        """The whole ``model-registries = {...}`` line with ``family`` built by ``module``."""
        return _toml_line("model-registries", {**dict(self.registries), family: module})

    # ----------------------------------------------------------------- converters

    def converter_names(self) -> tuple[str, ...]:
        """The declared converter names, in the order written."""
        return tuple(name for name, _ in self.converters)

    def converter_hint(self, name: str, builtin_hint: str, *, stale: bool) -> str:
        """For an ``unknown-converter`` finding: a stale name's rename (``builtin_hint``), the
        converter meant, or how to declare this one."""
        if stale:
            return builtin_hint
        import difflib

        # Stricter than for titan's dotted names: a fork's short names (npu_rope, npu_rms_norm)
        # share prefixes without being misspellings of each other.
        close = [n for n in self.converter_names() if n.lower() == name.lower()][:1]
        close = close or difflib.get_close_matches(name, self.converter_names(), n=1, cutoff=0.8)
        if close:  # another case or a typo of a declared name: that one, not a new declaration
            return f'did you mean `"{close[0]}"`?'
        if builtin_hint.startswith("did you mean"):
            return builtin_hint
        return (
            f"if your fork registers `{name}`, declare it {self.where()}: "
            f"[tool.titan] {self.converters_line(name)}; {builtin_hint}"
        )

    def converters_line(self, name: str) -> str:
        """The whole ``converters = ...`` line with ``name`` added, in the form already used."""
        if any(target is not None for _, target in self.converters):
            table = {n: target or "" for n, target in self.converters}
            table[name] = "yourpkg.converters.YourConverter"
            return _toml_line("converters", table)
        return _toml_line("converters", [*self.converter_names(), name])

    # ----------------------------------------------------------------- places

    def where(self) -> str:
        """The ``pyproject.toml`` a declaration goes in, as a hint says it."""
        if self.project is not None:
            return f"in {self.project}"
        return (
            f"in a {PYPROJECT} beside the TOML (titan reads the nearest one above it, up to the "
            "repository root)"
        )


NO_FORK = ForkNames()
"""Nothing declared: a config checked outside any project."""


_built: dict[tuple, ForkNames] = {}
"""(declaration, registry files' stamps) -> its names: an edited registry file is read again."""


def for_declaration(declaration: Any) -> ForkNames:
    """The fork names a ``titan.schemas.project.Declaration`` declares, with the flavors read from its
    registries (``titan.schemas.project`` reads its values with this module's ``read_*``, so this
    module does not import it)."""
    files = tuple(
        (family, module_file(module, root=declaration.root))
        for family, module in declaration.model_registries
    )
    key = (declaration, tuple((family, file, _stamp(file)) for family, file in files))
    found = _built.get(key)
    if found is None:
        read = tuple((family, registry_flavors(file) if file else None) for family, file in files)
        found = _built[key] = ForkNames(
            project=declaration.shown,
            flavors=declaration.flavors,
            registries=declaration.model_registries,
            read=read,
            converters=declaration.converters,
        )
    return found


def _stamp(file: str | None) -> tuple[int, int]:
    try:
        info = os.stat(file) if file else None
    except OSError:
        info = None
    return (info.st_mtime_ns, info.st_size) if info else (-1, -1)


def module_file(module: str, *, root: str) -> str | None:
    """The file of the dotted ``module`` inside the project folder ``root``, if there is one
    (a package's ``__init__.py`` first, as Python's path finder prefers it)."""
    base = os.path.join(root, *module.split("."))
    for candidate in (os.path.join(base, "__init__.py"), base + ".py"):
        if os.path.isfile(candidate):
            return candidate
    return None


def registry_flavors(file: str) -> tuple[str, ...] | None:
    """The flavors the ``model_registry(flavor)`` of the module ``file`` accepts, read from its
    source; ``None`` unless that function looks its argument up in one literal table of string
    keys defined in the module and does nothing else with it (but put it in a message)."""
    import ast

    try:
        with open(file, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=file)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    tables: dict[str, tuple[str, ...] | None] = {}
    function = None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node if node.name == "model_registry" else function
            tables[node.name] = None
        for target, value in _assignments(node):
            tables[target] = _string_keys(value)  # a later binding replaces an earlier one
    if function is None:
        return None
    params = [*function.args.posonlyargs, *function.args.args]
    if not params:
        return None
    used = _table_lookups(function, params[0].arg)
    if used is None or len(used) != 1:
        return None
    return tables.get(used.pop())


def _assignments(node: object):
    """(name, value) of a module-level ``NAME = value`` or ``NAME: T = value`` statement."""
    import ast

    if isinstance(node, ast.Assign):
        for target in node.targets:
            if isinstance(target, ast.Name):
                yield target.id, node.value
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
        yield node.target.id, node.value


def _string_keys(value: object) -> tuple[str, ...] | None:
    """The keys of a dict display whose keys are all string literals (no ``**`` unpacking)."""
    import ast

    if not isinstance(value, ast.Dict) or not value.keys:
        return None
    keys = [key.value if isinstance(key, ast.Constant) else None for key in value.keys]
    if not all(isinstance(key, str) for key in keys):
        return None
    return tuple(dict.fromkeys(keys))  # type: ignore[arg-type]


def _table_lookups(function: object, param: str) -> set[str] | None:
    """The module names ``function`` looks ``param`` up in (``T[param]``, ``param in T``), or
    ``None`` when it uses ``param`` in any other way (rebinds it, passes it on, ...)."""
    import ast

    parents = {child: node for node in ast.walk(function) for child in ast.iter_child_nodes(node)}
    used: set[str] = set()
    for node in ast.walk(function):
        if not (isinstance(node, ast.Name) and node.id == param):
            continue
        if not isinstance(node.ctx, ast.Load):
            return None
        parent = parents.get(node)
        if isinstance(parent, ast.Subscript) and parent.slice is node:
            table = parent.value
        elif (
            isinstance(parent, ast.Compare)
            and parent.left is node
            and len(parent.ops) == 1
            and isinstance(parent.ops[0], (ast.In, ast.NotIn))
        ):
            table = parent.comparators[0]
        elif isinstance(parent, ast.FormattedValue):
            continue  # named in an error message
        else:
            return None
        if not isinstance(table, ast.Name):
            return None
        used.add(table.id)
    return used


# --------------------------------------------------------------------------- TOML text


def _toml_line(key: str, value: dict | list) -> str:
    """``key = value`` as one TOML line, for a hint to show and a user to paste."""
    return f"{key} = {_toml_value(value)}"


def _toml_value(value: object) -> str:
    if isinstance(value, dict):
        items = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return _toml_string(str(value))


def _toml_key(key: str) -> str:
    bare = key and all(c.isascii() and (c.isalnum() or c in "_-") for c in key)
    return key if bare else _toml_string(key)


def _toml_string(text: str) -> str:
    import json

    return json.dumps(text)  # a JSON string is a TOML basic string (escapes included)


def _python_name(family: str) -> str:
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in family.lower())
    return name if name.isidentifier() else f"m_{name}"


# --------------------------------------------------------------------------- reading


def read_flavors(value: object) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    """``[tool.titan] flavors``: a table of FAMILY = [flavor names]; ``None`` if it is not one."""
    if not isinstance(value, dict):
        return None
    found = []
    for family, names in value.items():
        if not (isinstance(names, list) and names and all(_name(n) for n in names)):
            return None
        found.append((family, tuple(dict.fromkeys(names))))
    return tuple(found)


def read_converters(value: object) -> tuple[tuple[str, str | None], ...] | None:
    """``[tool.titan] converters``: a list of names, or a table of NAME = "package.module.Class";
    ``None`` if it is neither."""
    if isinstance(value, list) and all(_name(n) for n in value):
        return tuple((name, None) for name in dict.fromkeys(value))
    if isinstance(value, dict) and all(
        _name(n) and isinstance(t, str) and _class_path(t) for n, t in value.items()
    ):
        return tuple(value.items())
    return None


def _name(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip()) and value == value.strip()


def _class_path(text: str) -> bool:
    """``package.module.Class``: at least a module and a name, each a Python identifier."""
    import keyword

    parts = text.split(".")
    return len(parts) >= 2 and all(p.isidentifier() and not keyword.iskeyword(p) for p in parts)

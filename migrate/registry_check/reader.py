"""Read a registry module of upstream torchtitan 0.3.0 without running it.

Each registry function's statements are followed as Python would run them, over the values of
``titan.migrate.registry_check.values``: imports resolve against the generated tables of the
package (``api``), calls of its config classes, of ``model_registry`` and of the functions it
declares are checked against their fields and signatures, the module's own helper functions
and dataclasses are followed into, and everything else becomes an :class:`Unknown` with the
reason, said once per registry function. A branch whose condition cannot be known, a loop and
a ``try`` are read in *uncertain* mode: their calls are still checked, but what they assign is
unknown afterwards.

A hostile module cannot make this loop or grow without bound: every step counts against a
budget, arithmetic stops at a size, and calls nest only so deep. Nothing is imported or run.
"""

from __future__ import annotations

import ast
import builtins
import copy
import dataclasses
import math
from collections.abc import Iterator
from typing import Any

from titan.migrate.registry_check import api
from titan.migrate.registry_check.values import At, Obj, Ref, Spec, Unknown, has_unknown, plain
from titan.migrate.targets.spec_types import Default
from titan.migrate.targets.upstream_types import OPAQUE, REQUIRED, accepts, choices, spell
from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.misspelling import is_misspelling

STEPS = 200_000
"""Expressions and statements one module may take to read (a module of upstream's size takes a
few thousand)."""
DEPTH = 24
"""How deeply calls of the module's own functions nest."""
BIG = 2**256
"""Numbers past this are not computed with (``10 ** 10 ** 10``)."""
LONG = 100_000
"""Strings and lists longer than this are not built."""

BUILTINS = frozenset(dir(builtins)) | {"__file__", "__name__", "__doc__", "__spec__"}
"""Names every module has (an unknown use of one is not a ``NameError``)."""

FOLLOWED = {
    "typing:cast": "cast",
    "dataclasses:replace": "replace",
    "copy:deepcopy": "copy",
    "copy:copy": "copy",
    "dataclasses:field": "field",
}
"""Standard-library functions whose meaning the reader follows."""


class _OutOfSteps(Exception):
    pass


class _Return(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


@dataclasses.dataclass
class Function:
    """What reading one registry function found."""

    name: str
    at: At
    result: Any = None
    unread: list[tuple[At, str]] = dataclasses.field(default_factory=list)


class Frame:
    """One running function's names."""

    def __init__(self, reader: Reader, names: dict[str, Any], *, parent: Frame | None, name: str):
        self.reader, self.names, self.parent, self.name = reader, names, parent, name
        self.uncertain = 0
        self.branched = False
        """Whether a branch, loop or ``try`` was read in uncertain mode: falling off the end
        then does not say the function returns None (it may have returned, or never end)."""

    def lookup(self, name: str) -> Any:
        frame: Frame | None = self
        while frame is not None:
            if name in frame.names:
                return frame.names[name]
            frame = frame.parent
        return _MISSING


_MISSING = object()


class Reader:
    """One module's reading: its module-level names, then each registry function on demand."""

    def __init__(self, tree: ast.Module, *, shown: str, package: str | None) -> None:
        self.tree, self.shown, self.package = tree, shown, package
        self.found: dict[tuple, Diagnostic] = {}
        self.steps = 0
        self.stack: list[str] = []
        self.current: Function | None = None
        self.bound = _bound_names(tree)
        self.star = any(
            isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
            for n in ast.walk(tree)
        )
        self.local_classes: dict[str, dict[str, Any]] = {}
        self.origins: dict[int, tuple[dict, dict[str, At]]] = {}
        """``**kwargs`` dicts a call bound -> where each keyword was written (at the caller),
        so a keyword passed on through ``**kwargs`` is reported where the user wrote it."""
        self.module = Frame(self, {}, parent=None, name="<module>")
        self.module_notes: list[tuple[At, str]] = []
        """Limits the module's own top level ran into (what its functions use of it is noted
        where they use it)."""
        self.current = Function("<module>", At(1, 1))
        try:
            self._block(tree.body, self.module)
        except (_OutOfSteps, RecursionError):
            self.module_notes.append((At(1, 1), "the module is too large to read statically"))
        except _Return:
            pass
        self.current = None

    # -- the public entry ------------------------------------------------------------------

    def read_function(self, name: str) -> Function:
        """Call the registry function ``name`` (a module-level ``def``) as upstream would."""
        ref = self.module.names.get(name)
        node = ref.node if isinstance(ref, Ref) and ref.kind == "def" else None
        at = At(node.lineno, node.col_offset + 1) if node is not None else At(1, 1)
        function = Function(name, at)
        self.current, self.steps = function, 0
        try:
            if node is None:
                function.result = Unknown(f"`{name}` is not a function of the module")
            else:
                function.result = self._call_def(ref, [], {}, at, open_args=False)
        except _OutOfSteps:
            function.result = Unknown("the function takes too many steps to read statically")
            self._unread(at, "the function takes too many steps to read statically")
        except RecursionError:  # expressions nested past what Python itself compiles
            function.result = Unknown("the function nests too deeply to read statically")
            self._unread(at, "the function nests too deeply to read statically")
        finally:
            self.current = None
        return function

    def diagnostics(self) -> list[Diagnostic]:
        return list(self.found.values())

    # -- findings --------------------------------------------------------------------------

    def error(self, code: str, message: str, hint: str, at: At | None, path: str = "") -> None:
        span = Span(file=self.shown, line=at.line, col=at.col, end_col=at.end_col) if at else None
        key = (code, message, at)
        self.found.setdefault(
            key,
            Diagnostic(
                code=code,
                severity=Severity.ERROR,
                path=path,
                message=message,
                hint=hint,
                span=span,
            ),
        )

    def _unread(self, at: At, why: str) -> None:
        if self.current is not None and all(w != why for _, w in self.current.unread):
            self.current.unread.append((at, why))

    def unknown(self, node: ast.AST, why: str) -> Unknown:
        self._unread(_at(node), why)
        return Unknown(why)

    def _tick(self) -> None:
        self.steps += 1
        if self.steps > STEPS:
            raise _OutOfSteps

    # -- statements ------------------------------------------------------------------------

    def _block(self, body: list[ast.stmt], frame: Frame) -> None:
        for statement in body:
            self._statement(statement, frame)

    def _statement(self, node: ast.stmt, frame: Frame) -> None:
        self._tick()
        if isinstance(node, ast.Expr):
            self.eval(node.value, frame)
        elif isinstance(node, ast.Assign):
            value = self.eval(node.value, frame)
            for target in node.targets:
                self._assign(target, value, frame, node.value)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self._assign(node.target, self.eval(node.value, frame), frame, node.value)
        elif isinstance(node, ast.AugAssign):
            current = self.eval(_load(node.target), frame)
            value = self._binop(node.op, current, self.eval(node.value, frame), node)
            self._assign(node.target, value, frame, node.value)
        elif isinstance(node, ast.Return):
            value = self.eval(node.value, frame) if node.value is not None else None
            if frame.uncertain:
                frame.names["<returned under a condition>"] = True
                return
            raise _Return(value)
        elif isinstance(node, ast.If):
            test = self.eval(node.test, frame)
            if plain(test):
                self._block(node.body if test else node.orelse, frame)
            else:
                self._uncertain(frame, node.body, node.orelse)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            frame.names[node.name] = Ref("def", node.name, node, frame)
        elif isinstance(node, ast.ClassDef):
            frame.names[node.name] = self._class(node, frame)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            self._import(node, frame)
        elif isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                value = self.eval(item.context_expr, frame)
                if item.optional_vars is not None:
                    self._assign(
                        item.optional_vars,
                        Unknown("a context manager's value"),
                        frame,
                        item.context_expr,
                    )
                del value
            self._block(node.body, frame)
        elif isinstance(node, ast.For | ast.AsyncFor | ast.While):
            if isinstance(node, ast.For | ast.AsyncFor):
                self.eval(node.iter, frame)
            else:
                self.eval(node.test, frame)
            frame.uncertain += 1
            frame.branched = True
            try:
                if isinstance(node, ast.For | ast.AsyncFor):
                    self._assign(node.target, Unknown("a loop variable"), frame, node.iter)
                self._block(node.body, frame)
                self._block(node.orelse, frame)
            finally:
                frame.uncertain -= 1
            self._unread(_at(node), "a loop: what it assigns is not read statically")
        elif isinstance(node, ast.Try | getattr(ast, "TryStar", ast.Try)):
            frame.uncertain += 1
            frame.branched = True
            try:
                self._block(node.body, frame)
                for handler in node.handlers:
                    if handler.name:
                        frame.names[handler.name] = Unknown("an exception")
                    self._block(handler.body, frame)
                self._block(node.orelse, frame)
            finally:
                frame.uncertain -= 1
            self._block(node.finalbody, frame)
            self._unread(_at(node), "a `try` block: what it assigns is not read statically")
        elif isinstance(node, ast.Raise):
            if not frame.uncertain and frame is not self.module:
                shown = ast.unparse(node.exc)[:80] if node.exc is not None else "the exception"
                self.error(
                    "upstream-raises",
                    f"the function always raises {shown} when it is called",
                    "remove the raise, or put it under the condition it is meant for",
                    _at(node),
                )
            raise _Return(Unknown("raised"))
        elif isinstance(node, ast.Assert):
            self.eval(node.test, frame)
        elif isinstance(node, ast.Delete):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    frame.names[target.id] = Unknown("a deleted name")
        elif isinstance(node, ast.Match):
            self.eval(node.subject, frame)
            self._uncertain(frame, *[case.body for case in node.cases])
        # pass, break, continue, global, nonlocal: nothing to read

    def _uncertain(self, frame: Frame, *bodies: list[ast.stmt]) -> None:
        """Read branches of which any may run: each is checked, and every name they assign
        (and every field) is unknown after them."""
        frame.branched = True
        frame.uncertain += 1
        try:
            for body in bodies:
                self._block(body, frame)
        finally:
            frame.uncertain -= 1

    def _assign(self, target: ast.expr, value: Any, frame: Frame, source: ast.expr) -> None:
        if frame.uncertain:
            value = Unknown("assigned under a condition or in a loop")
        if isinstance(target, ast.Name):
            frame.names[target.id] = value
        elif isinstance(target, ast.Attribute):
            owner = self.eval(target.value, frame)
            self._set_field(owner, target.attr, value, _attr_at(target), source, frame)
        elif isinstance(target, ast.Tuple | ast.List):
            values = value if isinstance(value, list | tuple) else None
            if values is not None and len(values) != len(target.elts):
                values = None
            for index, element in enumerate(target.elts):
                if isinstance(element, ast.Starred):
                    element = element.value
                    values = None
                self._assign(
                    element,
                    values[index] if values is not None else Unknown("an unpacked value"),
                    frame,
                    source,
                )
        elif isinstance(target, ast.Subscript):
            container = self.eval(target.value, frame)
            key = self.eval(target.slice, frame)
            if isinstance(container, dict) and plain(key) and not isinstance(key, list | dict):
                container[key] = value
            elif (
                isinstance(container, list)
                and isinstance(key, int)
                and -len(container) <= key < len(container)
            ):
                container[key] = value
        elif isinstance(target, ast.Starred):
            self._assign(target.value, Unknown("an unpacked value"), frame, source)

    def _set_field(
        self, owner: Any, name: str, value: Any, at: At, source: ast.expr, frame: Frame
    ) -> None:
        if isinstance(owner, Obj):
            row = self._fields(owner)
            if row is None:
                owner.values[name] = value
                return
            if name not in row:
                self._unknown_field(owner.cls, name, at, setting=True)
                return
            self._check_value(owner.cls, name, row[name], value, at)
            owner.values[name] = value
            owner.spans[name] = at
        elif owner is None and not frame.uncertain:
            self.error(
                "upstream-field",
                f"setting `.{name}` on None: the object is None here, so this raises AttributeError",
                "build the config object first (its class' `Config(...)`), then set its field",
                at,
            )

    # -- imports and classes ---------------------------------------------------------------

    def _import(self, node: ast.Import | ast.ImportFrom, frame: Frame) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if alias.asname:
                    frame.names[alias.asname] = self._module_ref(alias.name, node)
                else:
                    self._module_ref(alias.name, node)
                    frame.names[top] = (
                        Ref("module", top) if top == "torchtitan" else Ref("foreign", top)
                    )
            return
        module = node.module or ""
        if node.level:
            if self.package is None:
                for alias in node.names:
                    frame.names[alias.asname or alias.name] = Unknown(
                        "a relative import outside the torchtitan package"
                    )
                self._unread(_at(node), "relative imports: the module's own package is not read")
                return
            parts = self.package.split(".")
            base = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
            module = ".".join(base + ([module] if module else []))
        for alias in node.names:
            if alias.name == "*":
                continue
            frame.names[alias.asname or alias.name] = self._from_import(module, alias, node)

    def _module_ref(self, name: str, node: ast.stmt) -> Any:
        if not api.is_package_module(name):
            return Ref("foreign", name)
        if api.is_module(name):
            return Ref("module", name)
        if api.unimportable(name):
            return self.unknown(node, f"`{name}` needs a package torchtitan does not depend on")
        self.error(
            "upstream-import",
            f"torchtitan {api.VERSION} has no module `{name}`",
            _module_hint(name),
            _at(node),
        )
        return Unknown(f"no module {name}")

    def _from_import(self, module: str, alias: ast.alias, node: ast.ImportFrom) -> Any:
        name = alias.name
        if not api.is_package_module(module):
            return Ref("foreign", f"{module}:{name}")
        if api.unimportable(module):
            return self.unknown(node, f"`{module}` needs a package torchtitan does not depend on")
        if not api.is_module(module):
            self.error(
                "upstream-import",
                f"torchtitan {api.VERSION} has no module `{module}`",
                _module_hint(module),
                _at(node),
            )
            return Unknown(f"no module {module}")
        found = api.export(module, name)
        if found is not None:
            return Ref(*found)
        if name.startswith("_") or api.has_name(module, name):
            return Unknown(f"`{module}.{name}` is not read statically")
        at = _alias_at(node, alias)
        close = [n for n in api.names_of(module) if is_misspelling(name, n)]
        self.error(
            "upstream-import",
            f"cannot import `{name}` from `{module}`: torchtitan {api.VERSION} has no such name there",
            f"did you mean `{close[0]}`?" if close else _elsewhere_hint(name, module),
            at,
        )
        return Unknown(f"no name {name}")

    def _class(self, node: ast.ClassDef, frame: Frame) -> Any:
        """A class of the module: a dataclass that subclasses a config class is a config class
        of its own (its fields the base's and its annotated ones); anything else is unknown."""
        bases = [self.eval(b, frame) for b in node.bases]
        known = [
            b
            for b in bases
            if isinstance(b, Ref) and b.kind == "class" and api.is_config_class(b.path)
        ]
        local = [b for b in bases if isinstance(b, Ref) and b.kind == "localclass"]
        if not (known or local) or len(known) + len(local) != len(bases):
            return Unknown(f"the module's class `{node.name}`")
        fields: dict[str, dict[str, Any]] = {}
        lineage: list[str] = []
        for base in bases:
            if base.kind == "class":
                fields.update(api.fields(base.path))
                lineage += [base.path, *api.bases(base.path)]
            else:
                row = self.local_classes[base.path]
                fields.update(row["fields"])
                lineage += row["bases"]
        for statement in node.body:
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                default: Any = REQUIRED
                if statement.value is not None:
                    value = self.eval(statement.value, frame)
                    default = value if plain(value) else OPAQUE
                fields[statement.target.id] = {"type": "any", "default": default}
        path = f"<module>:{node.name}"
        self.local_classes[path] = {"fields": fields, "bases": tuple(dict.fromkeys(lineage))}
        return Ref("localclass", path, node, frame)

    # -- expressions -----------------------------------------------------------------------

    def eval(self, node: ast.expr | None, frame: Frame) -> Any:
        self._tick()
        if node is None:
            return None
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bytes | complex) or node.value is Ellipsis:
                return Unknown("a constant")
            return node.value
        if isinstance(node, ast.Name):
            return self._name(node, frame)
        if isinstance(node, ast.Attribute):
            return self._attribute(self.eval(node.value, frame), node, frame)
        if isinstance(node, ast.Call):
            return self._call(node, frame)
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items: list[Any] = []
            for element in node.elts:
                if isinstance(element, ast.Starred):
                    inner = self.eval(element.value, frame)
                    if isinstance(inner, list | tuple):
                        items += list(inner)
                    else:
                        return Unknown("a starred value")
                else:
                    items.append(self.eval(element, frame))
            if isinstance(node, ast.Set):
                return Unknown("a set")
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.Dict):
            out: dict = {}
            for key, value in zip(node.keys, node.values, strict=True):
                if key is None:
                    inner = self.eval(value, frame)
                    if not isinstance(inner, dict):
                        return Unknown("a ** in a dict")
                    out.update(inner)
                    continue
                k = self.eval(key, frame)
                if not plain(k) or isinstance(k, list | dict):
                    return Unknown("a dict key")
                out[k] = self.eval(value, frame)
            return out
        if isinstance(node, ast.BinOp):
            return self._binop(
                node.op, self.eval(node.left, frame), self.eval(node.right, frame), node
            )
        if isinstance(node, ast.UnaryOp):
            value = self.eval(node.operand, frame)
            if not plain(value):
                return Unknown("an operation on an unknown value")
            try:
                if isinstance(node.op, ast.Not):
                    return not value
                if isinstance(node.op, ast.USub) and isinstance(value, int | float):
                    return -value
                if isinstance(node.op, ast.UAdd) and isinstance(value, int | float):
                    return +value
                if isinstance(node.op, ast.Invert) and isinstance(value, int):
                    return ~value
            except TypeError:
                pass
            return Unknown("an operation")
        if isinstance(node, ast.BoolOp):
            values = []
            for operand in node.values:
                value = self.eval(operand, frame)
                if not plain(value) and not isinstance(value, Obj | Spec):
                    return Unknown("a condition on an unknown value")
                values.append(value)
                truth = bool(value) if plain(value) else True
                if isinstance(node.op, ast.And) and not truth:
                    return value
                if isinstance(node.op, ast.Or) and truth:
                    return value
            return values[-1]
        if isinstance(node, ast.Compare):
            return self._compare(node, frame)
        if isinstance(node, ast.IfExp):
            test = self.eval(node.test, frame)
            if plain(test):
                return self.eval(node.body if test else node.orelse, frame)
            self.eval(node.body, frame)
            self.eval(node.orelse, frame)
            return Unknown("a conditional value")
        if isinstance(node, ast.Subscript):
            container = self.eval(node.value, frame)
            key = self.eval(node.slice, frame)
            if isinstance(container, list | tuple | str | dict) and plain(key):
                try:
                    return container[key]
                except (KeyError, IndexError, TypeError):
                    return Unknown("an item that is not there")
            return Unknown("an item of an unknown value")
        if isinstance(node, ast.JoinedStr):
            parts = []
            for value in node.values:
                part = self.eval(
                    value.value if isinstance(value, ast.FormattedValue) else value, frame
                )
                if not plain(part):
                    return Unknown("a formatted string")
                parts.append(str(part) if isinstance(value, ast.FormattedValue) else part)
                if sum(len(p) for p in parts) > LONG:
                    return Unknown("a long string")
            return "".join(parts)
        if isinstance(node, ast.NamedExpr):
            value = self.eval(node.value, frame)
            self._assign(node.target, value, frame, node.value)
            return value
        if isinstance(node, ast.Starred):
            return Unknown("a starred value")
        return self.unknown(node, f"`{_shown(node)}` is not read statically")

    def _name(self, node: ast.Name, frame: Frame) -> Any:
        found = frame.lookup(node.id)
        if found is not _MISSING:
            return found
        if node.id in BUILTINS:
            return Ref("builtin", node.id)
        if node.id not in self.bound and not self.star:
            self.error(
                "upstream-name",
                f"name `{node.id}` is not defined: calling the function raises NameError",
                "import it, or define it in the module",
                _at(node, len(node.id)),
            )
        return Unknown(f"the name {node.id}")

    def _attribute(self, owner: Any, node: ast.Attribute, frame: Frame) -> Any:
        name = node.attr
        if isinstance(owner, Ref):
            if owner.kind == "module":
                found = api.export(owner.path, name)
                if found is not None:
                    return Ref(*found)
                if api.has_name(owner.path, name) or name.startswith("_"):
                    return Unknown(f"{owner.path}.{name}")
                if api.is_module(owner.path):
                    self.error(
                        "upstream-import",
                        f"module `{owner.path}` has no attribute `{name}` in torchtitan {api.VERSION}",
                        _elsewhere_hint(name, owner.path),
                        _attr_at(node),
                    )
                return Unknown(f"{owner.path}.{name}")
            if owner.kind == "class":
                nested = f"{owner.path}.{name}"
                if api.is_class(nested):
                    return Ref("class", nested)
                return Unknown(f"{api.short(owner.path)}.{name}")
            if owner.kind == "foreign":
                return Ref("foreign", f"{owner.path}.{name}")
            return Unknown(f"{owner.path}.{name}")
        if isinstance(owner, Obj):
            return self._get_field(owner, name)
        if isinstance(owner, Spec):
            if name == "flavor":
                return owner.flavor
            if name == "name":
                return owner.family
            return Unknown("the model spec's own objects")
        return Unknown(f"an attribute of an unknown value (`.{name}`)")

    def _fields(self, owner: Obj) -> dict[str, dict[str, Any]] | None:
        if owner.local is not None:
            return self.local_classes[owner.cls]["fields"]
        return api.fields(owner.cls) if api.is_config_class(owner.cls) else None

    def _get_field(self, owner: Obj, name: str) -> Any:
        if name in owner.values:
            return owner.values[name]
        row = self._fields(owner)
        if row is None or name not in row:
            return Unknown(f"`{api.short(owner.cls)}.{name}`")
        if owner.opaque:
            return Unknown(f"a field of what `{api.short(owner.cls)}`'s factory built")
        value = self._default(row[name]["default"])
        owner.values[name] = value  # so that setting its fields changes this object
        return value

    def _default(self, default: Any) -> Any:
        if default is OPAQUE or default is REQUIRED:
            return Unknown("a default the table cannot write")
        if isinstance(default, Default):
            made = Obj(default.cls, None)
            for key, value in default.changed.items():
                made.values[key] = self._default(value)
            return made
        return copy.deepcopy(default)

    def _compare(self, node: ast.Compare, frame: Frame) -> Any:
        left = self.eval(node.left, frame)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = self.eval(right_node, frame)
            if isinstance(op, ast.Is | ast.IsNot) and (left is None or right is None):
                if isinstance(left, Unknown) or isinstance(right, Unknown):
                    return Unknown("a comparison")
                same = left is right
                result = same if isinstance(op, ast.Is) else not same
            elif plain(left) and plain(right):
                try:
                    result = _COMPARE[type(op)](left, right)
                except (TypeError, KeyError):
                    return Unknown("a comparison")
            else:
                return Unknown("a comparison of unknown values")
            if not result:
                return False
            left = right
        return True

    def _binop(self, op: ast.operator, left: Any, right: Any, node: ast.AST) -> Any:
        if not (plain(left) and plain(right)):
            return Unknown("arithmetic on an unknown value")
        try:
            if isinstance(op, ast.Pow):
                if isinstance(left, int | float) and isinstance(right, int | float):
                    if abs(right) > 256 or abs(left) > BIG:
                        return self.unknown(node, "a power too large to compute")
            if isinstance(op, ast.Mult):
                for a, b in ((left, right), (right, left)):
                    if (
                        isinstance(a, str | list | tuple)
                        and isinstance(b, int)
                        and len(a) * max(b, 0) > LONG
                    ):
                        return Unknown("a long repetition")
            if isinstance(op, ast.LShift) and isinstance(right, int) and right > 256:
                return self.unknown(node, "a shift too large to compute")
            value = _BINOPS[type(op)](left, right)
        except (ArithmeticError, TypeError, ValueError, KeyError):
            return Unknown("arithmetic that raises")
        if isinstance(value, int) and abs(value) > BIG:
            return self.unknown(node, "a number too large to compute with")
        if isinstance(value, float) and math.isnan(value):
            return value
        if isinstance(value, str | list | tuple) and len(value) > LONG:
            return Unknown("a long value")
        return value

    # -- calls -----------------------------------------------------------------------------

    def _call(self, node: ast.Call, frame: Frame) -> Any:
        func = node.func
        if isinstance(func, ast.Attribute):
            owner = self.eval(func.value, frame)
            if isinstance(owner, list) and func.attr in ("append", "extend", "insert"):
                args = [self.eval(a, frame) for a in node.args]
                if frame.uncertain:
                    return None
                if func.attr == "append" and len(args) == 1:
                    owner.append(args[0])
                elif func.attr == "extend" and len(args) == 1 and isinstance(args[0], list | tuple):
                    owner.extend(args[0])
                else:
                    owner.append(Unknown("an inserted item"))
                return None
            callee = self._attribute(owner, func, frame)
        else:
            callee = self.eval(func, frame)
        args, kwargs, open_args = self._arguments(node, frame)
        at = _at(node)
        if isinstance(callee, Ref):
            if callee.kind == "class":
                return self._construct(callee.path, args, kwargs, node, open_args=open_args)
            if callee.kind == "localclass":
                return self._construct(
                    callee.path, args, kwargs, node, open_args=open_args, local=True
                )
            if callee.kind == "function":
                return self._call_function(callee.path, args, kwargs, node, open_args=open_args)
            if callee.kind == "def":
                return self._call_def(callee, args, kwargs, at, open_args=open_args, node=node)
            if callee.kind == "foreign":
                key = callee.path.replace(".", ":", 1) if ":" not in callee.path else callee.path
                return self._followed(FOLLOWED.get(key), args, kwargs, node)
            if callee.kind == "builtin":
                return self._builtin(callee.path, args, node)
        if isinstance(callee, Unknown):
            return self.unknown(node, f"`{_shown(func)}(...)` is not read statically")
        return self.unknown(node, f"`{_shown(func)}(...)` is not read statically")

    def _arguments(self, node: ast.Call, frame: Frame) -> tuple[list, dict, bool]:
        args: list[Any] = []
        kwargs: dict[str, tuple[Any, At, ast.expr]] = {}
        open_args = False
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                inner = self.eval(arg.value, frame)
                if isinstance(inner, list | tuple):
                    args += list(inner)
                else:
                    open_args = True
            else:
                args.append(self.eval(arg, frame))
        for keyword in node.keywords:
            value = self.eval(keyword.value, frame)
            if keyword.arg is None:
                if isinstance(value, dict) and all(isinstance(k, str) for k in value):
                    kept = self.origins.get(id(value))
                    places = kept[1] if kept is not None and kept[0] is value else {}
                    for key, item in value.items():
                        kwargs[key] = (item, places.get(key, _at(keyword.value)), keyword.value)
                else:
                    open_args = True
                continue
            kwargs[keyword.arg] = (value, _keyword_at(keyword), keyword.value)
        return args, kwargs, open_args

    def _construct(
        self, path: str, args: list, kwargs: dict, node: ast.Call, *, open_args: bool, local=False
    ) -> Any:
        if path == api.MODEL_SPEC:
            return self.unknown(node, "a hand-built ModelSpec")
        if local:
            row, lineage = self.local_classes[path]["fields"], self.local_classes[path]["bases"]
        elif api.is_config_class(path):
            row, lineage = api.fields(path), api.bases(path)
        else:
            return self.unknown(node, f"`{api.short(path)}(...)`, which is not a config class")
        name = path.rpartition(":")[2]
        if args and (local or api.kw_only(path)):
            self.error(
                "upstream-positional",
                f"`{name}(...)` takes keyword arguments only; {len(args)} positional "
                f"argument{'s' if len(args) != 1 else ''} raise TypeError",
                f"name each value: `{name}({_first_fields(row, len(args))})`",
                _at(node.args[0] if node.args else node),
            )
        made = Obj(path, _at(node), local=lineage if local else None)
        for key, (value, at, _source) in kwargs.items():
            if key not in row:
                self._unknown_field(path, key, at, local_row=row if local else None)
                continue
            self._check_value(path, key, row[key], value, at, construct=True)
            made.values[key] = value
            made.spans[key] = at
        if not open_args:
            missing = [
                k for k, f in row.items() if f.get("default") is REQUIRED and k not in kwargs
            ]
            if missing:
                self.error(
                    "upstream-required",
                    f"`{name}(...)` needs {', '.join(f'`{m}`' for m in missing)}: without "
                    f"{'it' if len(missing) == 1 else 'them'} the call raises TypeError",
                    f"pass {', '.join(f'{m}=...' for m in missing)}",
                    _at(node),
                )
        else:
            self._unread(
                _at(node), f"`{name}(...)` is given `*` or `**` arguments not read statically"
            )
        return made

    def _unknown_field(
        self, path: str, key: str, at: At, *, setting: bool = False, local_row: dict | None = None
    ) -> None:
        name = path.rpartition(":")[2]
        row = (
            local_row
            if local_row is not None
            else (
                self.local_classes[path]["fields"]
                if path in self.local_classes
                else api.fields(path)
            )
        )
        close = [f for f in row if is_misspelling(key, f)]
        if close:
            hint = f"did you mean `{close[0]}`?"
        else:
            hint = _other_class_hint(key, path) or (
                f"`{name}` has the fields {', '.join(sorted(row)[:12])}"
                f"{', ...' if len(row) > 12 else ''}"
            )
        if setting:
            message = (
                f"`{name}` has no field `{key}`: setting it raises AttributeError "
                f"(torchtitan {api.VERSION}'s config classes have slots)"
            )
        else:
            message = f"`{name}(...)` has no field `{key}`: the call raises TypeError"
        self.error("upstream-field", message, hint, at, path=f"{name}.{key}")

    def _check_value(
        self, path: str, key: str, field: dict, value: Any, at: At, *, construct: bool = False
    ) -> None:
        if isinstance(value, Unknown) or has_unknown(value):
            return
        name = path.rpartition(":")[2]
        tp = field.get("type", "any")
        fits = accepts(tp, value, is_config=self._is_config)
        if fits is False:
            allowed = choices(tp)
            if allowed is not None and (value is None or isinstance(value, str | int | float)):
                self.error(
                    "upstream-choice",
                    f"`{name}.{key}` is {_shown_value(value)}; it must be one of "
                    f"{', '.join(repr(c) for c in allowed)}",
                    _choice_hint(value, allowed),
                    at,
                    path=f"{name}.{key}",
                )
            else:
                self.error(
                    "upstream-type",
                    f"`{name}.{key}` is {_shown_value(value)} ({_kind(value)}), not {spell(tp)}",
                    f"write a value of type {spell(tp)}; dataclasses do not check types, so the "
                    "run would get this value as it is",
                    at,
                    path=f"{name}.{key}",
                )
            return
        if not construct or not plain(value):
            return
        guard = _guard_problem(field, value)
        if guard is not None:
            self.error(
                "upstream-value",
                f"`{name}.{key}` is {_shown_value(value)}; {guard}: `{name}`'s own check raises "
                "ValueError when the config is built",
                guard_hint(field),
                at,
                path=f"{name}.{key}",
            )

    def _is_config(self, value: Any, path: str) -> bool | None:
        if isinstance(value, Obj):
            if not path:
                return True
            lineage = (
                self.local_classes[value.cls]["bases"] if value.cls in self.local_classes else ()
            )
            return api.is_subclass(value.cls, path) or path in lineage
        if isinstance(value, Spec):
            return path in ("", api.MODEL_SPEC)
        if isinstance(value, Ref):
            return None if value.kind in ("foreign", "def") else False
        return None

    def _call_function(
        self, path: str, args: list, kwargs: dict, node: ast.Call, *, open_args: bool
    ) -> Any:
        signature = api.function(path)
        name = path.rpartition(":")[2]
        if signature is None:
            return self.unknown(node, f"`{name}(...)` is not read statically")
        params = signature["params"]
        positional = [p for p in params if p[1] in ("POSITIONAL_ONLY", "POSITIONAL_OR_KEYWORD")]
        keywords = {p[0]: p for p in params if p[1] in ("POSITIONAL_OR_KEYWORD", "KEYWORD_ONLY")}
        takes_args = any(p[1] == "VAR_POSITIONAL" for p in params)
        takes_kwargs = any(p[1] == "VAR_KEYWORD" for p in params)
        bound: dict[str, Any] = {}
        if len(args) > len(positional) and not takes_args:
            self.error(
                "upstream-argument",
                f"`{name}()` takes {len(positional)} positional argument"
                f"{'s' if len(positional) != 1 else ''} but {len(args)} were given: the call "
                "raises TypeError",
                f"pass the others by name ({', '.join(sorted(keywords)[:8])})",
                _at(node),
            )
        places = [_at(a) for a in node.args] if not open_args else []
        for index, (param, value) in enumerate(zip(positional, args, strict=False)):
            at = places[index] if index < len(places) else _at(node)
            bound[param[0]] = (value, at, None)
        for key, item in kwargs.items():
            if key in keywords:
                bound[key] = item
                continue
            if takes_kwargs:
                continue
            close = [k for k in keywords if is_misspelling(key, k)]
            self.error(
                "upstream-argument",
                f"`{name}()` has no parameter `{key}`: the call raises TypeError",
                f"did you mean `{close[0]}`?"
                if close
                else (
                    f"its parameters are {', '.join(p[0] for p in params)}"
                    if params
                    else f"`{name}()` takes no arguments"
                ),
                item[1],
            )
        for param in params:
            _, kind, required, tp = param
            if param[0] in bound:
                value, at, _ = bound[param[0]]
                if not (isinstance(value, Unknown) or has_unknown(value)):
                    if accepts(tp, value, is_config=self._is_config) is False:
                        self.error(
                            "upstream-type",
                            f"`{name}({param[0]}=...)` is {_shown_value(value)}, not {spell(tp)}",
                            f"pass a value of type {spell(tp)}",
                            at,
                        )
            elif required and kind not in ("VAR_POSITIONAL", "VAR_KEYWORD") and not open_args:
                self.error(
                    "upstream-argument",
                    f"`{name}()` needs `{param[0]}`: without it the call raises TypeError",
                    f"pass {param[0]}=...",
                    _at(node),
                )
        family = api.family_of(path)
        if family is not None:
            return self._model_spec(family, bound, node)
        returns = signature["returns"]
        if (
            isinstance(returns, tuple)
            and returns[0] == "config"
            and api.is_config_class(returns[1])
        ):
            return Obj(returns[1], _at(node), opaque=True)
        return Unknown(f"what `{name}()` returns")

    def _model_spec(self, family: str, bound: dict, node: ast.Call) -> Spec:
        flavor, at, _ = bound.get("flavor", (Unknown("flavor"), _at(node), None))
        flavors = api.flavors(family)
        if isinstance(flavor, str) and flavor not in flavors:
            close = [f for f in flavors if is_misspelling(flavor, f)]
            self.error(
                "upstream-flavor",
                f"{family} has no flavor {flavor!r} in torchtitan {api.VERSION}: "
                "model_registry raises when called",
                f"did you mean {close[0]!r}?" if close else f"its flavors: {', '.join(flavors)}",
                at,
            )
        elif isinstance(flavor, Unknown):
            self._unread(_at(node), "the flavor is not read statically")
        backend = bound.get("attn_backend")
        if backend is not None and isinstance(backend[0], str):
            refused = api.refused_backends()
            accepted = api.attention_backends()
            if backend[0] in refused:
                self.error(
                    "upstream-choice",
                    f"attn_backend={backend[0]!r}: {refused[backend[0]]}",
                    f"use one of {', '.join(repr(b) for b in accepted)}",
                    backend[1],
                )
            elif backend[0] not in accepted:
                self.error(
                    "upstream-choice",
                    f"attn_backend={backend[0]!r} is not an attention backend of torchtitan "
                    f"{api.VERSION}: the model raises when built",
                    _choice_hint(backend[0], accepted),
                    backend[1],
                )
        return Spec(family, flavor, {k: v[0] for k, v in bound.items() if k != "flavor"}, _at(node))

    def _call_def(
        self, ref: Ref, args: list, kwargs: dict, at: At, *, open_args: bool, node: Any = None
    ) -> Any:
        definition = ref.node
        if isinstance(definition, ast.AsyncFunctionDef):
            return Unknown("a coroutine")
        if definition.name in self.stack:
            self._unread(at, f"`{definition.name}` calls itself (not followed)")
            return Unknown("a recursive call")
        if len(self.stack) >= DEPTH:
            self._unread(at, f"calls nested more than {DEPTH} deep (not followed)")
            return Unknown("a deep call")
        if definition.decorator_list:
            self._unread(at, f"`{definition.name}` is decorated: its decorators are not run")
        frame = Frame(
            self,
            {},
            parent=ref.frame if ref.frame is not self.module else self.module,
            name=definition.name,
        )
        if not self._bind(definition, frame, args, kwargs, at, open_args=open_args):
            return Unknown(f"a call of {definition.name} that does not bind")
        self.stack.append(definition.name)
        try:
            self._block(definition.body, frame)
            result = (
                Unknown("the end of a function read through branches") if frame.branched else None
            )
        except _Return as returned:
            result = returned.value
        finally:
            self.stack.pop()
        if frame.names.get("<returned under a condition>"):
            return Unknown(f"`{definition.name}` returns under a condition")
        return result

    def _bind(
        self,
        definition: ast.FunctionDef,
        frame: Frame,
        args: list,
        kwargs: dict,
        at: At,
        *,
        open_args: bool,
    ) -> bool:
        spec = definition.args
        positional = [*spec.posonlyargs, *spec.args]
        defaults = [None] * (len(positional) - len(spec.defaults)) + list(spec.defaults)
        outer = frame.parent or self.module
        for index, param in enumerate(positional):
            if index < len(args):
                frame.names[param.arg] = args[index]
            elif param.arg in kwargs:
                frame.names[param.arg] = kwargs[param.arg][0]
            elif defaults[index] is not None:
                frame.names[param.arg] = self.eval(defaults[index], outer)
            elif open_args:
                frame.names[param.arg] = Unknown("an argument")
            else:
                self.error(
                    "upstream-argument",
                    f"`{definition.name}()` needs `{param.arg}`: without it the call raises TypeError",
                    f"pass {param.arg}=...",
                    at,
                )
                return False
        for param, default in zip(spec.kwonlyargs, spec.kw_defaults, strict=True):
            if param.arg in kwargs:
                frame.names[param.arg] = kwargs[param.arg][0]
            elif default is not None:
                frame.names[param.arg] = self.eval(default, outer)
            else:
                frame.names[param.arg] = Unknown("an argument")
        names = {p.arg for p in [*positional, *spec.kwonlyargs]}
        extra = {k: v[0] for k, v in kwargs.items() if k not in names}
        if spec.vararg is not None:
            frame.names[spec.vararg.arg] = tuple(args[len(positional) :])
        if spec.kwarg is not None:
            frame.names[spec.kwarg.arg] = extra if not open_args else Unknown("** arguments")
            self.origins[id(extra)] = (extra, {k: kwargs[k][1] for k in extra})
        elif extra and not open_args:
            key = next(iter(extra))
            self.error(
                "upstream-argument",
                f"`{definition.name}()` has no parameter `{key}`: the call raises TypeError",
                f"its parameters are {', '.join(sorted(names)) or 'none'}",
                kwargs[key][1],
            )
        return True

    def _followed(self, what: str | None, args: list, kwargs: dict, node: ast.Call) -> Any:
        if what == "cast" and len(args) == 2:
            return args[1]
        if what == "copy" and len(args) == 1:
            return copy.deepcopy(args[0])
        if what == "replace" and args and isinstance(args[0], Obj):
            made = copy.deepcopy(args[0])
            for key, (value, at, source) in kwargs.items():
                self._set_field(made, key, value, at, source, self.module)
            return made
        return self.unknown(node, f"`{_shown(node.func)}(...)` is not read statically")

    def _builtin(self, name: str, args: list, node: ast.Call) -> Any:
        if not all(plain(a) for a in args):
            return Unknown(f"{name}() of an unknown value")
        try:
            if name == "len" and len(args) == 1:
                return len(args[0])
            if name in ("int", "float", "str", "bool", "abs", "round") and len(args) == 1:
                if name == "str" and not isinstance(args[0], str | int | float | bool | None):
                    return Unknown("str() of a container")
                if name == "int" and isinstance(args[0], str) and len(args[0]) > 100:
                    return Unknown("a long number")
                return {
                    "int": int,
                    "float": float,
                    "str": str,
                    "bool": bool,
                    "abs": abs,
                    "round": round,
                }[name](args[0])
            if name in ("min", "max", "sum") and args:
                values = args[0] if len(args) == 1 else args
                if isinstance(values, list | tuple) and len(values) <= LONG:
                    return {"min": min, "max": max, "sum": sum}[name](values)
            if name in ("list", "tuple") and len(args) == 1 and isinstance(args[0], list | tuple):
                return list(args[0]) if name == "list" else tuple(args[0])
        except (TypeError, ValueError, OverflowError):
            return Unknown(f"{name}() that raises")
        return Unknown(f"{name}()")


# -- helpers ---------------------------------------------------------------------------------

_BINOPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b if not isinstance(a, str) else _no(),
    ast.Pow: lambda a, b: a**b,
    ast.LShift: lambda a, b: a << b,
    ast.RShift: lambda a, b: a >> b,
    ast.BitOr: lambda a, b: a | b,
    ast.BitAnd: lambda a, b: a & b,
    ast.BitXor: lambda a, b: a ^ b,
}
_COMPARE = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
    ast.Is: lambda a, b: a is b,
    ast.IsNot: lambda a, b: a is not b,
}


def _no() -> Any:
    raise TypeError("not computed")


def _load(target: ast.expr) -> ast.expr:
    """An assignment target read as a value (for ``x.y += 1``)."""
    copied = copy.copy(target)
    copied.ctx = ast.Load()
    return copied


def _at(node: ast.AST, length: int | None = None) -> At:
    line = getattr(node, "lineno", 1) or 1
    col = (getattr(node, "col_offset", 0) or 0) + 1
    return At(line, col, col + length if length else None)


def _keyword_at(keyword: ast.keyword) -> At:
    return _at(keyword, len(keyword.arg) if keyword.arg else None)


def _attr_at(node: ast.Attribute) -> At:
    """The attribute's own name (``stpes`` of ``config.training.stpes``)."""
    end_line = getattr(node, "end_lineno", None)
    end_col = getattr(node, "end_col_offset", None)
    if end_line is not None and end_col is not None and end_line == node.lineno:
        return At(end_line, end_col - len(node.attr) + 1, end_col + 1)
    return _at(node)


def _alias_at(node: ast.ImportFrom, alias: ast.alias) -> At:
    if getattr(alias, "lineno", None):
        return _at(alias, len(alias.name))
    return _at(node)


def _shown(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 60 else text[:57] + "..."


def _shown_value(value: Any) -> str:
    text = repr(value) if plain(value) else f"a {type(value).__name__}"
    if isinstance(value, Obj):
        text = f"`{api.short(value.cls)}(...)`"
    elif isinstance(value, Spec):
        text = "a model spec"
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    if isinstance(value, Obj):
        return "a config object"
    return type(value).__name__


def _choice_hint(value: Any, allowed: tuple) -> str:
    if isinstance(value, str):
        close = [c for c in allowed if isinstance(c, str) and is_misspelling(value, c)]
        if close:
            return f"did you mean {close[0]!r}?"
    return f"use one of {', '.join(repr(c) for c in allowed)}"


def _guard_problem(field: dict, value: Any) -> str | None:
    if "choices" in field and value not in field["choices"]:
        return f"it must be one of {', '.join(repr(c) for c in field['choices'])}"
    if value in field.get("not", ()):
        return f"{_shown_value(value)} is refused"
    if isinstance(value, int | float) and not isinstance(value, bool):
        for key, test, words in (
            ("ge", lambda v, b: v >= b, "at least"),
            ("gt", lambda v, b: v > b, "greater than"),
            ("le", lambda v, b: v <= b, "at most"),
            ("lt", lambda v, b: v < b, "less than"),
        ):
            if key in field and not test(value, field[key]):
                return f"it must be {words} {field[key]}"
    return None


def guard_hint(field: dict) -> str:
    parts = []
    if "choices" in field:
        parts.append(f"one of {', '.join(repr(c) for c in field['choices'])}")
    for key, words in (("ge", "at least"), ("gt", "above"), ("le", "at most"), ("lt", "below")):
        if key in field:
            parts.append(f"{words} {field[key]}")
    if field.get("not"):
        parts.append(f"not {', '.join(repr(v) for v in field['not'])}")
    return f"use a value {' and '.join(parts)}" if parts else "use another value"


def _first_fields(row: dict, count: int) -> str:
    return ", ".join(f"{name}=..." for name in list(row)[:count])


def _other_class_hint(key: str, path: str) -> str | None:
    """Where a field of that name lives when it is not this class' (``warmup_steps`` of
    ``TrainingConfig`` is ``LRSchedulersContainer.Config``'s)."""
    owners = [p for p in api.field_owners().get(key, ()) if p != path]
    if not owners:
        return None
    home = next((o for o in owners if api.trainer_home(o)), owners[0])
    field = api.trainer_home(home)
    where = f" (Trainer.Config's `{field}`)" if field else ""
    return f"`{key}` is a field of `{api.short(home)}`{where}, not of `{api.short(path)}`"


def _module_hint(name: str) -> str:
    parent = name.rpartition(".")[0]
    while parent and not api.is_module(parent):
        parent = parent.rpartition(".")[0]
    if not parent:
        return "check the module path against the installed torchtitan"
    leaf = name[len(parent) + 1 :].split(".")[0]
    subs = [m.rpartition(".")[2] for m in _submodules(parent)]
    close = [s for s in subs if is_misspelling(leaf, s)]
    if close:
        return f"did you mean `{parent}.{close[0]}`?"
    return f"`{parent}` has {', '.join(sorted(subs)[:10])}" if subs else f"see `{parent}`"


def _submodules(parent: str) -> Iterator[str]:
    from titan.migrate.targets.upstream_api_030 import NAMES

    for module in NAMES:
        if module.rpartition(".")[0] == parent:
            yield module


def _elsewhere_hint(name: str, module: str) -> str:
    from titan.migrate.targets.upstream_api_030 import EXPORTS

    homes = sorted({k.partition(":")[0] for k in EXPORTS if k.partition(":")[2] == name})
    if homes:
        shortest = min(homes, key=len)
        return f"`{name}` is in `{shortest}`"
    return f"see what `{module}` defines"


def _bound_names(tree: ast.Module) -> set[str]:
    """Every name the module binds anywhere (so a name used before it is bound is not called
    undefined: only one bound nowhere is)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            names.update(node.names)
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            names.add(node.name)
    return names

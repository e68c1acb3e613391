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
import copy
import math
from typing import Any

from titan.migrate.registry_check import api
from titan.migrate.registry_check.calls import Calls
from titan.migrate.registry_check.frames import (
    BIG,
    BUILTINS,
    LONG,
    MISSING,
    STEPS,
    Frame,
    Function,
    OutOfSteps,
    Return,
)
from titan.migrate.registry_check.messages import (
    _alias_at,
    _at,
    _attr_at,
    _elsewhere_hint,
    _module_hint,
    _shown,
)
from titan.migrate.registry_check.values import At, Obj, Ref, Spec, Unknown, plain
from titan.migrate.targets.spec_types import Default
from titan.migrate.targets.upstream_types import OPAQUE, REQUIRED
from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.misspelling import is_misspelling

__all__ = ["Frame", "Function", "Reader"]


class Reader(Calls):
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
        except (OutOfSteps, RecursionError):
            self.module_notes.append((At(1, 1), "the module is too large to read statically"))
        except Return:
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
        except OutOfSteps:
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
            raise OutOfSteps

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
            raise Return(value)
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
            raise Return(Unknown("raised"))
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
        if found is not MISSING:
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

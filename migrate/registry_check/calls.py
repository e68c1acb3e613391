"""What a call does in the static reading: a 0.3.0 config class is constructed and its keywords
checked, a function of the package is bound against its signature (``model_registry`` makes a
model spec), a function of the module itself is followed into, and a few standard-library
helpers (``cast``, ``dataclasses.replace``, ``copy.deepcopy``, ``len``...) are computed.

:class:`Calls` is a part of :class:`~titan.migrate.registry_check.reader.Reader`, which it is
mixed into; it reads the reader's state and reports through its ``error`` and ``unknown``.
"""

from __future__ import annotations

import ast
import copy
from typing import Any

from titan.migrate.registry_check import api
from titan.migrate.registry_check.frames import DEPTH, FOLLOWED, LONG, Frame, Return
from titan.migrate.registry_check.messages import (
    _at,
    _choice_hint,
    _first_fields,
    _guard_problem,
    _keyword_at,
    _kind,
    _other_class_hint,
    _shown,
    _shown_value,
    guard_hint,
)
from titan.migrate.registry_check.values import At, Obj, Ref, Spec, Unknown, has_unknown, plain
from titan.migrate.targets.upstream_types import REQUIRED, accepts, choices, spell
from titan.schemas.misspelling import is_misspelling


class Calls:
    """The call half of the reader (see the module docstring)."""

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
        except Return as returned:
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

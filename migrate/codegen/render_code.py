"""The code renderer: migration plans as one ``config_registry.py`` module.

Each plan becomes a function named after its TOML that returns the config, passing only the fields
that differ from each class' real defaults (:func:`titan.migrate.targets.config_objects.changed_fields`,
the same choice the live renderer makes). A plan that differs from an earlier one in the same module
by a few values is written as ``config = earlier()`` plus assignments. Custom config modules become
generated dataclasses. Every value is built into a literal by ``titan.migrate.codegen.pyfmt``, never
pasted from the TOML, and the text is already what ``ruff format`` produces.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Sequence
from typing import Any

from titan.migrate.codegen.bindings import (
    Imports,
    check_package,
    function_names,
    function_renames,
    model_call,
    registry_names,
)
from titan.migrate.codegen.names import LOCALS, free_name
from titan.migrate.codegen.pyfmt import nodes as py
from titan.migrate.codegen.pyfmt.layout import literal_text
from titan.migrate.codegen.pyfmt.printer import format_module
from titan.migrate.plan.extension_classes import (
    GeneratedClass,
    generated_path,
    is_generated,
    spec_module,
)
from titan.migrate.plan.migration_plan import Plan
from titan.migrate.targets.config_objects import (
    Call,
    Default,
    Local,
    Obj,
    RegistryCall,
    UnsupportedModel,
    changed_fields,
    info,
    same,
)

__all__ = ["function_names", "function_renames", "model_call", "registry_names", "render_module"]

TODO = "TODO(titan-migrate): "
DERIVE_LIMIT = 5
"""A config is written as ``config = earlier()`` plus at most this many assignments."""
DERIVE_DEPTH = 32
"""The longest chain of registry functions each built from the one before (``config =
earlier()``): a deeper chain is started afresh with a function built in full, so that calling
the last function of a thousand similar TOMLs stays far from Python's recursion limit."""


class _Renderer:
    def __init__(self, plans: Sequence[Plan], names: Sequence[str]) -> None:
        self.plans = [p for p in plans if p.root is not None]
        self.registries = registry_names(self.plans)
        """Package -> the name it is imported as, when the module calls several families'
        ``model_registry`` (empty for one family: ``model_registry`` is imported itself)."""
        packages = set(self.registries.values())
        self.specs = _generated_specs(self.plans)
        self.generated = _class_names(self.specs, taken=set(names) | packages)
        """Generated class path -> its name in this module (unique across custom modules)."""
        fields = {item.name for _, spec in self.specs for item in spec.fields}
        taken = fields | set(names) | set(self.generated.values()) | packages
        self.field_function = (
            "field" if "field" not in fields else free_name("dataclass_field", taken=taken)
        )
        """What the module calls ``dataclasses.field``: a class body with a field named
        ``field`` would otherwise call that field's default for the fields after it."""
        self.hoisted: set[str] = set()
        """Fields of the config being written that are built as locals first (a model spec
        whose model config the function then edits)."""
        self.imports = Imports(
            defined={*names, *self.generated.values(), *LOCALS},
            promised={
                tuple(package.rsplit(".", 1)): alias for package, alias in self.registries.items()
            },
        )

    # ----------------------------------------------------------------- expressions

    def class_name(self, cls: str) -> str:
        if is_generated(cls):
            return self.generated[cls]
        class_info = info(cls)
        owner = self.imports.add(class_info.module, class_info.owner)
        return owner + class_info.qualname[len(class_info.owner) :]

    def value(self, value: Any, path: str, plan: Plan) -> Any:
        if isinstance(value, Obj):
            return self.call(value, path, plan)
        if isinstance(value, RegistryCall):
            if value.edits:  # its fields are set by statements: the call is a local
                if path not in self.hoisted:
                    raise ValueError(f"{path}: a model config edited in place must be a local")
                return py.Ref(path)
            return self.registry_call(value, path, plan)
        if isinstance(value, Call):
            func = self.imports.add(value.module, value.name)
            args = [py.Arg(self.value(v, path, plan)) for v in value.args]
            args += [py.Arg(self.value(v, path, plan), name=k) for k, v in value.kwargs.items()]
            return py.Call(py.Ref(func), args)
        if isinstance(value, Local):
            return py.Ref(value.name)
        if isinstance(value, UnsupportedModel):
            func = self.imports.add("titan.models", "unsupported_model")
            return py.Call(py.Ref(func), [py.Arg(py.Lit(value.name)), py.Arg(py.Lit(value.flavor))])
        if isinstance(value, list) and any(isinstance(v, Obj) for v in value):
            return py.ListExpr([py.Arg(self.value(v, path, plan)) for v in value])
        return py.Lit(value)

    def registry_call(self, value: RegistryCall, path: str, plan: Plan) -> Any:
        """``model_registry(flavor, ...)``, inside ``extend_model(...)`` when a custom module
        adds fields to the model config (``RegistryCall.model``)."""
        check_package(value.package, value.family)
        if not self.registries:
            # the one name every registry package exports: the user's may bind it too
            func = self.imports.add(value.package, "model_registry", alias="model_registry")
        else:  # several families: each through its package (``llama3.model_registry``)
            parent, dot, name = value.package.rpartition(".")
            if not dot:
                raise ValueError(
                    f"the model registry module {value.package!r} of `{value.family}` is a "
                    "top-level module; name it by a dotted path, or migrate its files into "
                    "a module of their own"
                )
            func = f"{self.imports.add(parent, name)}.model_registry"
        args = [py.Arg(py.Lit(value.flavor))]
        args += [py.Arg(self.value(v, path, plan), name=k) for k, v in value.kwargs.items()]
        call = py.Call(py.Ref(func), args)
        if value.model is None:
            return call
        extend = self.imports.add("titan.models", "extend_model")
        fields = self.call(value.model, f"{path}.model", plan).args
        model_class = py.Ref(self.class_name(value.model.cls))
        return py.Call(py.Ref(extend), [py.Arg(call), py.Arg(model_class), *fields])

    def call(self, obj: Obj, path: str, plan: Plan) -> Any:
        args = []
        for name, value in changed_fields(obj).items():
            child = f"{path}.{name}" if path else name
            leading, trailing = plan.comments.get(child, ((), None))
            if child not in plan.locals and child not in self.hoisted:  # above the local
                leading = (*leading, *(TODO + t for t in plan.todos.get(child, ())))
            args.append(
                py.Arg(
                    self.value(value, child, plan),
                    name=name,
                    comments=leading,
                    trailing=trailing,
                )
            )
        return py.Call(py.Ref(self.class_name(obj.cls)), args)

    # ----------------------------------------------------------------- functions

    def function(
        self, plan: Plan, name: str, base: tuple[str, Plan] | None, *, note: str | None = None
    ) -> Any:
        returns = self.class_name(plan.root.cls)
        body: list[Any] = [py.Docstring(_docstring(plan))]
        body += [py.Comment(note)] if note else []
        body += [py.Comment(line) for line in plan.preamble]
        emitted = set(self.emitted_paths(plan, base))
        locals_ = dict(plan.locals)
        self.hoisted = set()
        spec = plan.root.fields.get("model_spec")
        if base is None and isinstance(spec, RegistryCall) and spec.edits:
            if "model_spec" not in locals_:
                locals_["model_spec"] = spec  # edited after it is built: a local first
                self.hoisted.add("model_spec")
        if base is None:
            emitted |= set(locals_)  # written above the local's assignment
        for path, texts in plan.todos.items():
            if path not in emitted:
                body += [py.Comment(TODO + text) for text in texts]
        if base is None:
            for local, value in locals_.items():
                todos = tuple(TODO + t for t in plan.todos.get(local, ()))
                body += self.assignment(local, value, plan, comments=todos)
            body.append(py.Return(self.call(plan.root, "", plan)))
        else:
            earlier_name, earlier = base
            body.append(py.Assign("config", py.Call(py.Ref(earlier_name), [])))
            for path, value in _differences(earlier.root, plan.root):
                leading, trailing = plan.comments.get(path, ((), None))
                leading = (*leading, *(TODO + t for t in plan.todos.get(path, ())))
                body += self.assignment(
                    f"config.{path}", value, plan, path=path, comments=leading, trailing=trailing
                )
            body.append(py.Return(py.Ref("config")))
        return py.FunctionDef(name, returns, body)

    def assignment(
        self,
        target: str,
        value: Any,
        plan: Plan,
        *,
        path: str | None = None,
        comments: tuple[str, ...] = (),
        trailing: str | None = None,
    ) -> list[Any]:
        """``target = value``, and for a model spec whose model config the era edits, one
        assignment per edited field after it (``model_spec.model.rope.scaling = "none"``)."""
        path = target if path is None else path
        if not (isinstance(value, RegistryCall) and value.edits):
            rendered = self.value(value, path, plan)
            return [py.Assign(target, rendered, comments=comments, trailing=trailing)]
        call = self.registry_call(value.without_edits(), path, plan)
        found = [py.Assign(target, call, comments=comments, trailing=trailing)]
        for edit in value.edits:
            comments = tuple(edit.why.splitlines())
            if edit.each is None:
                found.append(
                    py.Assign(f"{target}.model.{edit.path}", py.Lit(edit.value), comments=comments)
                )
                continue
            taken = {*self.imports.defined, *self.imports.bound, *self.imports.promised.values()}
            item = free_name(edit.each.rpartition(".")[2].removesuffix("s") or "item", taken=taken)
            self.imports.defined.add(item)  # no later import binds the loop's name
            setting = py.Assign(f"{item}.{edit.path}", py.Lit(edit.value))
            found.append(py.For(item, f"{target}.model.{edit.each}", [setting], comments=comments))
        return found

    def emitted_paths(self, plan: Plan, base: tuple[str, Plan] | None) -> list[str]:
        """Config paths that get their own line (so their comments and TODOs can go there)."""
        if base is not None:
            return [path for path, _ in _differences(base[1].root, plan.root)]
        paths = []

        def walk(obj: Obj, prefix: str) -> None:
            for name, value in changed_fields(obj).items():
                path = f"{prefix}{name}"
                paths.append(path)
                if isinstance(value, Obj):
                    walk(value, f"{path}.")

        walk(plan.root, "")
        return paths

    # ----------------------------------------------------------------- generated classes

    def generated_class(self, path: str, spec: GeneratedClass) -> list[Any]:
        decorator = py.Call(
            py.Ref(self.imports.add("dataclasses", "dataclass")),
            [py.Arg(py.Lit(True), name="kw_only"), py.Arg(py.Lit(True), name="slots")],
        )
        bases = [self.class_name(spec.base)] if spec.base else []
        body: list[Any] = [py.Docstring(spec.doc or spec.name)]
        # Inside the class body a field shadows a module name for the fields after it, so the
        # defaults are written without the names of this class' fields.
        shadowed = {item.name for item in spec.fields}
        for item in spec.fields:
            annotation = self.annotation(item.annotation)
            default = self.field_default(item.default, shadowed=shadowed)
            body.append(py.AnnAssign(item.name, annotation, default))
            if item.doc:
                body.append(py.FieldDoc(item.doc))
        node = py.ClassDef(self.generated[path], bases, body, decorators=[decorator])
        if self.generated[path] == spec.name:
            return [node]
        module = spec_module(info(path).module)
        why = f"`{spec.name}` of {module}, renamed: another name in this module is `{spec.name}`"
        return [py.Comment(why), node]

    def field_default(self, default: Any, *, shadowed: set[str]) -> Any:
        if isinstance(default, Default):
            factory: Any = py.Ref(self.class_name(default.cls))
        elif (
            isinstance(default, list | dict)
            and not default
            and type(default).__name__ not in shadowed
        ):
            factory = py.Ref(type(default).__name__)
        elif isinstance(default, list | dict):
            factory = py.Lambda(py.Lit(default))
        elif isinstance(default, float) and not math.isfinite(default) and "float" in shadowed:
            factory = py.Lambda(py.Lit(default))  # float("inf") would call the field
        else:
            return py.Lit(default)
        field = self.imports.add("dataclasses", "field", alias=self.field_function)
        return py.Call(py.Ref(field), [py.Arg(factory, name="default_factory")])

    def annotation(self, annotation: Any) -> str:
        """Source text of a field type (typing objects, or a generated class path)."""
        if isinstance(annotation, str):
            return self.class_name(annotation)
        if annotation is Any:
            return self.imports.add("typing", "Any")
        if annotation is type(None):
            return "None"
        if annotation is Ellipsis:  # tuple[str, ...]
            return "..."
        origin, args = typing.get_origin(annotation), typing.get_args(annotation)
        if origin is typing.Literal:
            return (
                self.imports.add("typing", "Literal")
                + "["
                + ", ".join(literal_text(a) for a in args)
                + "]"
            )
        if origin in (typing.Union, types.UnionType):
            return " | ".join(self.annotation(a) for a in args)
        if origin is not None:
            inner = ", ".join(self.annotation(a) for a in args)
            return f"{origin.__name__}[{inner}]" if args else origin.__name__
        if isinstance(annotation, type):
            return annotation.__name__
        return self.imports.add("typing", "Any")

    # ----------------------------------------------------------------- module

    def module(self, names: Sequence[str], docstring: str) -> str:
        classes = [node for path, spec in self.specs for node in self.generated_class(path, spec)]
        functions = []
        written: list[tuple[str, Plan]] = []
        depth: dict[str, int] = {}
        """Function -> how many functions its call runs below it (0: built in full)."""
        for plan, name in zip(self.plans, names, strict=True):
            base = _closest(plan, written)
            note = None
            if base is not None and depth[base[0]] >= DERIVE_DEPTH:
                note = (
                    f"Built in full: building it from {base[0]}() would chain more than "
                    f"{DERIVE_DEPTH} registry functions."
                )
                base = None
            depth[name] = 0 if base is None else depth[base[0]] + 1
            functions.append(self.function(plan, name, base, note=note))
            written.append((name, plan))
        imports = self.imports.statements()
        return format_module(py.Module([py.Docstring(docstring), *imports, *classes, *functions]))


def _generated_specs(plans: Sequence[Plan]) -> list[tuple[str, GeneratedClass]]:
    """(class path, class) of every generated class, each once, in the order plans name them."""
    specs: dict[str, GeneratedClass] = {}
    for plan in plans:
        for spec in plan.classes:
            specs.setdefault(generated_path(plan.extension or "", spec.name, plan.target), spec)
    return list(specs.items())


def _class_names(specs: list[tuple[str, GeneratedClass]], *, taken: set[str]) -> dict[str, str]:
    """Each generated class' name in the module: its own, unless a class of another custom
    module (or a function) has it already. Names within one module are unique by construction
    (``titan.migrate.plan.extension_classes``)."""
    taken = set(taken)
    fields = {item.name for _, spec in specs for item in spec.fields}
    found = {}
    for path, spec in specs:
        found[path] = free_name(spec.name, taken=taken | fields)
        taken.add(found[path])
    return found


def _docstring(plan: Plan) -> str:
    first = (plan.description or "").strip() or f"Migrated from {plan.source}."
    return f"{first}\n\nMigrated by titan-migrate from ``{plan.source}``."


def _differences(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Assignments that turn ``old`` (a config object) into ``new``."""
    found = []
    for name, value in new.fields.items():
        before = old.fields[name]
        path = f"{prefix}{name}"
        if same(before, value):
            continue
        if isinstance(value, Obj) and isinstance(before, Obj) and value.cls == before.cls:
            found += _differences(before, value, f"{path}.")
        else:
            found.append((path, value))
    return found


DERIVE_WINDOW = 64
"""How many of the functions written just before are candidates to derive from: a module's
similar configs sit together (one folder's files), and comparing every pair would make a module
of n functions cost n² tree walks."""


def _closest(plan: Plan, written: list[tuple[str, Plan]]) -> tuple[str, Plan] | None:
    """The earlier config this one differs from least, if by at most ``DERIVE_LIMIT`` values,
    among the last ``DERIVE_WINDOW`` written (the earliest of equals wins).

    Each comparison stops as soon as it cannot beat the best so far."""
    best = None
    for name, earlier in written[-DERIVE_WINDOW:]:
        if earlier.root.cls != plan.root.cls or earlier.extension != plan.extension:
            continue
        if not same(earlier.locals, plan.locals):
            continue  # the tree refers to names the earlier function defines otherwise
        limit = DERIVE_LIMIT if best is None else best[0] - 1
        count = _count_differences(earlier.root, plan.root, limit)
        if count <= limit:
            best = (count, name, earlier)
            if count == 0:
                break
    return None if best is None else (best[1], best[2])


def _count_differences(old: Any, new: Any, limit: int) -> int:
    """``len(_differences(old, new))``, or any number above ``limit`` once it is exceeded."""
    count = 0
    for name, value in new.fields.items():
        before = old.fields[name]
        if isinstance(value, Obj) and isinstance(before, Obj) and value.cls == before.cls:
            count += _count_differences(before, value, limit - count)  # 0 when equal
        elif not same(before, value):
            count += 1
        if count > limit:
            return count
    return count


def render_module(plans: Sequence[Plan], *, command: str | None = None) -> str:
    """One ``config_registry.py`` for the plans that produced a config."""
    usable = [p for p in plans if p.root is not None]
    names = function_names(usable)
    sources = ", ".join(f"``{p.source}``" for p in usable)
    docstring = f"Registry functions migrated by titan-migrate from {sources}."
    targets = {plan.target for plan in usable} - {"titan"}
    if targets:
        docstring += f"\n\nWritten for {', '.join(sorted(targets))}, not titan's own trainer."
    declared = sorted({module for plan in usable for module in plan.declared_extensions})
    if declared:
        modules = ", ".join(f"``{module}``" for module in declared)
        docstring += (
            f"\n\nMerged {modules}: ``pyproject.toml`` declares "
            f"{'them' if len(declared) > 1 else 'it'} for the project (``[tool.titan] extensions``)."
        )
    if command:
        docstring += f"\n\nRegenerate with ``{command}``."
    return _Renderer(usable, names).module(names, docstring)

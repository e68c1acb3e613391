"""The names one generated ``config_registry.py`` binds, each to one thing.

A module binds three kinds of names at its top level, and none may take another's:

- its registry functions (:func:`function_names`): from the TOMLs' file names and ``model.name``,
  public identifiers that avoid every name :mod:`titan.migrate.codegen.names` reserves and the
  model registry packages the module imports by name;
- the model registry packages, when it calls several (:func:`registry_names`): ``llama3`` for
  titan's (or torchtitan 0.3.0's) own family, the whole dotted path (``forkpkg_models_llama3``)
  for a user's package whose last name another package shares or that would take a reserved
  name (``pkga.Trainer`` -> ``pkga_Trainer``);
- everything else it imports (:class:`Imports`): a name that is already bound to something else
  (a function, a class, another module's name, a builtin the code relies on, a local variable of
  the functions) is imported under an alias, and the code uses whatever name the import got.

So ``from pkga import models`` and ``from pkgb import models`` can never both bind ``models``, a
user's ``--model-registry llama3=mypkg.llama3`` never hides behind titan's ``llama3``, and a
function named ``default_adamw`` never replaces the torchtitan helper the bodies call.
"""

from __future__ import annotations

import builtins
import keyword
from collections.abc import Sequence

from titan.migrate.codegen import names as reserved
from titan.migrate.codegen.pyfmt import nodes as py
from titan.migrate.codegen.pyfmt.imports import sort_imports
from titan.migrate.plan.migration_plan import Plan
from titan.migrate.targets.config_objects import RegistryCall

PRODUCT_MODULES = ("titan.", "torchtitan.", "dataclasses", "typing", "os.path")
"""Modules whose names :func:`titan.migrate.codegen.names.imported_names` holds for them; a name
from any other module (the user's) that would take one of those is imported under an alias."""


class Imports:
    """The ``from module import name [as alias]`` statements of one module, with every bound
    name unique: :meth:`add` returns the name the code must use."""

    def __init__(self, *, defined: set[str], promised: dict[tuple[str, str], str]) -> None:
        self.defined = set(defined)
        """Names the module defines or its functions use as locals (never imported over)."""
        self.promised = dict(promised)
        """(module, name) -> the name it gets when it is imported (the model registry
        packages, :func:`registry_names`); nothing else takes those names."""
        self.alias: dict[tuple[str, str], str] = {}
        """(module, name) -> the name it is bound to."""
        self.bound: dict[str, tuple[str, str]] = {}

    def add(self, module: str, name: str, *, alias: str | None = None) -> str:
        """Import ``name`` from ``module`` (as ``alias`` when given) and return the name it is
        bound to: its own, unless that is taken, then ``<module>_<name>`` made free."""
        key = (module, name)
        if key in self.alias:
            return self.alias[key]
        wanted = self.promised.get(key) or alias or name
        if key not in self.promised and self._refused(
            wanted, module=module, forced=alias is not None
        ):
            wanted = reserved.free_name(
                f"{module.replace('.', '_')}_{name}",
                taken={*self.defined, *self.bound, *self.promised.values()},
            )
        self.alias[key] = wanted
        self.bound[wanted] = key
        return wanted

    def _refused(self, name: str, *, module: str, forced: bool) -> bool:
        """Whether ``name`` cannot be bound by an import from ``module``."""
        if name in self.bound or name in self.defined or name in self.promised.values():
            return True
        if keyword.iskeyword(name):
            return True
        if hasattr(builtins, name) or name in reserved.LOCALS or name in reserved.TYPING_MARKERS:
            return True
        theirs = not module.startswith(PRODUCT_MODULES) and module != "__future__"
        return theirs and not forced and name in reserved.imported_names()

    def statements(self) -> list:
        """The import statements, sorted as ruff's isort rule wants."""
        grouped: dict[str, set[str]] = {}
        for (module, name), bound in self.alias.items():
            grouped.setdefault(module, set()).add(name if bound == name else f"{name} as {bound}")
        imports = [py.ImportFrom("__future__", ["annotations"])]
        imports += [py.ImportFrom(m, sorted(n)) for m, n in grouped.items()]
        return sort_imports(imports)


def model_call(plan: Plan) -> RegistryCall | None:
    """The ``model_registry(...)`` call of a plan: the config's ``model_spec``, or the local
    the function assigns it to."""
    for value in (plan.root.fields.get("model_spec"), plan.locals.get("model_spec")):
        if isinstance(value, RegistryCall):
            return value
    return None


def check_package(package: str, family: str) -> None:
    """A ``ValueError`` (the CLI's message) for a model registry module no import can name."""
    parts = package.split(".")
    if not all(p.isidentifier() and not keyword.iskeyword(p) for p in parts):
        raise ValueError(
            f"the model registry module {package!r} of `{family}` is not an importable module "
            "path (each dotted part must be a Python identifier and not a keyword)"
        )


def registry_names(plans: Sequence[Plan]) -> dict[str, str]:
    """Each ``model_registry`` package -> the name the module imports it as, when there are
    several (none for one: ``model_registry`` itself is imported). A family package of titan or
    torchtitan keeps its last name (``llama3``); another package keeps its last name where no
    other package has it and it takes no reserved name, else it is named by its whole dotted
    path (``forkpkg_models_llama3``), made unique."""
    packages = sorted({call.package for p in plans if (call := model_call(p)) is not None})
    if len(packages) <= 1:
        return {}
    last = [package.rpartition(".")[2] for package in packages]
    found: dict[str, str] = {}
    # Family packages first: they keep their names whatever else the module imports.
    for package in sorted(packages, key=lambda p: (not reserved.family_package(p), p)):
        name = package.rpartition(".")[2]
        own = reserved.family_package(package) or (
            last.count(name) == 1 and reserved.reserved_reason(name) is None
        )
        wanted = name if own else package.replace(".", "_")
        if wanted in found.values() or (not own and reserved.reserved_reason(wanted)):
            wanted = reserved.free_name(wanted, taken=set(found.values()))
        found[package] = wanted
    return {package: found[package] for package in packages}


def function_names(plans: Sequence[Plan]) -> list[str]:
    """The plans' function names, made unique in file order (``_2``, ``_3`` ...) and distinct
    from the names the module imports and the classes it defines."""
    return [name for name, _ in _functions(plans)]


def function_renames(plans: Sequence[Plan]) -> list[str]:
    """For each plan, why its function in the module is not ``plan.function`` (``""`` where it
    is): the name an earlier file's function, a generated class or an imported package took."""
    return [why for _, why in _functions(plans)]


def _functions(plans: Sequence[Plan]) -> list[tuple[str, str]]:
    usable = [p for p in plans if p.root is not None]
    classes = {spec.name for plan in usable for spec in plan.classes}
    # the model packages are imported by name when the module has several families
    packages = set(registry_names(usable).values())
    functions: set[str] = set()
    found = []
    for plan in usable:
        name = reserved.free_name(plan.function, taken=classes | packages | functions)
        why = ""
        if plan.function in functions:
            why = f"`{plan.function}` is taken by an earlier file"
        elif plan.function in classes:
            why = f"`{plan.function}` is the name of a class the module defines"
        elif plan.function in packages:
            why = f"`{plan.function}` is a model registry package the module imports"
        elif name != plan.function:
            why = reserved.rename_reason(plan.function)
        functions.add(name)
        found.append((name, why))
    return found

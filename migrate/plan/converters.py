"""``model.converters`` and the ``[quantize.*]`` tables: each enabled converter as a config object
carrying its table, stale names (``"float8"``) by the file's era, inert tables reported, and the
float8 tensor-parallel change of behaviour.

A fork's own converter is the one its project declares with its class
(``[tool.titan] converters = { npu_rms_norm = "forkpkg.converters.NPURMSNorm" }``): it becomes
``NPURMSNorm.Config()``, imported from ``forkpkg.converters``. titan-migrate names the class and
never imports it; titan-train imports it when it builds the config. A name declared without its
class cannot be built, and is an error whose hint is the declaration to write.
"""

from __future__ import annotations

import functools
import json
import os

from titan.migrate.plan import homes as homes_table
from titan.migrate.plan.draft import PlanDraft
from titan.migrate.plan.legacy_values import copy_value, show
from titan.migrate.targets.config_objects import Obj, default_object, outside_class
from titan.schemas import rules
from titan.schemas.converter_eras import STALE_NAME_ERAS, stale_name_dated
from titan.schemas.diagnostics import Severity


def converters(draft: PlanDraft) -> None:
    """``model.converters`` in order, each carrying its ``[quantize.*]`` table.

    A stale name (``"float8"``) is carried only with ``--fix-stale-names``. Whether the
    legacy run had the converter depends on the file's era: a file whose old keys date it to
    when torchtitan registered the name (``converter_eras.stale_name_dated``) ran with it, and the
    migrated config keeps it; a later file failed on the name, and enabling the converter is
    new."""
    names = draft.leaves.get("model.converters", [])
    if draft.is_blocked("model.converters") or not isinstance(names, list):
        names = []
    built: list[Obj] = []
    enabled: list[str] = []
    renamed = False
    original: dict | None = None
    stale: set[str] = set()  # targets reached through an old name
    twice = 0
    for name in names:
        target = name
        if name in rules.STALE_CONVERTER_NAMES:
            target = rules.STALE_CONVERTER_NAMES[name]
            if original is None:  # the file as written: the era chain moved its old keys
                original = draft.check.written or {}
            dated = stale_name_dated(name, original)
            era, months = STALE_NAME_ERAS[name].era, STALE_NAME_ERAS[name].months
            if not draft.fix_stale_names:
                draft.report(
                    "stale-name",
                    "model.converters",
                    f'converter "{name}" is not carried: it was {era}, and `{dated}` dates '
                    "this file there, so its run had the converter; v0.2.2 does not know "
                    "the name"
                    if dated
                    else f'converter "{name}" is not carried: it is a stale name v0.2.2 failed on',
                    f'rerun with --fix-stale-names to keep it as "{target}"'
                    if dated
                    else f'rerun with --fix-stale-names to migrate it as "{target}", if the '
                    f"file dates from {months} (its run had the converter then)",
                )
                draft.plan.todo(
                    "model_converters",
                    f'model.converters lists "{name}", the name of "{target}" {era}; rerun '
                    "with --fix-stale-names to keep the converter"
                    if dated
                    else f'model.converters lists the stale name "{name}" (v0.2.2 failed on '
                    f'it with KeyError); rerun with --fix-stale-names to enable "{target}"',
                )
                continue
            renamed = True
            resolved(draft, name=name, target=target)
            draft.report(
                "stale-name",
                "model.converters",
                f'converter "{name}" is migrated as "{target}" (--fix-stale-names): it was '
                f"{era}, and `{dated}` dates this file there, so the migrated config keeps "
                "the converter its run had"
                if dated
                else f'converter "{name}" is migrated as "{target}" (--fix-stale-names); '
                "v0.2.2 failed on the old name, so this run enables a converter the legacy "
                "run never had",
                "nothing to do; `titan-validate --fix` writes the new name into the TOML"
                if dated
                else f"keep it if the file dates from {months}, when its run had the "
                f'converter; otherwise leave "{name}" out of model.converters',
            )
        if target in enabled and (name != target or target in stale):
            twice += 1  # listed twice through an old name (and the era chain's old switch)
            continue
        if name != target:
            stale.add(target)
        if target not in converter_classes() and name in draft.fork.converter_names():
            declared = fork_converter(draft, name)
            if declared is not None:
                built.append(declared)
                enabled.append(name)
            continue
        if target not in converter_classes():
            draft.plan.todo("model_converters", f"unknown converter {show(name)} not carried")
            continue
        options = {
            found.path: value
            for key, value in draft.leaves.items()
            if key.rpartition(".")[0] == target
            and (found := homes_table.home(key)) is not None
            and found.kind == "converter"
            and not draft.is_blocked(key)
        }
        converter = default_object(converter_classes()[target])
        converter.fields.update({k: copy_value(v) for k, v in options.items()})
        built.append(converter)
        enabled.append(target)
    if "model.converters" in draft.leaves and not draft.is_blocked("model.converters"):
        # a blocked value keeps the outcome ``carry`` gave it: rejected, with its finding
        if len(enabled) + twice == len(names):
            status = "renamed" if renamed else ("carried" if names else "default")
            draft.outcome("model.converters", status, ("model_converters.converters",))
        else:
            draft.outcome(
                "model.converters",
                "dropped",
                note="names that are not registered converters were not carried",
            )
    draft.root.fields["model_converters"].fields["converters"] = built
    converter_tables(draft, enabled=enabled)
    if "quantize.linear.float8" in enabled:
        float8_tensor_parallel(draft)


def fork_converter(draft: PlanDraft, name: str) -> Obj | None:
    """The config of the fork's converter ``name``, from the class its project declares; an
    error finding (and ``None``) when the declaration names no class or one that cannot be
    found."""
    target = dict(draft.fork.converters).get(name)
    if target is None:
        draft.report(
            "undeclared-converter-class",
            "model.converters",
            f'converter "{name}" is declared without its class in {draft.fork.project}, so '
            "the migrated config cannot build it",
            f"name the ModelConverter subclass that implements it {draft.fork.where()}: "
            f"[tool.titan] {class_line(draft, name)} (titan-train imports it; titan-migrate "
            "writes its Config())",
            severity=Severity.ERROR,
        )
        draft.plan.todo("model_converters", f'converter "{name}" not carried: its class is unknown')
        return None
    project = draft.fork.project
    found = converter_class(target, root=os.path.dirname(os.path.abspath(project or ".")))
    if found is None:
        draft.report(
            "undeclared-converter-class",
            "model.converters",
            f'converter "{name}" is declared as `{target}` in {draft.fork.project}, but no '
            f"module of `{target}` can be found, so the migrated config cannot build it",
            "write the class path of the ModelConverter subclass (package.module.Class) of a "
            f"module in the project or an installed package: [tool.titan] "
            f"{class_line(draft, name)}",
            severity=Severity.ERROR,
        )
        draft.plan.todo(
            "model_converters", f'converter "{name}" not carried: `{target}` is not found'
        )
        return None
    _FORK_NAMES[found] = name
    return default_object(outside_class(found))


def class_line(draft: PlanDraft, name: str) -> str:
    """The whole ``converters = {...}`` line with ``name`` given a class, every declared name
    with the class it has (a placeholder where it has none)."""
    table = {n: target or "package.module.Class" for n, target in draft.fork.converters}
    table[name] = "package.module.Class"
    items = ", ".join(f"{n} = {json.dumps(t)}" for n, t in table.items())
    return f"converters = {{ {items} }}"


def converter_class(target: str, *, root: str | None) -> str | None:
    """The config class path (``package.module:Class.Config``) of the converter class
    ``target`` (``package.module.Class``), found without importing anything: the longest dotted
    prefix that is a module file of the project at ``root``, or of an installed package;
    ``None`` when none is."""
    import importlib.util

    from titan.schemas.fork_names import module_file

    parts = target.split(".")
    for end in range(len(parts) - 1, 0, -1):
        module, rest = ".".join(parts[:end]), parts[end:]
        file = module_file(module, root=root) if root is not None else None
        if file is not None:
            if rest[0] not in _top_level_names(file):
                return None
            break
    else:
        end = len(parts) - 1  # not in the project: the last name is the class
        module, rest = ".".join(parts[:end]), parts[end:]
        try:  # the top package only: finding it runs none of its code
            if importlib.util.find_spec(parts[0]) is None:
                return None
        except (ImportError, ValueError):
            return None
    qualname = ".".join(rest)
    return f"{module}:{qualname if qualname.endswith('.Config') else qualname + '.Config'}"


def _top_level_names(file: str) -> set[str]:
    """The names a module file binds at its top level (classes, functions, imports, assignments)."""
    import ast

    try:
        with open(file, encoding="utf-8") as handle:
            tree = ast.parse(handle.read(), filename=file)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return set()
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).partition(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def resolved(draft: PlanDraft, *, name: str, target: str) -> None:
    """Drop the validator's findings that ``--fix-stale-names`` answered: the unknown name
    and the table it made inert (the stale-name warning says what happened instead)."""
    draft.plan.diagnostics = [
        d
        for d in draft.plan.diagnostics
        if not (d.code == "unknown-converter" and f'"{name}"' in d.message)
        and not (d.code == "inert-section" and d.path == target)
    ]


def converter_tables(draft: PlanDraft, *, enabled: list[str]) -> None:
    """The keys of the ``[quantize.*]`` tables: carried into their enabled converter, else inert."""
    for key in draft.leaves:
        found = homes_table.home(key)
        if found is None or found.kind != "converter" or draft.is_blocked(key):
            continue
        table = key.rpartition(".")[0]
        if table in enabled:
            draft.outcome(key, "carried", (f"model_converters.converters[{table}].{found.path}",))
            continue
        draft.outcome(key, "inert", note=f"converter {table} is not enabled")
    inert = sorted(
        {k.rpartition(".")[0] for k, o in draft.plan.outcomes.items() if o.status == "inert"}
    )
    for table in inert:
        draft.plan.todo(
            "model_converters",
            f"[{table}] was inert in v0.2.2 (its converter is not in model.converters) and is "
            "not carried; list the converter to enable it",
        )


def float8_tensor_parallel(draft: PlanDraft) -> None:
    """float8 with tensor parallel: the registry-era trainer also converts TP-sharded linears."""
    tp = draft.root.get("parallelism.tensor_parallel_degree")
    if isinstance(tp, int) and tp > 1:
        draft.report(
            "behaviour-change",
            "model.converters",
            "with tensor parallel, v0.2.2 never used the float8 tensor-parallel plan (its "
            'parallelize functions looked for "float8" in model.converters); the registry-era '
            "trainer does, so float8 now also applies inside the TP-sharded linears",
            "compare the losses of a short run with the v0.2.2 run's before relying on it",
        )


_FORK_NAMES: dict[str, str] = {}
"""Config class path of a fork's converter -> the name its project declares it by."""


def converter_name(cls: str) -> str:
    """The name ``model.converters`` gives the converter whose config class is ``cls``: titan's
    own (its ``[quantize.*]`` table), a fork's declared one, else the class path itself."""
    titan = {config: name for name, config in converter_classes().items()}
    return titan.get(cls) or _FORK_NAMES.get(cls) or cls


@functools.cache
def converter_classes() -> dict[str, str]:
    """Converter name (its ``[quantize.*]`` table) -> config class, from the homes table."""
    return {
        found.legacy.rpartition(".")[0]: found.config_class
        for found in homes_table.base_homes().values()
        if found.kind == "converter"
    }

"""Quantization converters of a legacy run for torchtitan 0.3.0's ``model_registry``.

Each ``[quantize.*]`` table that ``model.converters`` enabled is titan's converter config in the
plan; here it becomes 0.3.0's (float8 linears, MXFP8 linears, float8 and MXFP8 grouped experts),
with what 0.3.0 spells otherwise rewritten: module names are 0.3.0's (``lm_head``, fused
``wqkv``), and the MX skip-list becomes the include-list 0.3.0 reads, or is reported.
``builder`` is :class:`titan.migrate.targets.upstream._Upstream`.
"""

from __future__ import annotations

from typing import Any

from titan.migrate.plan.model_keys import FAMILY_ALIASES
from titan.migrate.targets import upstream_spec_030 as spec
from titan.migrate.targets.config_objects import Obj
from titan.migrate.targets.upstream_homes import split_flavor
from titan.schemas.diagnostics import Severity


def family_flavor(builder: Any) -> tuple[str, str]:
    """The 0.3.0 family and flavor of the model (converters are checked against it)."""
    call = builder.old.root.fields["model_spec"]
    family = FAMILY_ALIASES.get(call.family, call.family)
    return family, split_flavor(family, call.flavor)[0]


def convert_quantize_linear_float8(builder: Any, old: Obj, new: Obj, table: str) -> None:
    recipe = old.fields["recipe_name"]
    key = f"{table}.recipe_name"
    if recipe in ("rowwise", "rowwise_with_gw_hp"):
        new.fields["recipe_name"] = recipe
        builder.outcome(key, "carried", ("model_spec",))
    else:
        builder.gone(
            key,
            "float8 linears are rowwise only ('rowwise' or 'rowwise_with_gw_hp'); the "
            f"{'legacy default ' if recipe is None else ''}tensorwise recipe is gone, so "
            "the migrated run uses 'rowwise' (other numerics)",
            "model_spec",
            hint="compare a short run's losses before relying on it",
        )
    new.fields["emulate"] = old.fields["emulate"]
    builder.outcome(f"{table}.emulate", "carried", ("model_spec",))
    family, flavor = family_flavor(builder)
    skipped, unmatched = _translate_fqns(family, flavor, old.fields["filter_fqns"])
    new.fields["filter_fqns"] = skipped
    key = f"{table}.filter_fqns"
    if unmatched:
        builder.gone(
            key,
            f"{', '.join(repr(n) for n in unmatched)} names no linear of 0.3.0's "
            f"{family} {flavor!r} (it fuses the q/k/v projections and calls the output "
            "projection lm_head), so the migrated run converts linears the legacy run "
            "skipped",
            "model_spec",
            hint="list 0.3.0's module names in filter_fqns",
        )
    else:
        note = (
            f"as {skipped!r} in 0.3.0's module names"
            if skipped != old.fields["filter_fqns"]
            else ""
        )
        builder.outcome(key, "carried", ("model_spec",), note)
    for name in ("enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp"):
        if old.fields[name]:
            builder.gone(
                f"{table}.{name}",
                "an FSDP speed switch of the tensorwise recipe, which 0.3.0 does not have",
                "model_spec",
                numerics=False,
            )
        else:
            builder.outcome(f"{table}.{name}", "default", ())


def convert_quantize_linear_mx(builder: Any, old: Obj, new: Obj, table: str) -> None:
    skipped = old.fields["filter_fqns"]
    family, flavor = family_flavor(builder)
    inverted = _invert_fqns(family, flavor, skipped)
    key = f"{table}.filter_fqns"
    if inverted is None:
        _, unmatched = _translate_fqns(family, flavor, skipped)
        why = (
            f"{', '.join(repr(n) for n in unmatched)} names no linear of 0.3.0's {family} "
            f"{flavor!r} (it fuses the q/k/v projections into one wqkv and calls the output "
            "projection lm_head)"
            if unmatched
            else "no include-list converts exactly the linears this skip-list left"
        )
        builder.gone(
            key,
            f"0.3.0 lists the linears to convert, not those to skip, and {why}; the "
            "migrated run converts every linear",
            "model_spec",
            hint="write `fqns` (the modules to convert) on MXFP8LinearConverter.Config",
        )
    else:
        new.fields["fqns"] = inverted
        builder.outcome(key, "carried", ("model_spec",), f"inverted into fqns={inverted!r}")
    for name, default in (("mxfp8_dim1_cast_kernel_choice", "triton"), ("recipe_name", None)):
        value = old.fields[name]
        if name == "recipe_name" or value != default:
            builder.gone(
                f"{table}.{name}",
                "MXFP8 linears have no such choice in 0.3.0",
                "model_spec",
                hint="check that 0.3.0's MXFP8 recipe is the one the run needs",
            )


def convert_quantize_grouped_mm_float8(builder: Any, old: Obj, new: Obj, table: str) -> None:
    if old.fields["fqns"]:
        builder.gone(f"{table}.fqns", "every routed expert is converted", "model_spec")


def convert_quantize_grouped_mm_mx(builder: Any, old: Obj, new: Obj, table: str) -> None:
    recipe = old.fields["recipe_name"]
    key = f"{table}.recipe_name"
    if recipe == "mxfp8":
        new.fields["recipe_name"] = "mxfp8_rceil"
        builder.outcome(key, "carried", ("model_spec",), "'mxfp8' is 'mxfp8_rceil' in 0.3.0")
        builder.changed(
            key,
            "the grouped MX recipe 'mxfp8' is written as 0.3.0's 'mxfp8_rceil' (MXFP8 with "
            "round-up scales, the only one it offers)",
            "compare a short run's losses before relying on it",
            Severity.INFO,
        )
    if old.fields["fqns"]:
        builder.gone(f"{table}.fqns", "every routed expert is converted", "model_spec")


_MODULE_RENAMES = {"output": "lm_head"}
"""v0.2.2 module names that 0.3.0's models call otherwise (the output projection)."""


def _translate_fqns(family: str, flavor: str, names: list[str]) -> tuple[list[str], list[str]]:
    """A v0.2.2 list of module names in 0.3.0's names, and the entries that name no linear of
    0.3.0's model (q/k/v projections 0.3.0 fuses, a renamed module): (translated, unmatched).
    Without the model's list of linears every entry is taken as it is."""
    translated = [
        ".".join(_MODULE_RENAMES.get(part, part) for part in name.split(".")) for name in names
    ]
    linears = getattr(spec, "LINEAR_FQNS", {}).get(family, {}).get(flavor)
    if linears is None:
        return translated, []
    fused = any(fqn.endswith(".wqkv") for fqn in linears)
    unmatched = [
        name
        for name, new in zip(names, translated, strict=True)
        if not any(new in fqn for fqn in linears)
        or (fused and new.rpartition(".")[2] in _FUSED_PROJECTIONS)
    ]
    return translated, unmatched


_FUSED_PROJECTIONS = frozenset({"wq", "wk", "wv"})
"""v0.2.2's separate q/k/v projections, which 0.3.0 fuses into one ``wqkv`` where the model
does: naming one of them cannot name the same linears any more."""


def _invert_fqns(family: str, flavor: str, skipped: list[str]) -> list[str] | None:
    """The include-list (0.3.0 ``fqns``: a linear is converted when an entry is a substring of
    its name; empty converts all) that converts exactly the linears a v0.2.2 skip-list left
    (skipped when an entry is a substring of its name), or ``None`` when there is none."""
    linears = getattr(spec, "LINEAR_FQNS", {}).get(family, {}).get(flavor)
    if linears is None:  # no list of the model's linears to invert against
        return [] if not skipped else None
    skipped, unmatched = _translate_fqns(family, flavor, skipped)
    if unmatched:
        return None
    kept = [fqn for fqn in linears if not any(s in fqn for s in skipped)]
    if len(kept) == len(linears):
        return []
    if not kept:
        return None  # "convert nothing" is not a list 0.3.0 reads
    groups: dict[str, list[str]] = {}
    for fqn in linears:
        groups.setdefault(fqn.split(".")[0], []).append(fqn)
    include: list[str] = []
    for top, members in groups.items():
        if all(member in kept for member in members):
            include.append(top)
        else:
            include += [_relative(m) for m in members if m in kept]
    include = list(dict.fromkeys(include))
    converted = [fqn for fqn in linears if any(entry in fqn for entry in include)]
    return include if converted == kept else None


def _relative(fqn: str) -> str:
    """``layers.*.attention.wq`` -> ``attention.wq``: the part every layer's name shares."""
    head, star, rest = fqn.partition(".*.")
    return rest if star else fqn


CONVERTERS = {
    "quantize.linear.float8": convert_quantize_linear_float8,
    "quantize.linear.mx": convert_quantize_linear_mx,
    "quantize.grouped_mm.float8": convert_quantize_grouped_mm_float8,
    "quantize.grouped_mm.mx": convert_quantize_grouped_mm_mx,
}
"""Legacy converter table -> the function that fills its 0.3.0 converter config."""

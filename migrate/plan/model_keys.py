"""The model keys: ``model.name``/``model.flavor`` become a ``model_registry`` call, and the
deprecated ``model.tokenizer_path`` wins over ``model.hf_assets_path`` as it did in v0.2.2.
"""

from __future__ import annotations

from migrate.codegen import names
from migrate.plan import homes as homes_table
from migrate.plan.draft import PlanDraft
from migrate.plan.legacy_values import schema_default, show
from migrate.targets.config_objects import RegistryCall, UnsupportedModel, same
from schemas.diagnostics import Severity

TITAN_FAMILIES = names.FAMILIES
"""Model families titan has registries for (``titan.models.SUPPORTED_MODELS``; a test keeps
the two equal, this module cannot import titan)."""

FAMILY_ALIASES = {"llama3_ft": "llama3"}


def model(draft: PlanDraft) -> None:
    """``model.name`` and ``model.flavor``: titan's ``model_registry(flavor)``, the user's declared
    family, or an unsupported model recorded by name."""
    name = draft.leaves.get("model.name", schema_default(draft.schema, "model.name"))
    flavor = draft.leaves.get("model.flavor", schema_default(draft.schema, "model.flavor"))
    keys = [k for k in ("model.name", "model.flavor") if k in draft.leaves]
    if not isinstance(name, str) or not isinstance(flavor, str) or any(map(draft.is_blocked, keys)):
        return  # reported by the check
    family = FAMILY_ALIASES.get(name, name)
    from schemas import flavors

    if family in TITAN_FAMILIES and flavor in (flavors.flavor_names(family) or ()):
        draft.root.fields["model_spec"] = RegistryCall(family, flavor)
        for key in keys:
            draft.outcome(key, "structural", ("model_spec",))
        return
    declared = draft.model_registries.get(name)
    if declared is not None:  # the user's own family (or flavors titan does not ship)
        module, origin = declared
        draft.plan.diagnostics = [  # answered: the model is the user's declared family
            d
            for d in draft.plan.diagnostics
            if not (d.code in ("unknown-model", "unknown-flavor") and d.path in keys)
        ]
        draft.root.fields["model_spec"] = RegistryCall(name, flavor, module=module)
        for key in keys:
            draft.outcome(key, "structural", ("model_spec",), f"{module}.model_registry")
        draft.report(
            "custom-model",
            keys[0] if keys else "model.name",
            f"`{name}` flavor `{flavor}` comes from {module}.model_registry ({origin}); "
            "titan does not check its flavors or train it without that package",
            f"make sure {module} is importable where the registry runs (titan-train imports "
            "it by that name)",
            severity=Severity.INFO,
        )
        return
    why = (
        f"titan has no `{name}` model family"
        if family not in TITAN_FAMILIES
        else f"`{name}` has no flavor `{flavor}`"
    )
    draft.root.fields["model_spec"] = UnsupportedModel(name, flavor)
    for key in keys:
        draft.outcome(key, "structural", ("model_spec",), why)
    draft.report(
        "unsupported-model",
        keys[0] if keys else "model.name",
        f"{why}: the config records the model by name but titan cannot train it",
        f"declare the family: titan-migrate --model-registry {name}=PACKAGE.MODULE (or "
        "[tool.titan] model-registries in pyproject.toml); until then the generated config "
        "records it with titan.models.unsupported_model(name, flavor)",
    )
    draft.plan.todo("model_spec", f"{why}; choose a model_registry(...) titan can train")


def tokenizer_path(draft: PlanDraft) -> None:
    """v0.2.2 copied the deprecated ``model.tokenizer_path`` over ``hf_assets_path`` after
    loading, so the run read its tokenizer (and HF assets) from there, whatever
    ``model.hf_assets_path`` said."""
    key, other = "model.tokenizer_path", "model.hf_assets_path"
    value = draft.leaves.get(key)
    if key not in draft.leaves or draft.is_blocked(key) or not isinstance(value, str):
        return
    found = homes_table.home(key, extension=draft.extension)
    draft.set(found.path, value)
    draft.outcome(key, "carried", (found.path,), found.note)
    if other in draft.leaves and not draft.is_blocked(other):
        if same(draft.leaves[other], value):
            draft.outcome(other, "carried", (found.path,))
            return
        draft.outcome(other, "inert", note="v0.2.2 replaced it with model.tokenizer_path")
        draft.report(
            "behaviour-change",
            other,
            f"`{other} = {show(draft.leaves[other])}` had no effect: v0.2.2 replaced it with "
            f"`{key} = {show(value)}`, so the migrated config reads its assets from there",
            "delete model.tokenizer_path and set model.hf_assets_path to the folder you mean",
            severity=Severity.WARNING,
        )

"""The model keys: ``model.name``/``model.flavor`` become a ``model_registry`` call, and the
deprecated ``model.tokenizer_path`` wins over ``model.hf_assets_path`` as it did in v0.2.2.

The fields a custom config module adds to ``[model]`` go into the model config itself: the call
carries an object of the generated subclass of the family's model config (``RegistryCall.model``,
written ``extend_model(model_registry("1B"), ForkExtLlama3ModelConfig, npu_fused=True)``), so a
fork's model code reads them where it reads the rest of its model's settings.
"""

from __future__ import annotations

from titan.migrate.codegen import names
from titan.migrate.plan import homes as homes_table
from titan.migrate.plan.draft import PlanDraft
from titan.migrate.plan.legacy_values import copy_value, schema_default, show
from titan.migrate.targets.config_objects import (
    Obj,
    RegistryCall,
    UnsupportedModel,
    default_object,
    outside_class,
    same,
)
from titan.schemas import flavors
from titan.schemas.diagnostics import Severity

TITAN_FAMILIES = names.FAMILIES
"""Model families titan has registries for (``titan.models.SUPPORTED_MODELS``, read from the
generated table: this module cannot import titan)."""

FAMILY_ALIASES = flavors.FAMILY_ALIASES
"""Legacy ``model.name`` values that build another family's flavors (``llama3_ft``)."""

MODEL_CONFIGS = names.MODEL_CONFIGS
"""Each family's model config class, which a custom module's new ``[model]`` fields extend."""


def model_config_class(name: str) -> str | None:
    """The model config class of the legacy ``model.name``'s family (``None``: titan cannot name
    it, as for a user's own family), known to the plan by its path."""
    found = MODEL_CONFIGS.get(FAMILY_ALIASES.get(name, name))
    return outside_class(found) if found is not None else None


def model(draft: PlanDraft) -> None:
    """``model.name`` and ``model.flavor``: titan's ``model_registry(flavor)``, the user's declared
    family, or an unsupported model recorded by name."""
    name = draft.leaves.get("model.name", schema_default(draft.schema, "model.name"))
    flavor = draft.leaves.get("model.flavor", schema_default(draft.schema, "model.flavor"))
    keys = [k for k in ("model.name", "model.flavor") if k in draft.leaves]
    if not isinstance(name, str) or not isinstance(flavor, str) or any(map(draft.is_blocked, keys)):
        no_model_fields(draft)
        return  # reported by the check
    family = FAMILY_ALIASES.get(name, name)
    if family in TITAN_FAMILIES and flavor in (flavors.flavor_names(family) or ()):
        draft.root.fields["model_spec"] = RegistryCall(family, flavor, model=model_fields(draft))
        for key in keys:
            draft.outcome(key, "structural", ("model_spec",))
        return
    declared = draft.model_registries.get(name)
    if declared is not None:  # the user's own family (or flavors titan does not ship)
        module, origin = declared
        # A family the command line names is unknown to the check; a declared one is not, and
        # an unknown-flavor finding then means the declaration itself excludes the flavor.
        answered = ("unknown-model", "unknown-flavor") if origin == "--model-registry" else ()
        draft.plan.diagnostics = [
            d for d in draft.plan.diagnostics if not (d.code in answered and d.path in keys)
        ]
        fields = model_fields(draft)
        draft.root.fields["model_spec"] = RegistryCall(name, flavor, module=module, model=fields)
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
    no_model_fields(draft)
    draft.root.fields["model_spec"] = UnsupportedModel(name, flavor)
    for key in keys:
        draft.outcome(key, "structural", ("model_spec",), why)
    fork = draft.fork
    module = "yourpkg.models." + "".join(c if c.isalnum() else "_" for c in name.lower())
    if fork.builds(name, flavor) or (family not in TITAN_FAMILIES and fork.knows_family(name)):
        # The project says its fork builds this model, so the check passed it; without the
        # package that builds it no run can be made from the config.
        draft.report(
            "unsupported-model",
            keys[0] if keys else "model.name",
            f"{why} and {fork.project} declares no model registry that builds it: the "
            "migrated config cannot build the model",
            f"name the module whose model_registry({flavor!r}) builds it {fork.where()}: "
            f"[tool.titan] {fork.registries_line(name, module)} (for one run: titan-migrate "
            f"--model-registry {name}=PACKAGE.MODULE)",
            severity=Severity.ERROR,
        )
    else:
        draft.report(
            "unsupported-model",
            keys[0] if keys else "model.name",
            f"{why}: the config records the model by name but titan cannot train it",
            fork.family_hint(name)  # a declared family misspelt: not one to declare
            or f"declare the family: titan-migrate --model-registry {name}=PACKAGE.MODULE (or "
            "[tool.titan] model-registries in pyproject.toml); until then the generated config "
            "records it with titan.models.unsupported_model(name, flavor)",
        )
    draft.plan.todo("model_spec", f"{why}; choose a model_registry(...) titan can train")


def model_fields(draft: PlanDraft) -> Obj | None:
    """The object of the generated model config subclass holding the file's values of the
    custom module's new ``[model]`` fields, or ``None`` when the module adds none."""
    if draft.model_class is None:
        return None
    obj = default_object(draft.model_class)
    for key in _model_field_keys(draft):
        *parents, field = key.split(".")[1:]
        node = obj
        for part in parents:
            node = node.fields[part]
        node.fields[field] = copy_value(draft.leaves[key])
    return obj


def no_model_fields(draft: PlanDraft) -> None:
    """No model is built: the custom module's ``[model]`` values have nowhere to go."""
    if draft.model_class is not None:
        for key in _model_field_keys(draft):
            draft.outcome(key, "dropped", note="no model is built to hold it")
            draft.report(
                "dropped-key",
                key,
                f"`{key} = {show(draft.leaves[key])}` is not carried: the migrated config "
                "builds no model to hold it",
                "give the file a model titan-migrate can build (see the model.name and "
                "model.flavor findings)",
                severity=Severity.ERROR,
            )


def _model_field_keys(draft: PlanDraft) -> list[str]:
    """The file's keys of the model config subclass (``custom_modules.custom_classes`` marked
    them carried into it), but those the check rejected."""
    return [
        key
        for key, outcome in draft.plan.outcomes.items()
        if outcome.status == "carried"
        and outcome.paths[:1] != ()
        and outcome.paths[0].startswith("model_spec.model.")
    ]


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

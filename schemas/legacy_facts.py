"""The cross-field rules' inputs from a legacy document: each fact's effective value (as written,
else the merged schema's default) and where the file writes it.

The registry form builds the same :class:`~titan.schemas.rule_facts.ConfigFacts` from a
``Trainer.Config`` (``titan.config.check``), so the rules cannot tell the two forms apart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from titan.schemas import rule_facts, rules
from titan.schemas.spec import MISSING, SectionSpec

if TYPE_CHECKING:
    from titan.schemas.project import Declaration


def _effective(
    document: dict, schema: SectionSpec, parts: tuple[str, ...], span_of
) -> rule_facts.Setting:
    """The value at ``parts``: written, else the schema default, with the span where written."""
    node: Any = document
    written = True
    for part in parts:
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            written = False
            break
    if not written:
        node = _default(schema, parts)
    return rule_facts.Setting(
        value=node, path=".".join(parts), span=span_of(parts) if written else None
    )


def _default(schema: SectionSpec, parts: tuple[str, ...]) -> Any:
    """The merged schema's default at ``parts``; ``None`` for a path it does not have or a key
    with no default."""
    section: Any = schema
    for part in parts:
        field = section.field(part) if isinstance(section, SectionSpec) else None
        if field is None:
            return None
        section = field.annotation
        default = field.default
    return None if default is MISSING else default


def legacy_facts(
    document: dict,
    schema: SectionSpec,
    span_of,
    ngpu: int | None,
    *,
    fork: Any = None,
    declaration: Declaration | None = None,
    era_day: str | None = None,
) -> rule_facts.ConfigFacts:
    """The rule inputs of a legacy document (defaults from the merged schema); ``fork`` is what
    its project declares (``titan.schemas.fork_names.ForkNames``), ``declaration`` the project itself
    (its datasets); ``era_day`` the day of the file's era, whose flavor (heads, layers, experts)
    the rules judge (``titan.schemas.flavor_eras``)."""
    from titan.schemas import flavors

    def get(path: str) -> rule_facts.Setting:
        return _effective(document, schema, tuple(path.split(".")), span_of)

    tables = []
    for name in rules.CONVERTER_NAMES:  # each names its table
        parts = tuple(name.split("."))
        node: Any = document
        for part in parts:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            tables.append(rule_facts.Setting(value=name, path=name, span=span_of(parts)))
    model_name, flavor_name = get("model.name"), get("model.flavor")
    found = (
        flavors.flavor(model_name.value, flavor_name.value)
        if isinstance(model_name.value, str) and isinstance(flavor_name.value, str)
        else None
    )
    if found is not None and era_day is not None:
        from titan.schemas.flavor_eras import facts_at

        found = facts_at(found, era_day)
    fault_tolerance = get("fault_tolerance.enable")
    return rule_facts.ConfigFacts(
        ngpu=ngpu,
        **{fact: get(path) for fact, path in rule_facts.SHARED_FACT_PATHS.items()},
        converters=get("model.converters"),
        quantize_tables=tuple(tables),
        early_step_in_backward=get("optimizer.early_step_in_backward"),
        fault_tolerance=fault_tolerance,
        validation_steps=get("validation.steps"),
        validation_enable=get("validation.enable"),
        validation_seq_len=get("validation.seq_len"),
        validation_batch_size=get("validation.local_batch_size"),
        float8_recipe=get("quantize.linear.float8.recipe_name"),
        float8_all_gather=get("quantize.linear.float8.enable_fsdp_float8_all_gather"),
        float8_precompute=get("quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp"),
        model_name=model_name,
        flavor=flavor_name,
        n_heads=found.n_heads if found else None,
        n_kv_heads=found.n_kv_heads if found else None,
        n_layers=found.n_layers if found else None,
        # a decoder (a flavor with blocks) sizes its rotary tables by training.seq_len
        max_seq_len=get("training.seq_len").value if found and found.n_layers else None,
        moe=found.moe if found else None,
        experts=(rule_facts.ExpertRouting.of_flavor(found.routing, at=flavor_name),)
        if found is not None and found.moe and found.routing is not None
        else (),
        fork=fork,
        dataset=get("training.dataset"),
        validation_dataset=get("validation.dataset")
        if get("validation.enable").value is True
        else None,
        datasets=_dataset_facts(model_name.value, get, declaration),
        asset_paths=tuple(
            get(path)
            for path in (
                "model.hf_assets_path",
                "model.tokenizer_path",
                "checkpoint.initial_load_path",
            )
        ),
    )


def _dataset_facts(model: Any, get, declaration: Declaration | None) -> Any:
    """The names v0.2.2's registry for ``model`` has, with the project's own; ``None`` for a
    model whose data loader titan does not know (a custom train spec may bring its own)."""
    from titan.schemas import dataset_names, flavors

    if not isinstance(model, str):
        return None  # a wrong-typed model.name has its own finding
    known = model in dataset_names.V022_DATASETS or model in rules.EXPERIMENT_MODELS
    if not known and not (isinstance(model, str) and flavors.flavor_names(model) is not None):
        return None
    registered, lowercased = dataset_names.v022_registry(model)
    custom = get("experimental.custom_import").value
    return dataset_names.DatasetFacts(
        registered=registered,
        lowercased=lowercased,
        declared=declaration.datasets if declaration is not None else (),
        project=declaration.shown if declaration is not None else None,
        custom_import=custom if isinstance(custom, str) and custom else None,
    )

"""The cross-field rules' inputs from a registry-made ``Trainer.Config``: each fact's value, read
from the config object, and where the registry function writes it.

A legacy TOML's facts come from ``titan.schemas.legacy_facts``; the rules in ``titan.schemas.rules``
read only these facts, so both forms are checked by the same rules.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from titan.schemas import rule_facts
from titan.schemas.diagnostics import Span

Locate = Callable[[str], Span | None]
"""Where a dotted config path is written (``None`` when it is a default)."""


def config_facts(config: Any, *, ngpu: int | None, locate: Locate) -> rule_facts.ConfigFacts:
    """The cross-field rules' view of a ``Trainer.Config`` (paths in registry spelling)."""
    from titan.components.optimizer import OptimizersInBackwardContainer
    from titan.components.quantization.float8 import Float8LinearConverter

    def get(path: str) -> rule_facts.Setting:
        node = config
        for part in path.split("."):
            node = getattr(node, part)
        written = getattr(locate, "written", None)
        return rule_facts.Setting(
            value=node,
            path=path,
            span=locate(path),
            written=None if written is None else written(path),
        )

    converters = list(config.model_converters.converters)
    # A converter config of a class outside titan is a fork's own converter: being a class, it
    # is registered, so only titan's converters are named to the rules (which check names).
    names = [
        type(c)._legacy_name or type(c).__qualname__
        for c in converters
        if type(c).__module__.partition(".")[0] == "titan"
    ]
    float8 = next((c for c in converters if isinstance(c, Float8LinearConverter.Config)), None)
    f8 = float8 if float8 is not None else Float8LinearConverter.Config()
    f8_path = "model_converters.converters"
    if float8 is not None:
        f8_path += f"[{converters.index(float8)}]"
    spec = config.model_spec
    family = spec.name if spec is not None else None
    flavor_name = spec.flavor if spec is not None else None
    from titan.schemas import flavors

    if family is not None and flavor_name not in (flavors.flavor_names(family) or (flavor_name,)):
        # titan's registries build only the flavors they ship, so this spec comes from the
        # project's own model registry (a fork's llama3 "1B"): the registry answers for it.
        flavor_name = None
    # The facts come from the config tree itself, so a flavor whose tree was edited (heads, MoE
    # layers) is checked as it will be built, not as the flavor's name says.
    heads = spec.model.attention_heads() if spec is not None else None
    fault_tolerance = getattr(config, "fault_tolerance", None)
    in_backward = isinstance(config.optimizer, OptimizersInBackwardContainer.Config)
    return rule_facts.ConfigFacts(
        ngpu=ngpu,
        **{fact: get(path) for fact, path in rule_facts.SHARED_FACT_PATHS.items()},
        converters=rule_facts.Setting(
            value=names, path="model_converters.converters", span=locate("model_converters")
        ),
        quantize_tables=(),  # a converter config exists only when it is enabled
        early_step_in_backward=rule_facts.Setting(
            value=in_backward, path="optimizer", span=locate("optimizer")
        ),
        fault_tolerance=rule_facts.Setting(
            value=fault_tolerance.enable if fault_tolerance is not None else False,
            path="fault_tolerance.enable",
            span=locate("fault_tolerance.enable"),
        ),
        validation_steps=get("validator.steps"),
        validation_enable=get("validator.enable"),
        validation_seq_len=get("validator.seq_len"),
        validation_batch_size=get("validator.local_batch_size"),
        float8_recipe=rule_facts.Setting(f8.recipe_name, f"{f8_path}.recipe_name", locate(f8_path)),
        float8_all_gather=rule_facts.Setting(
            f8.enable_fsdp_float8_all_gather,
            f"{f8_path}.enable_fsdp_float8_all_gather",
            locate(f8_path),
        ),
        float8_precompute=rule_facts.Setting(
            f8.precompute_float8_dynamic_scale_for_fsdp,
            f"{f8_path}.precompute_float8_dynamic_scale_for_fsdp",
            locate(f8_path),
        ),
        model_name=rule_facts.Setting(family, "model_spec.name", locate("model_spec")),
        flavor=rule_facts.Setting(flavor_name, "model_spec.flavor", locate("model_spec")),
        # A count below 1 is the range check's finding, not a head count to divide.
        n_heads=_positive(heads.n_heads) if heads is not None else None,
        n_kv_heads=_positive(heads.n_kv_heads) if heads is not None else None,
        # a family without blocks to count (or a project's own model) skips the pipeline rule
        n_layers=_positive(getattr(spec.model, "n_layers", None)) if spec is not None else None,
        max_seq_len=_max_seq_len(config),
        moe=spec.model.has_moe() if spec is not None else None,
        experts=_expert_routings(spec, locate),
        **_dataset_facts(config, get),
        asset_paths=(get("hf_assets_path"), get("checkpoint.initial_load_path")),
    )


def _max_seq_len(config: Any) -> int | None:
    """The model's max_seq_len once the run has updated its config from the trainer's (as
    ``titan.training.run_checks.model_config_of`` does), read from a copy; None for a model
    without one."""
    spec = config.model_spec
    if spec is None or not hasattr(spec.model, "max_seq_len"):
        return None
    model = copy.deepcopy(spec.model)
    try:
        model.update_from_config(trainer_config=config)
    except Exception:  # noqa: BLE001  (a project's model: the run reports it where it calls it)
        return None
    return _positive(getattr(model, "max_seq_len", None))


def _positive(count: Any) -> int | None:
    """A count the rules can divide by; ``None`` for anything else (the range check's finding)."""
    return count if isinstance(count, int) and count >= 1 else None


def _expert_routings(spec: Any, locate: Locate) -> tuple[rule_facts.ExpertRouting, ...]:
    """The routing of every mixture of experts in the model's tree, at its fields' paths, when
    some layer runs one (a deepseek_v3 whose layers are all dense builds none)."""
    from titan.models.common.moe import MoE

    if spec is None or spec.model.has_moe() is False:
        return ()
    return tuple(
        rule_facts.ExpertRouting(
            **{
                name: rule_facts.Setting(
                    getattr(node, name), f"{path}.{name}", locate(f"{path}.{name}")
                )
                for name in rule_facts.ExpertRouting.__slots__
            }
        )
        for node, path in config_nodes(spec.model, "model_spec.model")
        if isinstance(node, MoE.Config)
    )


def _dataset_facts(config: Any, get: Callable[[str], rule_facts.Setting]) -> dict[str, Any]:
    """The datasets of titan's text loader, checked against its registry (the same rule as a
    TOML's ``training.dataset``); another loader brings its own names."""
    from titan.hf_datasets.text_datasets import DATASETS, HuggingFaceTextDataLoader
    from titan.schemas import flavors
    from titan.schemas.dataset_names import DatasetFacts

    text = HuggingFaceTextDataLoader.Config
    spec = getattr(config, "model_spec", None)
    if not isinstance(config.dataloader, text) or spec is None:
        return {}
    if flavors.flavor_names(spec.name) is None:
        return {}  # a model titan cannot train (unsupported_model): its run never loads data
    validator = getattr(config, "validator", None)
    checked = (
        validator is not None
        and getattr(validator, "enable", False) is True
        and isinstance(getattr(validator, "dataloader", None), text)
    )
    return {
        "dataset": get("dataloader.dataset"),
        "validation_dataset": get("validator.dataloader.dataset") if checked else None,
        "datasets": DatasetFacts(registered=tuple(DATASETS)),
    }


def config_nodes(node: Any, path: str) -> Iterator[tuple[Any, str]]:
    """Every config object in the tree under ``node`` (list items too), with its path."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        yield node, path
        for field in dataclasses.fields(node):
            yield from config_nodes(
                getattr(node, field.name), f"{path}.{field.name}" if path else field.name
            )
    elif isinstance(node, list | tuple):
        for index, item in enumerate(node):
            yield from config_nodes(item, f"{path}[{index}]")

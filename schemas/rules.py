"""Cross-field rules, written once for both config forms.

Each rule is a named function over :class:`ConfigFacts`, a small neutral view of a config that both
sides can build: the TOML validator from a legacy document (paths like
``parallelism.tensor_parallel_degree``, with spans), the registry validator from a
``Trainer.Config`` (paths in its own words). A rule never knows which form it is looking at.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from titan.schemas.converter_eras import STALE_NAME_ERAS
from titan.schemas.diagnostics import Diagnostic, Severity
from titan.schemas.expert_rules import expert_parallel, moe_routing
from titan.schemas.layout_rules import (
    activation_checkpointing,
    async_tensor_parallel,
    context_parallel_options,
    cpu_offload,
    global_batch,
    parallel_degrees,
    replication_layout,
    sequence_length,
    tensor_parallel_heads,
    validation_sequence_length,
    world_size,
)
from titan.schemas.moved_keys import STALE_CONVERTER_NAMES  # re-exported: one table, read here
from titan.schemas.pipeline_rules import pipeline_layout_rule
from titan.schemas.rule_facts import ConfigFacts
from titan.schemas.rule_helpers import OPTIMIZER_NAMES, blame, diag, ints

CONVERTER_NAMES = (
    "quantize.linear.float8",
    "quantize.grouped_mm.float8",
    "quantize.linear.mx",
    "quantize.grouped_mm.mx",
)
"""Converter names registered at v0.2.2; the last component is the quantization family."""


def checkpoint_keep(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """keep_latest_k is 0 (keep all) or at least 2; torchtitan refuses 1 (negative values are
    refused by the range check)."""
    k = facts.keep_latest_k
    if ints(k) and k.value == 1:
        yield diag(
            "keep-latest-k",
            k,
            f"keep_latest_k = {k.value} is not allowed",
            "use 0 to keep every checkpoint, or 2 or more",
        )


def hf_model_only(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """Hugging Face loads and saves carry model weights only."""
    if facts.initial_load_in_hf.value is True and facts.initial_load_model_only.value is False:
        yield diag(
            "hf-model-only",
            facts.initial_load_in_hf,
            "an initial load in HF format restores the model only, but initial_load_model_only is false",
            "set initial_load_model_only = true, or load a DCP checkpoint instead",
        )
    if facts.last_save_in_hf.value is True and facts.last_save_model_only.value is False:
        yield diag(
            "hf-model-only",
            facts.last_save_in_hf,
            "a last save in HF format holds the model only, but last_save_model_only is false",
            "set last_save_model_only = true, or keep the last save in DCP format",
        )
    if (
        facts.initial_load_in_hf_quantized.value is True
        and facts.initial_load_in_hf.value is not True
    ):
        yield diag(
            "hf-model-only",
            facts.initial_load_in_hf_quantized,
            "a quantized HF initial load needs initial_load_in_hf",
            "set initial_load_in_hf = true too, or turn initial_load_in_hf_quantized off",
        )


def initial_load_disabled(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """An initial load with checkpointing off: torchtitan v0.2.2 (and titan-train) read
    ``initial_load_path`` only when checkpointing is on, so the run silently starts from random
    weights; a warning, since v0.2.2 accepted the config."""
    enable, path = facts.checkpoint_enable, facts.initial_load_path
    if enable is None or path is None or enable.value is not False:
        return
    hf = facts.initial_load_in_hf
    if not (isinstance(path.value, str) and path.value) and hf.value is not True:
        return
    source = f"`{path.value}`" if isinstance(path.value, str) and path.value else "hf_assets_path"
    what = "Hugging Face weights" if hf.value is True else "initial checkpoint"
    yield diag(
        "initial-load-disabled",
        blame(path, hf),
        f"the {what} in {source} are NOT loaded: checkpoint.enable is false, and the initial "
        "load only happens with checkpointing on, so the run starts from random weights",
        "turn checkpointing on (`--checkpoint.enable`, or `enable = true` under [checkpoint]) "
        "to start from these weights, or remove the initial-load settings",
        severity=Severity.WARNING,
    )


HUB = "hf://"
"""The prefix of a Hugging Face Hub path, which Forge's config parser downloads when the app
starts (``forge.util.config.resolve_hf_hub_paths``, d55de5b8, 2025-09-18)."""


def hub_paths(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """A folder written as a Hugging Face Hub path: Forge resolves it to a download, but
    torchtitan and titan-train read local folders only, so the run would not find it."""
    for setting in facts.asset_paths:
        value = setting.value
        if not (isinstance(value, str) and value.startswith(HUB)):
            continue
        repo = value.removeprefix(HUB) or "ORG/NAME"
        yield diag(
            "hub-path",
            setting,
            f"`{setting.path}` is the Hugging Face Hub path `{value}`: Forge downloads it when "
            "the app starts, but titan-train reads a local folder there and has no resolver "
            "for hf:// paths, so the run would not find it",
            f"download it (`huggingface-cli download {repo} --local-dir DIR`) and write DIR "
            "for titan-train; Forge itself reads the hf:// path as it is",
            severity=Severity.WARNING,
        )


def converters(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """Converter names are registered ones, of one quantization family, and their tables are used."""
    if not isinstance(facts.converters.value, list):
        return  # wrong type: reported by the schema check
    from titan.schemas.fork_names import NO_FORK

    names, fork = facts.converters.value, facts.fork or NO_FORK
    valid = [n for n in names if n in CONVERTER_NAMES]
    for name in names:
        if not isinstance(name, str) or name in CONVERTER_NAMES or name in fork.converter_names():
            continue
        yield diag(
            "unknown-converter",
            facts.converters,
            f'converter `"{name}"` is not registered; the trainer would fail with KeyError',
            fork.converter_hint(
                name, _converter_hint(name, names), stale=name in STALE_CONVERTER_NAMES
            ),
        )
    families = {n.rsplit(".", 1)[-1] for n in valid}
    if len(families) > 1:
        keep = " or ".join(
            f"`converters = {_names([n for n in valid if n.endswith('.' + family)])}`"
            for family in sorted(families)
        )
        yield diag(
            "converter-families",
            facts.converters,
            "float8 and mx converters cannot be combined",
            f"keep the converters of one quantization family: {keep}",
        )
    for table in facts.quantize_tables:
        if table.value not in names:
            listed = [STALE_CONVERTER_NAMES.get(n, n) for n in names if isinstance(n, str)]
            enabled = _names([n for n in listed if n in CONVERTER_NAMES] + [table.value])
            hint = f"enable it with `model.converters = {enabled}`, or delete the table"
            if table.value in listed:
                hint = f"`model.converters` names it by an old name: set `model.converters = {enabled}`"
            yield diag(
                "inert-section",
                table,
                f"`[{table.path}]` has no effect: converter `{table.value}` is not in model.converters",
                hint,
                severity=Severity.WARNING,
            )


def _names(names: list[str]) -> str:
    """A list of converter names as TOML writes it, each once."""
    return "[" + ", ".join(f'"{n}"' for n in dict.fromkeys(names)) + "]"


def _converter_hint(name: str, names: list) -> str:
    """For an unregistered converter name: the list to write, when one would be accepted."""
    if name in STALE_CONVERTER_NAMES:
        new = STALE_CONVERTER_NAMES[name]
        why = f'"{name}" was {STALE_NAME_ERAS[name].era}; v0.2.2 registers "{new}"'
        fixed = [STALE_CONVERTER_NAMES.get(n, n) for n in names if isinstance(n, str)]
        families = {n.rsplit(".", 1)[-1] for n in fixed}
        if all(n in CONVERTER_NAMES for n in fixed) and len(families) == 1:
            return f"use `converters = {_names(fixed)}`: {why} (titan-validate --fix rewrites it)"
        return why
    from titan.schemas.misspelling import closest_one  # a misspelling only: not `float8_qat`

    meant = closest_one(name, CONVERTER_NAMES)
    if meant is not None:
        return f'did you mean `"{meant}"`?'
    return "registered converters: " + ", ".join(f'"{n}"' for n in CONVERTER_NAMES)


def float8_options(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """A float8 recipe cannot be combined with the float8 FSDP all-gather."""
    names = facts.converters.value if isinstance(facts.converters.value, list) else []
    if "quantize.linear.float8" not in names:
        return
    if (
        facts.float8_recipe.value in ("rowwise", "rowwise_with_gw_hp")
        and facts.float8_all_gather.value is True
    ):
        yield diag(
            "float8-options",
            facts.float8_recipe,
            f"recipe `{facts.float8_recipe.value}` does not support enable_fsdp_float8_all_gather (tensorwise only)",
            'use recipe "tensorwise", or turn enable_fsdp_float8_all_gather off',
        )
    if facts.float8_precompute.value is True and facts.float8_all_gather.value is not True:
        yield diag(
            "float8-options",
            facts.float8_precompute,
            "precompute_float8_dynamic_scale_for_fsdp has no effect without enable_fsdp_float8_all_gather",
            "turn enable_fsdp_float8_all_gather on, or precompute_float8_dynamic_scale_for_fsdp off",
            severity=Severity.WARNING,
        )


def optimizer_name(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """The optimizer is one titan-train builds (Adam or AdamW): the trainer refuses any other
    name when it builds the optimizer, after the model."""
    name = facts.optimizer_name
    if name is None or not isinstance(name.value, str) or name.value in OPTIMIZER_NAMES:
        return
    known = " or ".join(OPTIMIZER_NAMES)
    meant = next((n for n in OPTIMIZER_NAMES if n.lower() == name.value.strip().lower()), None)
    hint = (
        f"did you mean `{meant}`? the name is case-sensitive"
        if meant is not None
        else f"use {known}; another optimizer needs a trainer that builds it"
    )
    yield diag(
        "unknown-optimizer",
        name,
        f"optimizer {name.value!r} is not one titan-train builds: it builds {known} "
        "(torch.optim), and refuses any other name when the run starts",
        hint,
    )


def optimizer_in_backward(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """Stepping the optimizer inside backward does not work with EP, PP or fault tolerance."""
    if facts.early_step_in_backward.value is not True:
        return
    for setting, what in ((facts.ep, "expert parallel"), (facts.pp, "pipeline parallel")):
        if ints(setting) and setting.value > 1:
            yield diag(
                "optimizer-in-backward",
                facts.early_step_in_backward,
                f"early_step_in_backward is not supported with {what} (degree {setting.value})",
                f"turn early_step_in_backward off, or run without {what}",
            )
    if facts.fault_tolerance.value is True:
        yield diag(
            "optimizer-in-backward",
            facts.early_step_in_backward,
            "early_step_in_backward is not supported with fault tolerance",
            "turn early_step_in_backward off, or run without fault tolerance",
        )


def value_constraints(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """Checks v0.2.2 itself made while building the config (``__post_init__``)."""
    if facts.cp_load_balancer.value == "":
        yield diag(
            "invalid-value",
            facts.cp_load_balancer,
            "context_parallel_load_balancer must not be empty",
            'use "headtail", "ptrr", or leave the key out',
        )
    steps = facts.validation_steps
    if ints(steps) and steps.value == 0:  # below -1 is refused by the range check
        yield diag(
            "invalid-value",
            steps,
            f"validation steps {steps.value} must be positive or -1 (the whole set)",
            "use -1 to validate on the whole set, or a positive number of steps",
        )


EXPERIMENT_MODELS = (
    "simple_fsdp.llama3",
    "simple_fsdp.deepseek_v3",
    "vlm",
    "compiler_toolkit.deepseek_v3",
    "compiler_toolkit.llama3",
    "transformers_modeling_backend",
    "autoparallel.llama3",
    "autoparallel.deepseek_v3",
    "autoparallel.local_map_deepseek_v3",
)
"""Train specs of torchtitan's experiments at v0.2.2 (their flavors are not checked)."""


def model_and_flavor(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """The model is a known train spec and the flavor one of its flavors."""
    from titan.schemas import flavors, model_names
    from titan.schemas.fork_names import NO_FORK

    name, flavor = facts.model_name.value, facts.flavor.value
    if not isinstance(name, str) or not isinstance(flavor, str) or name in EXPERIMENT_MODELS:
        return
    names, fork = flavors.flavor_names(name), facts.fork or NO_FORK
    if (names is not None and flavor in names) or fork.builds(name, flavor):
        return
    if names is None and not fork.knows_family(name):
        yield diag(
            "unknown-model",
            facts.model_name,
            f"model `{name}` is not a torchtitan v0.2.2 train spec; it must be registered by "
            "custom code (experimental.custom_import)",
            fork.family_hint(name)  # a declared family misspelt: not one to declare
            or model_names.model_hint(
                name,
                flavor if facts.flavor.written else None,
                experiments=EXPERIMENT_MODELS,
                declared=fork.registries_line(name, "yourpkg.models") if fork.registries else None,
            ),
            severity=Severity.WARNING,
        )
    else:
        yield diag(
            "unknown-flavor",
            blame(facts.flavor, facts.model_name),
            f"`{name}` has no flavor `{flavor}`",
            fork.flavor_hint(name, flavor, names or ()),
        )


def dataset_names(facts: ConfigFacts) -> Iterator[Diagnostic]:
    """The datasets are names the run's registry has (or the project declares): torchtitan looks
    them up only when the run starts, after every other check passed."""
    known = facts.datasets
    if known is None:
        return
    for setting in (facts.dataset, facts.validation_dataset):
        if setting is None or not setting.written or not isinstance(setting.value, str):
            continue  # a default is the registry's own name, or the model's loader picks one
        if known.knows(setting.value):
            continue
        severity, unless = Severity.ERROR, ""
        if known.custom_import:
            # the imported module runs before the loader and may add to its registry
            severity = Severity.WARNING
            unless = f" unless `{known.custom_import}` (experimental.custom_import) registers it"
        yield diag(
            "invalid-value",
            setting,
            f'dataset "{setting.value}" is not registered; the run would fail when it starts'
            + unless,
            known.hint(setting.value),
            severity=severity,
        )


RULES: tuple[Callable[[ConfigFacts], Iterator[Diagnostic]], ...] = (
    model_and_flavor,
    dataset_names,
    parallel_degrees,
    world_size,
    expert_parallel,
    moe_routing,
    global_batch,
    sequence_length,
    validation_sequence_length,
    tensor_parallel_heads,
    pipeline_layout_rule,
    checkpoint_keep,
    hf_model_only,
    initial_load_disabled,
    hub_paths,
    converters,
    float8_options,
    optimizer_name,
    optimizer_in_backward,
    activation_checkpointing,
    async_tensor_parallel,
    replication_layout,
    cpu_offload,
    context_parallel_options,
    value_constraints,
)
"""Every cross-field rule, in the order their findings are reported."""


def check(facts: ConfigFacts) -> list[Diagnostic]:
    """Run every rule."""
    return [diagnostic for rule in RULES for diagnostic in rule(facts)]

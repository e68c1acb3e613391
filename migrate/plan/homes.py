"""Where every legacy TOML key lives in titan's registry-era config: the migration's data table.

One :class:`Home` per legacy leaf key (the 149 of v0.2.2 and those of the built-in custom config
modules). Most keys keep their name inside a section that is now a config object, so whole
sections are mapped by :data:`SECTION_HOMES`; the keys that move, change class or have no place
are listed one by one in :data:`KEY_HOMES`. Targets are written as strings (``"validator.freq"``,
``"titan.components.quantization.float8:Float8LinearConverter.Config"``) because ``migrate`` must
not import ``titan``; ``tests/test_homes.py`` resolves every one against the real classes and
checks the defaults.

Source of the mapping: ``reference/new_system.md`` section 4, extended where titan keeps a home for
a value upstream dropped (validation batch size and sequence length, the job description).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from typing import Any, Literal

from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.spec import SectionSpec

HomeKind = Literal["same", "moved", "converter", "structural", "dropped"]
"""How a legacy key is carried:

- ``same``: same field name, type and default, inside the section's new config object;
- ``moved``: a field of another section or a differently named one, same meaning;
- ``converter``: a field of a converter config in ``model_converters.converters`` (only when the
  converter is listed in ``model.converters``);
- ``structural``: the value decides a class or an object rather than a field (the note says how);
- ``dropped``: titan has no place for it (the note says why; the migrator reports it).
"""

TRAINER = "titan.trainer:Trainer.Config"
"""The config class a registry function returns unless a key needs a trainer subclass."""

SAME: Any = object()
"""Marks a home whose default equals the legacy default."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Home:
    """Where one legacy key's value goes."""

    legacy: str
    """Dotted legacy key, e.g. ``validation.freq``."""
    kind: HomeKind
    """How the value is carried."""
    path: str | None
    """Attribute path from the trainer config (``validator.freq``), or for ``converter`` homes
    the field of the converter config; ``None`` for ``dropped``."""
    trainer: str = TRAINER
    """The trainer config class that has ``path`` (a subclass for flux and fault tolerance)."""
    config_class: str | None = None
    """For ``converter`` homes: the converter config class (``module:Qualified.Name``)."""
    default: Any = SAME
    """The new default where it differs from the legacy one (then ``note`` says why)."""
    note: str = ""
    """What a reader of the migration report must know about this key."""
    extension: str | None = None
    """Short name of the custom config module that defines the key, for extension keys."""
    also: tuple[str, ...] = ()
    """Further paths that receive the same value (Flux keeps copies in its data loaders)."""


SECTION_HOMES: dict[str, str] = {
    "profiling": "profiling",
    "metrics": "metrics",
    "optimizer": "optimizer",
    "lr_scheduler": "lr_scheduler",
    "training": "training",
    "training.dataloader": "dataloader",
    "parallelism": "parallelism",
    "checkpoint": "checkpoint",
    "activation_checkpoint": "activation_checkpoint",
    "compile": "compile",
    "comm": "comm",
    "validation": "validator",
    "validation.dataloader": "validator.dataloader",
    "debug": "debug",
}
"""Legacy table -> attribute path of the config object that now holds its keys."""

_FT = "titan.experiments.ft.trainer:FaultTolerantTrainer.Config"
_FLUX = "titan.models.flux.trainer:FluxTrainer.Config"
_F8 = "titan.components.quantization.float8:"
_MX = "titan.components.quantization.mx:"


def _converter(legacy: str, config_class: str) -> Home:
    return Home(
        legacy=legacy,
        kind="converter",
        path=legacy.rsplit(".", 1)[1],
        config_class=config_class,
        note="carried only when its converter is listed in model.converters",
    )


def _dropped(legacy: str, note: str, *, extension: str | None = None) -> Home:
    return Home(legacy=legacy, kind="dropped", path=None, note=note, extension=extension)


_KEYS: tuple[Home, ...] = (
    # [job]
    Home(legacy="job.dump_folder", kind="moved", path="dump_folder"),
    Home(
        legacy="job.description",
        kind="moved",
        path="description",
        note="torchtitan dropped it; titan keeps it and the migrator also uses it as docstring",
    ),
    Home(legacy="job.print_config", kind="moved", path="debug.print_config"),
    Home(legacy="job.save_config_file", kind="moved", path="debug.save_config_file"),
    _dropped(
        "job.config_file",
        "a TOML path is replaced by the registry function (--module M --config NAME)",
    ),
    Home(
        legacy="job.custom_config_module",
        kind="structural",
        path=None,
        note="its sections become a Trainer.Config subclass that the registry function returns",
    ),
    # [model]
    Home(
        legacy="model.name",
        kind="structural",
        path="model_spec.name",
        default=None,
        note="the family: model_spec = <family>.model_registry(flavor); llama3_ft becomes llama3 "
        "with FaultTolerantTrainer.Config",
    ),
    Home(
        legacy="model.flavor",
        kind="structural",
        path="model_spec.flavor",
        default=None,
        note="the argument of model_registry(flavor)",
    ),
    Home(legacy="model.hf_assets_path", kind="moved", path="hf_assets_path"),
    Home(
        legacy="model.tokenizer_path",
        kind="structural",
        path="hf_assets_path",
        default="./tests/assets/tokenizer",
        note="deprecated in v0.2.2, which copied it into hf_assets_path; the migrator does too",
    ),
    Home(
        legacy="model.converters",
        kind="structural",
        path="model_converters.converters",
        note="each name becomes its converter config, in the same order",
    ),
    Home(
        legacy="model.print_after_conversion",
        kind="moved",
        path="model_converters.print_after_conversion",
    ),
    # [optimizer]
    Home(
        legacy="optimizer.early_step_in_backward",
        kind="structural",
        path="optimizer",
        default="titan.components.optimizer:OptimizersContainer.Config",
        note="true selects OptimizersInBackwardContainer.Config, with the same fields",
    ),
    # [training]
    Home(
        legacy="training.dataset",
        kind="moved",
        path="dataloader.dataset",
        note="the dataset belongs to the data loader config (HuggingFaceTextDataLoader)",
    ),
    Home(legacy="training.dataset_path", kind="moved", path="dataloader.dataset_path"),
    # [validation]
    Home(
        legacy="validation.dataset",
        kind="moved",
        path="validator.dataloader.dataset",
        note="the validation data loader is finite; whether it repeats follows validator.steps",
    ),
    Home(legacy="validation.dataset_path", kind="moved", path="validator.dataloader.dataset_path"),
    Home(
        legacy="validation.local_batch_size",
        kind="moved",
        path="validator.local_batch_size",
        default=None,
        note="None follows training.local_batch_size; the legacy default 8 was independent",
    ),
    Home(
        legacy="validation.seq_len",
        kind="moved",
        path="validator.seq_len",
        default=None,
        note="None follows training.seq_len; the legacy default 2048 was independent",
    ),
    # [quantize.*]: fields of the converter configs.
    *(
        _converter(f"quantize.linear.float8.{name}", _F8 + "Float8LinearConverter.Config")
        for name in (
            "enable_fsdp_float8_all_gather",
            "precompute_float8_dynamic_scale_for_fsdp",
            "recipe_name",
            "filter_fqns",
            "emulate",
        )
    ),
    *(
        _converter(f"quantize.linear.mx.{name}", _MX + "MXLinearConverter.Config")
        for name in ("mxfp8_dim1_cast_kernel_choice", "recipe_name", "filter_fqns")
    ),
    _converter("quantize.grouped_mm.float8.fqns", _F8 + "Float8GroupedMMConverter.Config"),
    *(
        _converter(f"quantize.grouped_mm.mx.{name}", _MX + "MXGroupedMMConverter.Config")
        for name in ("recipe_name", "fqns")
    ),
    # [memory_estimation], [experimental]
    _dropped("memory_estimation.enable", "titan has no memory estimator (upstream deleted it)"),
    _dropped("memory_estimation.disable_fake_mode", "titan has no memory estimator"),
    _dropped(
        "experimental.custom_import",
        "a registry function imports what it needs; model families come from model_registry",
    ),
    _dropped("experimental.custom_args_module", "deprecated alias of job.custom_config_module"),
    # [fault_tolerance]: the fault-tolerant trainer's config.
    *(
        Home(
            legacy=f"fault_tolerance.{name}",
            kind="moved",
            path=f"fault_tolerance.{name}",
            trainer=_FT,
            note="fault tolerance needs FaultTolerantTrainer.Config",
        )
        for name in (
            "enable",
            "process_group",
            "process_group_timeout_ms",
            "replica_id",
            "group_size",
            "min_replica_size",
            "semi_sync_method",
        )
    ),
)

_EXTENSION_KEYS: tuple[Home, ...] = (
    *(
        Home(
            legacy=f"fault_tolerance.{name}",
            kind="moved",
            path=f"fault_tolerance.{name}",
            trainer=_FT,
            extension="ft",
        )
        for name in (
            "sync_steps",
            "should_quantize",
            "fragment_sync_delay",
            "fragment_update_alpha",
            "module_fqns_per_model_fragment",
            "num_fragments",
        )
    ),
    # Flux: training-level keys moved into the data loaders (the validator's has its own copy).
    Home(
        legacy="training.classifier_free_guidance_prob",
        kind="moved",
        path="dataloader.classifier_free_guidance_prob",
        trainer=_FLUX,
        extension="flux",
        note="validation always used 0.0, which the validator's data loader keeps",
    ),
    Home(
        legacy="training.img_size",
        kind="moved",
        path="dataloader.img_size",
        trainer=_FLUX,
        extension="flux",
        also=("validator.dataloader.img_size",),
    ),
    Home(
        legacy="training.test_mode",
        kind="moved",
        path="encoder.test_mode",
        trainer=_FLUX,
        extension="flux",
    ),
    *(
        Home(
            legacy=f"encoder.{name}",
            kind="same",
            path=f"encoder.{name}",
            trainer=_FLUX,
            extension="flux",
        )
        for name in ("t5_encoder", "clip_encoder", "autoencoder_path", "max_t5_encoding_len")
    ),
    *(
        Home(
            legacy=f"validation.{name}",
            kind="moved",
            path=f"validation.{name}",
            trainer=_FLUX,
            extension="flux",
        )
        for name in (
            "enable_classifier_free_guidance",
            "classifier_free_guidance_scale",
            "denoising_steps",
            "eval_freq",
        )
    ),
    *(
        Home(
            legacy=f"validation.{name}",
            kind="moved",
            path=f"validator.{name}",
            trainer=_FLUX,
            extension="flux",
        )
        for name in ("save_img_count", "save_img_folder", "all_timesteps")
    ),
    *(
        Home(
            legacy=f"inference.{name}",
            kind="same",
            path=f"inference.{name}",
            trainer=_FLUX,
            extension="flux",
        )
        for name in ("save_img_folder", "prompts_path", "local_batch_size", "img_size")
    ),
    # Experiments titan does not train; their keys are reported, never silently lost.
    *(
        _dropped(key, f"titan has no {module} trainer", extension=module)
        for key, module in (
            ("data.max_images_per_batch", "vlm"),
            ("data.max_patches_per_image", "vlm"),
            ("data.patch_size", "vlm"),
            ("data.spatial_merge_size", "vlm"),
            ("data.packing_buffer_size", "vlm"),
            ("hf_transformers.model", "transformers_modeling_backend"),
            ("compile.graph_passes", "simple_fsdp"),
            ("compile.joint_passes", "compiler_toolkit"),
            ("compile.passes", "compiler_toolkit"),
            ("experimental.comms_bucket_reorder_strategy", "autoparallel"),
            ("experimental.autop_force_bf16", "autoparallel"),
        )
    ),
)

KEY_HOMES: dict[str, Home] = {home.legacy: home for home in _KEYS}
"""Base-schema keys that do not simply keep their name inside their section's new object."""

EXTENSION_HOMES: dict[tuple[str, str], Home] = {
    (home.extension, home.legacy): home for home in _EXTENSION_KEYS if home.extension
}
"""(custom config module short name, key) -> home, for the built-in custom config modules."""


def _leaves(section: SectionSpec, prefix: str = "") -> Iterator[str]:
    for spec in section.fields:
        if isinstance(spec.annotation, SectionSpec):
            yield from _leaves(spec.annotation, f"{prefix}{spec.name}.")
        else:
            yield f"{prefix}{spec.name}"


@functools.lru_cache(maxsize=8192)
def home(legacy: str, *, extension: str | None = None) -> Home | None:
    """The home of a legacy key (looked up in ``extension``'s keys first), or ``None``; asked
    for every key many times per file, so answers are kept (a :class:`Home` is frozen)."""
    if extension is not None and (extension, legacy) in EXTENSION_HOMES:
        return EXTENSION_HOMES[extension, legacy]
    if legacy not in _base_keys():
        return None  # a key of some other custom module: the migrator reads its own section
    if legacy in KEY_HOMES:
        return KEY_HOMES[legacy]
    section, _, name = legacy.rpartition(".")
    if section in SECTION_HOMES:
        kind: HomeKind = "same" if SECTION_HOMES[section] == section else "moved"
        return Home(legacy=legacy, kind=kind, path=f"{SECTION_HOMES[section]}.{name}")
    return None


@functools.cache
def _base_keys() -> frozenset[str]:
    return frozenset(_leaves(LEGACY_SPEC))


def base_homes() -> dict[str, Home]:
    """The home of each of the 149 base-schema keys, in schema order (a new dict each call)."""
    return dict(_base_homes())


@functools.cache
def _base_homes() -> dict[str, Home]:
    homes = {}
    for legacy in _leaves(LEGACY_SPEC):
        found = home(legacy)
        if found is None:  # a schema key the table forgot: a bug in this module
            raise KeyError(f"no home for legacy key {legacy!r}")
        homes[legacy] = found
    return homes

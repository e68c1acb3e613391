"""Flux configs for torchtitan 0.3.0: its Flux trainer's data loaders, tokenizers, validator,
loss and inference settings, filled from the legacy Flux keys as v0.2.2's Flux run read them.

Called by :class:`titan.migrate.targets.upstream._Upstream` when the legacy run used the Flux trainer:
:func:`prepare` before the keys are carried (the config objects the base keys go into),
:func:`finish` after the model is placed (the Flux trainer's own keys, and what 0.3.0 needs
that no key sets).

v0.2.2 read one key in several places where 0.3.0 has one field per place, so a key can fill
several fields (:data:`PLACES`):

- ``training.img_size`` sized the training images, the validation images, the images sampled
  during validation and those of ``infer.py`` (which never read ``inference.img_size``);
- ``encoder.t5_encoder`` / ``clip_encoder`` named both the encoder and its tokenizer, which
  0.3.0 builds apart (``FluxTokenizerContainer.Config``); ``max_t5_encoding_len`` only padded
  the T5 tokens;
- ``training.test_mode`` made the encoders random and the tokenizers the test tokenizer read
  from ``model.hf_assets_path``;
- the ``validation`` sampling keys drove the images of validation *and* of ``infer.py``;
- validation always ran with prompt dropout 0.0 and stratified timesteps unless
  ``all_timesteps``, which 0.3.0's validator data loader says with its own fields.
"""

from __future__ import annotations

from typing import Any

from titan.migrate.targets.config_objects import default_object, same
from titan.schemas.diagnostics import Severity

_SAMPLING = ("validator.sampling", "inference.sampling")

PLACES: dict[str, tuple[str, ...]] = {
    "training.classifier_free_guidance_prob": ("dataloader.prompt_dropout_prob",),
    "training.img_size": (
        "dataloader.img_size",
        "validator.dataloader.img_size",
        "inference.img_size",
    ),
    "training.test_mode": ("tokenizer.test_mode", "encoder.random_init"),
    "encoder.t5_encoder": ("encoder.t5_encoder", "tokenizer.t5_tokenizer_path"),
    "encoder.clip_encoder": ("encoder.clip_encoder", "tokenizer.clip_tokenizer_path"),
    "encoder.autoencoder_path": ("encoder.autoencoder_path",),
    "encoder.max_t5_encoding_len": ("tokenizer.max_t5_encoding_len",),
    **{
        f"validation.{name}": tuple(f"{owner}.{name}" for owner in _SAMPLING)
        for name in (
            "enable_classifier_free_guidance",
            "classifier_free_guidance_scale",
            "denoising_steps",
        )
    },
    **{
        f"validation.{name}": (f"validator.{name}",)
        for name in ("save_img_count", "save_img_folder", "all_timesteps")
    },
    **{
        f"inference.{name}": (f"inference.{name}",)
        for name in ("save_img_folder", "prompts_path", "local_batch_size")
    },
}
"""Each Flux key -> every 0.3.0 field that must hold its value for the run to read it where
v0.2.2 did."""

NEVER_READ: dict[str, str] = {
    "validation.eval_freq": "v0.2.2's Flux trainer never read it (validation.freq sets when "
    "validation runs)",
    "inference.img_size": "v0.2.2's infer.py never read it: it sampled at training.img_size, "
    "which 0.3.0's inference.img_size gets",
}
"""Flux keys v0.2.2 defined but no Flux run read: inert, whatever their value."""

_TOKENIZER_PATHS = ("tokenizer.t5_tokenizer_path", "tokenizer.clip_tokenizer_path")


def prepare(builder: Any) -> None:
    """Flux's data loader and validator in place of the abstract and text ones, so the base
    keys (``training.dataset``, ``validation.dataset``, their ``dataloader`` tables) land in
    them."""
    from titan.migrate.targets.upstream_homes import cls

    root = builder.root
    loader = default_object(cls("FluxDataLoader.Config"))
    loader.shown = frozenset({"prompt_dropout_prob", "img_size"})
    root.fields["dataloader"] = loader
    validator = default_object(cls("FluxValidator.Config"))
    validator.fields["dataloader"].shown = frozenset(
        {"dataset", "prompt_dropout_prob", "img_size", "generate_timesteps"}
    )
    validator.shown = frozenset({"dataloader"})  # what validation reads, spelled out
    root.fields["validator"] = validator
    root.fields["tokenizer"].shown = frozenset(
        {"t5_tokenizer_path", "clip_tokenizer_path", "max_t5_encoding_len"}
    )


def finish(builder: Any) -> None:
    """The loss upstream's Flux registries set (0.3.0's default loss config is abstract), then
    every Flux key at its 0.3.0 fields, and what v0.2.2's Flux run did without a key."""
    from titan.migrate.targets.upstream_homes import cls

    builder.root.fields["loss"] = default_object(cls("MSELoss.Config"))
    values, homes = _legacy_values(builder)
    test_mode = bool(values.get("training.test_mode"))
    for key, paths in PLACES.items():
        if key not in values:
            continue
        if test_mode and key in ("encoder.t5_encoder", "encoder.clip_encoder"):
            paths = paths[:1]  # the test tokenizer reads hf_assets_path instead
        _place(builder, key, values[key], paths)
        comment = builder.old.comments.get(homes[key])
        if comment is not None:  # the TOML's comment goes with the value
            builder.plan.comments.setdefault(paths[0], comment)
    if test_mode:
        for path in _TOKENIZER_PATHS:
            builder.set(path, builder.root.fields["hf_assets_path"])
        builder.outcome(
            "training.test_mode",
            "carried",
            PLACES["training.test_mode"] + _TOKENIZER_PATHS,
            "the test tokenizers read hf_assets_path, as v0.2.2's did",
        )
    all_timesteps = bool(values.get("validation.all_timesteps"))
    builder.set("validator.dataloader.generate_timesteps", not all_timesteps)
    builder.set("validator.dataloader.prompt_dropout_prob", 0.0)
    for key, why in NEVER_READ.items():
        builder.outcome(key, "inert", (), why)
    _inference_size(builder, values)
    _empty_encoders(builder, values)
    _seq_len(builder)
    _validation_loss(builder)


def _legacy_values(builder: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """Each Flux key -> the value the legacy run used (written or default), read at its
    titan home in the titan plan; and each key -> that home."""
    from titan.migrate.plan.homes import EXTENSION_HOMES

    values: dict[str, Any] = {}
    homes: dict[str, str] = {}
    for (extension, key), home in EXTENSION_HOMES.items():
        if extension != "flux" or home.path is None:
            continue
        try:
            values[key] = builder.old.root.get(home.path)
        except (KeyError, AttributeError):
            continue  # a trainer config without the Flux sections
        homes[key] = home.path
    return values, homes


def _place(builder: Any, key: str, value: Any, paths: tuple[str, ...]) -> None:
    """``value`` at each of ``paths``; the key's outcome says whether any differs from 0.3.0's
    default there."""
    differs = False
    for path in paths:
        before = builder.root.get(path)
        if not builder.set(path, value):
            raise KeyError(f"torchtitan 0.3.0's Flux config has no {path}")
        differs = differs or not same(before, value)
    builder.outcome(key, "carried" if differs else "default", paths)


def _inference_size(builder: Any, values: dict[str, Any]) -> None:
    written = values.get("inference.img_size")
    used = values.get("training.img_size")
    if "inference.img_size" in builder.written and not same(written, used):
        builder.changed(
            "inference.img_size",
            f"`inference.img_size = {written!r}` was never read: v0.2.2's infer.py sampled "
            f"at training.img_size ({used!r}), which the migrated inference.img_size keeps",
            "set inference.img_size in the generated function if inference should use it",
        )


def _empty_encoders(builder: Any, values: dict[str, Any]) -> None:
    """0.3.0 reads an empty encoder name as the model registry's own encoder; v0.2.2 tried to
    load one named ``""`` and stopped."""
    for name in ("t5_encoder", "clip_encoder"):
        key = f"encoder.{name}"
        if values.get(key) == "":
            builder.gone(
                key,
                "0.3.0 reads an empty name as the encoder its model registry names, so the "
                "migrated run loads an encoder the legacy run could not",
                "encoder",
                hint="name the encoder in the TOML",
            )


def _seq_len(builder: Any) -> None:
    """0.3.0's Flux trainer sets training.seq_len itself (image patches plus T5 tokens);
    v0.2.2's read it only for a log line, so a written value says nothing to either."""
    from titan.migrate.targets.upstream_homes import cls

    default = default_object(cls("TrainingConfig")).fields["seq_len"]
    builder.set("training.seq_len", default)
    builder.outcome(
        "training.seq_len",
        "inert",
        (),
        "the Flux trainer computes it from img_size and max_t5_encoding_len",
    )


def _validation_loss(builder: Any) -> None:
    if not builder.value("validation.enable"):
        return
    builder.changed(
        "validation.enable",
        "0.3.0's Flux validator logs the validation loss per latent element (summed over the "
        "steps, divided by their element count); v0.2.2 logged the mean over steps of each "
        "batch's summed loss, so the logged values differ in scale",
        "nothing to do: compare validation losses with runs of the same torchtitan only",
        Severity.WARNING,
    )

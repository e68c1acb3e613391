"""The Flux image-text data loader.

Each data-parallel rank reads its share of a dataset's image-caption groups (group ``i`` belongs to
rank ``i % dp_world_size``; ``image_sources``), prepares each sample as torchtitan v0.2.2 did
(``image_samples``) and yields batches ``(inputs, labels)``::

    inputs = {"t5_tokens": LongTensor[B, max_t5_encoding_len], "clip_tokens": LongTensor[B, 77],
              "prompt": list[str], "timestep": FloatTensor[B]}   # timestep: generate_timesteps
    labels = FloatTensor[B, 3, img_size, img_size]               # the images, in [-1, 1]

A sample that cannot be used (a damaged image, a caption that is not UTF-8, an image below
``img_size``, a broken shard) is skipped, counted by reason and logged; ``skip_report()`` says how
many. The position is saved per rank (``{"dp_rank_<r>": bytes, "world_size": n}``, the layout of
the text loader), so a resumed run reads exactly the batches an uninterrupted one would have, and
every random choice comes from ``seed`` and the sample's place in the stream.

Importing this module imports neither torch, PIL nor transformers.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from titan.components.dataloader import ParallelAwareDataloader
from titan.components.loader_state import rank_key, rank_state, saved_position
from titan.config.configurable import NotBuildableError
from titan.models.flux.configs import Encoder
from titan.models.flux.image_sources import FluxDatasetError, Group, image_text_source

log = logging.getLogger(__name__)

STRATIFIED_TIMESTEPS = tuple((i + 0.5) / 8 for i in range(8))
"""The validation timesteps of the SD3 paper, given to a rank's samples in turn."""
WARNINGS_PER_REASON = 5
"""Skips logged one by one per reason and rank; later ones are only counted."""


def default_generated_root() -> Path:
    """Where titan keeps the image sets it draws when the run names no folder for them."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "titan" / "flux_data"


@dataclasses.dataclass
class FluxPosition:
    """Where one rank is in the dataset: the pass, the next group, the samples it yielded."""

    epoch: int = 0
    """Passes over the dataset completed."""
    next_group: int = 0
    """Index, in stream order, of the next group this rank reads."""
    yielded: int = 0
    """Samples this rank has yielded over every pass (it picks the next validation timestep)."""
    finished: bool = False
    """Whether a finite loader's pass has ended (the next iteration starts another)."""

    def to_bytes(self) -> bytes:
        """The position as JSON bytes, the form checkpoints store."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes, *, origin: str) -> FluxPosition:
        """The position saved as ``data``; ``FluxDatasetError`` naming ``origin`` if unusable."""
        try:
            fields = json.loads(bytes(data).decode())
            position = cls(**fields)
        except (ValueError, TypeError) as error:
            raise FluxDatasetError(
                f"the data-loader state of {origin} is unusable: {error}"
            ) from None
        for name in ("epoch", "next_group", "yielded"):
            value = getattr(position, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise FluxDatasetError(f"the data-loader state of {origin} has {name}={value!r}")
        return position


def loader_encoder(own: Encoder | None, *, run: Encoder | None, where: str) -> Encoder:
    """The encoder settings a loader tokenizes for: its own ``encoder`` when set, else the
    run's (``run``), else the defaults. A loader's own that differs from the run's is refused
    with the fields that differ: its tokens would not be those the run's encoders read."""
    if own is None or run is None:
        return own or run or Encoder()
    differ = [
        f"{item.name} ({getattr(own, item.name)!r} here, {getattr(run, item.name)!r} in the run's)"
        for item in dataclasses.fields(Encoder)
        if getattr(own, item.name) != getattr(run, item.name)
    ]
    if differ:
        raise ValueError(
            f"{where}.encoder differs from the run's encoder in {', '.join(differ)}; leave "
            f"{where}.encoder unset (it takes the run's encoder) or make the two the same"
        )
    return own


class FluxDataLoader(ParallelAwareDataloader):
    """Yields images with their T5 and CLIP tokens (the tokenizers come from ``encoder``).

    The trainer passes its ``hf_assets_path`` to ``build``; torchtitan copies it into this config
    instead, which lets the two drift apart.
    """

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(ParallelAwareDataloader.Config):
        """An image-text dataset from the registry."""

        dataset: str = "cc12m-test"
        """Dataset name from the dataset registry, e.g. cc12m-wds, cc12m-test, coco-validation."""
        infinite: bool = True
        """Start over when the dataset is exhausted instead of stopping."""
        classifier_free_guidance_prob: float = 0.0
        """Probability of dropping each text encoding independently, for classifier-free guidance."""
        img_size: int = 256
        """Width and height of the images."""
        generate_timesteps: bool = False
        """Attach stratified denoising timesteps to each sample (validation)."""
        encoder: Encoder | None = None
        """Text encoders whose tokenizers the loader uses; None (the default) takes the run's
        ``encoder``. Set, it must equal the run's: the tokens must be the encoders' own."""

    def __init__(
        self,
        *,
        config: Config,
        dp_world_size: int,
        dp_rank: int,
        local_batch_size: int,
        hf_assets_path: str | None = None,
        seed: int = 0,
        generated_data_dir: str | Path | None = None,
        encoder: Encoder | None = None,
        where: str = "dataloader",
        tokenizer: Any = None,
        seq_len: int | None = None,
    ) -> None:
        """``encoder`` is the run's (``FluxTrainer.Config.encoder``), which the loader's own
        ``encoder`` defaults to; ``where`` is the loader's place in the config, for messages.
        ``tokenizer`` and ``seq_len`` are the text loaders' arguments, unused here: Flux builds
        its own tokenizers and its samples have a fixed shape. ``generated_data_dir`` is where
        the drawn ``cc12m-test``/``coco-validation`` sets are kept (default: the user cache)."""
        from titan.models.flux.tokenizer import build_flux_tokenizers

        if config.num_workers > 0:
            # Worker processes would read ahead of what the trainer consumed, and their
            # positions could not be saved exactly.
            raise NotBuildableError(
                f"dataloader.num_workers={config.num_workers}: the Flux loader reads in the "
                "training process so that checkpoints resume it exactly; set num_workers = 0"
            )
        if not 0 <= dp_rank < dp_world_size:
            raise ValueError(f"dp_rank {dp_rank} is not a rank of {dp_world_size} dp ranks")
        checks = (("local_batch_size", local_batch_size, 1), ("img_size", config.img_size, 1))
        for name, value, least in checks:
            if value < least:
                raise ValueError(f"{name} must be at least {least}, not {value}")
        if not 0.0 <= config.classifier_free_guidance_prob <= 1.0:
            raise ValueError(
                "classifier_free_guidance_prob must lie in [0, 1], not "
                f"{config.classifier_free_guidance_prob}"
            )
        self.config = config
        self.dp_world_size, self.dp_rank = dp_world_size, dp_rank
        self.local_batch_size = local_batch_size
        self.seed = seed
        root = Path(generated_data_dir) if generated_data_dir else default_generated_root()
        self.source = image_text_source(
            config.dataset, dataset_path=config.dataset_path, generated_root=root
        )
        self.tokenizers = build_flux_tokenizers(
            loader_encoder(config.encoder, run=encoder, where=where), hf_assets_path=hf_assets_path
        )
        self._empty_tokens = (self.tokenizers.empty_t5(), self.tokenizers.empty_clip())
        self.position = FluxPosition()
        self.skipped: collections.Counter[str] = collections.Counter()
        self._samples: Iterator[Any] | None = None

    def __iter__(self) -> Iterator[tuple[dict[str, Any], Any]]:
        """Batches from the current position; a finite loader whose pass ended starts another."""
        import torch

        if self.position.finished:
            self._restart(
                FluxPosition(epoch=self.position.epoch + 1, yielded=self.position.yielded)
            )
        pin = self.config.pin_memory and torch.cuda.is_available()
        while True:
            samples = []
            while len(samples) < self.local_batch_size:
                sample = self._next_sample()
                if sample is None:
                    break
                samples.append(sample)
            if not samples:
                return
            inputs, labels = _collate(samples)
            if pin:
                labels = labels.pin_memory()
                inputs = {k: v.pin_memory() if hasattr(v, "pin_memory") else v
                          for k, v in inputs.items()}  # fmt: skip
            yield inputs, labels
            if len(samples) < self.local_batch_size:
                return

    def _restart(self, position: FluxPosition) -> None:
        """Read from ``position`` next, dropping the open stream."""
        self.position = position
        self._samples = None

    def _next_sample(self) -> tuple[Any, float | None] | None:
        """The next prepared sample of this rank (with its timestep), None at a finite end."""
        if self.position.finished:
            return None
        if self._samples is None:
            self._samples = self._read_samples()
        return next(self._samples, None)

    def _read_samples(self) -> Iterator[tuple[Any, float | None]]:
        """This rank's samples from the position on, pass after pass while ``infinite``."""
        from titan.models.flux.image_samples import SkippedSample, prepare_sample, sample_rng

        config = self.config
        while True:
            position = self.position
            from_start, produced, ordinal = position.next_group == 0, 0, -1
            for item in self.source.groups():
                if not isinstance(item, Group):
                    self._skip("unreadable_shard", f"{item.origin}: {item.reason}")
                    continue
                ordinal += 1
                if ordinal < position.next_group or ordinal % self.dp_world_size != self.dp_rank:
                    continue
                position.next_group = ordinal + 1
                rng = sample_rng(seed=self.seed, epoch=position.epoch, index=ordinal)
                try:
                    sample = prepare_sample(
                        item,
                        tokenizers=self.tokenizers,
                        empty_tokens=self._empty_tokens,
                        size=config.img_size,
                        dropout_prob=config.classifier_free_guidance_prob,
                        rng=rng,
                    )
                except SkippedSample as skipped:
                    self._skip(skipped.reason, skipped.detail)
                    continue
                timestep = None
                if config.generate_timesteps:
                    timestep = STRATIFIED_TIMESTEPS[position.yielded % len(STRATIFIED_TIMESTEPS)]
                position.yielded += 1
                produced += 1
                yield sample, timestep
            if from_start and produced == 0:
                raise FluxDatasetError(
                    f"{self.source.description} gave data-parallel rank {self.dp_rank} of "
                    f"{self.dp_world_size} no usable sample in a whole pass "
                    f"({ordinal + 1} samples in all); {self.skip_report()}"
                )
            if not config.infinite:
                position.finished = True
                if self.skipped:
                    log.warning("%s", self.skip_report())
                return
            log.warning("dataset %r is starting pass %d", config.dataset, position.epoch + 1)
            self.position = FluxPosition(epoch=position.epoch + 1, yielded=position.yielded)

    def _skip(self, reason: str, detail: str) -> None:
        """Count a skipped sample; log the first few of each reason."""
        from titan.models.flux.image_samples import SKIP_REASONS

        self.skipped[reason] += 1
        if self.skipped[reason] <= WARNINGS_PER_REASON:
            more = (
                " (further ones are only counted)"
                if self.skipped[reason] == WARNINGS_PER_REASON
                else ""
            )
            log.warning("skipped a sample: %s: %s%s", SKIP_REASONS[reason], detail, more)

    def skip_report(self) -> str:
        """How many samples this rank skipped and why, in one line."""
        from titan.models.flux.image_samples import SKIP_REASONS

        if not self.skipped:
            return f"data-parallel rank {self.dp_rank} skipped no samples"
        parts = [
            f"{count} ({SKIP_REASONS[reason]})" for reason, count in sorted(self.skipped.items())
        ]
        return (
            f"data-parallel rank {self.dp_rank} skipped {sum(self.skipped.values())} samples: "
            + ("; ".join(parts))
        )

    def state_dict(self) -> dict[str, Any]:
        """This rank's position under its own key, plus the dp world size it belongs to."""
        return rank_state(
            self.position.to_bytes(), dp_rank=self.dp_rank, dp_world_size=self.dp_world_size
        )

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from a saved position; an empty state (no saved loader) starts afresh."""
        position = saved_position(
            state_dict,
            dp_rank=self.dp_rank,
            dp_world_size=self.dp_world_size,
            error=FluxDatasetError,
        )
        if position is not None:
            origin = rank_key(self.dp_rank)
            self._restart(FluxPosition.from_bytes(position, origin=origin))


def _collate(samples: list[tuple[Any, float | None]]) -> tuple[dict[str, Any], Any]:
    """One batch: token tensors, prompts and (for validation) timesteps; images as labels."""
    import numpy
    import torch

    prepared = [sample for sample, _ in samples]
    inputs: dict[str, Any] = {
        "t5_tokens": torch.tensor([s.t5_tokens for s in prepared], dtype=torch.long),
        "clip_tokens": torch.tensor([s.clip_tokens for s in prepared], dtype=torch.long),
        "prompt": [s.prompt for s in prepared],
    }
    timesteps = [timestep for _, timestep in samples]
    if timesteps[0] is not None:
        inputs["timestep"] = torch.tensor(timesteps, dtype=torch.float32)
    # numpy stacks without torch's thread pool (see image_samples.preprocess_image).
    return inputs, torch.from_numpy(numpy.stack([s.image.numpy() for s in prepared]))

"""Flux validation: loss on held-out images plus sampled images saved to disk.

The loss is the flow-matching loss at torchtitan v0.2.2's eight stratified timesteps
(``(i + 0.5) / 8``): the loader attaches them round robin, or every sample is scored at all
eight (``all_timesteps``). The reported value is the mean squared error per latent element over
every validation batch of every data-parallel rank. Before scoring a batch, each rank draws
images for its first captions until ``save_img_count`` are written, as PNGs named
``image_rank<R>_step<S>_<I>.png`` in ``<dump_folder>/<save_img_folder>``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import field
from typing import Any

from titan.components.dataloader import BaseDataLoader
from titan.components.validate import Validator
from titan.models.flux.flux_datasets import FluxDataLoader

STRATIFIED = 8
"""v0.2.2's number of stratified validation timesteps."""
IMAGE_KEY = 7_919
"""Offset of the image noise's generator key from the loss batches' keys."""


def _validation_loader() -> FluxDataLoader.Config:
    return FluxDataLoader.Config(dataset="coco-validation", generate_timesteps=True, infinite=False)


class FluxValidator(Validator):
    """Validates a Flux model and saves the images it generates."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Validator.Config):
        """Flux validation loop and image output."""

        dataloader: BaseDataLoader.Config = field(default_factory=_validation_loader)
        """Data loader of the validation images; its guidance dropout is forced off."""
        all_timesteps: bool = False
        """Generate all stratified timesteps per sample instead of round robin."""
        # torchtitan's registry changed these two defaults (-1, "validation_images"); titan keeps
        # the legacy ones so that an unset legacy value still means the same thing.
        save_img_count: int = 1
        """How many validation images to generate and save; -1 means all samples."""
        save_img_folder: str = "img"
        """Directory for the images generated during validation."""

    def __init__(
        self,
        *,
        config: Config,
        dp_world_size: int,
        dp_rank: int,
        local_batch_size: int,
        hf_assets_path: str | None = None,
        seed: int = 0,
        loss_fn: Any = None,
        metrics: Any = None,
        device: Any = None,
        dp_mesh: Any = None,
        amp: Any = None,
        frozen: Any = None,
        rows: Any = None,
        trainer_config: Any = None,
        encoder: Any = None,
        **unused: Any,
    ) -> None:
        """``unused`` takes the text validators' arguments (tokenizer, sequence length, masks),
        which Flux has no use for. ``frozen`` (autoencoder and encoders), ``rows`` and
        ``trainer_config`` come from the Flux run; the pre-flight builds without them.
        ``encoder`` is the run's, which the loader's own ``encoder`` defaults to."""
        self.config = config
        loader = dataclasses.replace(
            config.dataloader, infinite=config.steps != -1, classifier_free_guidance_prob=0.0
        )
        self.loader_config = loader
        self.loader_args = {
            "dp_world_size": dp_world_size,
            "dp_rank": dp_rank,
            "local_batch_size": local_batch_size,
            "hf_assets_path": hf_assets_path,
            "seed": seed,
            "encoder": encoder,
            "where": "validator.dataloader",
        }
        self.tokenizers = loader.build(**self.loader_args).tokenizers  # a bad set fails now
        self.dp_rank, self.seed = dp_rank, seed
        self.loss_fn, self.metrics, self.device = loss_fn, metrics, device
        self.dp_mesh, self.amp = dp_mesh, amp
        self.frozen, self.rows = frozen, rows
        self.trainer_config = trainer_config
        self.forward_loss = None
        if trainer_config is not None:
            from titan.models.flux.images import check_sampling

            check_sampling(self.sampling(), where="validation")

    def sampling(self) -> Any:
        """The images' size, Euler steps and guidance (``validation`` and the loader)."""
        from titan.models.flux.images import Sampling

        validation = self.trainer_config.validation
        return Sampling(
            img_size=self.loader_config.img_size,
            denoising_steps=validation.denoising_steps,
            guidance=validation.enable_classifier_free_guidance,
            guidance_scale=validation.classifier_free_guidance_scale,
        )

    def validate(self, model_parts: list[Any], step: int) -> float:
        """The mean squared error per latent element over the validation batches (the same
        ones every time), after writing this step's images."""
        import torch

        from titan.distributed.reductions import dist_min
        from titan.models.flux.conditioning import flow_batch, step_generator

        model = model_parts[0]
        model.eval()
        batches = iter(self.loader_config.build(**self.loader_args))
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        elements, done, images_left = 0, 0, self.config.save_img_count
        with torch.no_grad():
            while self.config.steps == -1 or done < self.config.steps:
                batch = next(batches, None)
                # Sharded models run collectives in forward: every rank takes as many batches.
                have = torch.tensor(float(batch is not None))
                if dist_min(have, self.dp_mesh) == 0.0:
                    break
                assert batch is not None
                inputs, images = batch
                images_left = self._save_images(model, inputs["prompt"], step, images_left)
                timesteps = inputs.pop("timestep", None)
                if self.config.all_timesteps:
                    inputs, images, timesteps = _every_timestep(inputs, images)
                generator = step_generator(self.seed, step=step, micro=done)
                flow = flow_batch(
                    self.frozen,
                    inputs,
                    images,
                    rows=self.rows,
                    generator=generator,
                    timesteps=timesteps,
                )
                with self.amp():
                    pred = model(**flow.model_inputs())
                loss_sum += self.loss_fn(pred, flow.target).double()
                elements += flow.target.numel()
                done += 1
        model.train()
        batch = f"{self.loader_args['local_batch_size']} image(s)"
        return self.log_mean_loss(step, loss_sum, elements, batch=batch)

    def _save_images(self, model: Any, prompts: list[str], step: int, left: int) -> int:
        """Draw and write images for the first of ``prompts`` while ``left`` allows (-1: all);
        every rank draws as many (the fewest any rank has), as sharded forwards need. Returns
        how many are left to write."""
        import torch

        from titan.distributed.reductions import dist_min
        from titan.models.flux.conditioning import step_generator
        from titan.models.flux.images import generate_images, save_png

        wanted = len(prompts) if left == -1 else min(left, len(prompts))
        count = int(dist_min(torch.tensor(float(wanted)), self.dp_mesh))
        if count <= 0:
            return left
        generator = step_generator(self.seed, step=step, micro=IMAGE_KEY + self.dp_rank)
        pictures = generate_images(
            model,
            frozen=self.frozen,
            tokenizers=self.tokenizers,
            prompts=prompts[:count],
            sampling=self.sampling(),
            generator=generator,
        )
        folder = os.path.join(self.trainer_config.dump_folder, self.config.save_img_folder)
        written = left if left == -1 else left - count
        already = 0 if left == -1 else self.config.save_img_count - left
        for index, (picture, prompt) in enumerate(zip(pictures, prompts, strict=False)):
            name = f"image_rank{self.dp_rank}_step{step}_{already + index}.png"
            save_png(picture, path=os.path.join(folder, name), prompt=prompt)
        return written


def _every_timestep(inputs: dict[str, Any], images: Any) -> tuple[dict[str, Any], Any, Any]:
    """Each sample repeated at all eight stratified timesteps."""
    import torch

    batch = images.shape[0]
    timesteps = torch.tensor([(i + 0.5) / STRATIFIED for i in range(STRATIFIED)]).repeat(batch)
    repeated = {
        key: value.repeat_interleave(STRATIFIED, dim=0)
        for key, value in inputs.items()
        if hasattr(value, "repeat_interleave")
    }
    return repeated, images.repeat_interleave(STRATIFIED, dim=0), timesteps

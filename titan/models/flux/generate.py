"""Images from a trained Flux model, one per line of ``inference.prompts_path``:

    python -m titan.models.flux.generate --job.config_file flux.toml --checkpoint.enable
    torchrun --nproc-per-node 8 -m titan.models.flux.generate --module flux --config flux_dev_model

The arguments are ``titan-train``'s (either config form, the same overrides). The run's model is
built as for training and loads the newest checkpoint of ``checkpoint.folder`` (or
``checkpoint.load_step``, or the initial load); without a checkpoint it draws nothing and says
which folder it looked in, since random weights draw noise. Prompts are
shared round robin over the ranks, ``inference.local_batch_size`` at a time, drawn at
``inference.img_size`` with ``validation.denoising_steps`` Euler steps and the validation's
classifier-free guidance; each image is ``image_prompt<N>_rank<R>.png`` in
``<dump_folder>/<inference.save_img_folder>`` (N counts the file's non-empty lines from 0).

Exit status: 0 every image written, 1 the config or the generation failed (one message), 2 usage.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any

PROG = "flux-generate"


def read_prompts(path: str) -> list[str]:
    """The non-empty lines of ``path``; ``ValueError`` naming ``inference.prompts_path`` when
    it is missing, unreadable, not UTF-8 text, or holds no prompt."""
    key = f"inference.prompts_path {path!r}"
    if not os.path.isfile(path):
        what = "is a folder" if os.path.isdir(path) else "does not exist"
        raise ValueError(f"{key} {what}; give a text file with one prompt per line")
    try:
        with open(path, encoding="utf-8") as handle:
            lines = [line.strip() for line in handle]
    except UnicodeDecodeError:
        raise ValueError(f"{key} is not UTF-8 text; give one prompt per line") from None
    except OSError as error:
        raise ValueError(f"{key} cannot be read: {error.strerror}") from None
    prompts = [line for line in lines if line]
    if not prompts:
        raise ValueError(f"{key} holds no prompt; give one prompt per line")
    return prompts


def no_checkpoint(config: Any, *, folder: str | None) -> str:
    """Why there are no trained weights to draw with: checkpointing is off, or ``folder`` (the
    run's checkpoint folder) holds no checkpoint and no initial load is set."""
    if not config.checkpoint.enable:
        return (
            "checkpoint.enable is false, so no checkpoint is loaded and the images would be "
            "drawn by random weights; add --checkpoint.enable and point --dump_folder (and "
            "--checkpoint.folder) at a trained run, or --checkpoint.initial_load_path at a "
            "checkpoint"
        )
    return (
        f"no checkpoint in {folder}, so the images would be drawn by random weights; point "
        "--dump_folder (and --checkpoint.folder) at a trained run, or "
        "--checkpoint.initial_load_path at a checkpoint"
    )


def generate(trainer: Any) -> list[str]:
    """Every image of ``trainer``'s prompts file this rank draws; the paths it wrote."""
    import torch

    from titan.distributed.reductions import dist_min
    from titan.models.flux.conditioning import step_generator
    from titan.models.flux.images import Sampling, check_sampling, generate_images, save_png

    config, parts = trainer.config, trainer.parts
    inference, validation = config.inference, config.validation
    if inference.local_batch_size < 1:
        raise ValueError(
            f"inference.local_batch_size must be at least 1, not {inference.local_batch_size}"
        )
    sampling = Sampling(
        img_size=inference.img_size,
        denoising_steps=validation.denoising_steps,
        guidance=validation.enable_classifier_free_guidance,
        guidance_scale=validation.classifier_free_guidance_scale,
    )
    check_sampling(sampling, where="inference")
    prompts = read_prompts(inference.prompts_path)
    dims = parts.parallel_dims
    ranks, rank = dims.dp_degree, parts.rows.dp_rank
    if len(prompts) < ranks:
        raise ValueError(
            f"inference.prompts_path has {len(prompts)} prompt(s) for {ranks} data-parallel "
            "ranks; every rank needs at least one"
        )
    if not parts.checkpointer.load(step=config.checkpoint.load_step):
        raise ValueError(no_checkpoint(config, folder=parts.checkpointer.folders.root))
    mine = list(range(rank, len(prompts), ranks))
    mesh = dims.mesh(parts.world_mesh, "dp_cp") if parts.world_mesh is not None else None
    # Sharded forwards are collective: every rank runs as many batches, the last ones empty-
    # handed ranks repeat their final prompt without writing it.
    rounds = -(-len(mine) // inference.local_batch_size)
    rounds = -int(dist_min(torch.tensor(float(-rounds)), mesh))
    folder = os.path.join(config.dump_folder, inference.save_img_folder)
    model = parts.model
    model.eval()
    written = []
    for round_index in range(rounds):
        start = round_index * inference.local_batch_size
        batch = mine[start : start + inference.local_batch_size] or mine[-1:]
        pictures = generate_images(
            model,
            frozen=parts.frozen,
            tokenizers=parts.dataloader.tokenizers,
            prompts=[prompts[i] for i in batch],
            sampling=sampling,
            generator=step_generator(parts.seed, step=0, micro=round_index * ranks + rank),
        )
        if start >= len(mine):
            continue
        for index, picture in zip(batch, pictures, strict=True):
            path = os.path.join(folder, f"image_prompt{index}_rank{rank}.png")
            save_png(picture, path=path, prompt=prompts[index])
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """The command; returns its exit code."""
    import logging

    from titan.cli.exits import UsageError
    from titan.cli.train_config import load
    from titan.training.errors import USER_ERRORS, RunFailure, describe

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(__doc__ or "")
        return 0 if args else 2
    logging.basicConfig(level=logging.INFO, format=f"[{PROG}] %(asctime)s %(message)s")
    failure = RunFailure.from_env()
    try:
        loaded = load(args, world_size=failure.world_size, stdout=sys.stdout, stderr=sys.stderr)
    except UsageError as error:
        failure.report(str(error))
        return 2
    if loaded.config is None:
        return loaded.exit_code
    trainer = None
    try:
        from titan.models.flux.trainer import FluxTrainer

        if not isinstance(loaded.config, FluxTrainer.Config):
            raise ValueError(f"{PROG} draws Flux images; this config trains another model")
        read_prompts(loaded.config.inference.prompts_path)  # refused before the model is built
        if not loaded.config.checkpoint.enable:
            raise ValueError(no_checkpoint(loaded.config, folder=None))
        trainer = loaded.config.build(findings_reported=True)
        written = generate(trainer)
        trainer.finished = True
        logging.getLogger("titan").info("wrote %d image(s)", len(written))
    except USER_ERRORS as error:
        failure.report(describe(error))
        return 1
    except Exception as error:
        if os.environ.get("TITAN_DEBUG"):
            raise
        failure.report(
            f"{PROG} stopped on an unexpected {type(error).__name__}: {error}; TITAN_DEBUG=1 "
            "prints its traceback"
        )
        return 1
    finally:
        if trainer is not None:
            trainer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

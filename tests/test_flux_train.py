"""titan-train on flux: the debug TOML and its migrated registry give the same losses bit for bit
and the loss falls; two FSDP ranks train as one process does; a resumed run repeats the straight
one bit for bit; validation writes real pictures, and so does the generate command; every v0.2.2
Flux TOML passes the pre-flight at its GPU count and trains two steps on the CPU.

Every run is small: 32-pixel images, an 8-token T5 context, the tiny test encoders, float32. The
debug flavor (258M parameters) runs where the TOML's own model is the point; the others run a
flux shrunk to 257K parameters by a registry (``TINY``).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests import reference
from tests.training_runs import (
    REPO,
    Launch,
    child_env,
    loss_bits,
    titan_trains,
)

DEBUG_TOML = REPO / "legacy_configs" / "flux" / "debug_model.toml"
CORPUS = reference.CORPUS / "torchtitan" / "models" / "flux"
"""The v0.2.2 Flux TOMLs in ``../shared`` (trained too when present; promised under CI)."""
PRESETS = sorted((REPO / "legacy_configs" / "flux").glob("*.toml")) + sorted(
    CORPUS.glob("train_configs/*.toml")
)
FULL_ATTENTION = "torchtitan v0.2.2's double- and single-stream blocks attended causally"

# The legacy spellings, and the registry's: the data loaders take the run's encoder settings.
SHRINK_TOML = [
    "--training.test_mode",
    "--encoder.max_t5_encoding_len", "8",
    "--training.img_size", "32",
    "--training.local_batch_size", "2",
    "--training.mixed_precision_param", "float32",
    "--debug.seed", "7",
]  # fmt: skip
SHRINK_REGISTRY = [
    "--encoder.test_mode",
    "--encoder.max_t5_encoding_len", "8",
    "--dataloader.img_size", "32",
    "--training.local_batch_size", "2",
    "--training.mixed_precision_param", "float32",
    "--debug.seed", "7",
]  # fmt: skip

TINY = """
from titan.models.flux.config_registry import flux_debugmodel


def tiny():
    config = flux_debugmodel()
    model = config.model_spec.model
    model.hidden_size, model.num_heads, model.depth, model.depth_single_blocks = 64, 2, 1, 1
    model.context_in_dim, model.vec_in_dim = 32, 32
    model.rope.axes_dim = (8, 12, 12)
    autoencoder = model.autoencoder
    autoencoder.ch, autoencoder.ch_mult, autoencoder.num_res_blocks = 32, (1, 1, 1, 1), 1
    config.encoder.test_mode, config.encoder.max_t5_encoding_len = True, 8
    config.dataloader.img_size = config.validator.dataloader.img_size = 32
    config.training.mixed_precision_param = "float32"
    config.training.local_batch_size = 4
    config.debug.seed = 7
    return config
"""


def metrics(folder: Path) -> list[dict]:
    """The training records of ``folder/metrics.jsonl`` (validation and events left out)."""
    lines = (folder / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [record for record in map(json.loads, lines) if "loss" in record]


def check_pictures(paths: list[Path], *, side: int) -> None:
    """Each file is a ``side``-pixel RGB PNG of more than one colour, with its caption."""
    from PIL import Image

    for path in paths:
        with Image.open(path) as image:
            assert image.format == "PNG" and image.mode == "RGB", path
            assert image.size == (side, side), (path, image.size)
            assert any(low != high for low, high in image.getextrema()), f"{path} is one colour"
            assert image.text.get("prompt"), f"{path} carries no prompt"


@pytest.mark.slow
def test_debug_toml_and_its_registry_train_identically_and_the_loss_falls(tmp_path):
    # Measured (seed 7, lr 1e-4): step 1 1.2121, mean of steps 21-30 1.1107; at the TOML's own
    # 8e-4 this small batch only wanders (mean of the last ten 1.1947), so the runs take 1e-4.
    registry = tmp_path / "config_registry.py"
    done = subprocess.run(
        [sys.executable, "-m", "titan.cli.migrate", str(DEBUG_TOML), "-o", str(registry), "-q"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=child_env(),
    )
    assert done.returncode == 0, done.stderr
    assert "def flux_debugmodel() -> FluxTrainer.Config:" in registry.read_text(encoding="utf-8")
    # Without activation checkpointing (the file's is full): a quarter less time a step, the
    # same numbers (tests/test_flux_model.py checks that checkpointing computes the same).
    lr = ["--optimizer.lr", "1e-4", "--activation_checkpoint.mode", "none"]
    toml, code = titan_trains(
        [
            Launch(
                ["--job.config_file", str(DEBUG_TOML), *SHRINK_TOML, *lr, "--training.steps", "30"],
                dump_folder=tmp_path / "toml",
                legacy=True,
            ),
            Launch(
                ["--registry", str(registry), "--config", "flux_debugmodel", *SHRINK_REGISTRY,
                 *lr, "--training.steps", "10"],
                dump_folder=tmp_path / "registry",
            ),
        ]
    )  # fmt: skip
    for run in (toml, code):
        run.check()
        assert run.stderr.count(FULL_ATTENTION) == 1, run.stderr[-3000:]
    assert [m["step"] for m in toml.metrics if "loss" in m] == list(range(1, 31))
    assert loss_bits(toml.losses[:10]) == loss_bits(code.losses)
    assert sum(toml.losses[-10:]) / 10 < toml.losses[0] - 0.05


@pytest.mark.parametrize("img_size", [8, 24, 40, 250])
def test_an_image_size_that_makes_no_whole_patches_is_refused_by_name(img_size):
    from titan.models.flux.run import check_image_size

    with pytest.raises(ValueError, match="training.img_size.*multiple of 16"):
        check_image_size(img_size)
    check_image_size(img_size - img_size % 16 + 16)


def test_dropping_the_causal_attention_is_said_in_product_words():
    from titan.models.flux.run import FULL_ATTENTION_NOTE

    assert FULL_ATTENTION in FULL_ATTENTION_NOTE and "attends fully" in FULL_ATTENTION_NOTE


@pytest.mark.slow
def test_fsdp_matches_one_process_resume_is_exact_and_pictures_are_written(tmp_path):
    registry = tmp_path / "config_registry.py"
    registry.write_text(TINY, encoding="utf-8")
    base = ["--registry", str(registry), "--config", "tiny", "--training.steps", "4"]
    # The one-process run also scores every sample at all eight timesteps and draws nothing.
    saving = ["--checkpoint.enable", "--checkpoint.interval", "2", "--validator.enable",
              "--validator.freq", "4", "--validator.steps", "1", "--validator.all_timesteps",
              "--validator.save_img_count", "0"]  # fmt: skip
    validating = [
        "--validator.enable", "--validator.freq", "4", "--validator.steps", "1",
        "--validator.local_batch_size", "2", "--validator.save_img_count", "2",
        "--validation.denoising_steps", "2",
    ]  # fmt: skip
    one, sharded = titan_trains(
        [
            Launch([*base, *saving], dump_folder=tmp_path / "one"),
            Launch(
                [*base, "--training.local_batch_size", "2",
                 "--parallelism.data_parallel_shard_degree", "2", *validating],
                dump_folder=tmp_path / "fsdp",
                nproc=2,
            ),
        ]
    )  # fmt: skip
    one.check(), sharded.check()
    # The same four global batches of 4 images: 2 per rank. fp32 sums in another order differ
    # by an ulp or so (measured: 1.2e-7 on losses near 1.1).
    straight, split = metrics(tmp_path / "one"), metrics(tmp_path / "fsdp")
    assert [m["step"] for m in split] == [1, 2, 3, 4]
    for a, b in zip(straight, split, strict=True):
        assert abs(a["loss"] - b["loss"]) <= 1e-6 and abs(a["grad_norm"] - b["grad_norm"]) <= 1e-6
    # Validation at steps 1 and 4: each rank wrote its first two captions' pictures each time.
    pictures = sorted((tmp_path / "fsdp" / "img").iterdir())
    assert [p.name for p in pictures] == [
        f"image_rank{r}_step{s}_{i}.png" for r in (0, 1) for s in (1, 4) for i in (0, 1)
    ]
    check_pictures(pictures, side=32)
    validation = [
        json.loads(line)
        for line in (tmp_path / "fsdp" / "metrics.jsonl").read_text().splitlines()
        if "validation_loss" in line
    ]
    assert [v["step"] for v in validation] == [1, 4]
    every = [
        json.loads(line)
        for line in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()
        if "validation_loss" in line
    ]
    assert [v["step"] for v in every] == [1, 4] and not (tmp_path / "one" / "img").exists()

    # Resume from step 2 (step 4 set aside) while the generate command draws from step 4.
    resumed = tmp_path / "resumed"
    shutil.copytree(tmp_path / "one", resumed)
    shutil.rmtree(resumed / "checkpoint" / "step-4")
    (tmp_path / "prompts.txt").write_text("a red cube\n\na blue sphere\na green cat\n")
    drawing = subprocess.Popen(
        [sys.executable, "-m", "titan.models.flux.generate", *base[:4], "--checkpoint.enable",
         "--dump_folder", str(tmp_path / "one"),
         "--inference.prompts_path", str(tmp_path / "prompts.txt"),
         "--inference.img_size", "32", "--validation.denoising_steps", "2"],
        cwd=REPO, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    (again,) = titan_trains([Launch([*base, *saving], dump_folder=resumed)])
    output, _ = drawing.communicate(timeout=600)
    again.check()
    assert "loaded checkpoint from" in again.stderr and "step-2" in again.stderr
    assert loss_bits([m["loss"] for m in metrics(resumed)[-2:]]) == loss_bits(
        [m["loss"] for m in straight[2:]]
    )
    assert drawing.returncode == 0, output[-3000:]
    assert "step-4" in output
    drawn = sorted((tmp_path / "one" / "inference_results").iterdir())
    assert [p.name for p in drawn] == [f"image_prompt{i}_rank0.png" for i in range(3)]
    check_pictures(drawn, side=32)


@pytest.mark.slow
def test_hf_export_is_a_diffusers_folder_and_imports_bit_for_bit(tmp_path):
    from diffusers import FluxTransformer2DModel
    from safetensors.torch import load_file

    registry = tmp_path / "config_registry.py"
    registry.write_text(TINY, encoding="utf-8")
    base = ["--registry", str(registry), "--config", "tiny", "--checkpoint.enable"]
    export = ["--checkpoint.last_save_in_hf", "--checkpoint.last_save_model_only"]
    (trained,) = titan_trains(
        [Launch([*base, *export, "--training.steps", "2"], dump_folder=tmp_path / "a")]
    )
    trained.check()
    folder = tmp_path / "a" / "checkpoint" / "step-2"
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "diffusion_pytorch_model.safetensors",
    ]
    exported = load_file(folder / "diffusion_pytorch_model.safetensors")
    model = FluxTransformer2DModel.from_pretrained(str(folder))  # diffusers reads it as its own
    theirs = model.state_dict()
    assert set(theirs) == set(exported)
    assert all(theirs[key].equal(value) for key, value in exported.items())
    # Imported by a run that does not move its weights (lr 0), exported again: the same bits.
    load = ["--checkpoint.initial_load_path", str(folder), "--checkpoint.initial_load_in_hf",
            "--checkpoint.initial_load_model_only", "--optimizer.lr", "0",
            "--lr_scheduler.warmup_steps", "0", "--training.steps", "1"]  # fmt: skip
    (again,) = titan_trains([Launch([*base, *export, *load], dump_folder=tmp_path / "b")])
    again.check()
    assert "loaded model weights (Hugging Face safetensors)" in again.stderr
    back = load_file(
        tmp_path / "b" / "checkpoint" / "step-1" / "diffusion_pytorch_model.safetensors"
    )
    assert set(back) == set(exported)
    assert all(back[key].equal(value) for key, value in exported.items())


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "does not exist"),
        ("", "holds no prompt"),
        ("\n  \n", "holds no prompt"),
        (b"\xff\xfe caption", "is not UTF-8"),
    ],
)
def test_a_prompts_file_that_cannot_serve_is_refused_by_name(tmp_path, content, words):
    from titan.models.flux.generate import read_prompts

    path = tmp_path / "prompts.txt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match="inference.prompts_path") as refused:
        read_prompts(str(path))
    assert words in str(refused.value)


def test_a_folder_is_not_a_prompts_file(tmp_path):
    from titan.models.flux.generate import read_prompts

    with pytest.raises(ValueError, match="is a folder"):
        read_prompts(str(tmp_path))


@pytest.mark.parametrize(
    ("img_size", "steps", "words"),
    [(8, 2, "too small"), (15, 2, "too small"), (32, 0, "at least 1")],
)
def test_sampling_settings_no_picture_can_be_drawn_with_are_refused(img_size, steps, words):
    from titan.models.flux.images import Sampling, check_sampling

    sampling = Sampling(img_size=img_size, denoising_steps=steps, guidance=True, guidance_scale=5)
    with pytest.raises(ValueError, match=words):
        check_sampling(sampling, where="validation")


@pytest.mark.parametrize("make", ["missing", "folder", "not_safetensors"])
def test_an_unusable_autoencoder_path_is_refused_naming_its_key(tmp_path, make):
    import torch

    from titan.models.flux import model_registry
    from titan.models.flux.conditioning import build_frozen_parts
    from titan.models.flux.configs import Encoder

    path = tmp_path / "ae.safetensors"
    if make == "folder":
        path.mkdir()
    elif make == "not_safetensors":
        path.write_bytes(b"not a checkpoint")
    encoder = Encoder(autoencoder_path=str(path))
    with pytest.raises(ValueError, match="encoder.autoencoder_path"):
        build_frozen_parts(
            encoder=encoder,
            model_config=model_registry("flux-debug").model,
            tokenizers=None,
            device=torch.device("cpu"),
            dtype=torch.float32,
        )


def preflight(toml: Path) -> tuple[int, str]:
    """``titan-train --preflight --ngpu 8`` of ``toml`` in test mode on the shipped image set."""
    from titan.cli.train_preflight import preflight as run_preflight

    out, err = io.StringIO(), io.StringIO()
    args = ["--job.config_file", str(toml), "--training.test_mode"]
    code = run_preflight(
        [*args, "--training.dataset", "cc12m-test"], ngpu=8, stdout=out, stderr=err
    )
    return code, out.getvalue() + err.getvalue()


@pytest.mark.slow
def test_every_v022_flux_toml_passes_preflight_and_trains_two_steps(tmp_path):
    # One launch per TOML, two at a time: the debug flavor for two steps, tiny encoders, 32 px.
    if os.environ.get("CI"):
        reference.require(CORPUS)
    assert len(PRESETS) >= 3, PRESETS
    for toml in PRESETS:
        code, said = preflight(toml)
        assert code == 0 and "pre-flight passed: flux" in said and "8 GPUs (FSDP 8)" in said, said
    shrink = [*SHRINK_TOML, "--model.flavor", "flux-debug", "--training.dataset", "cc12m-test"]
    shrink += ["--metrics.log_freq", "1"]
    # A corpus file that holds the same settings as a shipped one (only its comments and key
    # order differ) is the same run: each distinct configuration trains once.
    distinct = {}
    for toml in PRESETS:
        distinct.setdefault(repr(tomllib.loads(toml.read_text(encoding="utf-8"))), toml)
    trained = list(distinct.values())
    launches = [
        Launch(
            ["--job.config_file", str(toml), *shrink, "--training.steps", "2"],
            dump_folder=tmp_path / f"{index}",
            legacy=True,
        )
        for index, toml in enumerate(trained)
    ]
    # Two at a time: each holds about 4.7 GiB (258M parameters with their AdamW state).
    runs = [
        run
        for start in range(0, len(launches), 2)
        for run in titan_trains(launches[start : start + 2])
    ]
    for toml, run in zip(trained, runs, strict=True):
        run.check()
        assert [m["step"] for m in run.metrics if "loss" in m] == [1, 2], toml


@pytest.mark.parametrize("microbatches", [[], [("tokens", "labels")], "not a list"])
def test_the_token_library_step_is_refused_for_flux(microbatches):
    from titan.models.flux.trainer import FluxTrainer
    from titan.training.step_api import TrainerUsageError

    trainer = object.__new__(FluxTrainer)  # the refusal needs no built run
    with pytest.raises(TrainerUsageError, match="train\\(\\)"):
        trainer.forward_backward(microbatches)

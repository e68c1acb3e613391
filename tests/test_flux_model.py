"""The flux model layer: the transformer and the autoencoder against diffusers' own models on the
same weights, the state-dict adapters, meta build and init, loading ``ae.safetensors``, and
per-block activation checkpointing and FSDP (the sampling arithmetic: ``test_flux_sampling.py``).

The diffusers models are built from configs with random weights; nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from diffusers import AutoencoderKL, FluxTransformer2DModel
from safetensors.torch import load_file, save_file

from titan.models import model_registry
from titan.models.flux import sampling
from titan.models.flux.autoencoder import AutoEncoderLoadError, load_autoencoder
from titan.models.flux.autoencoder_adapter import AutoEncoderStateDictAdapter
from titan.models.flux.model_config import AutoEncoder, FluxModel, FluxRoPE
from titan.models.flux.state_dict_adapter import FluxStateDictAdapter

# fp32 forward of the same weights in titan and diffusers: measured differences are ~1e-6 (the
# q/k RMSNorm eps and float64 rope angles in diffusers); outputs are of order 1.
ATOL, RTOL = 2e-5, 1e-5


def debug_shaped() -> FluxModel.Config:
    """flux-debug's shape (widths of CLIP-L and T5-XXL, 2 + 2 blocks), with a narrower
    transformer."""
    config = model_registry("flux", "flux-debug").model
    return dataclasses.replace(
        config, hidden_size=128, num_heads=4, rope=FluxRoPE.Config(axes_dim=(4, 14, 14))
    )


def small_with_guidance() -> FluxModel.Config:
    """A small config unlike any flavor: guidance embedded, three heads, more single blocks."""
    return FluxModel.Config(
        in_channels=16,
        out_channels=8,
        vec_in_dim=24,
        context_in_dim=40,
        hidden_size=96,
        num_heads=3,
        depth=1,
        depth_single_blocks=3,
        guidance_embed=True,
        rope=FluxRoPE.Config(axes_dim=(8, 12, 12)),
    )


CONFIGS = {"debug-shaped": debug_shaped, "small-with-guidance": small_with_guidance}


def random_model(config: FluxModel.Config, *, seed: int = 0) -> torch.nn.Module:
    """``config``'s transformer, meta-built, materialised, every tensor random (not the init,
    whose zero modulations would make most comparisons trivial)."""
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device="cpu")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    return model


def diffusers_transformer(adapter: FluxStateDictAdapter) -> FluxTransformer2DModel:
    """diffusers' transformer of the adapter's config.json (random weights until loaded)."""
    kwargs = {
        k: v for k, v in adapter.config_json().items() if k not in ("_class_name", "torch_dtype")
    }
    return FluxTransformer2DModel(**kwargs)


def inputs(config: FluxModel.Config, *, batch: int = 2, seed: int = 1) -> dict[str, torch.Tensor]:
    """Random model inputs: a 6x8 latent (12 patches) and 5 text tokens."""
    generator = torch.Generator().manual_seed(seed)
    tokens, text = 12, 5

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=generator)

    batch_inputs = {
        "img": randn(batch, tokens, config.in_channels),
        "img_ids": sampling.latent_position_ids(batch, height=6, width=8),
        "txt": randn(batch, text, config.context_in_dim),
        "txt_ids": sampling.text_position_ids(batch, tokens=text),
        "y": randn(batch, config.vec_in_dim),
        "timesteps": torch.rand(batch, generator=generator),
    }
    if config.guidance_embed:
        batch_inputs["guidance"] = torch.tensor([3.5, 1.0])[:batch]
    return batch_inputs


# ----------------------------------------------------------------------------- transformer


@pytest.mark.parametrize("name", CONFIGS)
def test_transformer_equals_diffusers_on_the_same_weights(name):
    config = CONFIGS[name]()
    model = random_model(config)
    adapter = FluxStateDictAdapter(model_config=config, hf_assets_path=None)
    reference = diffusers_transformer(adapter)
    reference.load_state_dict(adapter.to_hf(model.state_dict()), strict=True)
    batch = inputs(config)
    with torch.no_grad():
        ours = model(**batch)
        theirs = reference(
            hidden_states=batch["img"],
            encoder_hidden_states=batch["txt"],
            pooled_projections=batch["y"],
            timestep=batch["timesteps"],
            img_ids=batch["img_ids"][0],
            txt_ids=batch["txt_ids"][0],
            guidance=batch.get("guidance"),
            return_dict=False,
        )[0]
    assert ours.shape == (2, 12, config.out_channels)
    assert ours.abs().max() > 0.1  # a real signal, not zeros on both sides
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=RTOL)


def test_text_tokens_see_the_image():
    # Attention is not causal: changing the image changes what the text tokens carry into the
    # single-stream blocks, hence the image output through them too, and each image token
    # depends on the others.
    config = debug_shaped()
    model = random_model(config)
    batch = inputs(config, batch=1)
    with torch.no_grad():
        before = model(**batch)
        batch["img"][:, -1] += 1.0
        after = model(**batch)
    assert not torch.allclose(before[:, 0], after[:, 0])


def test_guidance_is_required_exactly_when_embedded():
    with_guidance = random_model(small_with_guidance())
    batch = inputs(small_with_guidance())
    with pytest.raises(ValueError, match="embeds guidance: pass guidance"):
        with_guidance(**{k: v for k, v in batch.items() if k != "guidance"})
    without = random_model(debug_shaped())
    with pytest.raises(ValueError, match="has no guidance embedding"):
        without(**inputs(debug_shaped()), guidance=torch.ones(2))
    assert "guidance_in.in_layer.weight" in with_guidance.state_dict()
    assert not any(k.startswith("guidance_in") for k in without.state_dict())


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_heads": 5}, "hidden_size 128 is not divisible by num_heads 5"),
        ({"rope": FluxRoPE.Config(axes_dim=(4, 14, 12))}, r"adds up to 30, but each head is"),
    ],
)
def test_inconsistent_shapes_are_refused(change, message):
    with torch.device("meta"), pytest.raises(ValueError, match=message):
        dataclasses.replace(debug_shaped(), **change).build()


# ----------------------------------------------------------------------------- build and init


@pytest.mark.parametrize("flavor", ["flux-dev", "flux-schnell", "flux-debug"])
def test_flavors_build_on_meta_with_diffusers_parameter_count(flavor):
    config = model_registry("flux", flavor).model
    with torch.device("meta"):
        model = config.build()
        adapter = FluxStateDictAdapter(model_config=config, hf_assets_path=None)
        reference = diffusers_transformer(adapter)
    count = sum(p.numel() for p in model.parameters())
    assert count == sum(p.numel() for p in reference.parameters())
    if flavor != "flux-debug":
        # FLUX.1's transformer without the guidance embedding (11.9B).
        assert count == 11_891_178_560
    assert set(adapter.to_hf(model.state_dict())) == set(reference.state_dict())


def test_meta_build_then_init_gives_finite_outputs_and_gradients():
    config = dataclasses.replace(debug_shaped(), guidance_embed=True)
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    params = dict(model.named_parameters())
    assert all(torch.isfinite(p).all() for p in params.values())
    # adaLN-zero: every modulation and the output layer start at zero, so the untrained model
    # predicts zero velocity; the embedders start at std 0.02, the linears xavier-uniform.
    zero = [n for n in params if ".lin." in n or n.startswith("final_layer.")]
    assert len(zero) == 2 * (2 * 2 + 2) + 4 and all(not params[n].any() for n in zero)
    assert abs(params["vector_in.in_layer.weight"].std().item() - 0.02) < 0.002
    bound = math.sqrt(6 / (config.in_channels + config.hidden_size))
    assert params["img_in.weight"].abs().max() <= bound and not params["img_in.bias"].any()
    batch = inputs(config)
    out = model(**batch)
    assert out.shape == (2, 12, 64) and torch.isfinite(out).all() and not out.any()
    (out - torch.ones_like(out)).pow(2).mean().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert model.final_layer.linear.bias.grad.abs().sum() > 0


# ----------------------------------------------------------------------------- HF adapter


@pytest.mark.parametrize("name", CONFIGS)
def test_hf_export_then_import_is_bitwise(name, tmp_path):
    config = CONFIGS[name]()
    state = random_model(config, seed=3).state_dict()
    adapter = FluxStateDictAdapter(model_config=config, hf_assets_path=None)
    path = tmp_path / "diffusion_pytorch_model.safetensors"
    save_file({k: v.contiguous() for k, v in adapter.to_hf(state).items()}, path)
    back = adapter.from_hf(load_file(path))
    assert back.keys() == state.keys()
    for key, value in state.items():
        assert back[key].dtype == value.dtype and torch.equal(back[key], value), key


def test_hf_adapter_refuses_what_it_cannot_map():
    config = small_with_guidance()
    adapter = FluxStateDictAdapter(model_config=config, hf_assets_path=None)
    hf = adapter.to_hf(random_model(config).state_dict())
    with pytest.raises(ValueError, match="'transformer_blocks.0.attn.to_qkv.weight' is not a flux"):
        adapter.from_hf({**hf, "transformer_blocks.0.attn.to_qkv.weight": torch.zeros(1)})
    without_k = {k: v for k, v in hf.items() if k != "single_transformer_blocks.2.attn.to_k.bias"}
    with pytest.raises(ValueError, match=r"single_blocks.2.linear1.bias needs attn.to_k.bias"):
        adapter.from_hf(without_k)
    with pytest.raises(ValueError, match="'final_layer.gate.weight' is not a flux"):
        adapter.to_hf({"final_layer.gate.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match=r"mlp_ratio 2.0 \(diffusers has 4.0\)"):
        FluxStateDictAdapter(
            model_config=dataclasses.replace(config, mlp_ratio=2.0), hf_assets_path=None
        )


def test_hf_adapter_reads_diffusers_shard_index(tmp_path):
    transformer = tmp_path / "transformer"
    transformer.mkdir()
    (tmp_path / "model_index.json").write_text("{}")
    (transformer / "diffusion_pytorch_model.safetensors.index.json").write_text(
        '{"weight_map": {"x_embedder.weight": "diffusion_pytorch_model-00002-of-00003.safetensors"}}'
    )
    adapter = FluxStateDictAdapter(model_config=debug_shaped(), hf_assets_path=str(tmp_path))
    assert adapter.hf_assets_path == str(transformer)
    assert adapter.fqn_to_index_mapping == {"x_embedder.weight": 2}


# ----------------------------------------------------------------------------- autoencoder


def small_autoencoder() -> AutoEncoder.Config:
    """Three levels (one resampling each way, a channel change), one resnet block per level."""
    return AutoEncoder.Config(
        resolution=16, ch=32, ch_mult=(1, 2, 2), num_res_blocks=1, z_channels=4
    )


def random_autoencoder(config: AutoEncoder.Config, *, seed: int = 0) -> torch.nn.Module:
    """``config``'s autoencoder with random weights."""
    autoencoder = config.build()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in autoencoder.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    return autoencoder


def test_autoencoder_equals_diffusers_on_the_same_weights():
    config = small_autoencoder()
    ours = random_autoencoder(config)
    adapter = AutoEncoderStateDictAdapter(config=config)
    reference = AutoencoderKL(
        **{k: v for k, v in adapter.config_json(config).items() if k != "_class_name"}
    )
    reference.load_state_dict(adapter.to_hf(ours.state_dict()), strict=True)
    images = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(1)) * 2 - 1
    latents = torch.randn(2, 4, 4, 4, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        mean, _ = ours.latent_distribution(images)
        posterior = reference.encode(images).latent_dist
        torch.testing.assert_close(mean, posterior.mean, atol=ATOL, rtol=RTOL)
        # Sampling draws the same noise from the same generator state as diffusers does.
        sampled = ours.encode(images, generator=torch.Generator().manual_seed(7))
        theirs = posterior.sample(generator=torch.Generator().manual_seed(7))
        expected = config.scale_factor * (theirs - config.shift_factor)
        torch.testing.assert_close(sampled, expected, atol=ATOL, rtol=RTOL)
        decoded = ours.decode(latents)
        raw = latents / config.scale_factor + config.shift_factor
        torch.testing.assert_close(decoded, reference.decode(raw).sample, atol=ATOL, rtol=RTOL)
    assert decoded.shape == (2, 3, 16, 16) and mean.shape == (2, 4, 4, 4)
    back = adapter.from_hf(adapter.to_hf(ours.state_dict()))
    assert all(torch.equal(back[k], v) for k, v in ours.state_dict().items())


def test_flavor_autoencoder_maps_onto_diffusers_key_for_key():
    config = model_registry("flux", "flux-dev").model.autoencoder
    adapter = AutoEncoderStateDictAdapter(config=config)
    with torch.device("meta"):
        ours = config.build().state_dict()
        kwargs = {k: v for k, v in adapter.config_json(config).items() if k != "_class_name"}
        theirs = AutoencoderKL(**kwargs).state_dict()
    hf = adapter.to_hf(ours)
    assert {k: tuple(v.shape) for k, v in hf.items()} == {
        k: tuple(v.shape) for k, v in theirs.items()
    }
    assert sum(v.numel() for v in ours.values()) == 83_819_683  # FLUX.1's ae.safetensors
    with pytest.raises(ValueError, match="'decoder.up.4.block.0.conv1.weight' is not a flux"):
        adapter.to_hf({"decoder.up.4.block.0.conv1.weight": hf["decoder.conv_in.weight"]})
    with pytest.raises(ValueError, match="'encoder.quant_conv.weight' is not a flux autoencoder"):
        adapter.from_hf({"encoder.quant_conv.weight": hf["decoder.conv_in.weight"]})


def test_autoencoder_loads_frozen_from_ae_safetensors(tmp_path):
    config = small_autoencoder()
    saved = random_autoencoder(config, seed=5).state_dict()
    path = tmp_path / "ae.safetensors"
    save_file(saved, path)
    autoencoder = load_autoencoder(config, path=str(path), dtype=torch.float32)
    assert not autoencoder.training
    assert not any(p.requires_grad for p in autoencoder.parameters())
    assert all(torch.equal(autoencoder.state_dict()[k], v) for k, v in saved.items())
    assert load_autoencoder(config, path=str(path)).decoder.conv_out.weight.dtype == torch.bfloat16


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "absent.safetensors", "does not exist; it should be a safetensors file"),
        (lambda d: d, "is a folder, not a safetensors file"),
        (lambda d: _write(d / "ae.safetensors", b"\x00" * 3), "is not a readable safetensors"),
        (lambda d: _write(d / "ae.safetensors", b"not json"), "is not a readable safetensors"),
    ],
    ids=["missing", "folder", "truncated", "garbage"],
)
def test_unreadable_autoencoder_path_names_the_setting(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(AutoEncoderLoadError, match=message) as info:
        load_autoencoder(small_autoencoder(), path=str(path))
    assert str(info.value).startswith(f"encoder.autoencoder_path {str(path)!r}")


def test_autoencoder_of_another_shape_is_refused(tmp_path):
    path = tmp_path / "ae.safetensors"
    save_file(random_autoencoder(small_autoencoder()).state_dict(), path)
    other = dataclasses.replace(small_autoencoder(), z_channels=8, ch_mult=(1, 2))
    with pytest.raises(AutoEncoderLoadError, match="is not this autoencoder's checkpoint") as info:
        load_autoencoder(other, path=str(path))
    assert "has unknown tensors" in str(info.value) and "has other shapes for" in str(info.value)


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


# ----------------------------------------------------------------------------- parallelize


def test_activation_checkpointing_wraps_every_block_and_computes_the_same():
    from titan.config.configs import ActivationCheckpointConfig
    from titan.models.flux.parallelize import parallelize_flux

    config = small_with_guidance()
    plain, wrapped = random_model(config), random_model(config)
    parallelize_flux(
        wrapped, activation_checkpoint=ActivationCheckpointConfig(mode="full"), dp_mesh=None
    )
    blocks = [*wrapped.double_blocks, *wrapped.single_blocks]
    assert len(blocks) == 4 and all(type(b).__name__ == "CheckpointWrapper" for b in blocks)
    assert "single_blocks.2._checkpoint_wrapped_module.linear1.weight" in dict(
        wrapped.named_parameters()
    )
    # The wrapper hides itself from the state dict: checkpoints and the HF adapter see FLUX.1's
    # names.
    assert wrapped.state_dict().keys() == plain.state_dict().keys()
    for model in (plain, wrapped):
        model(**inputs(config)).square().mean().backward()
    for (name, a), b in zip(plain.named_parameters(), wrapped.parameters(), strict=True):
        assert torch.equal(a.grad, b.grad), name
    untouched = random_model(config)
    parallelize_flux(
        untouched, activation_checkpoint=ActivationCheckpointConfig(mode="none"), dp_mesh=None
    )
    assert type(untouched.single_blocks[0]).__name__ == "SingleStreamBlock"


@pytest.mark.slow
def test_fsdp_on_2_ranks_matches_one_process():
    # Real torchrun over gloo: FSDP2 per embedder, block and final layer, with and without
    # activation checkpointing, against the unsharded model (tests/dist_scripts).
    from tests.dist_scripts.flux_parallel_check import SCENARIOS
    from tests.training_runs import REPO, parallel_check

    script = REPO / "tests" / "dist_scripts" / "flux_parallel_check.py"
    output = parallel_check(script, list(SCENARIOS), nproc=2)
    assert output.count("fsdp 2,") == len(SCENARIOS)


@pytest.mark.parametrize(
    ("degree", "refused"),
    [
        ("tensor_parallel_degree", "tensor parallel"),
        ("pipeline_parallel_degree", "pipeline parallel"),
        ("context_parallel_degree", "context parallel"),
        ("expert_parallel_degree", "expert parallel"),
        ("data_parallel_replicate_degree", "DDP replication"),
        ("data_parallel_shard_degree", None),
    ],
)
def test_flux_layouts_other_than_fsdp_are_refused(degree, refused):
    from titan.models.llama3.config_registry import llama3_debugmodel

    spec = model_registry("flux", "flux-debug")
    # As the record will read once training lands: the layout refusals are the family's own.
    capabilities = dataclasses.replace(spec.capabilities, training_refusal=None)
    spec = dataclasses.replace(spec, capabilities=capabilities)
    config = llama3_debugmodel()
    config.model_spec = spec
    config.activation_checkpoint.mode = "full"
    config.parallelism.data_parallel_shard_degree = 1
    setattr(config.parallelism, degree, 2)
    messages = [str(refusal) for refusal in spec.refusals(config, world_size=2)]
    if refused is None:
        assert messages == []
    else:
        (message,) = messages
        assert message.startswith(refused) and f"parallelism.{degree} = 2) for flux" in message

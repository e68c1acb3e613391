"""The llama4 torch model and its Hugging Face adapter, against transformers' Llama4ForCausalLM.

Hugging Face's Llama 4 text model has knobs torchtitan v0.2.2's llama4 does not implement; the
reference models here set them to compute torchtitan's math:

- ``use_qk_norm=False``: torchtitan has no L2 norm of q and k on the rope layers;
- ``attn_temperature_tuning=False``: torchtitan does not rescale the NoPE layers' queries
  (so ``floor_scale`` and ``attn_scale`` are unused);
- ``no_rope_layers`` written out: torchtitan drops rope on layers ``0, n, 2n...``
  (``layer % every_n_layers_nope == 0``), Hugging Face's default on layers ``n-1, 2n-1...``;
- ``layer_types`` written out: torchtitan chunks the rope layers only under flex attention
  (its sdpa path is plainly causal); Hugging Face chunks every rope layer by default;
- ``head_dim = dim // n_heads`` (Hugging Face's default is 128).

Routing needs no knob: Hugging Face takes the top-1 logit then its sigmoid, torchtitan the
top-1 sigmoid score (the same expert, sigmoid being monotonic), and both scale the token by the
score before the expert.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import (
    Llama4Config,
    Llama4ForCausalLM,
    Llama4ForConditionalGeneration,
    Llama4TextConfig,
    Llama4VisionConfig,
)

from titan.config.configurable import NotBuildableError
from titan.models.common.attention_masks import MaskSpec
from titan.models.common.feed_forward import FeedForward
from titan.models.common.model import LlamaRoPE as LlamaRoPEModule
from titan.models.common.moe import MoE
from titan.models.common.rope import LlamaRoPE
from titan.models.llama4 import FLAVORS, model_registry
from titan.models.llama4.model import Llama4Model, uses_rope
from titan.models.llama4.model_config import Llama4Attention, Llama4TransformerBlock
from titan.models.llama4.state_dict_adapter import Llama4StateDictAdapter

DIM, N_HEADS, N_KV_HEADS, VOCAB, N_LAYERS, SEQ, CHUNK, EXPERTS = 64, 8, 2, 128, 4, 24, 8, 4
# dim 64 by torchtitan's llama4 rules (multiple_of 32): dense int(2*256/3)=170 -> 192;
# experts 170 / (top_k 1 + 1 shared) = 85 -> 96.
DENSE_HIDDEN, EXPERT_HIDDEN = 192, 96
# A short original context makes llama4's rope scaling (factor 16) slow 3 of the 4 frequencies.
ORIGINAL_CONTEXT = 16
# Hugging Face draws every weight from N(0, this); large enough that attention is far from
# uniform and routing far from ties, so a wrong mask or expert shows in the logits.
HF_INIT_STD = 0.2
# fp32 logits of magnitude ~6: both sides run the same operations in the same order except for
# the experts (Hugging Face multiplies every token by every expert, titan only the routed rows,
# grouped) and SDPA's kernel choice under a mask; that may move the last bits on another BLAS.
# 1e-5 is ~20 float32 ulps at that magnitude; measured here: 0.0 (bitwise equal).
LOGITS_ATOL = 1e-5


def tiny_config(*, attn_type="sdpa", every_n_layers_nope=None, interleave=2, moe=True):
    """A four-layer GQA llama4 with llama4's rope scaling and 4-expert top-1 MoE layers."""
    return Llama4Model.Config(
        dim=DIM,
        n_layers=N_LAYERS,
        vocab_size=VOCAB,
        max_seq_len=32,
        rope=LlamaRoPE.Config(
            theta=500000.0,
            scaling="llama",
            scaling_factor=16.0,
            low_freq_factor=1.0,
            high_freq_factor=1.0,
            original_max_position_embeddings=ORIGINAL_CONTEXT,
        ),
        layer=Llama4TransformerBlock.Config(
            attention=Llama4Attention.Config(
                n_heads=N_HEADS,
                n_kv_heads=N_KV_HEADS,
                attn_type=attn_type,
                every_n_layers_nope=every_n_layers_nope,
                fixed_attn_block_size=CHUNK,
            ),
            feed_forward=FeedForward.Config(multiple_of=32),
            moe=MoE.Config(num_experts=EXPERTS) if moe else None,
            interleave_moe_layer_step=interleave,
        ),
    )


# (titan config, the Hugging Face config of the same model written by hand)
SETUPS = {
    # debugmodel's shape: sdpa, rope everywhere, MoE on every second layer.
    "sdpa-interleaved": (
        dict(attn_type="sdpa", interleave=2),
        dict(
            interleave_moe_layer_step=2,
            moe_layers=[1, 3],
            no_rope_layers=[1, 1, 1, 1],
            layer_types=["full_attention"] * 4,
        ),
    ),
    # an irope flavor's shape: flex, NoPE on layers 0 and 2, chunks of 8 on 1 and 3, all MoE.
    "flex-irope": (
        dict(attn_type="flex", every_n_layers_nope=2, interleave=1),
        dict(
            interleave_moe_layer_step=1,
            moe_layers=[0, 1, 2, 3],
            no_rope_layers=[0, 1, 0, 1],
            layer_types=["full_attention", "chunked_attention"] * 2,
        ),
    ),
}


def hf_config(**layers):
    """Hugging Face's Llama4TextConfig of ``tiny_config`` with ``layers``' per-layer lists."""
    return Llama4TextConfig(
        hidden_size=DIM,
        num_hidden_layers=N_LAYERS,
        num_attention_heads=N_HEADS,
        num_key_value_heads=N_KV_HEADS,
        head_dim=DIM // N_HEADS,
        vocab_size=VOCAB,
        intermediate_size=EXPERT_HIDDEN,
        intermediate_size_mlp=DENSE_HIDDEN,
        num_local_experts=EXPERTS,
        num_experts_per_tok=1,
        attention_chunk_size=CHUNK,
        use_qk_norm=False,
        attn_temperature_tuning=False,
        max_position_embeddings=32,
        rms_norm_eps=1e-5,
        rope_parameters={
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 16.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 1.0,
            "original_max_position_embeddings": ORIGINAL_CONTEXT,
        },
        tie_word_embeddings=False,
        initializer_range=HF_INIT_STD,
        **layers,
    )


def built(config, *, seed=0):
    """The model of ``config`` built on meta, materialized on CPU, initialized under ``seed``."""
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device="cpu")
    torch.manual_seed(seed)
    model.init_weights()
    return model


def tokens(batch=2, seq=SEQ):
    """Fixed random token ids."""
    return torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(3))


@pytest.fixture(scope="module", params=list(SETUPS))
def hf_pair(request, tmp_path_factory):
    """``(titan config, HF model, HF safetensors state)`` of one setup, saved and read back."""
    titan_args, hf_layers = SETUPS[request.param]
    torch.manual_seed(0)
    hf = Llama4ForCausalLM(hf_config(**hf_layers)).eval()
    folder = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(folder)
    return tiny_config(**titan_args), hf, load_file(folder / "model.safetensors")


# ----------------------------------------------------------------------------- flavors


@pytest.mark.parametrize("name", FLAVORS)
def test_every_flavor_builds_on_meta_with_the_configs_parameter_count(name):
    config = model_registry(name).model
    with torch.device("meta"):
        model = config.build()
    assert sum(p.numel() for p in model.parameters()) == config.num_params()


def test_irope_flavors_mask_by_document_and_varlen_is_refused_clearly():
    with torch.device("meta"):
        model = model_registry("debugmodel_irope").model.build()
    # NoPE layers (every 4th from 0): documents only; rope layers: documents and chunks.
    chunks = [spec.chunk_size for spec in model.mask_specs]
    assert all(spec.documents for spec in model.mask_specs)
    assert chunks == [None if i % 4 == 0 else 256 for i in range(len(chunks))]
    config = tiny_config()
    config.layer.attention.attn_type = "varlen"
    with pytest.raises(NotBuildableError, match="no varlen attention.*'sdpa' or 'flex'"):
        with torch.device("meta"):
            config.build()


def test_expert_and_dense_sizes_are_torchtitans():
    scout = model_registry("17bx16e").model
    # Llama 4 Scout's published intermediate_size and intermediate_size_mlp.
    assert scout.layer.moe_hidden_dim(scout.dim) == 8192
    assert scout.layer.feed_forward.effective_hidden_dim(scout.dim) == 16384
    debug = model_registry("debugmodel").model
    assert debug.layer.moe_hidden_dim(debug.dim) == 512  # int(682 / 2) = 341 -> 512
    config = tiny_config()
    assert config.layer.moe_hidden_dim(DIM) == EXPERT_HIDDEN
    assert config.layer.feed_forward.effective_hidden_dim(DIM) == DENSE_HIDDEN


def test_moe_layers_interleave_and_nope_layers_start_at_zero():
    with torch.device("meta"):
        model = model_registry("debugmodel").model.build()
    assert [layer.moe_enabled for layer in model.layers.values()] == [False, True] * 3
    assert not hasattr(model.layers["0"], "moe") and not hasattr(model.layers["1"], "feed_forward")
    attention = model_registry("17bx16e_irope").model.layer.attention
    assert [uses_rope(attention, i) for i in range(9)] == [False, True, True, True] * 2 + [False]
    attention.every_n_layers_nope = 1
    with pytest.raises(ValueError, match="every_n_layers_nope must be greater than 1"):
        uses_rope(attention, 0)


# ----------------------------------------------------------------------------- attention


def test_chunked_causal_mask_by_hand():
    expected = torch.tensor(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [0, 0, 1, 0, 0],
            [0, 0, 1, 1, 0],
            [0, 0, 0, 0, 1],
        ],
        dtype=torch.bool,
    )
    mask = MaskSpec(chunk_size=2).build(seqlen=5, device=torch.device("cpu"))
    assert torch.equal(mask[0, 0], expected)


def attention_by_hand(attention, x, freqs_cis, mask):
    """softmax(q k^T / sqrt(d) masked) v, written out with every kv head repeated."""
    bs, seqlen, _ = x.shape
    q = attention.wq(x).view(bs, seqlen, N_HEADS, -1)
    k = attention.wk(x).view(bs, seqlen, N_KV_HEADS, -1)
    v = attention.wv(x).view(bs, seqlen, N_KV_HEADS, -1)
    if attention.use_rope:
        rotations = freqs_cis[:seqlen].view(1, seqlen, 1, -1)
        q = torch.view_as_real(torch.view_as_complex(q.reshape(*q.shape[:-1], -1, 2)) * rotations)
        k = torch.view_as_real(torch.view_as_complex(k.reshape(*k.shape[:-1], -1, 2)) * rotations)
        q, k = q.flatten(3), k.flatten(3)
    k = k.repeat_interleave(N_HEADS // N_KV_HEADS, dim=2)
    v = v.repeat_interleave(N_HEADS // N_KV_HEADS, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / (DIM // N_HEADS) ** 0.5
    weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    out = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(bs, seqlen, -1)
    return attention.wo(out)


@pytest.mark.parametrize(
    ("attn_type", "layer", "chunk"),
    [("flex", "1", CHUNK), ("flex", "0", None), ("sdpa", "1", None), ("sdpa", "0", None)],
    ids=["flex-rope-chunked", "flex-nope-global", "sdpa-rope-causal", "sdpa-nope-causal"],
)
def test_each_layer_attends_as_torchtitan_masks_it(attn_type, layer, chunk):
    model = built(tiny_config(attn_type=attn_type, every_n_layers_nope=2))
    attention = model.layers[layer].attention
    assert attention.use_rope == (layer == "1") and attention.chunk_size == chunk
    x = torch.randn(2, SEQ, DIM, generator=torch.Generator().manual_seed(5))
    causal = torch.ones(SEQ, SEQ, dtype=torch.bool).tril()
    mask = causal
    if chunk is not None:
        mask = MaskSpec(chunk_size=chunk).build(seqlen=SEQ, device=torch.device("cpu"))[0, 0]
    # The decoder hands each layer its mask (none for plain causal), built once per batch.
    given = model.attention_masks(torch.zeros(2, SEQ, dtype=torch.long)).get(attention.mask_spec)
    with torch.no_grad():
        expected = attention_by_hand(attention, x, model.freqs_cis, mask)
        out = attention(x, model.freqs_cis, attention_mask=given)
        torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-5)


def test_llama4_rope_scaling_slows_only_the_long_wavelengths():
    # Both frequency bounds at 1: no blended band; wavelengths beyond the original context are
    # divided by the factor, the others kept (torchtitan's RoPEScalingArgs defaults for llama4).
    rope_config = tiny_config().rope
    head_dim = DIM // N_HEADS
    rope = LlamaRoPEModule(config=rope_config, head_dim=head_dim, max_seq_len=4)
    plain = 1.0 / 500000.0 ** (torch.arange(0, head_dim, 2).float() / head_dim)
    wavelengths = 2 * torch.pi / plain
    expected = torch.where(wavelengths > ORIGINAL_CONTEXT, plain / 16.0, plain)
    assert (wavelengths > ORIGINAL_CONTEXT).tolist() == [False, True, True, True]
    assert torch.equal(rope.inverse_frequencies(), expected)


# ----------------------------------------------------------------------------- Hugging Face


def test_hf_checkpoint_gives_hf_logits(hf_pair):
    config, hf, hf_state = hf_pair
    model = built(config)
    adapter = Llama4StateDictAdapter(model_config=config, hf_assets_path=None)
    model.load_state_dict(adapter.from_hf(hf_state), strict=True)
    with torch.no_grad():
        expected = hf(tokens()).logits
        got = model(tokens())
    assert expected.abs().max() > 1.0  # weights large enough to make the comparison sharp
    torch.testing.assert_close(got, expected, atol=LOGITS_ATOL, rtol=0)


def test_the_other_kernels_masks_are_far_from_hf(hf_pair):
    # Control for the comparison above: the same weights under the other attention kernel
    # (flex chunks the rope layers, sdpa does not) are far from Hugging Face's logits.
    config, hf, hf_state = hf_pair
    other = copy.deepcopy(config)
    attention = other.layer.attention
    attention.attn_type = "sdpa" if attention.attn_type == "flex" else "flex"
    model = built(other)
    adapter = Llama4StateDictAdapter(model_config=other, hf_assets_path=None)
    model.load_state_dict(adapter.from_hf(hf_state))
    with torch.no_grad():
        assert (model(tokens()) - hf(tokens()).logits).abs().max() > 1e-2


def test_export_then_import_is_bitwise_and_hf_runs_the_export(hf_pair, tmp_path):
    config, hf, hf_state = hf_pair
    model = built(config, seed=4)
    adapter = Llama4StateDictAdapter(model_config=config, hf_assets_path=None)
    titan_state = model.state_dict()
    exported = adapter.to_hf(titan_state)
    assert set(exported) == set(hf_state)
    assert all(exported[key].shape == hf_state[key].shape for key in hf_state)
    back = adapter.from_hf(exported)
    assert set(back) == set(titan_state)
    assert all(torch.equal(back[key], titan_state[key]) for key in titan_state)
    assert all(
        torch.equal(adapter.to_hf(adapter.from_hf(hf_state))[k], v) for k, v in hf_state.items()
    )
    # The export folder as titan writes it (weights + config_json) is a Hugging Face model
    # computing titan's logits.
    save_file(exported, tmp_path / "model.safetensors")
    config_json = adapter.config_json()
    assert config_json["architectures"] == ["Llama4ForCausalLM"]
    hf_kwargs = {k: v for k, v in config_json.items() if k not in ("architectures", "torch_dtype")}
    reloaded = Llama4ForCausalLM(Llama4TextConfig(**hf_kwargs)).eval()
    reloaded.load_state_dict(load_file(tmp_path / "model.safetensors"), strict=True)
    with torch.no_grad():
        torch.testing.assert_close(
            reloaded(tokens()).logits, model(tokens()), atol=LOGITS_ATOL, rtol=0
        )


def test_config_json_matches_the_hand_written_hf_config(hf_pair):
    config, hf, _ = hf_pair
    written = Llama4StateDictAdapter(model_config=config, hf_assets_path=None).config_json()
    reference = hf.config.to_dict()
    for key, value in written.items():
        if key in ("architectures", "torch_dtype", "initializer_range"):
            continue
        assert reference[key] == value, key


def test_a_multimodal_checkpoint_loads_its_language_model(tmp_path):
    # The published Llama 4 checkpoints are Llama4ForConditionalGeneration: the text model under
    # language_model., beside a vision tower and projector (tiny here) that titan skips.
    titan_args, hf_layers = SETUPS["flex-irope"]
    vision = Llama4VisionConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=28,
        patch_size=14,
        vision_output_dim=32,
        projector_input_dim=32,
        projector_output_dim=64,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    )
    text = hf_config(**hf_layers)
    torch.manual_seed(0)
    hf = Llama4ForConditionalGeneration(
        Llama4Config(text_config=text.to_dict(), vision_config=vision.to_dict())
    ).eval()
    hf.save_pretrained(tmp_path)
    hf_state = load_file(tmp_path / "model.safetensors")
    assert "language_model.lm_head.weight" in hf_state
    assert any(key.startswith("vision_model.") for key in hf_state)
    config = tiny_config(**titan_args)
    model = built(config)
    adapter = Llama4StateDictAdapter(model_config=config, hf_assets_path=None)
    model.load_state_dict(adapter.from_hf(hf_state), strict=True)
    with torch.no_grad():
        expected = hf.language_model(tokens()).logits
        torch.testing.assert_close(model(tokens()), expected, atol=LOGITS_ATOL, rtol=0)


def test_expert_bias_is_dropped_on_export_and_zero_on_import():
    config = tiny_config()
    model = built(config)
    adapter = Llama4StateDictAdapter(model_config=config, hf_assets_path=None)
    state = model.state_dict()
    state["layers.1.moe.expert_bias"] = torch.arange(EXPERTS, dtype=torch.float32)
    exported = adapter.to_hf(state)
    assert not any("bias" in key for key in exported)
    imported = adapter.from_hf(exported)
    assert torch.equal(imported["layers.1.moe.expert_bias"], torch.zeros(EXPERTS))
    gate_up = exported["model.layers.1.feed_forward.experts.gate_up_proj"]
    assert gate_up.shape == (EXPERTS, DIM, 2 * EXPERT_HIDDEN)
    assert torch.equal(gate_up[2, :, :EXPERT_HIDDEN], state["layers.1.moe.experts.w1"][2].T)
    assert torch.equal(gate_up[2, :, EXPERT_HIDDEN:], state["layers.1.moe.experts.w3"][2].T)


def test_unknown_keys_and_unrepresentable_routing_are_named():
    adapter = Llama4StateDictAdapter(model_config=tiny_config(), hf_assets_path=None)
    with pytest.raises(ValueError, match="'layers.0.attention.wqkv.weight' is not a llama4"):
        adapter.to_hf({"layers.0.attention.wqkv.weight": torch.zeros(1)})
    with pytest.raises(ValueError, match="'model.layers.0.mlp.gate_proj.weight' is not a llama4"):
        adapter.from_hf({"model.layers.0.mlp.gate_proj.weight": torch.zeros(1)})
    config = tiny_config()
    config.layer.moe = dataclasses.replace(config.layer.moe, route_norm=True, num_shared_experts=2)
    with pytest.raises(ValueError, match="num_shared_experts=2 \\(needs 1\\), route_norm=True"):
        Llama4StateDictAdapter(model_config=config, hf_assets_path=None)


def test_a_training_step_reaches_every_parameter():
    model = built(tiny_config(attn_type="flex", every_n_layers_nope=2))
    batch = tokens()
    loss = F.cross_entropy(model(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
    loss.backward()
    # Every routed expert may not get a token; everything else must get a gradient.
    missing = [
        name
        for name, p in model.named_parameters()
        if (p.grad is None or not p.grad.any()) and ".experts." not in name
    ]
    assert not missing

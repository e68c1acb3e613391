"""The qwen3 torch model (dense and MoE) against Hugging Face's Qwen3 / Qwen3Moe, and its adapter."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from safetensors.torch import load_file, save_file

from titan.models import model_registry
from titan.models.common import FeedForward, MoE, RoPE, TransformerBlock
from titan.models.qwen3 import FLAVORS
from titan.models.qwen3.model import Qwen3Model, apply_half_rotary_emb, rotate_half
from titan.models.qwen3.model_config import Qwen3Attention
from titan.models.qwen3.state_dict_adapter import Qwen3StateDictAdapter

transformers = pytest.importorskip("transformers")

DIM, N_HEADS, N_KV_HEADS, HEAD_DIM, VOCAB, SEQ = 64, 4, 2, 32, 128, 16
# The same tiny shape on both sides; eps and theta differ from the defaults on purpose, so a
# setting that does not reach the model shows up as a mismatch.
EPS, THETA = 1e-5, 50000.0


def tiny_config(*, moe: bool, tied: bool = False) -> Qwen3Model.Config:
    """A two-layer qwen3 (head width 32 != dim / heads), MoE with 4 experts top-2 or dense."""
    return Qwen3Model.Config(
        dim=DIM,
        n_layers=2,
        vocab_size=VOCAB,
        norm_eps=EPS,
        max_seq_len=32,
        enable_weight_tying=tied,
        rope=RoPE.Config(theta=THETA),
        layer=TransformerBlock.Config(
            attention=Qwen3Attention.Config(
                n_heads=N_HEADS, n_kv_heads=N_KV_HEADS, head_dim=HEAD_DIM
            ),
            feed_forward=FeedForward.Config(hidden_dim=96),
            moe=MoE.Config(
                num_experts=4,
                top_k=2,
                hidden_dim=32,
                num_shared_experts=0,
                score_func="softmax",
                route_norm=True,
                score_before_experts=False,
            )
            if moe
            else None,
        ),
    )


def hf_model(*, moe: bool, tied: bool = False):
    """The random Hugging Face model of the same shape (seed 0), float32, eval mode, SDPA."""
    common = dict(
        vocab_size=VOCAB,
        hidden_size=DIM,
        num_hidden_layers=2,
        num_attention_heads=N_HEADS,
        num_key_value_heads=N_KV_HEADS,
        head_dim=HEAD_DIM,
        rms_norm_eps=EPS,
        rope_parameters={"rope_type": "default", "rope_theta": THETA},
        max_position_embeddings=32,
        tie_word_embeddings=tied,
        attn_implementation="sdpa",
    )
    torch.manual_seed(0)
    if moe:
        config = transformers.Qwen3MoeConfig(
            intermediate_size=96,
            moe_intermediate_size=32,
            num_experts=4,
            num_experts_per_tok=2,
            norm_topk_prob=True,
            **common,
        )
        model = transformers.Qwen3MoeForCausalLM(config)
    else:
        model = transformers.Qwen3ForCausalLM(
            transformers.Qwen3Config(intermediate_size=96, **common)
        )
    # Hugging Face initializes norms to ones; random norms make the q/k norms count.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
    return model.eval()


def titan_from_hf(tmp_path, hf, config: Qwen3Model.Config) -> Qwen3Model:
    """A titan model loaded from ``hf`` saved with ``save_pretrained`` (safetensors)."""
    hf.save_pretrained(tmp_path)
    hf_state = load_file(tmp_path / "model.safetensors")
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device="cpu")
    model.init_weights()
    adapter = Qwen3StateDictAdapter(model_config=config, hf_assets_path=str(tmp_path))
    missing, unexpected = model.load_state_dict(adapter.from_hf(hf_state), strict=True)
    assert not missing and not unexpected
    return model.eval()


@pytest.mark.parametrize(("moe", "tied"), [(False, False), (False, True), (True, False)])
def test_logits_match_hugging_face(tmp_path, moe, tied):
    hf = hf_model(moe=moe, tied=tied)
    model = titan_from_hf(tmp_path, hf, tiny_config(moe=moe, tied=tied))
    tokens = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf(tokens).logits
        got = model(tokens)
    # Same math in float32; the kernels differ (torch RMSNorm vs HF's explicit one, SDPA with
    # HF's repeated kv heads, per-expert index_add vs titan's sorted grouped experts), which
    # could move the last bits of logits of magnitude ~1 (1e-5 absolute is ~100 ulps); on
    # torch 2.13 CPU they agree bit for bit.
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
    if tied:
        assert model.output.weight is model.tok_embeddings.weight


@pytest.mark.parametrize("moe", [False, True])
def test_bfloat16_autocast_forward_warns_nothing_and_matches_hugging_face(tmp_path, moe):
    # titan-train's one-process mixed precision: float32 weights, bfloat16 autocast. The q/k
    # norms get bfloat16 heads from the projections; handed to rms_norm with their float32
    # weights they warn (once a process, hence the dtype hooks as well as the filter).
    hf = hf_model(moe=moe)
    model = titan_from_hf(tmp_path, hf, tiny_config(moe=moe))
    seen = []
    for layer in model.layers.values():
        for norm in (layer.attention.q_norm, layer.attention.k_norm):
            norm.register_forward_pre_hook(
                lambda norm, args: seen.append((args[0].dtype, norm.weight.dtype))
            )
    tokens = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = model(tokens)
        expected = hf(tokens).logits
    assert seen == [(torch.float32, torch.float32)] * 4
    assert got.dtype == expected.dtype == torch.bfloat16
    # Both round to bfloat16 at different points (Hugging Face's norm rounds before its weight
    # multiplies); measured: one bfloat16 ulp (3.9e-3) at logits below 1.
    torch.testing.assert_close(got, expected, rtol=0, atol=8e-3)


@pytest.mark.parametrize("moe", [False, True])
def test_export_then_import_is_bitwise(tmp_path, moe):
    config = tiny_config(moe=moe)
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device="cpu")
    torch.manual_seed(3)
    model.init_weights()
    if moe:
        with torch.no_grad():
            for layer in model.layers.values():
                layer.moe.expert_bias.uniform_(-1, 1)
    adapter = Qwen3StateDictAdapter(model_config=config, hf_assets_path=None)
    state = model.state_dict()
    hf = adapter.to_hf(state)
    save_file({k: v.contiguous() for k, v in hf.items()}, tmp_path / "model.safetensors")
    back = adapter.from_hf(load_file(tmp_path / "model.safetensors"))
    assert set(back) == set(state)
    for key, value in state.items():
        if key.endswith("expert_bias"):
            assert torch.equal(back[key], torch.zeros_like(value))  # HF has no expert bias
        else:
            assert torch.equal(back[key], value), key
    if moe:
        assert "model.layers.1.mlp.experts.3.down_proj.weight" in hf
        assert hf["model.layers.1.mlp.experts.3.down_proj.weight"].shape == (DIM, 32)


@pytest.mark.parametrize("moe", [False, True])
def test_config_json_loads_in_hugging_face(moe):
    config = tiny_config(moe=moe)
    adapter = Qwen3StateDictAdapter(model_config=config, hf_assets_path=None)
    data = adapter.config_json()
    auto = transformers.AutoConfig.for_model(**json.loads(json.dumps(data)))
    assert auto.model_type == ("qwen3_moe" if moe else "qwen3")
    assert (auto.head_dim, auto.rms_norm_eps) == (HEAD_DIM, EPS)
    if moe:
        assert (auto.num_experts, auto.num_experts_per_tok, auto.norm_topk_prob) == (4, 2, True)


def test_adapter_refuses_what_hugging_face_cannot_express():
    config = tiny_config(moe=True)
    config.layer.moe.score_func = "sigmoid"
    config.layer.moe.num_shared_experts = 1
    with pytest.raises(ValueError, match="score_func 'sigmoid'.*1 shared experts"):
        Qwen3StateDictAdapter(model_config=config, hf_assets_path=None)
    adapter = Qwen3StateDictAdapter(model_config=tiny_config(moe=False), hf_assets_path=None)
    with pytest.raises(ValueError, match="'layers.0.attention.bogus' is not a qwen3"):
        adapter.to_hf({"layers.0.attention.bogus": torch.zeros(1)})


@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_flavor_builds_with_the_parameters_its_config_counts(flavor):
    config = model_registry("qwen3", flavor).model
    with torch.device("meta"):
        model = config.build()
    assert sum(p.numel() for p in model.parameters()) == config.num_params()
    moe_layers = [layer for layer in model.layers.values() if layer.moe_enabled]
    assert len(moe_layers) == (config.n_layers if config.layer.moe is not None else 0)


def test_half_rotation_by_hand():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(1, 1, 1, 4)
    assert rotate_half(x).view(-1).tolist() == [-3.0, -4.0, 1.0, 2.0]
    # Position 1 with frequencies (1, 0.5): pairs (x0, x2) and (x1, x3) rotate by 1 and 0.5 rad.
    angles = torch.tensor([1.0, 0.5, 1.0, 0.5])
    table = torch.stack([torch.zeros(8), torch.cat([angles.cos(), angles.sin()])])
    q, _ = apply_half_rotary_emb(torch.cat([x, x], dim=1), torch.cat([x, x], dim=1), table)
    c, s = angles.cos(), angles.sin()
    expected = torch.tensor([1.0, 2.0, 3.0, 4.0]) * c + torch.tensor([-3.0, -4.0, 1.0, 2.0]) * s
    torch.testing.assert_close(q[0, 1, 0], expected, rtol=0, atol=0)

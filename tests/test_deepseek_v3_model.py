"""The deepseek_v3 torch model, its YaRN rope and MLA attention, and the Hugging Face adapter.

The numerics anchor is a tiny random ``transformers`` DeepseekV3 saved with ``save_pretrained``
(safetensors, per-expert keys as DeepSeek publishes them), loaded into titan through the adapter.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import warnings

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3TopkRouter

from titan.models.common import FeedForward, MoE
from titan.models.common.moe_model import TokenChoiceTopKRouter
from titan.models.deepseek_v3 import FLAVORS, model_registry
from titan.models.deepseek_v3.model import (
    DeepSeekV3Model,
    MLAttention,
    YaRNRoPE,
    linear_ramp,
    yarn_correction_range,
)
from titan.models.deepseek_v3.model_config import DeepSeekV3TransformerBlock
from titan.models.deepseek_v3.state_dict_adapter import DeepSeekV3StateDictAdapter

# Tolerance of titan's logits against Hugging Face's, in float32. Both run the same math in
# a different order: SDPA with an explicit scale against transformers' attention call, the rope
# as complex products against cos/sin, YaRN's interpolated frequency as (1/p)/factor against
# 1/(factor·p), and the experts' weighted sum as bmm against index_add. Measured: at most
# 1.8e-7 on logits of magnitude 0.7 (a few float32 ulps); 1e-6 leaves room for other BLAS
# kernels without hiding a real error (a wrong rope layout or scale moves logits by 1e-3 or more).
LOGITS_ATOL = 1e-6
VOCAB, DIM, SEQ = 128, 64, 64


def hf_config(*, q_lora_rank: int | None, yarn: bool) -> DeepseekV3Config:
    """A 3-layer DeepseekV3 (1 dense, 2 MoE) with 8 experts in 4 groups, top-2 of 2 groups."""
    rope: dict = {"rope_type": "default", "rope_theta": 10000.0}
    if yarn:
        # The table (64 positions) reaches past the "pretraining" context (16): YaRN is on.
        rope = {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 40.0,
            "original_max_position_embeddings": 16,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 0.7,
            "mscale_all_dim": 0.7,
        }
    return DeepseekV3Config(
        vocab_size=VOCAB,
        hidden_size=DIM,
        intermediate_size=96,
        moe_intermediate_size=32,
        num_hidden_layers=3,
        first_k_dense_replace=1,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=q_lora_rank,
        kv_lora_rank=16,
        qk_nope_head_dim=16,
        qk_rope_head_dim=8,
        v_head_dim=16,
        n_routed_experts=8,
        n_shared_experts=1,
        num_experts_per_tok=2,
        n_group=4,
        topk_group=2,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        max_position_embeddings=SEQ,
        rope_parameters=rope,
        num_nextn_predict_layers=0,
    )


def titan_config(hf: DeepseekV3Config) -> DeepSeekV3Model.Config:
    """The titan config of Hugging Face config ``hf``, field by field."""
    rope = hf.rope_parameters
    return DeepSeekV3Model.Config(
        dim=hf.hidden_size,
        n_layers=hf.num_hidden_layers,
        vocab_size=hf.vocab_size,
        norm_eps=hf.rms_norm_eps,
        max_seq_len=hf.max_position_embeddings,
        rope=YaRNRoPE.Config(
            theta=rope["rope_theta"],
            original_seq_len=rope.get("original_max_position_embeddings", SEQ),
            rope_factor=rope.get("factor", 1.0),
            mscale=rope.get("mscale_all_dim", 1.0),
        ),
        layer=DeepSeekV3TransformerBlock.Config(
            attention=MLAttention.Config(
                n_heads=hf.num_attention_heads,
                q_lora_rank=hf.q_lora_rank or 0,
                kv_lora_rank=hf.kv_lora_rank,
                qk_nope_head_dim=hf.qk_nope_head_dim,
                qk_rope_head_dim=hf.qk_rope_head_dim,
                v_head_dim=hf.v_head_dim,
            ),
            feed_forward=FeedForward.Config(hidden_dim=hf.intermediate_size),
            moe=MoE.Config(
                hidden_dim=hf.moe_intermediate_size,
                num_experts=hf.n_routed_experts,
                num_shared_experts=hf.n_shared_experts,
                top_k=hf.num_experts_per_tok,
                score_func="sigmoid",
                route_norm=hf.norm_topk_prob,
                route_scale=hf.routed_scaling_factor,
                score_before_experts=False,
                num_expert_groups=hf.n_group,
                num_limited_groups=hf.topk_group,
            ),
            n_dense_layers=hf.first_k_dense_replace,
        ),
    )


def saved_hf_model(path, config: DeepseekV3Config, *, seed: int = 0) -> DeepseekV3ForCausalLM:
    """A random HF model with a random expert bias (so it steers routing), saved in ``path``."""
    torch.manual_seed(seed)
    model = DeepseekV3ForCausalLM(config).eval()
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buffer.copy_(0.05 * torch.randn_like(buffer))
    model.save_pretrained(path)
    return model


def titan_from_hf(path, config: DeepSeekV3Model.Config) -> DeepSeekV3Model:
    """titan's model of ``config`` with the weights of the HF checkpoint in ``path``."""
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device="cpu")
    model.init_weights()
    adapter = DeepSeekV3StateDictAdapter(model_config=config, hf_assets_path=None)
    model.load_state_dict(adapter.from_hf(load_file(path / "model.safetensors")), strict=True)
    return model.eval()


def tokens(seed: int = 1) -> torch.Tensor:
    """A [2, SEQ] batch of random token ids."""
    return torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- flavors


@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_flavor_builds_on_meta_with_its_parameter_count(flavor):
    """Each v0.2.2 flavor's modules hold exactly the parameters its config counts.

    The flex flavors (block-causal masks) build as they are: titan runs their masks on SDPA.
    """
    config = model_registry(flavor).model
    with torch.device("meta"):
        model = config.build()
    assert sum(p.numel() for p in model.parameters()) == config.num_params()


def test_flex_flavors_mask_every_layer_by_document():
    """16B asks for FlexAttention with block-causal masks: every MLA layer masks by document."""
    with torch.device("meta"):
        model = model_registry("16B").model.build()
    assert all(spec.documents for spec in model.mask_specs)


def test_debugmodel_names_match_torchtitan():
    """Dense leading layer uses feed_forward, the others moe; q_lora_rank 0 projects with wq."""
    config = model_registry("debugmodel").model
    with torch.device("meta"):
        model = config.build()
    names = set(dict(model.named_parameters()))
    assert "layers.0.feed_forward.w1.weight" in names
    assert "layers.1.moe.experts.w1" in names and "layers.1.moe.router.gate.weight" in names
    assert "layers.1.attention.wq.weight" in names and "layers.1.attention.wq_a.weight" not in names
    assert {"layers.1.attention.wkv_a.weight", "layers.1.attention.kv_norm.weight"} <= names
    assert "layers.1.moe.expert_bias" in dict(model.named_buffers())
    # torchtitan's final norm keeps RMSNorm's default eps (it never passes norm_eps to it).
    assert model.norm.eps is None and model.layers["0"].attention_norm.eps == config.norm_eps


def test_init_buffers_zeroes_the_token_counts_to_empty_left_unset():
    """The sharded CPU start-up only calls init_buffers: counts must not keep to_empty's memory."""
    config = titan_config(hf_config(q_lora_rank=None, yarn=False))
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device="cpu")
    for layer in model.layers.values():
        if layer.moe_enabled:
            layer.moe.tokens_per_expert.fill_(float("nan"))
    model.init_buffers()
    counts = [layer.moe.tokens_per_expert for layer in model.layers.values() if layer.moe_enabled]
    assert len(counts) == 2 and all(torch.equal(c, torch.zeros(8)) for c in counts)
    assert torch.equal(
        model.freqs_cis, YaRNRoPE(config=config.rope, head_dim=8, max_seq_len=SEQ).freqs_cis()
    )


# ----------------------------------------------------------------------------- YaRN rope


def test_yarn_correction_range_by_hand():
    """head_dim 64, theta 1e4, 4096 context: index = 64·ln(4096/(2π·r)) / (2·ln 1e4)."""
    config = YaRNRoPE.Config(original_seq_len=4096, beta_fast=32, beta_slow=1)
    # r=32: 64·ln(20.37)/18.42 = 10.47 -> floor 10; r=1: 64·ln(651.9)/18.42 = 22.51 -> ceil 23.
    assert yarn_correction_range(config, head_dim=64) == (10, 23)
    # head_dim 8, 16 positions: r=32 gives 8·ln(0.0796)/18.42 = -1.1 -> floor -2, clamped to 0;
    # r=1 gives 8·ln(2.546)/18.42 = 0.41 -> 1.
    assert yarn_correction_range(YaRNRoPE.Config(original_seq_len=16), head_dim=8) == (0, 1)
    # 1e9 positions: r=1 gives 8·ln(1.59e8)/18.42 = 8.2 -> 9, clamped to head_dim - 1.
    assert yarn_correction_range(YaRNRoPE.Config(original_seq_len=10**9), head_dim=8) == (6, 7)


def test_linear_ramp_by_hand():
    """0 up to ``low``, linear to 1 at ``high``; equal bounds are widened, not divided by 0."""
    assert linear_ramp(5, low=1, high=3).tolist() == [0.0, 0.0, 0.5, 1.0, 1.0]
    assert linear_ramp(4, low=2, high=2).tolist() == [
        0.0,
        0.0,
        0.0,
        1.0,
    ]  # a step just past index 2


def test_yarn_frequencies_and_temperature_by_hand():
    """Past the pretraining context: fast bands kept, slow bands divided by rope_factor."""
    config = YaRNRoPE.Config(
        theta=10000.0,
        original_seq_len=4096,
        rope_factor=40.0,
        beta_fast=32,
        beta_slow=1,
        mscale=0.7,
    )
    plain = 1.0 / 10000.0 ** (torch.arange(0, 64, 2).float() / 64)
    short = YaRNRoPE(config=config, head_dim=64, max_seq_len=4096)
    assert torch.equal(short.inverse_frequencies(), plain) and short.attention_scale() == 1.0
    long = YaRNRoPE(config=config, head_dim=64, max_seq_len=8192)
    freqs = long.inverse_frequencies()
    # (10, 23) from the hand-computed range: index 10 and below kept, 23 and above / 40.
    assert torch.equal(freqs[:11], plain[:11])
    torch.testing.assert_close(freqs[23:], plain[23:] / 40.0, rtol=1e-6, atol=0)
    keep = 1 - (16 - 10) / (23 - 10)  # index 16 is 6/13 of the way down the ramp
    torch.testing.assert_close(freqs[16], plain[16] * keep + plain[16] / 40 * (1 - keep))
    assert long.attention_scale() == pytest.approx((0.1 * 0.7 * math.log(40) + 1) ** 2)


def test_softmax_scale_carries_the_yarn_temperature():
    """MLA's softmax scale is 1/sqrt(qk_head_dim), times mscale² only when YaRN is on."""
    for max_seq_len, factor in ((16, 1.0), (64, (0.1 * 0.7 * math.log(40.0) + 1) ** 2)):
        config = titan_config(hf_config(q_lora_rank=None, yarn=True))
        config.max_seq_len = max_seq_len
        with torch.device("meta"):
            model = config.build()
        assert model.layers["0"].attention.softmax_scale == pytest.approx(24**-0.5 * factor)


# ----------------------------------------------------------------------------- routing


def test_group_limited_routing_matches_hugging_face():
    """titan's router picks the same experts with the same weights as HF's n_group/topk_group."""
    hf = hf_config(q_lora_rank=None, yarn=False)
    torch.manual_seed(0)
    reference = DeepseekV3TopkRouter(hf)
    torch.nn.init.normal_(reference.weight, std=0.5)
    reference.e_score_correction_bias.copy_(0.1 * torch.randn(8))
    router = TokenChoiceTopKRouter(config=titan_config(hf).layer.moe, dim=DIM)
    router.gate.weight.data.copy_(reference.weight)
    x = torch.randn(200, DIM)
    _, hf_weights, hf_experts = reference(x)
    weights, experts, _ = router(x, reference.e_score_correction_bias)
    hf_order, order = hf_experts.sort(dim=-1), experts.sort(dim=-1)
    assert torch.equal(order.values, hf_order.values)
    torch.testing.assert_close(
        weights.gather(1, order.indices), hf_weights.gather(1, hf_order.indices)
    )
    # The groups matter: routing over all 8 experts picks other experts for some tokens.
    ungrouped = dataclasses.replace(
        titan_config(hf).layer.moe, num_expert_groups=None, num_limited_groups=None
    )
    free = TokenChoiceTopKRouter(config=ungrouped, dim=DIM)
    free.gate.weight.data.copy_(reference.weight)
    _, free_experts, _ = free(x, reference.e_score_correction_bias)
    assert not torch.equal(free_experts.sort(dim=-1).values, order.values)


# ----------------------------------------------------------------------------- Hugging Face


@pytest.mark.parametrize(
    ("q_lora_rank", "yarn"), [(24, False), (None, True)], ids=["q_lora", "direct_q_yarn"]
)
def test_logits_match_hugging_face(tmp_path, q_lora_rank, yarn):
    """A saved HF DeepseekV3 loaded through the adapter gives HF's logits within LOGITS_ATOL.

    One difference is compared away: torchtitan's (and titan's) final norm uses RMSNorm's
    default eps where HF uses rms_norm_eps; with HF's 0.02-std embeddings that alone moves
    logits by about 1e-3, so the test gives titan's final norm HF's eps.
    """
    hf = hf_config(q_lora_rank=q_lora_rank, yarn=yarn)
    reference = saved_hf_model(tmp_path, hf)
    model = titan_from_hf(tmp_path, titan_config(hf))
    model.norm.eps = hf.rms_norm_eps
    with torch.no_grad():
        expected = reference(tokens()).logits
        actual = model(tokens())
    torch.testing.assert_close(actual, expected, rtol=0, atol=LOGITS_ATOL)


def test_bfloat16_autocast_forward_does_not_warn_and_norms_see_their_weight_dtype(tmp_path):
    # titan-train's one-process mixed precision: float32 weights, bfloat16 autocast. The latent
    # norms get bfloat16 projections; handed to rms_norm with float32 weights they warn (once a
    # process, hence the dtype hooks as well as the filter).
    hf = hf_config(q_lora_rank=24, yarn=True)
    saved_hf_model(tmp_path, hf)
    model = titan_from_hf(tmp_path, titan_config(hf))
    with torch.no_grad():
        fp32 = model(tokens())
    seen = []
    for layer in model.layers.values():
        for norm in (layer.attention.q_norm, layer.attention.kv_norm):
            norm.register_forward_pre_hook(
                lambda norm, args: seen.append((args[0].dtype, norm.weight.dtype))
            )
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = model(tokens())
    assert seen == [(torch.float32, torch.float32)] * (2 * len(model.layers))
    assert got.dtype == torch.bfloat16
    # bfloat16 matmuls against the float32 forward: a few bfloat16 ulps at logits below 1.
    torch.testing.assert_close(got.float(), fp32, rtol=0, atol=5e-2)


def test_export_loads_in_hugging_face_with_the_same_logits(tmp_path):
    """titan -> to_hf + config_json -> HF from_pretrained computes titan's logits; back is bitwise."""
    config = titan_config(hf_config(q_lora_rank=24, yarn=True))
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device="cpu")
    torch.manual_seed(3)
    model.init_weights()
    model.eval()
    for layer in model.layers.values():
        if layer.moe_enabled:
            layer.moe.expert_bias.copy_(0.05 * torch.randn(8))
    adapter = DeepSeekV3StateDictAdapter(model_config=config, hf_assets_path=None)
    hf_state = adapter.to_hf(model.state_dict())
    save_file({k: v.contiguous() for k, v in hf_state.items()}, tmp_path / "model.safetensors")
    (tmp_path / "config.json").write_text(json.dumps(adapter.config_json()))
    reference = DeepseekV3ForCausalLM.from_pretrained(tmp_path).eval()
    model.norm.eps = reference.config.rms_norm_eps  # see test_logits_match_hugging_face
    with torch.no_grad():
        torch.testing.assert_close(
            model(tokens()), reference(tokens()).logits, rtol=0, atol=LOGITS_ATOL
        )
    back = adapter.from_hf(load_file(tmp_path / "model.safetensors"))
    state = model.state_dict()
    assert set(back) == set(state)
    assert all(torch.equal(back[key], value) for key, value in state.items())


def test_rope_interleave_false_checkpoints_are_permuted_both_ways(tmp_path):
    """An HF checkpoint that rotates halves (rope_interleave false in its config.json) gives HF's
    logits in titan, and the export of that adapter is the checkpoint again, bit for bit."""
    hf = hf_config(q_lora_rank=24, yarn=True)
    hf.rope_interleave = False
    reference = saved_hf_model(tmp_path, hf)
    config = titan_config(hf)
    adapter = DeepSeekV3StateDictAdapter(model_config=config, hf_assets_path=str(tmp_path))
    assert adapter.rope_interleave is False and adapter.config_json()["rope_interleave"] is False
    saved = load_file(tmp_path / "model.safetensors")
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device="cpu")
    model.init_weights()
    model.load_state_dict(adapter.from_hf(saved), strict=True)
    model.eval().norm.eps = hf.rms_norm_eps  # see test_logits_match_hugging_face
    with torch.no_grad():
        expected = reference(tokens()).logits
        torch.testing.assert_close(model(tokens()), expected, rtol=0, atol=LOGITS_ATOL)
    back = adapter.to_hf(model.state_dict())
    assert set(back) == set(saved) and all(torch.equal(back[k], v) for k, v in saved.items())
    # The interleaved reading of the same file differs: the permutation is not a no-op.
    plain = DeepSeekV3StateDictAdapter(model_config=config, hf_assets_path=None).from_hf(saved)
    assert not torch.equal(
        plain["layers.0.attention.wkv_a.weight"], model.layers["0"].attention.wkv_a.weight
    )


def test_adapter_reads_transformers_fused_experts():
    """transformers' in-memory gate_up_proj/down_proj give the same stacked w1/w3/w2."""
    hf = hf_config(q_lora_rank=None, yarn=False)
    torch.manual_seed(0)
    reference = DeepseekV3ForCausalLM(hf)
    adapter = DeepSeekV3StateDictAdapter(model_config=titan_config(hf), hf_assets_path=None)
    state = adapter.from_hf(reference.state_dict())
    fused = reference.model.layers[1].mlp.experts
    assert torch.equal(state["layers.1.moe.experts.w1"], fused.gate_up_proj[:, :32])
    assert torch.equal(state["layers.1.moe.experts.w3"], fused.gate_up_proj[:, 32:])
    assert torch.equal(state["layers.1.moe.experts.w2"], fused.down_proj)


def test_adapter_refuses_what_it_cannot_place():
    """Unknown keys, missing experts, and a non-zero bias without expert_bias are errors."""
    hf = hf_config(q_lora_rank=None, yarn=False)
    config = titan_config(hf)
    adapter = DeepSeekV3StateDictAdapter(model_config=config, hf_assets_path=None)
    with pytest.raises(ValueError, match="not a deepseek_v3 state-dict key"):
        adapter.from_hf({"model.layers.0.self_attn.rotary.weight": torch.zeros(1)})
    some_experts = {
        f"model.layers.1.mlp.experts.{j}.up_proj.weight": torch.zeros(2) for j in (0, 2)
    }
    with pytest.raises(ValueError, match=r"needs experts 0..7, the checkpoint has \[0, 2\]"):
        adapter.from_hf(some_experts)
    config.layer.moe.load_balance_coeff = None
    no_bias = DeepSeekV3StateDictAdapter(model_config=config, hf_assets_path=None)
    bias = "model.layers.1.mlp.gate.e_score_correction_bias"
    assert no_bias.from_hf({bias: torch.zeros(8)}) == {}
    with pytest.raises(ValueError, match="set moe.load_balance_coeff"):
        no_bias.from_hf({bias: torch.ones(8)})
    exported = no_bias.to_hf({"layers.1.moe.router.gate.weight": torch.ones(8, DIM)})
    assert torch.equal(exported[bias], torch.zeros(8))


def test_adapter_skips_the_multi_token_prediction_layer():
    """DeepSeek-V3's layer after the last (eh_proj, enorm, ...) is not titan's: skipped whole."""
    hf = hf_config(q_lora_rank=None, yarn=False)
    adapter = DeepSeekV3StateDictAdapter(model_config=titan_config(hf), hf_assets_path=None)
    norm = torch.ones(DIM)
    mtp = {
        "model.layers.3.eh_proj.weight": torch.zeros(DIM, 2 * DIM),
        "model.layers.3.enorm.weight": norm,
        "model.layers.3.input_layernorm.weight": norm,
    }
    state = adapter.from_hf({"model.layers.0.input_layernorm.weight": norm, **mtp})
    assert state == {"layers.0.attention_norm.weight": norm}
    # Without its eh_proj a layer is not a prediction module: its unknown keys are errors.
    del mtp["model.layers.3.eh_proj.weight"]
    with pytest.raises(ValueError, match="'model.layers.3.enorm.weight' is not a deepseek_v3"):
        adapter.from_hf(mtp)


def test_config_json_notes_softmax_routing(caplog):
    """The debug flavor routes by softmax, which HF's DeepseekV3 cannot: the log says so."""
    config = model_registry("debugmodel").model
    adapter = DeepSeekV3StateDictAdapter(model_config=config, hf_assets_path=None)
    with caplog.at_level(logging.INFO):
        exported = adapter.config_json()
    assert "score_func 'softmax'" in caplog.text
    assert exported["first_k_dense_replace"] == 1 and exported["q_lora_rank"] is None
    # The flavor's table (16384 positions) reaches past original_seq_len 4096: YaRN, with
    # titan's mscale as HF's mscale_all_dim; trained at 2048 (the trainer sets max_seq_len) it
    # is plain rope, as torchtitan computes it.
    assert exported["rope_parameters"] == {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 40,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
        "mscale": 0.7,
        "mscale_all_dim": 0.7,
    }
    config.max_seq_len = 2048
    assert adapter.config_json()["rope_parameters"]["rope_type"] == "default"
    sigmoid = model_registry("671B").model
    assert (
        DeepSeekV3StateDictAdapter(model_config=sigmoid, hf_assets_path=None).hf_differences() == []
    )

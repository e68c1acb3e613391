"""gpt_oss in titan: every flavor builds, a tiny Hugging Face gpt-oss loads through the adapter and
gives the same logits, export/import is exact, and the family's special parts compute what
torchtitan v0.2.2 and Hugging Face compute (masks, sinks, YaRN rope, clamped SwiGLU).
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from titan.models.common.attention_masks import MaskSpec
from titan.models.gpt_oss import FLAVORS, model_registry
from titan.models.gpt_oss.model import (
    GptOssRoPE,
    clamped_swiglu,
    sink_attention,
    yarn_correction_range,
)
from titan.models.gpt_oss.model_config import (
    GptOssAttention,
    GptOssModel,
    GptOssMoE,
    GptOssTransformerBlock,
)
from titan.models.gpt_oss.model_config import GptOssRoPE as GptOssRoPESpec
from titan.models.gpt_oss.state_dict_adapter import GptOssStateDictAdapter

transformers = pytest.importorskip("transformers")

# The tiny model both sides build: 2 layers (one sliding, one full), width 64, 4 experts of
# which each token uses 2, heads of 16 (independent of the width), a window of 8 positions
# (shorter than the test sequence), and gpt-oss's own YaRN rope (factor 32, theta 150000).
DIM, LAYERS, VOCAB, HIDDEN, EXPERTS, TOP_K = 64, 2, 128, 32, 4, 2
HEADS, KV_HEADS, HEAD_DIM, WINDOW, SEQ = 4, 2, 16, 8, 40
THETA, ORIGINAL_SEQ, FACTOR = 150000.0, 4096, 32.0
# Small enough that the clamps bind for the weights below (checked in the test).
SWIGLU_LIMIT = 1.5


def tiny_config() -> GptOssModel.Config:
    """titan's config of the tiny model, with gpt-oss's routing (as every v0.2.2 flavor)."""
    return GptOssModel.Config(
        dim=DIM,
        n_layers=LAYERS,
        vocab_size=VOCAB,
        max_seq_len=64,
        rope=GptOssRoPESpec.Config(theta=THETA, original_seq_len=ORIGINAL_SEQ, rope_factor=FACTOR),
        layer=GptOssTransformerBlock.Config(
            attention=GptOssAttention.Config(
                n_heads=HEADS, n_kv_heads=KV_HEADS, head_dim=HEAD_DIM, sliding_window_size=WINDOW
            ),
            feed_forward=None,
            moe=GptOssMoE.Config(
                hidden_dim=HIDDEN,
                num_experts=EXPERTS,
                top_k=TOP_K,
                num_shared_experts=0,
                score_func="softmax",
                route_norm=True,
                gate_bias=True,
                score_before_experts=False,
                swiglu_limit=SWIGLU_LIMIT,
            ),
        ),
    )


def tiny_hf_model():
    """A random ``GptOssForCausalLM`` of the tiny shape whose every part matters to the logits.

    Hugging Face initializes biases at zero and weights at std 0.02, which would leave the
    biases, sinks and clamps untested; they are redrawn here at scales where each one moves
    the logits.
    """
    config = transformers.GptOssConfig(
        num_hidden_layers=LAYERS,
        num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        vocab_size=VOCAB,
        hidden_size=DIM,
        intermediate_size=HIDDEN,
        head_dim=HEAD_DIM,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        sliding_window=WINDOW,
        max_position_embeddings=ORIGINAL_SEQ * int(FACTOR),
        swiglu_limit=SWIGLU_LIMIT,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": THETA,
            "factor": FACTOR,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": False,
            "original_max_position_embeddings": ORIGINAL_SEQ,
        },
    )
    torch.manual_seed(0)
    model = transformers.GptOssForCausalLM(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            elif name.endswith(("bias", "sinks")):
                param.normal_(0.0, 0.5)
            elif "experts" in name or "router" in name:
                param.normal_(0.0, 0.2)
            else:
                param.normal_(0.0, 0.1)
    return model


def titan_model(config: GptOssModel.Config) -> torch.nn.Module:
    """A built, initialized titan model of ``config`` on CPU."""
    model = config.build()
    model.init_weights()
    return model.eval()


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    """A ``save_pretrained`` folder (safetensors + config.json) of the tiny HF model."""
    folder = tmp_path_factory.mktemp("hf_gpt_oss")
    tiny_hf_model().save_pretrained(folder)
    return folder


def read_safetensors(folder) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / "model.safetensors"))


def tokens() -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))


# --------------------------------------------------------------------------- flavors


@pytest.mark.parametrize("flavor", FLAVORS)
def test_every_flavor_builds_on_meta_with_the_config_parameter_count(flavor):
    config = model_registry(flavor).model
    with torch.device("meta"):
        model = config.build()
    assert sum(p.numel() for p in model.parameters()) == config.num_params()
    layer = model.layers["0"]
    assert layer.attention.window == config.layer.attention.sliding_window_size
    assert model.layers["1"].attention.window is None  # odd layers attend fully
    assert tuple(layer.moe.experts.mlp1_weight.shape) == (
        config.layer.moe.num_experts,
        2 * config.layer.moe.hidden_dim,
        config.dim,
    )


def test_flops_per_token_count_the_routed_experts_with_their_biases():
    # torchtitan's count from the module itself: every parameter but the embedding, of the
    # experts (biases included) only top_k / num_experts, 6 FLOPs each, plus attention's
    # 6 * layers * heads * (2 * head_dim) * seq.
    config = tiny_config()
    with torch.device("meta"):
        model = config.build()
    params = dict(model.named_parameters())
    experts = sum(p.numel() for n, p in params.items() if ".moe.experts." in n)
    dense = sum(p.numel() for n, p in params.items() if ".moe.experts." not in n)
    embedding = params["tok_embeddings.weight"].numel()
    active = dense - embedding + experts * TOP_K // EXPERTS
    attention = 6 * LAYERS * HEADS * 2 * HEAD_DIM * SEQ
    assert config.flops_per_token(SEQ) == 6 * active + attention


def test_every_flavor_keeps_flex_attention_which_titan_computes_with_explicit_masks():
    # torchtitan only runs gpt_oss on FlexAttention; titan keeps the flavor's attn_type and
    # computes the same masks and sink softmax (see titan.models.gpt_oss.model).
    for flavor in FLAVORS:
        assert model_registry(flavor).model.layer.attention.attn_type == "flex"


def test_block_causal_keeps_each_document_to_itself_on_every_layer():
    # A document after another gives the logits it gives alone: rope and window are relative,
    # so only the mask could let the first document leak into the second.
    config = tiny_config()
    config.layer.attention.attn_mask_type = "block_causal"
    model = titan_model(config)
    assert [layer.attention.mask_spec for layer in model.layers.values()] == [
        MaskSpec(documents=True, window=WINDOW),
        MaskSpec(documents=True),
    ]
    eos = 0
    first = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12, 13, eos]])
    second = torch.randint(1, VOCAB, (1, 20), generator=torch.Generator().manual_seed(2))
    both = torch.cat([first, second], dim=1)
    with torch.no_grad():
        together = model(both, model.attention_masks(both, eos_id=eos))
        alone = model(second, model.attention_masks(second, eos_id=eos))
    torch.testing.assert_close(together[:, first.shape[1] :], alone, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="needs the id of the EOS token"):
        model(both)


def test_init_on_meta_then_to_empty_sets_every_tensor_the_same_way_each_time():
    # The router's gate bias included: torchtitan leaves it as to_empty's memory.
    def built(seed: int) -> dict[str, torch.Tensor]:
        with torch.device("meta"):
            model = tiny_config().build()
        model.to_empty(device="cpu")
        for param in model.parameters():
            param.data.fill_(float("nan"))  # what to_empty leaves is anything, NaN included
        torch.manual_seed(seed)
        model.init_weights()
        return model.state_dict()

    first, again = built(0), built(0)
    assert all(torch.isfinite(v).all() for v in first.values())
    assert all(torch.equal(first[k], again[k]) for k in first)
    gate_bias = first["layers.1.moe.router.gate.bias"]
    assert 0 < gate_bias.abs().max() < 10 * 0.02 / 4**0.5  # drawn at layer 1's std, 0.01


def test_init_buffers_alone_zeroes_the_token_counts_to_empty_left():
    with torch.device("meta"):
        model = tiny_config().build()
    model.to_empty(device="cpu")
    for layer in model.layers.values():
        layer.moe.tokens_per_expert.fill_(float("nan"))
    model.init_buffers()
    for layer in model.layers.values():
        assert torch.equal(layer.moe.tokens_per_expert, torch.zeros(EXPERTS))
    assert torch.equal(model.freqs_cis, model.rope.rope_cache())


# --------------------------------------------------------------------------- Hugging Face


def test_hf_model_loads_through_the_adapter_with_the_same_logits(hf_folder):
    hf = transformers.GptOssForCausalLM.from_pretrained(hf_folder).eval()
    config = tiny_config()
    model = titan_model(config)
    adapter = GptOssStateDictAdapter(model_config=config, hf_assets_path=str(hf_folder))
    model.load_state_dict(adapter.from_hf(read_safetensors(hf_folder)), strict=True)
    with torch.no_grad():
        ours = model(tokens())
        theirs = hf(tokens()).logits
    # Both compute in float32 with the same operations in a different order (softmax over all
    # experts then renormalised vs softmax over the top-k logits; the sink as an extra column
    # of the softmax vs last; RMSNorm as torch's fused op vs written out). Each reorder moves a
    # result by a few float32 ulps (~1e-7 relative), and two layers amplify that by at most a
    # few; 1e-5 of the logits' scale is 100x that margin and far below any real mismatch
    # (a wrong mask, rope or clamp moves the logits by > 1e-2 of their scale).
    scale = theirs.abs().max().item()
    assert scale > 1.0  # the redrawn weights make every part matter
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5 * scale)


def test_the_swiglu_clamps_bind_in_the_compared_model(hf_folder):
    # Without this the logits comparison above would not test the clamps.
    hf = transformers.GptOssForCausalLM.from_pretrained(hf_folder).eval()
    seen = []
    experts = hf.model.layers[0].mlp.experts
    hook = experts.register_forward_hook(lambda m, args, out: seen.append(args[0]))
    with torch.no_grad():
        hf(tokens())
    hook.remove()
    gate_up = seen[0] @ experts.gate_up_proj[0] + experts.gate_up_proj_bias[0]
    assert (gate_up.abs() > SWIGLU_LIMIT).float().mean() > 0.1


def test_export_import_is_bitwise_and_has_hf_names_and_shapes(hf_folder):
    config = tiny_config()
    torch.manual_seed(3)
    model = titan_model(config)
    adapter = GptOssStateDictAdapter(model_config=config, hf_assets_path=None)
    state = model.state_dict()
    hf_state = adapter.to_hf(state)
    reference = read_safetensors(hf_folder)
    assert {k: tuple(v.shape) for k, v in hf_state.items()} == {
        k: tuple(v.shape) for k, v in reference.items()
    }
    back = adapter.from_hf(hf_state)
    assert set(back) == set(state)
    for key, value in state.items():
        assert torch.equal(back[key], value), key


def test_export_runs_in_hf_from_its_config_json(tmp_path):
    from safetensors.torch import save_file

    config = tiny_config()
    torch.manual_seed(4)
    model = titan_model(config)
    adapter = GptOssStateDictAdapter(model_config=config, hf_assets_path=None)
    hf_state = {k: v.contiguous() for k, v in adapter.to_hf(model.state_dict()).items()}
    save_file(hf_state, str(tmp_path / "model.safetensors"), {"format": "pt"})
    (tmp_path / "config.json").write_text(json.dumps(adapter.config_json()), encoding="utf-8")
    hf = transformers.GptOssForCausalLM.from_pretrained(tmp_path).eval()
    assert hf.config.max_position_embeddings == ORIGINAL_SEQ * FACTOR
    assert hf.config.layer_types == ["sliding_attention", "full_attention"]
    with torch.no_grad():
        ours, theirs = model(tokens()), hf(tokens()).logits
    # Same reasoning and bound as the import test.
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5 * theirs.abs().max().item())


def test_import_starts_the_expert_bias_at_zero(hf_folder):
    config = tiny_config()
    adapter = GptOssStateDictAdapter(model_config=config, hf_assets_path=None)
    state = adapter.from_hf(read_safetensors(hf_folder))
    for layer in range(LAYERS):
        bias = state[f"layers.{layer}.moe.expert_bias"]
        assert bias.dtype == torch.float32 and torch.equal(bias, torch.zeros(EXPERTS))
    config.layer.moe.load_balance_coeff = None
    unbalanced = GptOssStateDictAdapter(model_config=config, hf_assets_path=None)
    assert not any("expert_bias" in k for k in unbalanced.from_hf(read_safetensors(hf_folder)))


def test_adapter_names_what_it_cannot_convert(caplog):
    config = tiny_config()
    adapter = GptOssStateDictAdapter(model_config=config, hf_assets_path=None)
    with pytest.raises(ValueError, match="'layers.0.moe.experts.w1' is not a gpt_oss"):
        adapter.to_hf({"layers.0.moe.experts.w1": torch.zeros(1)})
    with pytest.raises(ValueError, match="MXFP4"):
        adapter.get_hf_storage_reader("unused", from_quantized=True)
    assert "would misroute" not in caplog.text
    adapter.config_json()
    assert "would misroute" not in caplog.text
    config.layer.moe.score_func = "sigmoid"
    adapter.config_json()
    assert "routes with score_func='softmax'; this model has score_func='sigmoid'" in caplog.text


# --------------------------------------------------------------------------- special parts


def test_even_layers_slide_over_the_window_and_odd_layers_see_everything_before():
    model = titan_model(tiny_config())
    specs = [layer.attention.mask_spec for layer in model.layers.values()]
    assert specs == [MaskSpec(window=WINDOW), MaskSpec()]
    sliding = MaskSpec(window=2).build(seqlen=4, device=torch.device("cpu"))[0, 0]
    # Each query sees itself and the one before it: q - kv < 2, torchtitan's sliding window.
    assert sliding.int().tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]]


def test_sink_takes_probability_mass_without_a_value():
    # One query, two keys with logits 0 (q = 0) and values 1 and 3: without a sink the output is
    # their mean 2; a sink logit s adds e^s to the denominator: 2 * 2 / (2 + e^s).
    q = torch.zeros(1, 1, 2, 4)
    k = torch.randn(1, 1, 2, 4)
    v = torch.tensor([1.0, 3.0]).view(1, 1, 2, 1).expand(1, 1, 2, 4)
    mask = MaskSpec().build(seqlen=2, device=torch.device("cpu"))
    for sink in (-30.0, 0.0, math.log(2.0)):
        out = sink_attention(q, k, v, sinks=torch.tensor([sink]), mask=mask)
        expected = 2 * 2 / (2 + math.exp(sink))
        torch.testing.assert_close(out[0, 0, 1], torch.full((4,), expected))
    # The first query sees only key 0: 1 * 1 / (1 + e^0) with sink 0.
    out = sink_attention(q, k, v, sinks=torch.tensor([0.0]), mask=mask)
    torch.testing.assert_close(out[0, 0, 0], torch.full((4,), 0.5))


def test_clamped_swiglu_on_hand_computed_values():
    # Interleaved columns: (gate, up) pairs. limit 7, alpha 1.702.
    h = torch.tensor([[0.0, 0.0, 1.0, 2.0, 10.0, -10.0, -2.0, 8.0]])
    out = clamped_swiglu(h, limit=7.0)
    sig = lambda x: 1 / (1 + math.exp(-1.702 * x))  # noqa: E731
    expected = [
        0.0,  # gate 0 -> glu 0
        1.0 * sig(1.0) * (2.0 + 1),
        7.0 * sig(7.0) * (-7.0 + 1),  # gate clamped above to 7, up clamped below to -7
        -2.0 * sig(-2.0) * (7.0 + 1),  # gate not clamped below, up clamped above to 7
    ]
    torch.testing.assert_close(out, torch.tensor([expected]))


def test_yarn_range_and_concentration_of_the_20b_rope():
    rope_config = model_registry("20b").model.rope
    # low = 32 ln(4096 / (32 * 2 pi)) / ln(150000), high = 32 ln(4096 / (1 * 2 pi)) / ln(150000)
    low, high = yarn_correction_range(rope_config, head_dim=64)
    assert low == pytest.approx(8.0928, abs=1e-4)
    assert high == pytest.approx(17.3980, abs=1e-4)
    rope = GptOssRoPE(config=rope_config, head_dim=64, max_seq_len=4)
    assert rope.concentration() == pytest.approx(0.1 * math.log(32) + 1)
    freqs = rope.inverse_frequencies()
    plain = 1.0 / (150000.0 ** (torch.arange(0, 64, 2).float() / 64))
    assert torch.equal(freqs[:9], plain[:9])  # bands 0..8, up to low, are kept
    torch.testing.assert_close(freqs[18:], plain[18:] / 32)  # bands from 18 > high interpolated
    assert torch.all((freqs[9:18] < plain[9:18]) & (freqs[9:18] > plain[9:18] / 32))
    cache = rope.rope_cache()
    assert cache.shape == (4, 128)
    # Position 0: cos = concentration, sin = 0, for every band.
    torch.testing.assert_close(cache[0, :64], torch.full((64,), rope.concentration()))
    assert torch.equal(cache[0, 64:], torch.zeros(64))


def test_rope_factor_one_leaves_frequencies_unscaled():
    config = GptOssRoPESpec.Config(theta=10000.0, rope_factor=1.0)
    rope = GptOssRoPE(config=config, head_dim=8, max_seq_len=3)
    expected = 1.0 / (10000.0 ** (torch.arange(0, 8, 2).float() / 8))
    assert torch.equal(rope.inverse_frequencies(), expected)
    assert rope.concentration() == 1.0
    angles = 2 * expected
    torch.testing.assert_close(
        rope.rope_cache()[2], torch.cat([angles.cos()] * 2 + [angles.sin()] * 2)
    )


def test_yarn_range_outside_the_head_is_a_clear_error():
    config = GptOssRoPESpec.Config(theta=10000.0, rope_factor=4.0, original_seq_len=16)
    with pytest.raises(ValueError, match="YaRN needs 0 < low < high"):
        GptOssRoPE(config=config, head_dim=16, max_seq_len=4).inverse_frequencies()


class _TwoRanks:
    """Stands in for a 2-rank TP mesh: the plan's checks read only its size."""

    def size(self) -> int:
        return 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_shared_experts": 1}, "no split for shared experts"),
        ({"score_before_experts": True}, "score_before_experts = False"),
        ({"hidden_dim": 33}, r"tensor_parallel_degree \(2\) must divide the experts' hidden"),
    ],
)
def test_tp_plan_refuses_an_moe_it_cannot_split_before_touching_the_model(change, message):
    from titan.models.gpt_oss.parallelize import parallelize_gpt_oss

    config = tiny_config()
    for name, value in change.items():
        setattr(config.layer.moe, name, value)
    with torch.device("meta"):
        model = config.build()
    with pytest.raises(ValueError, match=message):
        parallelize_gpt_oss(
            model,
            tp_mesh=_TwoRanks(),
            loss_parallel=True,
            float8_enabled=False,
            moe_layout="replicated",
        )


def test_grouped_gemm_experts_match_the_loop():
    # Empty experts and groups that are not multiples of the padding included.
    from titan.models.gpt_oss.model import GptOssGroupedExperts

    torch.manual_seed(0)
    experts = GptOssGroupedExperts(
        dim=DIM, hidden_dim=HIDDEN, num_experts=EXPERTS, swiglu_limit=1.5, use_grouped_mm=True
    )
    experts.init_weights(0.3)
    counts = torch.tensor([5, 0, 9, 3])
    x = torch.randn(int(counts.sum()), DIM)
    weights = torch.randn(int(counts.sum()), DIM)

    def run(grouped: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        experts.use_grouped_mm = grouped
        experts.zero_grad()
        out = experts(x, counts)
        (out * weights).sum().backward()
        return out.detach(), {n: p.grad.clone() for n, p in experts.named_parameters()}

    (grouped, grouped_grads), (loop, loop_grads) = run(True), run(False)
    # float32 GEMMs in another summation order: a few ulps of values of size ~5 to ~50.
    torch.testing.assert_close(grouped, loop, rtol=0, atol=1e-5)
    for name, grad in loop_grads.items():
        assert torch.isfinite(grouped_grads[name]).all(), name
        torch.testing.assert_close(grouped_grads[name], grad, rtol=1e-5, atol=1e-4)

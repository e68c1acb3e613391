"""The llama3 torch model, its building blocks, the loss and the Hugging Face adapter (tiny sizes)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from titan.components.loss import build_cross_entropy_loss
from titan.config.configurable import NotBuildableError
from titan.models import model_registry
from titan.models.common import Attention, FeedForward, LlamaRoPE, TransformerBlock
from titan.models.common import model as common
from titan.models.llama3.model import Llama3Model
from titan.models.llama3.state_dict_adapter import LAYER_KEYS, Llama3StateDictAdapter

DIM, N_HEADS, N_KV_HEADS, VOCAB, SEQ = 64, 8, 2, 128, 12


def tiny_config(*, n_kv_heads: int | None = N_KV_HEADS, init_std="by_layer", n_layers=2):
    """A two-layer GQA llama3 with llama-scaled rope."""
    return Llama3Model.Config(
        dim=DIM,
        n_layers=n_layers,
        vocab_size=VOCAB,
        max_seq_len=32,
        rope=LlamaRoPE.Config(theta=500000.0, scaling="llama"),
        layer=TransformerBlock.Config(
            attention=Attention.Config(n_heads=N_HEADS, n_kv_heads=n_kv_heads),
            feed_forward=FeedForward.Config(multiple_of=32),
            init_std=init_std,
        ),
    )


def initialized(config, *, seed=0):
    """The model of ``config`` built on meta, materialized on CPU, initialized under ``seed``."""
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device="cpu")
    torch.manual_seed(seed)
    model.init_weights()
    return model


@pytest.fixture(scope="module")
def model():
    """The tiny GQA model, initialized under seed 0."""
    return initialized(tiny_config())


# ----------------------------------------------------------------------------- structure


@pytest.mark.parametrize(
    "config",
    [model_registry("llama3", "debugmodel").model, tiny_config()],
    ids=["debugmodel", "gqa"],
)
def test_parameter_count_matches_the_config(config):
    with torch.device("meta"):
        built = config.build()
    assert isinstance(built, Llama3Model)
    assert sum(p.numel() for p in built.parameters()) == config.num_params()


def test_names_and_buffers_are_torchtitans(model):
    keys = set(model.state_dict())
    assert {"tok_embeddings.weight", "norm.weight", "output.weight"} <= keys
    assert {f"layers.1.{name}" for name in LAYER_KEYS} <= keys
    assert "freqs_cis" not in keys and dict(model.named_buffers())["freqs_cis"].is_complex()


def test_logits_shape_and_causality(model):
    tokens = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    logits = model(tokens)
    assert logits.shape == (2, SEQ, VOCAB)
    changed = tokens.clone()
    t = 7
    changed[:, t] = (changed[:, t] + 1) % VOCAB
    other = model(changed)
    torch.testing.assert_close(other[:, :t], logits[:, :t], rtol=0, atol=1e-6)
    assert not torch.allclose(other[:, t:], logits[:, t:])


def test_too_long_sequence_is_refused(model):
    with pytest.raises(ValueError, match="exceeds max_seq_len 32"):
        model(torch.zeros(1, 33, dtype=torch.long))


# ----------------------------------------------------------------------------- attention


def reference_attention(attention, x, freqs):
    """Grouped-query causal attention written out with real cos/sin on adjacent pairs."""
    bs, seq, _ = x.shape
    d, n_rep = attention.head_dim, attention.n_rep
    q = (x @ attention.wq.weight.T).view(bs, seq, -1, d)
    k = (x @ attention.wk.weight.T).view(bs, seq, -1, d)
    v = (x @ attention.wv.weight.T).view(bs, seq, -1, d)
    angle = torch.arange(seq)[:, None, None].float() * freqs  # [seq, 1, d/2]

    def rotate(t):
        even, odd = t[..., 0::2], t[..., 1::2]
        cos, sin = torch.cos(angle), torch.sin(angle)
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)

    q, k = rotate(q), rotate(k)
    out = torch.empty_like(q)
    mask = torch.ones(seq, seq, dtype=torch.bool).tril()
    for h in range(q.shape[2]):
        kv = h // n_rep  # query head h reads key/value head h // n_rep
        scores = q[:, :, h] @ k[:, :, kv].transpose(1, 2) / math.sqrt(d)
        weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        out[:, :, h] = weights @ v[:, :, kv]
    return out.reshape(bs, seq, -1) @ attention.wo.weight.T


def test_gqa_matches_an_explicit_reference(model):
    attention = model.layers["0"].attention
    assert (attention.n_heads, attention.n_kv_heads, attention.n_rep) == (8, 2, 4)
    x = torch.randn(2, SEQ, DIM, generator=torch.Generator().manual_seed(2))
    freqs = model.rope.inverse_frequencies()
    expected = reference_attention(attention, x, freqs)
    torch.testing.assert_close(attention(x, model.freqs_cis), expected, rtol=1e-4, atol=1e-5)


def test_flex_and_varlen_flavors_build_with_document_masks():
    # Their block_causal masks run on SDPA (tests/test_block_causal.py checks the numbers).
    for flavor in ("debugmodel_flex_attn", "8B_varlen"):
        with torch.device("meta"):
            model = model_registry("llama3", flavor).model.build()
        assert model.needs_documents()
    causal_varlen = Attention.Config(attn_type="varlen", attn_mask_type="causal")
    with pytest.raises(NotBuildableError, match="'varlen' runs only attn_mask_type 'block_causal'"):
        causal_varlen.build(dim=DIM)


def test_head_counts_must_divide():
    with pytest.raises(ValueError, match="not divisible by n_kv_heads 3"):
        Attention.Config(n_heads=4, n_kv_heads=3).build(dim=DIM)


# ----------------------------------------------------------------------------- init


def test_meta_init_is_reproducible_and_has_torchtitans_stds(model):
    again = initialized(tiny_config())
    for key, value in model.state_dict().items():
        assert torch.equal(value, again.state_dict()[key]), key
    with torch.device("cpu"):
        eager = tiny_config().build()
    assert torch.equal(model.freqs_cis, eager.freqs_cis)

    def std(tensor):
        return tensor.detach().float().std().item()

    assert std(model.tok_embeddings.weight) == pytest.approx(1.0, rel=0.05)
    for layer_id, layer in model.layers.items():
        depth_std = 0.02 / (2 * (int(layer_id) + 1)) ** 0.5
        attention, ffn = layer.attention, layer.feed_forward
        for linear in (attention.wq, attention.wk, attention.wv, ffn.w1):
            assert std(linear.weight) == pytest.approx(0.02, rel=0.1)
        for linear in (attention.wo, ffn.w2, ffn.w3):
            assert std(linear.weight) == pytest.approx(depth_std, rel=0.1)
        assert torch.equal(layer.attention_norm.weight, torch.ones(DIM))
        assert torch.equal(layer.ffn_norm.weight, torch.ones(DIM))
    out_std = DIM**-0.5
    assert model.output.weight.abs().max().item() <= 3 * out_std
    assert std(model.output.weight) == pytest.approx(out_std, rel=0.1)
    assert torch.equal(model.norm.weight, torch.ones(DIM))


def test_init_std_by_n_layers():
    with torch.device("meta"):
        built = tiny_config(init_std="by_n_layers", n_layers=3).build()
    assert {layer.weight_init_std for layer in built.layers.values()} == {0.02 / 6**0.5}


# ----------------------------------------------------------------------------- rope


def scaled_frequencies_by_hand(rope, head_dim):
    """llama 3.1's scaling as Meta's reference writes it: one frequency at a time."""
    result, bands = [], set()
    low_wavelen = rope.original_max_position_embeddings / rope.low_freq_factor
    high_wavelen = rope.original_max_position_embeddings / rope.high_freq_factor
    for i in range(0, head_dim, 2):
        freq = 1.0 / rope.theta ** (i / head_dim)
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            result.append(freq)
            bands.add("kept")
        elif wavelen > low_wavelen:
            result.append(freq / rope.scaling_factor)
            bands.add("slowed")
        else:
            smooth = (rope.original_max_position_embeddings / wavelen - rope.low_freq_factor) / (
                rope.high_freq_factor - rope.low_freq_factor
            )
            result.append((1 - smooth) * freq / rope.scaling_factor + smooth * freq)
            bands.add("blended")
    return result, bands


def test_llama_rope_scaling_matches_a_direct_implementation():
    config = LlamaRoPE.Config(theta=500000.0, scaling="llama")
    rope = config.build(head_dim=16, max_seq_len=64)
    expected, bands = scaled_frequencies_by_hand(config, 16)
    assert bands == {"kept", "slowed", "blended"}
    freqs = rope.inverse_frequencies()
    torch.testing.assert_close(freqs, torch.tensor(expected, dtype=torch.float32))
    table = rope.freqs_cis()
    assert table.shape == (64, 8) and table.dtype == torch.complex64
    angles = torch.arange(64, dtype=torch.float64)[:, None] * torch.tensor(expected)[None]
    torch.testing.assert_close(table.real.double(), torch.cos(angles), rtol=0, atol=2e-5)
    torch.testing.assert_close(table.imag.double(), torch.sin(angles), rtol=0, atol=2e-5)
    plain = LlamaRoPE.Config(theta=500000.0).build(head_dim=16, max_seq_len=64)
    assert not torch.allclose(plain.inverse_frequencies(), freqs)


# ----------------------------------------------------------------------------- HF adapter


def adapter(config):
    """The adapter of ``config`` without a Hugging Face folder."""
    return Llama3StateDictAdapter(model_config=config, hf_assets_path=None)


def test_hf_round_trip_is_exact(model):
    sd_adapter = adapter(tiny_config())
    state = model.state_dict()
    hf = sd_adapter.to_hf(state)
    assert {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"} <= set(hf)
    assert "model.layers.1.mlp.gate_proj.weight" in hf and len(hf) == len(state)
    assert torch.equal(
        hf["model.layers.0.mlp.up_proj.weight"], state["layers.0.feed_forward.w3.weight"]
    )
    assert not torch.equal(
        hf["model.layers.0.self_attn.k_proj.weight"], state["layers.0.attention.wk.weight"]
    )
    back = sd_adapter.from_hf({**hf, "model.layers.0.self_attn.rotary_emb.inv_freq": None})
    assert back.keys() == state.keys()
    for key, value in state.items():
        assert torch.equal(back[key], value), key


def test_unknown_keys_are_named():
    sd_adapter = adapter(tiny_config())
    with pytest.raises(ValueError, match="'model.layers.0.self_attn.q_norm.weight'"):
        sd_adapter.from_hf({"model.layers.0.self_attn.q_norm.weight": torch.ones(1)})
    with pytest.raises(ValueError, match="'model.embed.weight'"):
        sd_adapter.from_hf({"model.embed.weight": torch.ones(1)})
    with pytest.raises(ValueError, match="'layers.0.attention.bias'"):
        sd_adapter.to_hf({"layers.0.attention.bias": torch.ones(1)})


def rotate_half(x):
    """Hugging Face's rotation partner of each element: the other half of the head, negated."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def per_head_scores(q, k):
    """``[bs, heads, seq, seq]`` dot products of ``[bs, seq, heads, d]`` queries and GQA keys."""
    keys = common.repeat_kv(k, q.shape[2] // k.shape[2])
    return q.transpose(1, 2) @ keys.transpose(1, 2).transpose(2, 3)


def test_hf_layout_with_rotate_half_gives_titans_attention_scores(model):
    attention = model.layers["0"].attention
    hf = adapter(tiny_config()).to_hf(model.state_dict())
    x = torch.randn(1, SEQ, DIM, generator=torch.Generator().manual_seed(3))
    d = attention.head_dim

    def titan_scores():
        q = attention.wq(x).view(1, SEQ, -1, d)
        k = attention.wk(x).view(1, SEQ, -1, d)
        q, k = common.apply_rotary_emb(q, k, model.freqs_cis)
        return per_head_scores(q, k)

    def hf_scores(wq, wk):
        q = (x @ wq.T).view(1, SEQ, -1, d)
        k = (x @ wk.T).view(1, SEQ, -1, d)
        angles = torch.arange(SEQ)[:, None].float() * model.rope.inverse_frequencies()
        emb = torch.cat([angles, angles], dim=-1)[None, :, None]  # HF's cos/sin layout
        q = q * emb.cos() + rotate_half(q) * emb.sin()
        k = k * emb.cos() + rotate_half(k) * emb.sin()
        return per_head_scores(q, k)

    expected = titan_scores()
    permuted = hf_scores(
        hf["model.layers.0.self_attn.q_proj.weight"], hf["model.layers.0.self_attn.k_proj.weight"]
    )
    torch.testing.assert_close(permuted, expected, rtol=1e-4, atol=1e-5)
    unpermuted = hf_scores(attention.wq.weight, attention.wk.weight)
    assert not torch.allclose(unpermuted, expected, rtol=1e-2, atol=1e-3)


def test_config_json_is_hf_llama():
    config = adapter(model_registry("llama3", "8B").model).config_json()
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    assert (config["hidden_size"], config["intermediate_size"]) == (4096, 14336)
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (32, 8)
    assert config["head_dim"] == 128 and config["num_hidden_layers"] == 32
    assert config["rope_theta"] == 500000 and config["rope_scaling"]["rope_type"] == "llama3"
    assert config["rope_scaling"]["factor"] == 8.0
    assert config["tie_word_embeddings"] is False


# ----------------------------------------------------------------------------- loss


def test_cross_entropy_is_the_float32_token_mean():
    loss_fn = build_cross_entropy_loss()
    logits = torch.randn(2, 5, VOCAB, generator=torch.Generator().manual_seed(4))
    labels = torch.randint(0, VOCAB, (2, 5), generator=torch.Generator().manual_seed(5))
    expected = torch.stack(
        [
            F.cross_entropy(logits[b, s][None], labels[b, s][None])
            for b in range(2)
            for s in range(5)
        ]
    ).mean()
    torch.testing.assert_close(loss_fn(logits, labels), expected)
    assert loss_fn(logits.bfloat16(), labels).dtype == torch.float32

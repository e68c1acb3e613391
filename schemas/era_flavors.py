"""What a flavor name built in each torchtitan era, where that differs from v0.2.2: flavor eras.

``model.flavor = "8B"`` is only a name; the model behind it is what the torchtitan that read the
file defined for it on that day. titan builds v0.2.2's definition, so a file of an older era
would train another model from step 1 (and its checkpoint would compute something else). Each
:class:`FlavorChange` is one difference, read from torchtitan's history (``git log -p`` of each
family's flavor table, model args and model code): from ``since`` until the commit ``until``
landed on main, the flavors it names had ``sets`` (titan model-config paths, the values of
that era) instead of v0.2.2's values. A change titan's config cannot say has ``lost`` instead.
:data:`FLAVOR_ADDED` holds the day each flavor (and family) name first existed: a file naming it
was written on or after that day. Pure data; ``titan.schemas.flavor_eras`` applies it.
"""

from __future__ import annotations

from typing import Any

from titan.schemas._frozen import Frozen, _set


class FromTokenizer(Frozen):
    """A ``sets`` value: the era took the field from the tokenizer the run loaded
    (``vocab_size = tokenizer.n_words``), not from the flavor."""

    __slots__ = ("usual",)
    __match_args__ = ("usual",)

    usual: int | None
    """The size of the tokenizer the family's own TOMLs named (Llama 3's 128256), when that is
    what every run of the flavor had; ``None`` for the debug flavors, whose test tokenizers had
    other sizes than any v0.2.2 flavor."""

    def __init__(self, usual: int | None = None) -> None:
        _set(self, "usual", usual)


TOKENIZER = FromTokenizer()
"""The vocabulary of a debug flavor before it was fixed: the test tokenizer's size."""


class FlavorChange(Frozen):
    """Flavors of one family that, before a commit, built something v0.2.2 does not.

    Built as ``FlavorChange(family, flavors, (since, until), sets, (commit, pr), why)``."""

    __slots__ = ("family", "flavors", "since", "until", "sets", "commit", "pr", "why", "lost")
    __slots__ += ("init_only",)
    __match_args__ = ("family", "flavors")

    family: str
    """The model family (``model.name`` after aliases), e.g. ``"llama3"``."""
    flavors: tuple[str, ...]
    """The v0.2.2 flavor names whose definition differed."""
    since: str
    """The first day (``YYYY-MM-DD``) the old definition held (a flavor added later is dated by
    :data:`FLAVOR_ADDED`)."""
    until: str
    """The day the change landed on main: the old definition held before it."""
    sets: dict[str, Any]
    """titan model-config path (below ``model_spec.model``) -> the era's value, for each field
    whose value differed from v0.2.2's; empty when :attr:`lost`."""
    commit: str
    """The short hash of the upstream commit that changed it."""
    pr: str
    """Its pull request (``#1839``)."""
    why: str
    """One sentence: what the model of that era computed differently."""
    lost: str | None
    """What titan's config cannot say of the old definition (``None`` when :attr:`sets` says
    all of it): the migration refuses such a flavor instead of building another model."""
    init_only: bool
    """Whether what is :attr:`lost` is only how a run from scratch initialised its weights (a
    run resumed from a checkpoint computes the same): a warning, not an error."""

    def __init__(
        self,
        family: str,
        flavors: tuple[str, ...],
        span: tuple[str, str],
        sets: dict[str, Any],
        change: tuple[str, str],
        why: str,
        *,
        lost: str | None = None,
        init_only: bool = False,
    ) -> None:
        since, until = span
        assert since < until, (family, flavors, span)
        assert bool(sets) != bool(lost), (family, flavors, span)
        _set(self, "family", family)
        _set(self, "flavors", flavors)
        _set(self, "since", since)
        _set(self, "until", until)
        _set(self, "sets", sets)
        _set(self, "commit", commit_of(change))
        _set(self, "pr", change[1])
        _set(self, "why", why)
        _set(self, "lost", lost)
        _set(self, "init_only", init_only)

    @property
    def era(self) -> str:
        """``before 5bbda42c (#1839, 2025-10-08)``: when the old definition ended."""
        return f"before {self.commit} ({self.pr}, {self.until})"


def commit_of(change: tuple[str, str]) -> str:
    """The commit of a ``(commit, pr)`` pair, checked to be a short hash."""
    commit = change[0]
    assert len(commit) == 8 and all(c in "0123456789abcdef" for c in commit), change
    return commit


_C = FlavorChange

_LLAMA3 = ("debugmodel", "debugmodel_flex_attn", "8B", "70B", "405B")
_LLAMA4 = (
    "debugmodel",
    "17bx16e",
    "17bx128e",
    "17bx16e_irope",
    "17bx128e_irope",
    "debugmodel_irope",
)
_LLAMA4_IROPE = ("17bx16e_irope", "17bx128e_irope", "debugmodel_irope")
_DSV3 = ("debugmodel", "debugmodel_flex_attn", "16B", "236B", "671B")
_QWEN3_TIED = ("debugmodel", "0.6B", "1.7B", "4B")
_EOS_0 = (
    "the block_causal mask split documents at token id 0 (the model args' eos_id, never set "
    "from the tokenizer); titan splits them at the tokenizer's end-of-sequence id"
)

FLAVOR_CHANGES: tuple[FlavorChange, ...] = (
    # --- llama3 (torchtitan/models/llama, then models/llama3; flavors from df2dcc74, #256)
    _C(
        "llama3",
        ("debugmodel",),
        ("2024-04-19", "2024-06-17"),
        {"n_layers": 2},
        ("ae3d2a9b", "#403"),
        "the debug model had 2 transformer blocks",
    ),
    _C(
        "llama3",
        ("debugmodel",),
        ("2024-06-17", "2025-04-15"),
        {"n_layers": 8},
        ("f64cf3c1", "#1103"),
        "the debug model had 8 transformer blocks",
    ),
    _C(
        "llama3",
        ("debugmodel", "debugmodel_flex_attn"),
        ("2024-04-19", "2025-07-22"),
        {"vocab_size": TOKENIZER},
        ("177b295d", "#1424"),
        "the vocabulary was the tokenizer's (2256 with test_tiktoken.model, 2000 with the "
        "Hugging Face test tokenizer), set at run time",
    ),
    _C(
        "llama3",
        ("8B", "70B", "405B"),
        ("2024-04-19", "2025-07-22"),
        {"vocab_size": FromTokenizer(128256)},
        ("177b295d", "#1424"),
        "the vocabulary was the tokenizer's, set at run time (128256 with Llama 3's)",
    ),
    _C(
        "llama3",
        ("debugmodel", "debugmodel_flex_attn"),
        ("2025-07-22", "2025-09-22"),
        {"vocab_size": 2000},
        ("c9cb3046", "#1615"),
        "the debug vocabulary was 2000 tokens",
    ),
    _C(
        "llama3",
        _LLAMA3,
        ("2024-04-19", "2025-10-08"),
        {"rope.scaling": "none"},
        ("5bbda42c", "#1839"),
        "RoPE frequencies were not scaled (llama 3.1's low/high-frequency scaling came later)",
    ),
    _C(
        "llama3",
        ("debugmodel_flex_attn",),
        ("2025-04-17", "2025-04-25"),
        {},
        ("73439e1c", "#1145"),
        "documents ended at token 0, not at the tokenizer's end-of-sequence token",
        lost=_EOS_0,
    ),
    _C(
        "llama3",
        ("debugmodel_varlen_attn", "8B_varlen"),
        ("2025-11-21", "2026-01-18"),
        {},
        ("09c6d74b", "#2229"),
        "varlen attention transposed its output once more than the other backends",
        lost="the output projection received each token's features in (head_dim, heads) order "
        "instead of (heads, head_dim): a checkpoint of it is permuted against titan's model",
    ),
    # --- deepseek_v3 (torchtitan/models/deepseek_v3 from d54d05a5, #1373)
    _C(
        "deepseek_v3",
        ("debugmodel", "debugmodel_flex_attn"),
        ("2025-07-11", "2025-07-22"),
        {"vocab_size": TOKENIZER},
        ("177b295d", "#1424"),
        "the vocabulary was the tokenizer's (about 2000 with the test tokenizer), set at run time",
    ),
    _C(
        "deepseek_v3",
        ("16B", "236B", "671B"),
        ("2025-07-11", "2025-07-22"),
        {"vocab_size": FromTokenizer()},
        ("177b295d", "#1424"),
        "the vocabulary was the tokenizer's size, set at run time, not the flavor's padded one",
    ),
    _C(
        "deepseek_v3",
        ("debugmodel", "debugmodel_flex_attn"),
        ("2025-07-22", "2025-09-22"),
        {"vocab_size": 2000},
        ("c9cb3046", "#1615"),
        "the debug vocabulary was 2000 tokens",
    ),
    _C(
        "deepseek_v3",
        ("debugmodel", "debugmodel_flex_attn"),
        ("2025-07-11", "2025-08-31"),
        {"n_layers": 3},
        ("07c00d9c", "#1669"),
        "the debug models had 3 layers (1 dense, 2 MoE)",
    ),
    _C(
        "deepseek_v3",
        ("debugmodel", "16B", "236B", "671B"),
        ("2025-07-11", "2025-07-18"),
        {"rope.mscale": 0.0},
        ("4e5265ed", "#1394"),
        "attention used SDPA's default scale, without YaRN's temperature (mscale 0 leaves it "
        "out; it only applies beyond 4096 positions)",
    ),
    _C(
        "deepseek_v3",
        ("671B",),
        ("2025-07-11", "2025-07-21"),
        {"layer.moe.route_norm": False},
        ("93a236cc", "#1419"),
        "the router's top-k scores were not renormalised to sum to one",
    ),
    _C(
        "deepseek_v3",
        ("16B", "236B", "671B"),
        ("2025-07-11", "2025-08-22"),
        {"layer.attention.attn_type": "sdpa", "layer.attention.attn_mask_type": "causal"},
        ("f738a03b", "#1610"),
        "attention was SDPA with a plain causal mask (across document boundaries)",
    ),
    _C(
        "deepseek_v3",
        ("236B", "671B"),
        ("2025-07-11", "2025-12-13"),
        {"layer.moe.num_expert_groups": None, "layer.moe.num_limited_groups": None},
        ("2aac20a9", "#2111"),
        "group-limited routing was not implemented: top-k ran over all experts",
    ),
    _C(
        "deepseek_v3",
        ("671B",),
        ("2025-10-08", "2025-10-09"),
        {"n_layers": 4},
        ("b6ccf227", "#1845"),
        "the flavor had 4 layers (committed by mistake for a day)",
    ),
    _C(
        "deepseek_v3",
        ("debugmodel_flex_attn",),
        ("2025-07-21", "2025-07-22"),
        {},
        ("177b295d", "#1424"),
        "documents ended at token 0, not at the tokenizer's end-of-sequence token",
        lost=_EOS_0,
    ),
    # --- qwen3 (torchtitan/models/qwen3 from f9e8897a, #1429)
    _C(
        "qwen3",
        ("0.6B", "1.7B", "4B"),
        ("2025-08-18", "2025-08-25"),
        {"enable_weight_tying": False},
        ("030879fa", "#1633"),
        "the small flavors did not tie the embedding and output weights",
    ),
    _C(
        "qwen3",
        _QWEN3_TIED,
        ("2025-08-25", "2026-01-26"),
        {"enable_weight_tying": False},
        ("d12ff2fc", "#2253"),
        "weight tying had no effect: the tie made on the meta device came apart when the model "
        "was materialised, so embedding and output were two weights",
    ),
    _C(
        "qwen3",
        _QWEN3_TIED,
        ("2026-01-26", "2026-02-09"),
        {},
        ("e38d7abe", "#2342"),
        "the tied embedding/output weight kept the embedding's N(0, 1) initialisation",
        lost="the tied weight was initialised as an embedding, N(0, 1); titan initialises it as "
        "the output projection (truncated normal, std dim**-0.5)",
        init_only=True,
    ),
    _C(
        "qwen3",
        ("debugmodel_moe",),
        ("2025-09-11", "2025-10-12"),
        {"dim": 1024, "n_layers": 28, "vocab_size": 151936},
        ("d880de21", "#1860"),
        "the MoE debug model had 0.6B's shape (width 1024, 28 layers, the full vocabulary)",
    ),
    _C(
        "qwen3",
        ("30B-A3B",),
        ("2025-09-11", "2025-09-26"),
        {
            "dim": 5120,
            "n_layers": 64,
            "layer.attention.n_heads": 64,
            "layer.attention.n_kv_heads": 8,
            "layer.feed_forward.hidden_dim": 25600,
            "max_seq_len": 4096,
        },
        ("5359d989", "#1760"),
        "30B-A3B had 32B's dense shape (width 5120, 64 layers, 64 heads, 8 key/value heads) "
        "under its experts",
    ),
    # --- llama4 (torchtitan/experiments/llama4 from e4e48349, #1064)
    _C(
        "llama4",
        ("debugmodel", "17bx16e", "17bx128e"),
        ("2025-04-07", "2025-04-10"),
        {"layer.moe.use_grouped_mm": False},
        ("dbb34ccb", "#1084"),
        "the experts ran as a loop of per-expert matmuls, not a grouped GEMM",
    ),
    _C(
        "llama4",
        ("debugmodel",),
        ("2025-04-07", "2025-04-15"),
        {"n_layers": 8},
        ("f64cf3c1", "#1103"),
        "the debug model had 8 layers",
    ),
    _C(
        "llama4",
        ("debugmodel",),
        ("2025-04-15", "2025-04-17"),
        {
            "layer.attention.every_n_layers_nope": 4,
            "layer.attention.fixed_attn_block_size": 256,
            "layer.attention.attn_mask_type": "block_causal",
        },
        ("8c6bf93e", "#1111"),
        "the debug model was an iRoPE model (no RoPE every 4th layer, chunks of 256) with "
        "document masks",
    ),
    _C(
        "llama4",
        ("17bx16e", "17bx128e"),
        ("2025-04-15", "2025-04-17"),
        {"layer.attention.attn_mask_type": "block_causal"},
        ("8c6bf93e", "#1111"),
        "attention was document-masked (block_causal was the model args' default)",
    ),
    _C(
        "llama4",
        _LLAMA4,
        ("2025-04-07", "2025-04-18"),
        {"layer.moe.load_balance_coeff": None},
        ("5ae50d0f", "#1114"),
        "the router had no load-balancing expert bias",
    ),
    _C(
        "llama4",
        _LLAMA4,
        ("2025-04-18", "2025-07-08"),
        {},
        ("01f4e502", "#1324"),
        "the expert bias was updated after every backward pass from each rank's own token "
        "counts, never all-reduced",
        lost="load balancing updated the expert bias per microbatch and per data-parallel rank "
        "(the ranks' biases drifted apart); titan updates it once per step from all ranks' counts",
    ),
    _C(
        "llama4",
        _LLAMA4,
        ("2025-04-07", "2025-07-22"),
        {"vocab_size": TOKENIZER},
        ("177b295d", "#1424"),
        "the vocabulary was the tokenizer's, set at run time",
    ),
    _C(
        "llama4",
        ("debugmodel", "debugmodel_irope"),
        ("2025-07-22", "2025-09-22"),
        {"vocab_size": 2000},
        ("c9cb3046", "#1615"),
        "the debug vocabulary was 2000 tokens",
    ),
    _C(
        "llama4",
        _LLAMA4,
        ("2025-04-07", "2025-08-05"),
        {"layer.moe.score_func": "softmax"},
        ("a9aa5069", "#1534"),
        "the router scored experts with a softmax, not a sigmoid",
    ),
    _C(
        "llama4",
        ("debugmodel", "17bx16e", "debugmodel_irope", "17bx16e_irope"),
        ("2025-04-07", "2025-10-08"),
        {"rope.scaling": "none"},
        ("5bbda42c", "#1839"),
        "RoPE frequencies were not scaled",
    ),
    _C(
        "llama4",
        _LLAMA4_IROPE,
        ("2025-04-15", "2025-04-25"),
        {},
        ("73439e1c", "#1145"),
        "documents ended at token 0, not at the tokenizer's end-of-sequence token",
        lost=_EOS_0,
    ),
    _C(
        "llama4",
        _LLAMA4_IROPE,
        ("2025-04-15", "2025-10-09"),
        {},
        ("6a3a9da9", "#1776"),
        "the chunked attention of the RoPE layers read every chunk's document boundaries from "
        "the first chunk's positions",
        lost="beyond the first attention chunk, RoPE layers masked documents by the first "
        "chunk's boundaries (sequences longer than fixed_attn_block_size)",
    ),
    _C(
        "llama4",
        _LLAMA4,
        ("2025-04-07", "2025-08-03"),
        {},
        ("ed288bc9", "#1517"),
        "routed expert weights were stored transposed, so a run from scratch drew other values",
        lost="the routed experts' weights were (experts, dim, hidden), filled in that order; "
        "titan's are (experts, hidden, dim)",
        init_only=True,
    ),
    # --- gpt_oss (torchtitan/experiments/gpt_oss from de335b32, #1754; loadable from #1967)
    _C(
        "gpt_oss",
        ("debugmodel", "20b", "120b"),
        ("2025-10-29", "2026-02-05"),
        {"layer.moe.route_norm": False, "layer.moe.gate_bias": False},
        ("41753c67", "#2319"),
        "the router had no bias and its top-4 gates were not renormalised",
    ),
    _C(
        "gpt_oss",
        ("debugmodel", "20b", "120b"),
        ("2025-10-29", "2026-02-05"),
        {"rope.rope_factor": 1.0},
        ("6278dccc", "#2216"),
        "RoPE was plain (theta 150000): YaRN's interpolation and temperature came later",
    ),
    _C(
        "gpt_oss",
        ("debugmodel", "20b", "120b"),
        ("2025-10-29", "2026-02-09"),
        {},
        ("e38d7abe", "#2342"),
        "weights were drawn with a truncated normal directly in bfloat16",
        lost="the blocks were cast to bfloat16 before their truncated-normal initialisation "
        "(too many values at the lower bound); titan initialises in float32",
        init_only=True,
    ),
    # --- flux (torchtitan/experiments/flux from d2b57cfa, #1024)
    _C(
        "flux",
        ("flux-debug",),
        ("2025-04-04", "2025-04-10"),
        {"hidden_size": 512, "num_heads": 4},
        ("ab086125", "#1074"),
        "the debug flavor was 512 wide with 4 heads",
    ),
    _C(
        "flux",
        ("flux-debug",),
        ("2025-04-10", "2025-06-13"),
        {"hidden_size": 3072, "num_heads": 24},
        ("bf835b59", "#1295"),
        "the debug flavor had flux-dev's width (3072, 24 heads)",
    ),
    _C(
        "flux",
        ("flux-dev", "flux-debug"),
        ("2025-04-04", "2025-04-16"),
        {"guidance_embed": True},
        ("738000f9", "#1099"),
        "the model embedded the guidance strength (a guidance-distilled model)",
    ),
    _C(
        "flux",
        ("flux-dev", "flux-schnell", "flux-debug"),
        ("2025-04-04", "2025-04-15"),
        {},
        ("a581e4fe", "#1087"),
        "the query/key norm was an RMSNorm in float32 with eps 1e-6",
        lost="QK normalisation used eps 1e-6 in float32; titan's (as v0.2.2's) uses the "
        "activation dtype's machine epsilon",
    ),
    _C(
        "flux",
        ("flux-dev", "flux-schnell", "flux-debug"),
        ("2025-04-04", "2025-04-15"),
        {},
        ("a581e4fe", "#1087"),
        "every parameter was initialised uniform in [0, 0.1)",
        lost="a run from scratch started from uniform(0, 0.1) weights, not the DiT-style init",
        init_only=True,
    ),
    _C(
        "flux",
        ("flux-dev", "flux-schnell", "flux-debug"),
        ("2025-04-04", "2025-04-29"),
        {},
        ("00b4a47c", "#1153"),
        "the text input width was the file's encoder.max_t5_encoding_len, not the flavor's",
        lost="context_in_dim followed encoder.max_t5_encoding_len (512 by default then), so the "
        "text projection's width was the file's, not the flavor's 4096",
    ),
)
"""Every difference of a v0.2.2 flavor from its definition in an older era, by family (changes
that only alter rounding, such as SDPA kernel priorities, are not listed)."""

FLAVOR_ADDED: dict[tuple[str, str | None], tuple[str, str, str]] = {
    ("llama3", None): ("2024-04-19", "df2dcc74", "#256"),
    ("llama3", "debugmodel"): ("2024-04-19", "df2dcc74", "#256"),
    ("llama3", "8B"): ("2024-04-19", "df2dcc74", "#256"),
    ("llama3", "70B"): ("2024-04-19", "df2dcc74", "#256"),
    ("llama3", "405B"): ("2024-08-01", "48713581", "#481"),
    ("llama3", "debugmodel_flex_attn"): ("2025-04-17", "8c6bf93e", "#1111"),
    ("llama3", "debugmodel_varlen_attn"): ("2025-11-21", "f8fa21e1", "#2000"),
    ("llama3", "8B_flex"): ("2025-11-21", "f8fa21e1", "#2000"),
    ("llama3", "8B_varlen"): ("2025-11-21", "f8fa21e1", "#2000"),
    ("deepseek_v3", None): ("2025-07-11", "d54d05a5", "#1373"),
    ("deepseek_v3", "debugmodel"): ("2025-07-11", "d54d05a5", "#1373"),
    ("deepseek_v3", "16B"): ("2025-07-11", "d54d05a5", "#1373"),
    ("deepseek_v3", "236B"): ("2025-07-11", "d54d05a5", "#1373"),
    ("deepseek_v3", "671B"): ("2025-07-11", "d54d05a5", "#1373"),
    ("deepseek_v3", "debugmodel_flex_attn"): ("2025-07-21", "415f8344", "#1437"),
    ("qwen3", None): ("2025-08-18", "f9e8897a", "#1429"),
    ("qwen3", "0.6B"): ("2025-08-18", "f9e8897a", "#1429"),
    ("qwen3", "1.7B"): ("2025-08-18", "f9e8897a", "#1429"),
    ("qwen3", "4B"): ("2025-08-18", "f9e8897a", "#1429"),
    ("qwen3", "8B"): ("2025-08-18", "f9e8897a", "#1429"),
    ("qwen3", "14B"): ("2025-08-18", "f9e8897a", "#1429"),
    ("qwen3", "32B"): ("2025-08-18", "f9e8897a", "#1429"),
    ("qwen3", "debugmodel_moe"): ("2025-09-11", "bd3850be", "#1685"),
    ("qwen3", "30B-A3B"): ("2025-09-11", "bd3850be", "#1685"),
    ("qwen3", "235B-A22B"): ("2025-09-11", "bd3850be", "#1685"),
    ("qwen3", "debugmodel"): ("2025-10-12", "d880de21", "#1860"),
    ("llama4", None): ("2025-04-07", "e4e48349", "#1064"),
    ("llama4", "debugmodel"): ("2025-04-07", "e4e48349", "#1064"),
    ("llama4", "17bx16e"): ("2025-04-07", "e4e48349", "#1064"),
    ("llama4", "17bx128e"): ("2025-04-07", "e4e48349", "#1064"),
    ("llama4", "17bx16e_irope"): ("2025-04-15", "2f78d7b7", "#1102"),
    ("llama4", "17bx128e_irope"): ("2025-04-15", "2f78d7b7", "#1102"),
    ("llama4", "debugmodel_irope"): ("2025-04-17", "8c6bf93e", "#1111"),
    # the package was on main from de335b32 (#1754, 2025-10-22) but failed to import until #1967
    ("gpt_oss", None): ("2025-10-29", "de4592d6", "#1967"),
    ("gpt_oss", "debugmodel"): ("2025-10-29", "de4592d6", "#1967"),
    ("gpt_oss", "20b"): ("2025-10-29", "de4592d6", "#1967"),
    ("gpt_oss", "120b"): ("2025-10-29", "de4592d6", "#1967"),
    ("flux", None): ("2025-04-04", "d2b57cfa", "#1024"),
    ("flux", "flux-dev"): ("2025-04-04", "d2b57cfa", "#1024"),
    ("flux", "flux-schnell"): ("2025-04-04", "d2b57cfa", "#1024"),
    ("flux", "flux-debug"): ("2025-04-04", "d2b57cfa", "#1024"),
}
"""``(family, flavor)`` (``flavor`` ``None`` for the family itself) -> ``(day, commit, pr)``:
the first day the name built a model on torchtitan main."""

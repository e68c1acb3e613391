"""Block-causal (per-document) attention, as titan computes torchtitan's FlexAttention / varlen
masks with SDPA: document indices and masks checked by hand (EOS in the middle, first, last,
twice in a row, absent), every family's packed row giving each document's logits as if it ran
alone (fp32, atol 5e-6; measured at most 1.2e-6 on logits up to 4.4) and a row without EOS
giving the causal model's logits bit for bit, the EOS id a run uses, and (slow) the flex flavors of llama3,
deepseek_v3 and llama4 training in titan-train in both config forms with identical losses.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from tests.training_runs import REPO, SEED, SMALL, Launch, loss_bits, titan_trains
from titan.config.configurable import NotBuildableError
from titan.models import model_registry
from titan.models.common.attention_masks import MaskSpec, build_attention_masks, document_ids
from titan.training.run_checks import document_eos_id as _document_eos_id

EOS = 0
CPU = torch.device("cpu")


def rows(*lists: list[int]) -> torch.Tensor:
    """A ``[bs, seq]`` batch of token ids."""
    return torch.tensor(lists)


def bits(mask: torch.Tensor) -> list[list[int]]:
    """A ``[seq, seq]`` boolean mask as 0/1 rows (query rows, key columns)."""
    return mask.int().tolist()


# ----------------------------------------------------------------------------- masks by hand


def test_each_token_belongs_to_the_document_its_eos_closes():
    tokens = rows(
        [5, 6, 0, 7, 8, 0, 9, 4],  # two EOS in the middle
        [0, 5, 6, 7, 8, 9, 4, 3],  # EOS first: a one-token document
        [5, 6, 7, 8, 9, 4, 3, 2],  # no EOS: one document spans the row
        [5, 6, 7, 0, 0, 4, 3, 0],  # EOS twice in a row, and as the last token
    )
    assert document_ids(tokens, eos_id=EOS).tolist() == [
        [0, 0, 0, 1, 1, 1, 2, 2],
        [0, 1, 1, 1, 1, 1, 1, 1],
        [0, 0, 0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 1, 2, 2, 2],
    ]


def test_block_causal_masks_of_rows_with_different_boundaries():
    masks = MaskSpec(documents=True).build(
        seqlen=4, device=CPU, documents=document_ids(rows([5, 0, 6, 7], [5, 6, 0, 7]), eos_id=EOS)
    )
    assert masks.shape == (2, 1, 4, 4)
    assert bits(masks[0, 0]) == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]
    assert bits(masks[1, 0]) == [[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 0, 0, 1]]


def test_documents_combine_with_chunks_and_windows():
    documents = document_ids(rows([5, 6, 7, 0, 8, 9]), eos_id=EOS)
    # llama4's rope layers: documents AND chunks of 4 (positions 0-3 and 4-5).
    chunked = MaskSpec(documents=True, chunk_size=4).build(
        seqlen=6, device=CPU, documents=documents
    )
    assert bits(chunked[0, 0]) == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [0, 0, 0, 0, 1, 0],
        [0, 0, 0, 0, 1, 1],
    ]
    # gpt_oss's sliding layers: documents AND the last 2 positions.
    sliding = MaskSpec(documents=True, window=2).build(seqlen=6, device=CPU, documents=documents)
    assert bits(sliding[0, 0]) == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [0, 1, 1, 0, 0, 0],
        [0, 0, 1, 1, 0, 0],
        [0, 0, 0, 0, 1, 0],
        [0, 0, 0, 0, 1, 1],
    ]


def test_a_batch_gets_one_mask_per_distinct_kind_and_none_for_plain_causal():
    tokens = rows([5, 6, 0, 7], [5, 6, 7, 8])
    nope, rope = MaskSpec(documents=True), MaskSpec(documents=True, chunk_size=8)
    window = MaskSpec(window=2)
    masks = build_attention_masks([nope, rope, MaskSpec(), window, rope], tokens=tokens, eos_id=EOS)
    # Chunks longer than the sequence change nothing: both document kinds share one tensor.
    assert set(masks) == {nope, rope, window} and masks[nope] is masks[rope]
    assert masks[nope].shape == (2, 1, 4, 4) and masks[window].shape == (1, 1, 4, 4)
    with pytest.raises(ValueError, match="needs the id of the EOS token"):
        build_attention_masks([nope], tokens=tokens, eos_id=None)
    assert build_attention_masks([MaskSpec(), window], tokens=tokens[:, :2], eos_id=None) == {}
    with pytest.raises(ValueError, match="window must be at least 1"):
        MaskSpec(window=0)


# ----------------------------------------------------------------------------- every family

# Each family's debug flavor (the block-causal one where it has one; tiny_model sets the mask),
# shrunk to vocab 64 and 2 layers (llama4's NoPE layer 0 and chunked rope layer 1, gpt_oss's
# sliding layer 0 and full layer 1, deepseek's dense layer 0 and MoE layer 1), with the fields
# that make chunks and windows shorter than a row.
FAMILIES = {
    "llama3": ("debugmodel_flex_attn", {}),
    "qwen3": ("debugmodel_moe", {}),
    "deepseek_v3": ("debugmodel_flex_attn", {}),
    "llama4": ("debugmodel_irope", {"fixed_attn_block_size": 8}),
    "gpt_oss": ("debugmodel", {"sliding_window_size": 4}),
}
VOCAB, SEQ = 64, 32


def tiny_model(family: str, *, attn_mask_type: str = "block_causal"):
    """The family's flavor of ``FAMILIES``, shrunk, with initialized fp32 weights (the same for
    either ``attn_mask_type``)."""
    flavor, attention_fields = FAMILIES[family]
    config = copy.deepcopy(model_registry(family, flavor).model)
    config.vocab_size, config.n_layers = VOCAB, 2
    for name, value in attention_fields.items():
        setattr(config.layer.attention, name, value)
    config.layer.attention.attn_mask_type = attn_mask_type
    torch.manual_seed(0)
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device=CPU)
    model.init_weights()
    return model.eval()


def document(length: int, *, seed: int, closed: bool) -> list[int]:
    """``length`` random non-EOS tokens, the last one EOS when ``closed``."""
    ids = torch.randint(1, VOCAB, (length,), generator=torch.Generator().manual_seed(seed))
    if closed:
        ids[-1] = EOS
    return ids.tolist()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_packed_row_gives_each_document_the_logits_it_gets_alone(family):
    model = tiny_model(family)
    assert model.needs_documents()
    # Row 0: a document of 8 then one of 24 that runs off the row; row 1: two of 16, the second
    # ending with EOS as the row's last token. Boundaries fall on llama4's chunks of 8, so the
    # chunks of a document alone are the ones it has in the row.
    spans = [[(0, 8, True), (8, 32, False)], [(0, 16, True), (16, 32, True)]]
    docs = [
        [document(end - start, seed=10 * r + d, closed=c) for d, (start, end, c) in enumerate(row)]
        for r, row in enumerate(spans)
    ]
    batch = torch.tensor([sum(row, []) for row in docs])
    with torch.no_grad():
        packed = model(batch, model.attention_masks(batch, eos_id=EOS))
        for r, row in enumerate(spans):
            for d, (start, end, _) in enumerate(row):
                alone_tokens = torch.tensor([docs[r][d]])
                alone = model(alone_tokens, model.attention_masks(alone_tokens, eos_id=EOS))
                torch.testing.assert_close(packed[r, start:end], alone[0], rtol=0, atol=5e-6)
        # The causal model on the same row lets documents see earlier ones: far off.
        causal = tiny_model(family, attn_mask_type="causal")
        causal.load_state_dict(model.state_dict())
        assert (causal(batch, causal.attention_masks(batch)) - packed).abs().max() > 0.1
        # Without its masks a block-causal model cannot tell documents apart: it refuses.
        with pytest.raises(ValueError, match="needs the id of the EOS token"):
            model(batch)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_row_without_eos_is_one_document_attended_causally(family):
    model = tiny_model(family)
    # The same weights, causal (llama4's rope layers still chunked, gpt_oss's still sliding).
    plain = tiny_model(family, attn_mask_type="causal")
    plain.load_state_dict(model.state_dict())
    assert not plain.needs_documents()
    batch = torch.tensor([document(SEQ, seed=1, closed=False), document(SEQ, seed=2, closed=False)])
    with torch.no_grad():
        masked = model(batch, model.attention_masks(batch, eos_id=EOS))
        causal = plain(batch, plain.attention_masks(batch))
    assert torch.equal(masked, causal)


# ----------------------------------------------------------------------------- the EOS id


def test_a_run_ends_documents_at_the_tokenizers_eos_else_the_model_configs():
    llama3 = model_registry("llama3", "debugmodel_flex_attn").model
    deepseek = model_registry("deepseek_v3", "debugmodel_flex_attn").model
    with torch.device("meta"):
        llama3_model, deepseek_model = llama3.build(), deepseek.build()
        causal_model = model_registry("llama3", "debugmodel").model.build()
    where = {"hf_assets_path": "assets"}
    tokenizer = SimpleNamespace(eos_id=2)
    assert _document_eos_id(llama3_model, tokenizer=tokenizer, model_config=llama3, **where) == 2
    llama3.eos_id = 5
    assert _document_eos_id(llama3_model, tokenizer=None, model_config=llama3, **where) == 5
    assert _document_eos_id(causal_model, tokenizer=None, model_config=deepseek, **where) is None
    with pytest.raises(NotBuildableError, match="tokenizer in assets has no eos_token"):
        _document_eos_id(
            llama3_model, tokenizer=SimpleNamespace(eos_id=None), model_config=llama3, **where
        )
    with pytest.raises(NotBuildableError, match="no tokenizer and .* no eos_id"):
        _document_eos_id(deepseek_model, tokenizer=None, model_config=deepseek, **where)


# ----------------------------------------------------------------------------- titan-train

# family -> its debug TOML's flavor replaced by the block-causal one.
TRAINED = {
    "llama3": "debugmodel_flex_attn",
    "deepseek_v3": "debugmodel_flex_attn",
    "llama4": "debugmodel_irope",
}
STEPS = ["--training.steps", "6"]


def flavored_toml(family: str, folder) -> str:
    """The family's debug TOML with its flavor set to the block-causal one, written in
    ``folder``."""
    source = (REPO / "legacy_configs" / family / "debug_model.toml").read_text(encoding="utf-8")
    text, count = re.subn(r'(?m)^flavor = "debugmodel"$', f'flavor = "{TRAINED[family]}"', source)
    assert count == 1
    path = folder / f"{family}.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(TRAINED))
def test_flex_flavors_train_in_both_forms_with_identical_losses(family, tmp_path):
    toml = flavored_toml(family, tmp_path)
    registry = tmp_path / "config_registry.py"
    migrated = subprocess.run(
        [sys.executable, "-m", "titan.cli.migrate", toml, "-o", str(registry), "-q"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert migrated.returncode == 0, migrated.stderr
    function = re.search(r"^def (\w+)\(\) -> Trainer.Config:", registry.read_text(), re.M)
    assert function is not None
    # Validation runs the same masks (2 batches of the bundled set, at steps 1 and 6; the
    # legacy form's validation batch defaults to 8, so both forms set it).
    settings = {"dataset": "c4_test_validation", "seq_len": "64", "local_batch_size": "2"}
    settings |= {"steps": "2", "freq": "6"}
    validation, legacy_validation = ["--validator.enable"], ["--validation.enable"]
    for key, value in settings.items():
        section = "validator.dataloader" if key == "dataset" else "validator"
        validation += [f"--{section}.{key}", value]
        legacy_validation += [f"--validation.{key}", value]
    launches = [
        Launch(
            ["--job.config_file", toml, *SMALL, *SEED, *STEPS, *legacy_validation],
            dump_folder=tmp_path / "toml",
            legacy=True,
        ),
        Launch(
            ["--registry", str(registry), "--config", function.group(1)]
            + [*SMALL, *SEED, *STEPS, *validation],
            dump_folder=tmp_path / "registry",
        ),
        # The same run on the causal debug flavor, for the comparison at the end.
        Launch(
            ["--job.config_file", str(REPO / "legacy_configs" / family / "debug_model.toml")]
            + [*SMALL, *SEED, *STEPS, *legacy_validation],
            dump_folder=tmp_path / "causal",
            legacy=True,
        ),
    ]
    legacy, code, causal = (run.check() for run in titan_trains(launches))
    assert f"{family} {TRAINED[family]}" in legacy.stderr
    assert len(legacy.losses) == 6 and loss_bits(legacy.losses) == loss_bits(code.losses)
    assert legacy.losses[-1] < legacy.losses[0]
    validated = [m["validation_loss"] for m in legacy.metrics if "validation_loss" in m]
    assert len(validated) == 2 and validated == [
        m["validation_loss"] for m in code.metrics if "validation_loss" in m
    ]
    # The masks change the numbers: the causal debug flavor trains differently (the c4 batches
    # hold documents shorter than the 64-token rows).
    assert loss_bits(causal.losses) != loss_bits(legacy.losses)

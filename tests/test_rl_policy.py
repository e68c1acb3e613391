"""PolicyTrainer: the GRPO clipped loss against hand-computed values, its gradients against a
plain-torch reference on the same weights, and its config rules on good and bad configs (in
titan-validate's registry form and when the trainer is built)."""

from __future__ import annotations

import math
import textwrap

import pytest
import torch

from tests.helpers import codes, validate
from titan.config.check import check_config
from titan.models.llama3.config_registry import llama3_debugmodel
from titan.rl import PolicyTrainer, policy_microbatch
from titan.rl.grpo import GRPOLoss, per_token_loss
from titan.training.run_checks import ConfigFindings
from titan.training.step_api import Microbatch, TrainerUsageError


def _config(tmp_path, **policy):
    """A small debugmodel policy config writing under ``tmp_path``."""
    base = llama3_debugmodel()
    base.training.seq_len, base.training.local_batch_size = 16, 2
    base.dump_folder = str(tmp_path / "out")
    base.debug.seed = 3
    # Full precision: the plain-torch reference below runs without autocast.
    base.training.mixed_precision_param = "float32"
    return PolicyTrainer.config_of(base, **policy)


# ---------------------------------------------------------------- the loss by hand


@pytest.mark.parametrize(
    ("ratio", "advantage", "expected"),
    [
        (1.1, 1.0, -1.1),  # inside the clip: -ratio * A
        (1.1, -2.0, 2.2),
        (1.5, 1.0, -1.2),  # above 1 + eps, A > 0: clipped
        (1.5, -1.0, 1.5),  # above 1 + eps, A < 0: the unclipped term is the smaller
        (0.5, 1.0, -0.5),  # below 1 - eps, A > 0: unclipped
        (0.5, -1.0, 0.8),  # below 1 - eps, A < 0: clipped
        (2.0, 0.0, 0.0),
    ],
)
def test_per_token_loss_inside_and_outside_the_clip(ratio, advantage, expected):
    """-min(ratio * A, clamp(ratio, 0.8, 1.2) * A) for ratios on both sides of the clip."""
    generator = torch.tensor([[-1.0]])
    logprobs = generator + math.log(ratio)
    loss = per_token_loss(logprobs, generator, torch.tensor([[advantage]]), clip_eps=0.2)
    assert loss.item() == pytest.approx(expected, rel=1e-6, abs=1e-7)


def _two_token_logits(probabilities):
    """Logits over a vocabulary of 2 whose token 0 has each given probability."""
    p = torch.tensor(probabilities, dtype=torch.float64)
    return torch.stack([p.log(), (1 - p).log()], dim=-1)


def test_grpo_loss_token_and_sequence_mean_with_masked_tokens():
    """Two sequences of three tokens, one token masked (-100): the token mean divides by the
    five valid tokens, the sequence mean averages each sequence's own mean."""
    probs = [[0.5, 0.25, 0.9], [0.5, 0.5, 0.5]]
    logits = _two_token_logits(probs)
    labels = torch.tensor([[0, 0, -100], [0, 1, 0]])
    # Generator probabilities: ratios 1.0, 2.0 (clipped for A > 0) ; 1.25 (clipped for A < 0,
    # the unclipped term is smaller), 0.5 (below: clipped), 1.0.
    generator = torch.log(torch.tensor([[0.5, 0.125, 0.3], [0.4, 1.0, 0.5]]))
    advantages = torch.tensor([1.0, -1.0])
    batch = Microbatch(
        token_ids=labels.clamp(min=0),
        labels=labels,
        extras={"generator_logprobs": generator, "advantages": advantages},
    )
    per_token = [[-1.0, -1.2], [1.25, 0.8, 1.0]]
    token_sum = sum(map(sum, per_token))
    token = GRPOLoss(
        clip_eps=0.2, loss_mean="token", num_global_valid_tokens=5, num_global_sequences=2
    )
    assert token(logits, batch).item() / 5 == pytest.approx(token_sum / 5)
    sequence = GRPOLoss(
        clip_eps=0.2, loss_mean="sequence", num_global_valid_tokens=5, num_global_sequences=2
    )
    means = [sum(row) / len(row) for row in per_token]
    assert sequence(logits, batch).item() / 5 == pytest.approx(sum(means) / 2)
    # Per-token advantages give the same numbers as the same advantage on every token.
    spread = dict(batch.extras, advantages=advantages[:, None].expand(2, 3).clone())
    again = Microbatch(token_ids=batch.token_ids, labels=labels, extras=spread)
    assert token(logits, again).item() == pytest.approx(token(logits, batch).item())


# ---------------------------------------------------------------- gradients vs plain torch


def _reference_loss(logits, labels, generator, advantages, *, eps, mean, divisor, sequences):
    """The GRPO loss written out independently: gather, ratio, clip, mask, mean."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    mask = labels != -100
    taken = logp.gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    ratio = torch.exp(taken - generator)
    adv = advantages[:, None]
    loss = -torch.min(ratio * adv, ratio.clamp(1 - eps, 1 + eps) * adv) * mask
    if mean == "token":
        return loss.sum() / divisor
    return (loss.sum(1) / mask.sum(1)).sum() / sequences


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    """One built debugmodel policy trainer for the gradient checks."""
    with _config(tmp_path_factory.mktemp("policy")).build() as built:
        yield built


def _gradients(trainer):
    """Every parameter's gradient, copied."""
    return {n: p.grad.detach().clone() for n, p in trainer.parts.model.named_parameters()}


@pytest.mark.parametrize(
    ("mean", "extra_tokens"), [("token", 0), ("token", 40), ("sequence", 0), ("sequence", 40)]
)
def test_gradients_equal_a_plain_torch_reference(trainer, mean, extra_tokens):
    """forward_backward's gradients are those of the reference loss on the same weights, with
    some ratios clipped and prompt tokens masked; ``extra_tokens`` stands for other ranks'
    tokens in the global count."""
    torch.manual_seed(1)
    tokens = torch.randint(0, 2000, (2, 16))
    labels = torch.roll(tokens, -1, dims=1)
    mask = torch.ones_like(tokens, dtype=torch.bool)
    mask[0, :5] = False
    mask[1, :9] = False
    model = trainer.parts.model
    with torch.no_grad():
        current = torch.log_softmax(model(tokens).float(), -1).gather(-1, labels[..., None])[..., 0]
    generator = current + torch.randn(2, 16) * 0.5  # ratios from ~0.2 to ~5: many clipped
    advantages = torch.tensor([0.7, -1.3])
    trainer.config.loss_mean = mean
    valid = int(mask.sum())
    batch = policy_microbatch(
        token_ids=tokens,
        labels=labels,
        generator_logprobs=generator,
        advantages=advantages,
        loss_mask=mask,
    )
    # The extra tokens stand in three more sequences for the sequence mean.
    extra_sequences = 3 if extra_tokens else 0
    metrics = trainer.forward_backward(
        [batch],
        num_global_valid_tokens=valid + extra_tokens if extra_tokens else None,
        num_global_sequences=2 + extra_sequences if extra_tokens else None,
    )
    got = _gradients(trainer)
    trainer.parts.optimizers.zero_grad()
    trainer._pending = 0  # the reference below owns the gradients now
    masked = torch.where(mask, labels, -100)
    expected = _reference_loss(
        model(tokens),
        masked,
        generator,
        advantages,
        eps=0.2,
        mean=mean,
        divisor=valid + extra_tokens,
        sequences=2 + extra_sequences,
    )
    expected.backward()
    assert metrics.loss == pytest.approx(expected.item(), rel=1e-5)
    for name, grad in _gradients(trainer).items():
        torch.testing.assert_close(got[name], grad, rtol=1e-4, atol=1e-7, msg=name)
    trainer.parts.optimizers.zero_grad()


def test_policy_micro_batches_are_checked(trainer):
    """Missing advantages, mis-shaped log-probabilities and integer advantages are refused."""
    tokens = torch.randint(0, 2000, (2, 16))
    labels = torch.roll(tokens, -1, dims=1)
    bad = [
        (Microbatch(token_ids=tokens, labels=labels), "needs extras['advantages']"),
        (
            policy_microbatch(
                token_ids=tokens,
                labels=labels,
                generator_logprobs=torch.zeros(2, 15),
                advantages=torch.zeros(2),
            ),
            "generator_logprobs has shape [2, 15]",
        ),
        (
            policy_microbatch(
                token_ids=tokens,
                labels=labels,
                generator_logprobs=None,
                advantages=torch.zeros(2, dtype=torch.long),
            ),
            "must be a floating tensor",
        ),
        (
            policy_microbatch(
                token_ids=tokens, labels=labels, generator_logprobs=None, advantages=torch.zeros(3)
            ),
            "advantages must be [batch]",
        ),
    ]
    for batch, words in bad:
        with pytest.raises(TrainerUsageError, match=words.replace("[", r"\[")):
            trainer.forward_backward([batch])
    good = policy_microbatch(
        token_ids=tokens, labels=labels, generator_logprobs=None, advantages=torch.zeros(2)
    )
    for count, words in [(0, "positive int"), (True, "positive int"), (1, "alone hold 2")]:
        with pytest.raises(TrainerUsageError, match=words):
            trainer.forward_backward([good], num_global_sequences=count)


# ---------------------------------------------------------------- rules


@pytest.mark.parametrize(
    ("changes", "ngpu", "expected"),
    [
        ({}, 1, []),
        ({"generator_dtype": "float16"}, 1, []),
        ({"generator_dtype": "bf16"}, 1, [("generator-dtype", 'use "bfloat16"')]),
        ({"generator_dtype": "int8"}, 1, [("generator-dtype", "use one of")]),
        ({"generator_dtype": "float64"}, 1, [("generator-dtype", 'use "float32"')]),
        ({"tp": 2}, 2, [("policy-loss-parallel", "disable_loss_parallel = true")]),
        ({"tp": 2, "disable_loss_parallel": True}, 2, []),
        ({"pp": 2}, 2, [("policy-pipeline", "pipeline_parallel_degree = 1")]),
    ],
)
def test_policy_rules(tmp_path, changes, ngpu, expected):
    """Each rule on good and bad configs, with its hint (other rules' findings ignored)."""
    changes = dict(changes)
    config = _config(tmp_path, **{k: changes.pop(k) for k in ["generator_dtype"] if k in changes})
    parallelism = config.parallelism
    parallelism.tensor_parallel_degree = changes.pop("tp", 1)
    parallelism.pipeline_parallel_degree = changes.pop("pp", 1)
    parallelism.disable_loss_parallel = changes.pop("disable_loss_parallel", False)
    found = check_config(config, ngpu=ngpu, locate=lambda path: None)
    ours = [d for d in found if d.code.startswith(("policy-", "generator-"))]
    assert len(ours) == len(expected), ours
    for (code, words), finding in zip(expected, ours, strict=True):
        assert finding.code == code and words in finding.hint


def test_policy_ranges_and_types(tmp_path):
    """clip_eps must be positive and finite, loss_mean token or sequence."""
    for changes, path in [
        ({"clip_eps": 0.0}, "clip_eps"),
        ({"clip_eps": float("inf")}, "clip_eps"),
        ({"loss_mean": "mean"}, "loss_mean"),
        ({"keep_snapshots": 0}, "keep_snapshots"),
    ]:
        found = check_config(_config(tmp_path, **changes), ngpu=1, locate=lambda path: None)
        assert path in [d.path for d in found], (changes, found)


def test_rules_in_titan_validate_and_at_build(tmp_path):
    """titan-validate --config reports the rules at the registry function's lines; building
    the trainer refuses the same config before anything is written."""
    registry = tmp_path / "reg.py"
    registry.write_text(
        textwrap.dedent(
            """\
            from titan.models.llama3.config_registry import llama3_debugmodel
            from titan.rl import PolicyTrainer


            def good():
                return PolicyTrainer.config_of(llama3_debugmodel(), generator_dtype="float16")


            def bad():
                return PolicyTrainer.config_of(
                    llama3_debugmodel(),
                    generator_dtype="fp8",
                )
            """
        )
    )
    assert validate("--registry", registry, "--config", "good").code == 0
    result = validate("--registry", registry, "--config", "bad", "--format", "json")
    assert result.code == 1, result.out + result.err
    assert codes(result) == ["generator-dtype"]
    text = validate("--registry", registry, "--config", "bad")
    assert "generator_dtype = 'fp8' is not a floating dtype" in text.out
    assert "reg.py:" in text.out
    config = _config(tmp_path, generator_dtype="fp8")
    with pytest.raises(ConfigFindings, match="generator-dtype|generator_dtype"):
        config.build()
    assert not (tmp_path / "out").exists()

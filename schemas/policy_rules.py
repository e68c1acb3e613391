"""The rules of a policy trainer's config (``titan.rl.PolicyTrainer.Config``).

A policy trainer's loss reads the log-probability of every sampled token from the full logits,
and its weights go to a generator; so its layout and weight dtype have rules a plain run does
not. They read :class:`PolicyFacts`, built by the config itself
(``PolicyTrainer.Config.rule_findings``), and ``titan.config.check.check_config`` runs them after
the shared rules: ``titan-validate --config`` and the trainer's own checks both report them.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator

from titan.schemas._frozen import Frozen, _set
from titan.schemas.diagnostics import Diagnostic
from titan.schemas.rule_facts import Setting
from titan.schemas.rule_helpers import diag, ints

GENERATOR_DTYPES = ("bfloat16", "float16", "float32")
"""Floating dtypes a generator (vLLM, a Hugging Face model) loads weights in."""

DTYPE_SPELLINGS = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float": "float32",
    "float64": "float32",  # a generator takes no float64 weights: the closest it loads
    "double": "float32",
    "torch.bfloat16": "bfloat16",
    "torch.float16": "float16",
    "torch.float32": "float32",
}
"""Other spellings of the generator dtypes, named in the hint."""


class PolicyFacts(Frozen):
    """What the policy rules read: the layout and the pushed weights' dtype."""

    __slots__ = ("tp", "pp", "disable_loss_parallel", "generator_dtype")
    __match_args__ = ()

    tp: Setting
    """``parallelism.tensor_parallel_degree``."""
    pp: Setting
    """``parallelism.pipeline_parallel_degree``."""
    disable_loss_parallel: Setting
    """``parallelism.disable_loss_parallel``."""
    generator_dtype: Setting
    """``generator_dtype``: the dtype the pushed weights are cast to."""

    def __init__(self, **settings: Setting) -> None:
        for name in self.__slots__:
            _set(self, name, settings[name])


def generator_dtype(facts: PolicyFacts) -> Iterator[Diagnostic]:
    """The pushed weights must be in a floating dtype the generator can load."""
    setting = facts.generator_dtype
    if setting.value in GENERATOR_DTYPES:
        return
    spelled = DTYPE_SPELLINGS.get(str(setting.value).strip().lower())
    close = difflib.get_close_matches(str(setting.value), GENERATOR_DTYPES, n=1, cutoff=0.6)
    suggestion = spelled or (close[0] if close else None)
    names = ", ".join(f'"{name}"' for name in GENERATOR_DTYPES)
    hint = f'use "{suggestion}"' if suggestion else f"use one of {names}"
    yield diag(
        "generator-dtype",
        setting,
        f"generator_dtype = {setting.value!r} is not a floating dtype a generator loads ({names})",
        hint,
    )


def loss_parallel(facts: PolicyFacts) -> Iterator[Diagnostic]:
    """Under tensor parallel, loss parallel shards the logits over the vocabulary; the policy
    loss needs each sampled token's log-probability from the full logits."""
    tp, disabled = facts.tp, facts.disable_loss_parallel
    if ints(tp) and tp.value > 1 and disabled.value is False:
        yield diag(
            "policy-loss-parallel",
            disabled,
            f"tensor parallel (degree {tp.value}) with loss parallel: the policy loss needs "
            "the full logits of every token, which loss parallel shards over the vocabulary",
            "set parallelism.disable_loss_parallel = true",
        )


def no_pipeline(facts: PolicyFacts) -> Iterator[Diagnostic]:
    """A policy trainer is driven one forward/backward at a time; a pipeline schedule owns
    both."""
    pp = facts.pp
    if ints(pp) and pp.value > 1:
        yield diag(
            "policy-pipeline",
            pp,
            f"pipeline parallel (degree {pp.value}) is not supported by a policy trainer: its "
            "schedule runs forward and backward itself",
            "set parallelism.pipeline_parallel_degree = 1 (use FSDP, TP or EP instead)",
        )


POLICY_RULES: tuple[Callable[[PolicyFacts], Iterator[Diagnostic]], ...] = (
    generator_dtype,
    loss_parallel,
    no_pipeline,
)
"""Every policy rule, in the order their findings are reported."""


def check_policy(facts: PolicyFacts) -> list[Diagnostic]:
    """Run every policy rule."""
    return [finding for rule in POLICY_RULES for finding in rule(facts)]


__all__ = ["GENERATOR_DTYPES", "POLICY_RULES", "PolicyFacts", "check_policy"]

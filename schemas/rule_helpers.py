"""What the cross-field rules (``titan.schemas.rules``, ``layout_rules``, ``expert_rules``,
``pipeline_rules``) share: how a finding is made, which setting it blames, which numbers a rule
may compute with, and the example values their hints suggest."""

from __future__ import annotations

from collections.abc import Callable

from titan.schemas.diagnostics import Diagnostic, Severity
from titan.schemas.ranges import is_int64
from titan.schemas.rule_facts import ConfigFacts, Setting

OPTIMIZER_NAMES = ("Adam", "AdamW")
"""The ``torch.optim`` classes titan-train builds (torchtitan v0.2.2 accepts the same two): the
trainer's list (``titan.components.optimizer``) and the rule's."""

CANDIDATES = 10_000
"""How many numbers a hint's example is looked for among: a hostile count may be near 2**63,
where counting down to the answer would never end."""


def diag(
    code: str, setting: Setting, message: str, hint: str | None = None, *, severity=Severity.ERROR
) -> Diagnostic:
    """A finding about ``setting``, at its span."""
    return Diagnostic(
        code=code,
        severity=severity,
        path=setting.path,
        message=message,
        hint=hint,
        span=setting.span,
    )


def blame(*settings: Setting) -> Setting:
    """The first setting the user wrote, else the first one."""
    return next((s for s in settings if s.written), settings[0])


def degrees(facts: ConfigFacts) -> list[Setting]:
    """The degrees whose product is the world size."""
    return [facts.dp_replicate, facts.dp_shard, facts.tp, facts.pp, facts.cp]


def ints(*settings: Setting) -> bool:
    """Whether every setting is a whole number a rule may compute with (a number past 64 bits is
    the range check's finding)."""
    return all(is_int64(s.value) for s in settings)


def largest_divisor(
    n: int,
    *,
    at_most: int,
    multiple_of: int = 1,
    fits: Callable[[int], bool] = lambda degree: True,
) -> int:
    """The largest divisor of ``n`` not above ``at_most`` that is a multiple of ``multiple_of``
    and ``fits``; ``multiple_of`` itself when none is found.

    Looked for among the ``CANDIDATES`` numbers below ``at_most`` and the quotients of ``n`` by
    the first ``CANDIDATES`` numbers (which hold a large number's largest divisors), never by
    counting down from a number that may be near 2**63.
    """
    top = min(n, at_most)
    below = range(top, max(top - CANDIDATES, 0), -1)
    quotients = (n // k for k in range(1, min(n, CANDIDATES) + 1) if n % k == 0)
    found = [
        d
        for d in (*below, *quotients)
        if d <= top and n % d == 0 and d % multiple_of == 0 and fits(d)
    ]
    return max(found, default=multiple_of)

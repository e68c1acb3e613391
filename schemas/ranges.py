"""The ranges numeric settings must lie in, checked the same way for both config forms.

The bounds are declared once, as pydantic constraints on the legacy models (``Field(ge=1)``,
``allow_inf_nan=False`` in ``schemas/legacy.py``), from which ``python -m titan.schemas.spec_codegen``
writes the table ``LEGACY_RANGES`` (legacy dotted key -> :class:`Range`) into
``schemas/legacy_spec.py``. ``titan-validate FILE.toml`` reads it for the TOML's keys; the registry
check (``titan.config.check``) reads the same table and finds each key's field through the
migration's homes table, so ``training.steps = -1`` is refused alike in a TOML, in a registry
function and on ``titan-train``'s command line.

Fields of titan's own config classes with no legacy key (a model config's ``dim``, an MoE's
``num_experts``) declare their range on the class, as ``_ranges = {"dim": POSITIVE}`` with the
ranges below (``titan.config.configurable.field_ranges``); the registry check reads them too.

Besides its declared range, every integer must fit in a signed 64-bit integer: sizes and steps
become tensor shapes and C++ integers, where a larger number overflows.
"""

from __future__ import annotations

import math
import reprlib
from typing import Any

from titan.schemas._frozen import Frozen, _set
from titan.schemas.diagnostics import Diagnostic, Severity, Span

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def is_int64(value: Any) -> bool:
    """Whether ``value`` is a whole number (not a bool) that fits a signed 64-bit integer.

    Cross-field checks compute only with such numbers: a larger one is the range check's finding,
    and products of it could not even be printed (Python refuses to format integers of more
    than 4,300 digits).
    """
    return (
        isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX
    )


class Range(Frozen):
    """Bounds of one numeric setting (pydantic's ``ge``/``gt``/``le``/``lt``/``allow_inf_nan``)."""

    __slots__ = ("ge", "gt", "le", "lt", "finite")
    __match_args__ = ()

    ge: int | float | None
    """The value must be at least this."""
    gt: int | float | None
    """The value must be greater than this."""
    le: int | float | None
    """The value must be at most this."""
    lt: int | float | None
    """The value must be less than this."""
    finite: bool
    """``inf`` and ``-inf`` are refused (``nan`` is refused by any bound, and by this)."""

    def __init__(
        self,
        *,
        ge: int | float | None = None,
        gt: int | float | None = None,
        le: int | float | None = None,
        lt: int | float | None = None,
        finite: bool = False,
    ) -> None:
        _set(self, "ge", ge)
        _set(self, "gt", gt)
        _set(self, "le", le)
        _set(self, "lt", lt)
        _set(self, "finite", finite)

    def __repr__(self) -> str:  # the generated table prints only what is set
        values = [(name, getattr(self, name)) for name in self.__slots__]
        fields = [f"{n}={v!r}" for n, v in values if v is not None and v is not False]
        return f"Range({', '.join(fields)})"

    def admits(self, value: int | float) -> bool:
        if value != value:  # nan compares false with everything, as pydantic treats it
            return not self.finite and all(getattr(self, b) is None for b in _BOUNDS)
        if self.finite and isinstance(value, float) and math.isinf(value):
            return False
        return all(
            bound is None or test(value, bound)
            for bound, test in (
                (self.ge, _ge),
                (self.gt, _gt),
                (self.le, _le),
                (self.lt, _lt),
            )
        )

    def describe(self) -> str:
        """``must be ≥ 1``, ``must be a finite number ≥ 0 and < 1``."""
        bounds = [
            f"{symbol} {_number(bound)}"
            for symbol, bound in (("≥", self.ge), (">", self.gt), ("≤", self.le), ("<", self.lt))
            if bound is not None
        ]
        text = " and ".join(bounds)
        if self.finite:
            return f"must be a finite number {text}".rstrip()
        return f"must be {text}"

    def pydantic_kwargs(self) -> dict[str, Any]:
        """The bounds as keyword arguments of ``pydantic.Field``."""
        kwargs = {name: getattr(self, name) for name in _BOUNDS if getattr(self, name) is not None}
        if self.finite:
            kwargs["allow_inf_nan"] = False
        return kwargs


_BOUNDS = ("ge", "gt", "le", "lt")

POSITIVE = Range(ge=1)
"""A count or size: at least 1 (sizes, layers, heads, experts)."""
NON_NEGATIVE = Range(ge=0)
"""A count that may be zero (shared experts, a LoRA rank that 0 turns off)."""
POSITIVE_NUMBER = Range(gt=0, finite=True)
"""A finite number above zero (an epsilon, a rope base, a multiplier)."""


def _ge(value: float, bound: float) -> bool:
    return value >= bound


def _gt(value: float, bound: float) -> bool:
    return value > bound


def _le(value: float, bound: float) -> bool:
    return value <= bound


def _lt(value: float, bound: float) -> bool:
    return value < bound


def _number(value: float) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def shown_number(value: int | float) -> str:
    """``value`` as a message shows it: whole below 31 digits, else its first digits and length."""
    if isinstance(value, float):
        return repr(value)
    if -(10**30) < value < 10**30:
        return str(value)
    magnitude = abs(value)
    digits = int(magnitude.bit_length() * math.log10(2))  # str() refuses past 4,300 digits
    while magnitude >= 10**digits:
        digits += 1
    head = magnitude // 10 ** (digits - 6)
    return f"{'-' if value < 0 else ''}{head}… ({digits} digits)"


class _Shown(reprlib.Repr):
    def repr_int(self, x: int, level: int) -> str:
        return shown_number(x)


_SHOWN = _Shown()
_SHOWN.maxstring = _SHOWN.maxother = 120


def shown_value(value: Any) -> str:
    """``repr(value)`` for a message: long strings, lists and numbers shortened, and never
    refused (``repr`` of an integer past 4,300 digits raises, here inside any list or dict)."""
    try:
        return _SHOWN.repr(value)
    except Exception:  # a user object whose __repr__ raises
        return f"<{type(value).__qualname__}>"


def problem(value: Any, bounds: Range | None) -> str | None:
    """What is wrong with a number that has the right type (``None`` when nothing is)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None  # a wrong type, None, or a list: the type check reports it
    if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
        return f"must fit in a signed 64-bit integer (at most {INT64_MAX})"
    if bounds is not None and not bounds.admits(value):
        return bounds.describe()
    return None


def out_of_range(
    value: Any, bounds: Range | None, *, path: str, span: Span | None
) -> Diagnostic | None:
    """The ``out-of-range`` finding for ``value`` at ``path``, if it has one."""
    why = problem(value, bounds)
    if why is None:
        return None
    return Diagnostic(
        code="out-of-range",
        severity=Severity.ERROR,
        path=path,
        message=f"`{path}` is {shown_number(value)}; it {why}",
        hint=why,
        span=span,
    )

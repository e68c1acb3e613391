"""The words of the Forge app config reader's findings (``titan.schemas.yaml_source``): its messages
and hints, apart from the reading so that each reads as one piece of text."""

from __future__ import annotations

from typing import Any

MAX_NODES = 100_000
"""The most nodes a file may expand to once aliases are followed (an app config has hundreds)."""

SYNTAX = "fix the YAML at this position (indentation, a missing `:` or closing bracket)"
DEEP = "an app config nests a few levels; flatten the value"
TOO_DEEP = "the YAML nests deeper than titan reads"
BOMB = (
    f"aliases make this YAML expand to more than {MAX_NODES:,} nodes (an alias bomb): "
    "titan does not read it, and Forge's loader would not finish"
)
CYCLE = "the anchor of this value is used inside the value itself: it has no end"
BOMB_HINT = "write the values out, or use anchors only for small shared blocks"
NO_DOCUMENT = "the file holds no YAML document"
NOT_MAPPING = "the app config is not a mapping of keys (Forge reads a mapping at the top)"
NO_TRAINER = (
    "put the legacy sections (model, optimizer, training, parallelism, ...) under a "
    "`trainer:` mapping (an RL app), or at the top level of the file (an SFT app)"
)
PLAIN_HINT = "write a value of the tag's type, or drop the tag"
UNRESOLVED_HINT = "write the value itself, or refer to a plain value of this file (${a.b})"


def syntax_message(error: Any) -> str:
    """PyYAML's words without its position block (the finding carries the position)."""
    words = " ".join(w for w in (error.context, error.problem) if w)
    return f"invalid YAML: {words or 'the file cannot be parsed'}"


def unknown_tag(tag: str) -> tuple[str, str]:
    """Message and hint for a tag Forge's safe loader has no constructor for."""
    return (
        f"the tag `{tag}` names a Python object or a type Forge's safe YAML loader refuses "
        "(titan never constructs one)",
        "write the value as a plain string, number, boolean, list or mapping",
    )


def duplicate(name: str, *, first_line: int) -> tuple[str, str]:
    """Message and hint for a key written twice in one mapping."""
    return (
        f"`{name}` is written twice in one mapping (first at line {first_line}): "
        "Forge's loader refuses the file",
        "delete one of the two, or merge them",
    )


def foreign(dotted: str, tag: str) -> tuple[str, str]:
    """Message and hint for a tagged value (date, binary, set) among the legacy sections."""
    return (
        f"`{dotted}` is a YAML `!!{tag}` value, which no legacy JobConfig setting holds",
        "write the value as a plain string, number, boolean, list or mapping",
    )


def unresolved(dotted: str, value: str) -> str:
    """The message for an interpolation only Forge can compute."""
    return (
        f"`{dotted}` is `{value}`, which Forge resolves at run time and titan cannot: the value "
        "is not checked, and titan-migrate leaves the setting at its default"
    )


def no_trainer(kind: str | None) -> str:
    """Why the file has no legacy sections to check; ``kind`` is what ``trainer:`` holds, when
    the file has one."""
    if kind is None:
        return (
            "the app config has no legacy JobConfig sections: neither a `trainer:` mapping nor "
            "top-level sections (model, training, ...)"
        )
    return f"`trainer:` holds a {kind}, not a mapping of legacy JobConfig sections"

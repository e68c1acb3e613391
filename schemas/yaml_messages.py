"""The words of the Forge app config reader's findings (``titan.schemas.yaml_source``): its messages
and hints, apart from the reading so that each reads as one piece of text."""

from __future__ import annotations

from typing import Any

from titan.schemas.yaml_interpolation import MAX_TEXT

MAX_NODES = 100_000
"""The most nodes a file may expand to once aliases are followed (an app config has hundreds)."""

MAX_BYTES = 256 * 1024
"""The largest app config read: 256 KiB, fifty times a real one (PyYAML's pure-Python parser,
which Forge's loader uses too, takes seconds per MiB)."""

SYNTAX = "fix the YAML at this position (indentation, a missing `:` or closing bracket)"
DEEP = "an app config nests a few levels; flatten the value"
TOO_DEEP = "the YAML nests deeper than titan reads"
BOMB = (
    f"aliases make this YAML expand to more than {MAX_NODES:,} nodes (an alias bomb): "
    "titan does not read it, and Forge's loader would not finish"
)
TOO_LARGE_HINT = "an app config is a few kilobytes: name the app's YAML itself, not a data file"
NOT_UTF8_HINT = "Forge reads an app config as UTF-8 text: save the file as UTF-8"
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


def too_large(size: int) -> str:
    """The message for a file over :data:`MAX_BYTES`, with its size."""
    return (
        f"the app config is {size / 1024:,.0f} KiB ({size:,} bytes), larger than "
        f"{MAX_BYTES // 1024} KiB, the most titan reads of an app config"
    )


def too_many_nodes(count: int) -> str:
    """The message for a file of more than :data:`MAX_NODES` nodes written out (no aliases)."""
    return (
        f"the app config holds {count:,} YAML values, more than the {MAX_NODES:,} titan reads "
        "(an app config has hundreds)"
    )


def not_utf8(byte: int) -> str:
    """The message for an app config that does not decode."""
    return f"the app config is not valid UTF-8 text (byte 0x{byte:02x})"


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


# What a tagged YAML value holds, in the user's words.
_HOLDS = {
    "binary": "binary data",
    "timestamp": "a date or time",
    "set": "a set",
    "omap": "an ordered mapping",
    "pairs": "a list of pairs",
}


def foreign(dotted: str, tag: str, *, expected: str | None) -> tuple[str, str]:
    """Message and hint for a tagged value (date, binary, set) among the legacy sections;
    ``expected`` is the type the setting takes, when it is a known one."""
    holds = _HOLDS.get(tag, f"a `!!{tag}` value")
    if expected is None:
        message = f"`{dotted}` holds {holds} (a YAML `!!{tag}` value), which no legacy JobConfig setting holds"
        return message, "write the value as a plain string, number, boolean, list or mapping"
    return (
        f"`{dotted}` holds {holds} (a YAML `!!{tag}` value), but it takes {expected}",
        f"write {expected} without the `!!{tag}` tag",
    )


def broken(dotted: str, value: str, *, kind: str, chain: tuple[str, ...]) -> tuple[str, str]:
    """Message and hint for a reference OmegaConf refuses: to a key the file does not have
    (``missing``), or round in a circle (``cycle``); or one whose text would grow past
    ``MAX_TEXT`` characters (``too-long``); ``chain`` is the references followed."""
    path = " → ".join(f"${{{name}}}" for name in chain)
    if kind == "too-long":
        return (
            f"`{dotted}` is `{value}`, whose references would build a text of more than "
            f"{MAX_TEXT:,} characters ({path}): titan does not build it, and no setting "
            "takes such a value",
            f"write the value itself instead of `{chain[-1]}`'s repeated references",
        )
    if kind == "cycle":
        return (
            f"`{dotted}` is `{value}`, whose references lead back to themselves ({path}): "
            "OmegaConf cannot resolve it and Forge stops when the app reads it",
            f"write the value itself in one of {', '.join(f'`{n}`' for n in dict.fromkeys(chain))}",
        )
    via = f" (followed {path})" if len(chain) > 1 else ""
    return (
        f"`{dotted}` is `{value}`, but the file has no key `{chain[-1]}`{via}: OmegaConf "
        "cannot resolve it and Forge stops when the app reads it",
        f"add `{chain[-1]}` to the file (`{chain[-1]}: ???` when Forge's command line gives "
        "it), or refer to a key that is there",
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


def setting_type(path: tuple) -> str | None:
    """The type the legacy setting at ``path`` takes, in words; None when ``path`` names no
    setting of the legacy schema (an extension's, an unknown key, a list item)."""
    from titan.schemas.legacy_spec import LEGACY_SPEC
    from titan.schemas.spec import SectionSpec
    from titan.schemas.typecheck import type_name

    spec: Any = LEGACY_SPEC
    for part in path:
        field = (
            spec.field(part) if isinstance(spec, SectionSpec) and isinstance(part, str) else None
        )
        if field is None:
            return None
        spec = field.annotation
    return None if isinstance(spec, SectionSpec) else type_name(spec)

"""Exact serialization of config trees: a class-tagged dict, JSON and TOML dumps, and a typed diff.

torchtitan's ``Trainer.Config.to_dict`` is one-way: it drops the class of every polymorphic entry
(which optimizer, which dataloader, which converter), the model config tree, and the difference
between ``1`` and ``1.0`` or a tuple and a list. titan's dump keeps all of it, so
``from_dict(to_dict(config)) == config`` with every nested value of the same type.

The encoding (``to_dict``; JSON-able, and the body of the JSON and TOML dumps):

- a dataclass becomes ``{"__class__": "package.module:Qual.Name", <every field, in order>}``;
- a list stays a list; a tuple becomes ``{"__tuple__": [...]}``;
- a dict whose keys are strings not starting with ``__`` stays a dict; any other dict becomes
  ``{"__dict__": [[key, value], ...]}``, so no user key can be mistaken for a tag;
- ``inf``, ``-inf`` and ``nan`` become ``{"__float__": "inf" | "-inf" | "nan"}`` (JSON has no
  non-finite numbers; a NaN's sign and payload are not kept); finite floats stay floats;
- an enum member becomes ``{"__enum__": "package.module:Qual.Name.MEMBER"}``;
- ``None`` stays ``None`` (JSON ``null``). TOML has no null: ``to_toml`` leaves a None field out
  of its table and lists its name in the table's ``__none__ = ["field", ...]`` array, and writes a
  None element of an array as the inline table ``{ __none__ = true }``; ``from_toml`` inverts both.

``from_dict`` imports classes only from the ``titan`` package and the modules a caller allows:
a dump is data, and must not be able to name ``os:system``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import importlib
import json
import math
import tomllib
from collections.abc import Iterable
from typing import Any, Literal

import tomli_w

CLASS_TAG = "__class__"
_TUPLE, _DICT, _FLOAT, _ENUM, _NONE = "__tuple__", "__dict__", "__float__", "__enum__", "__none__"
_NONFINITE = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}
_UNSET = object()


def _is_config(value: Any) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _shown(path: str) -> str:
    return f"`{path}`" if path else "the root"


def class_tag(cls: type) -> str:
    """The ``"package.module:Qual.Name"`` tag that names ``cls`` in a dump."""
    return f"{cls.__module__}:{cls.__qualname__}"


# ---------------------------------------------------------------------------------------------
# Encoding


def to_dict(config: Any) -> dict[str, Any]:
    """A JSON-able, class-tagged dict of every field of ``config`` (defaults included)."""
    if not _is_config(config):
        raise TypeError(f"to_dict expects a dataclass instance, not {type(config).__name__}")
    return _encode(config, "")


def encode_value(value: Any) -> Any:
    """Any config value (a field, a list element) in the tagged encoding of ``to_dict``."""
    return _encode(value, "")


def _encode(value: Any, path: str) -> Any:
    if isinstance(value, enum.Enum):  # before str/int: StrEnum and IntEnum members are both
        return {_ENUM: f"{class_tag(type(value))}.{value.name}"}
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if kind is float:
        if math.isfinite(value):
            return value
        return {_FLOAT: "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if _is_config(value):
        out: dict[str, Any] = {CLASS_TAG: class_tag(kind)}
        for field in dataclasses.fields(value):
            item = getattr(value, field.name, _UNSET)
            if item is not _UNSET:  # an init=False field that __post_init__ never set
                out[field.name] = _encode(item, _join(path, field.name))
        return out
    if kind is list:
        return [_encode(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if kind is tuple:
        return {_TUPLE: [_encode(item, f"{path}[{i}]") for i, item in enumerate(value)]}
    if kind is dict:
        if all(type(k) is str and not k.startswith("__") for k in value):
            return {k: _encode(v, f"{path}[{k!r}]") for k, v in value.items()}
        return {_DICT: [[_encode(k, path), _encode(v, f"{path}[{k!r}]")] for k, v in value.items()]}
    raise TypeError(f"{_shown(path)}: cannot serialize a {kind.__qualname__} ({value!r:.80})")


# ---------------------------------------------------------------------------------------------
# Decoding


def from_dict(data: dict[str, Any], *, allowed_modules: Iterable[str] = ()) -> Any:
    """Rebuild the config that ``to_dict`` encoded; ``ValueError`` naming the path if it cannot.

    Classes are imported only from the ``titan`` package and from ``allowed_modules`` (module
    names; their submodules are allowed too), and must be dataclasses. Each one is constructed
    through ``__init__`` with keyword arguments, so its ``__post_init__`` checks run; fields with
    ``init=False`` are assigned afterwards, so their dumped values are restored exactly.
    """
    if not isinstance(data, dict) or CLASS_TAG not in data:
        raise ValueError("not a titan config dump: the root has no __class__ tag")
    return _Decoder(tuple(allowed_modules)).decode(data, "")


class _Decoder:
    def __init__(self, allowed_modules: tuple[str, ...]) -> None:
        self.allowed = ("titan", *allowed_modules)

    def decode(self, value: Any, path: str) -> Any:
        if value is None or type(value) in (bool, int, float, str):
            return value
        if type(value) is list:
            return [self.decode(item, f"{path}[{i}]") for i, item in enumerate(value)]
        if not isinstance(value, dict):
            raise ValueError(f"{_shown(path)}: unsupported value {value!r:.80}")
        if CLASS_TAG in value:
            return self.config(value, path)
        tags = [key for key in value if key.startswith("__")]
        if not tags:
            return {k: self.decode(v, f"{path}[{k!r}]") for k, v in value.items()}
        if len(value) != 1 or tags[0] not in (_TUPLE, _DICT, _FLOAT, _ENUM):
            raise ValueError(f"{_shown(path)}: unknown tag {tags[0]!r} (or extra keys beside it)")
        tag, body = tags[0], value[tags[0]]
        if tag == _FLOAT and isinstance(body, str) and body in _NONFINITE:
            return _NONFINITE[body]
        if tag == _ENUM and isinstance(body, str):
            owner, _, member = body.rpartition(".")
            found = getattr(self.resolve(owner, path, want="enum"), member, None)
            if not isinstance(found, enum.Enum):
                raise ValueError(f"{_shown(path)}: {body!r} is not an enum member")
            return found
        if tag == _TUPLE and type(body) is list:
            return tuple(self.decode(item, f"{path}[{i}]") for i, item in enumerate(body))
        if tag == _DICT and type(body) is list and all(_is_pair(p) for p in body):
            pairs = [(self.decode(k, path), v) for k, v in body]
            with contextlib.suppress(TypeError):  # an unhashable key: reported below
                return {k: self.decode(v, f"{path}[{k!r}]") for k, v in pairs}
        raise ValueError(f"{_shown(path)}: malformed {tag} value {body!r:.80}")

    def config(self, value: dict[str, Any], path: str) -> Any:
        tag = value[CLASS_TAG]
        cls = self.resolve(tag, path, want="dataclass")
        fields = {field.name: field for field in dataclasses.fields(cls)}
        init: dict[str, Any] = {}
        late: dict[str, Any] = {}
        for key, item in value.items():
            if key == CLASS_TAG:
                continue
            field = fields.get(key)
            if field is None:
                raise ValueError(f"unknown field `{_join(path, key)}`: {tag} has no field {key!r}")
            (init if field.init else late)[key] = self.decode(item, _join(path, key))
        try:
            built = cls(**init)
        except Exception as error:  # a missing required field, or a __post_init__ check
            raise ValueError(f"{_shown(path)}: cannot build {tag}: {error}") from error
        for key, item in late.items():
            object.__setattr__(built, key, item)  # also works for frozen dataclasses
        return built

    def resolve(self, tag: Any, path: str, *, want: Literal["dataclass", "enum"]) -> Any:
        """The class a tag names, imported only from allowed modules."""
        module, sep, qualname = tag.partition(":") if isinstance(tag, str) else ("", "", "")
        parts = qualname.split(".")
        if not sep or not all(p.isidentifier() for p in [*module.split("."), *parts]):
            raise ValueError(
                f"{_shown(path)}: malformed class tag {tag!r}; expected 'module:Class'"
            )
        if not self.allows(module):
            raise ValueError(
                f"{_shown(path)}: refusing to load {tag!r}: a dump may only name classes from "
                f"the modules {', '.join(self.allowed)} (allow more with allowed_modules)"
            )
        try:
            found: Any = importlib.import_module(module)
        except ImportError as error:
            raise ValueError(
                f"{_shown(path)}: cannot import {module} for {tag!r}: {error}"
            ) from None
        for part in parts:
            found = None if part.startswith("__") else getattr(found, part, None)
        ok = isinstance(found, type) and (
            dataclasses.is_dataclass(found) if want == "dataclass" else issubclass(found, enum.Enum)
        )
        if not ok:
            raise ValueError(f"{_shown(path)}: {tag!r} is not a {want} class")
        # Only the class's own name is accepted: a name reached through something an allowed
        # module imported (``titan.x:some_library.Class``) would escape the allowed modules.
        if class_tag(found) != tag:
            raise ValueError(f"{_shown(path)}: {tag!r} names {class_tag(found)!r}; refusing it")
        return found

    def allows(self, module: str) -> bool:
        return any(module == m or module.startswith(m + ".") for m in self.allowed)


def _is_pair(item: Any) -> bool:
    return type(item) is list and len(item) == 2


# ---------------------------------------------------------------------------------------------
# JSON and TOML dumps


def to_json(config: Any) -> str:
    """The tagged dict as JSON (standard JSON: no NaN/Infinity literals), fields in order."""
    return json.dumps(to_dict(config), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def from_json(text: str, *, allowed_modules: Iterable[str] = ()) -> Any:
    """Rebuild a config from ``to_json`` text; ``json.JSONDecodeError`` carries line and column."""
    return from_dict(json.loads(text), allowed_modules=allowed_modules)


def to_toml(config: Any) -> str:
    """The tagged dict as TOML; TOML has no null, so each ``None`` is encoded (module docstring)."""
    return tomli_w.dumps(_none_to_toml(to_dict(config)))


def from_toml(text: str, *, allowed_modules: Iterable[str] = ()) -> Any:
    """Rebuild a config from ``to_toml`` text; ``tomllib.TOMLDecodeError`` if it does not parse."""
    return from_dict(_none_from_toml(tomllib.loads(text), ""), allowed_modules=allowed_modules)


def _none_to_toml(value: Any) -> Any:
    # A None value of a table is listed by key in the table's own ``__none__`` array (tomli_w
    # would write an inline-table marker as a separate [section.key] table); a None element of
    # an array becomes the inline table ``{ __none__ = true }``.
    if isinstance(value, dict):
        out = {k: v for k, v in value.items() if k == CLASS_TAG}
        nones = [k for k, v in value.items() if v is None]
        if nones:
            out[_NONE] = nones
        out.update(
            {k: _none_to_toml(v) for k, v in value.items() if k not in out and v is not None}
        )
        return out
    if isinstance(value, list):
        return [{_NONE: True} if item is None else _none_to_toml(item) for item in value]
    return value


def _none_from_toml(value: Any, path: str) -> Any:
    if isinstance(value, list):
        return [_none_from_toml(item, f"{path}[{i}]") for i, item in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if value.keys() == {_NONE} and value[_NONE] is True:
        return None
    nones = value.get(_NONE, [])
    if type(nones) is not list or not all(type(k) is str and k not in value for k in nones):
        raise ValueError(f"{_shown(path)}: malformed __none__ entry {nones!r:.80}")
    out = {k: _none_from_toml(v, _join(path, k)) for k, v in value.items() if k != _NONE}
    out.update(dict.fromkeys(nones))
    return out


def plain_dict(config: Any) -> Any:
    """An untagged dict like torchtitan's ``to_dict``, for logs and W&B (cannot be read back).

    A ``ModelSpec`` becomes ``{"name", "flavor"}``; tuples become lists.
    """
    from titan.protocols.model_spec import ModelSpec

    if isinstance(config, ModelSpec):
        return {"name": config.name, "flavor": config.flavor}
    if _is_config(config):
        return {
            f.name: plain_dict(getattr(config, f.name))
            for f in dataclasses.fields(config)
            if hasattr(config, f.name)
        }
    if isinstance(config, list | tuple):
        return [plain_dict(item) for item in config]
    if isinstance(config, dict):
        return {k: plain_dict(v) for k, v in config.items()}
    return config


# ---------------------------------------------------------------------------------------------
# Diff


class _Absent:
    """Marks a list element, dict key or field that only one side has."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Any = _Absent()


@dataclasses.dataclass(frozen=True, slots=True)
class Difference:
    """One path at which two configs differ; ``left``/``right`` are classes for a class change."""

    path: str
    """Dotted attribute path from the root, e.g. ``model_converters.converters[0].emulate``."""
    left: Any
    """The value on the left (``ABSENT`` when only the right side has it)."""
    right: Any
    """The value on the right (``ABSENT`` when only the left side has it)."""

    @property
    def kind(self) -> Literal["class", "added", "removed", "value"]:
        """What changed: the class at the path, an added or removed entry, or a value."""
        if isinstance(self.left, type) and isinstance(self.right, type):
            return "class"
        if self.left is ABSENT:
            return "added"
        return "removed" if self.right is ABSENT else "value"


def diff(a: Any, b: Any) -> list[Difference]:
    """Every path at which ``a`` and ``b`` differ, in field order, values compared with types.

    A class change is one entry at its path (the fields below are not compared), except at the
    root, where the fields both classes share are compared too. Lists and dicts that hold configs
    are compared entry by entry; other lists and dicts are compared whole.
    """
    out: list[Difference] = []
    _diff(a, b, "", out)
    return out


def _diff(a: Any, b: Any, path: str, out: list[Difference]) -> None:
    if _is_config(a) and _is_config(b):
        if type(a) is not type(b):
            out.append(Difference(path, type(a), type(b)))
            if path:
                return
        names_a = [f.name for f in dataclasses.fields(a)]
        names_b = [f.name for f in dataclasses.fields(b)]
        for name in [*names_a, *(n for n in names_b if n not in names_a)]:
            left = getattr(a, name, ABSENT) if name in names_a else ABSENT
            right = getattr(b, name, ABSENT) if name in names_b else ABSENT
            _diff(left, right, _join(path, name), out)
        return
    if type(a) is type(b) and type(a) in (list, dict) and (_holds_config(a) or _holds_config(b)):
        if type(a) is list:
            keys: list[Any] = list(range(max(len(a), len(b))))
            get = lambda seq, i: seq[i] if i < len(seq) else ABSENT  # noqa: E731
        else:
            keys = [*a, *(k for k in b if k not in a)]
            get = lambda mapping, k: mapping.get(k, ABSENT)  # noqa: E731
        for key in keys:
            _diff(get(a, key), get(b, key), f"{path}[{key!r}]", out)
        return
    if not same(a, b):
        out.append(Difference(path, a, b))


def _holds_config(value: Any) -> bool:
    items = value.values() if isinstance(value, dict) else value
    return any(
        _is_config(item) or (type(item) in (list, dict) and _holds_config(item)) for item in items
    )


def same(a: Any, b: Any) -> bool:
    """Equal and of the same type all the way down (``1`` is not ``1.0``; NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if type(a) is float:
        both_nan = math.isnan(a) and math.isnan(b)
        return both_nan or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is dict:
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if _is_config(a):
        return all(
            same(getattr(a, f.name, ABSENT), getattr(b, f.name, ABSENT))
            for f in dataclasses.fields(a)
        )
    return a == b

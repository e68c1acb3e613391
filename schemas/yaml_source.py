"""Reading a TorchForge app config: the legacy JobConfig sections under its ``trainer:`` key.

A Forge app YAML holds the whole RL job (generator, reward actors, services, ``${...}``
interpolations); only its ``trainer:`` mapping is a legacy JobConfig (torchtitan 0.2.x sections:
``model``, ``optimizer``, ``training``, ``parallelism``, ...). This module reads the file the way
Forge reads it and hands the checker that mapping, with the position of every key in the YAML,
so a finding points at ``app.yaml:line:col``.

How Forge reads it, and so how titan does: ``OmegaConf.load`` parses with PyYAML's ``SafeLoader``
(YAML 1.1) changed in three ways, all copied here as data: ``1e-5`` is a float (YAML 1.1 wants a
dot), dates stay strings (no implicit timestamps), and a key written twice in one mapping is an
error. So ``yes``/``no``/``on``/``off`` are booleans, ``~`` and ``null`` are None, ``0x10`` and
``1_000`` are ints. ``${a.b}`` interpolations are resolved from the same file as OmegaConf
resolves them; one titan cannot resolve (a resolver such as ``${oc.env:USER}``) leaves its key
unchecked, with a warning.

What a YAML file can do that a job config never needs becomes a finding, never a hang or an
object: anchors and aliases expanding past :data:`MAX_NODES` nodes (an alias bomb) or into
themselves, nesting too deep for the parser, and tags (``!!python/...``, ``!!binary``,
``!!timestamp``, ``!!set``) — nothing but plain scalars, mappings and sequences is constructed.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.spans import KeySpan
from titan.schemas.yaml_interpolation import resolve

MAX_NODES = 100_000
"""The most nodes a file may expand to once aliases are followed (an app config has hundreds)."""
SECTION = "trainer"
"""The key of the app config that holds the legacy JobConfig sections."""
FORGE_ACTOR_FIELDS = ("loss", "state_dict_key", "use_dcp", "dcp_path")
"""Keys of the ``trainer:`` block that are Forge's trainer actor's own settings, not legacy
sections (``forge.actors.trainer.titan.TitanTrainer``): not titan's to check."""

_PREFIX = "tag:yaml.org,2002:"
_PLAIN = {_PREFIX + name for name in ("null", "bool", "int", "float", "str")}
_MAP, _SEQ, _MERGE = _PREFIX + "map", _PREFIX + "seq", _PREFIX + "merge"
# OmegaConf's float resolver (omegaconf/_utils.py, get_yaml_loader): YAML 1.2's floats.
_FLOAT = re.compile(
    r"""^(?:[-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
    |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
    |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
    |[-+]?\.(?:inf|Inf|INF)
    |\.(?:nan|NaN|NAN))$""",
    re.X,
)


class _ForgeLoader(yaml.SafeLoader):
    """PyYAML's safe loader as ``OmegaConf.load`` configures it (see the module docstring)."""


_ForgeLoader.add_implicit_resolver(_PREFIX + "float", _FLOAT, list("-+0123456789."))
_ForgeLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _PREFIX + "timestamp"]
    for first, resolvers in _ForgeLoader.yaml_implicit_resolvers.items()
}


class YamlSource:
    """An app config as read: the trainer's sections and their positions, or what stopped it."""

    __slots__ = ("text", "document", "spans", "problems", "problem")

    text: str
    """The decoded text."""
    document: dict[str, Any] | None
    """The ``trainer:`` mapping (keys the checker must not see removed), when one was read."""
    spans: dict[tuple, KeySpan]
    """Positions of the trainer's keys, by their path inside the trainer."""
    problems: tuple[Diagnostic, ...]
    """Every finding of the reading itself, in file order."""
    problem: Diagnostic | None
    """The first error when there is no document."""

    def __init__(
        self,
        *,
        text: str,
        document: dict[str, Any] | None,
        spans: dict[tuple, KeySpan],
        problems: list[Diagnostic],
    ) -> None:
        self.text = text
        self.document = document
        self.spans = spans
        self.problems = tuple(sorted(problems, key=Diagnostic.sort_key))
        self.problem = None if document is not None else (self.problems or (None,))[0]


def parse(text: str, *, file: str) -> YamlSource:
    """Read an app config's text; every problem is a finding at the YAML's line and column."""
    reader = _Reader(text, file)
    document = reader.run()
    return YamlSource(text=text, document=document, spans=reader.spans, problems=reader.found)


class _Reader:
    """One reading of one file: composes the node graph, checks it, builds the trainer."""

    def __init__(self, text: str, file: str) -> None:
        self.text, self.file = text, file
        self.spans: dict[tuple, KeySpan] = {}
        self.found: list[Diagnostic] = []
        self.loader = _ForgeLoader(text)

    def run(self) -> dict[str, Any] | None:
        """The trainer mapping, or None with the reason among ``found``."""
        try:
            root = self.loader.get_single_node()
        except yaml.MarkedYAMLError as error:
            return self.fail("yaml-syntax", error.problem_mark, _syntax_message(error), _SYNTAX)
        except yaml.YAMLError as error:
            return self.fail("yaml-syntax", None, f"invalid YAML: {error}", _SYNTAX)
        except RecursionError:
            return self.fail("too-deep", None, "the YAML nests deeper than titan reads", _DEEP)
        finally:
            self.loader.dispose()
        if root is None:
            return self.fail("no-trainer", None, "the file holds no YAML document", _NO_TRAINER)
        try:
            self.sizes: dict[int, int] = {}
            self.active: set[int] = set()
            if self.expanded(root) > MAX_NODES:
                return self.fail("yaml-syntax", root.start_mark, _BOMB, _BOMB_HINT)
        except _Cycle as cycle:
            return self.fail("yaml-syntax", cycle.mark, _CYCLE, _BOMB_HINT)
        except RecursionError:
            return self.fail("too-deep", None, "the YAML nests deeper than titan reads", _DEEP)
        if any(d.severity is Severity.ERROR for d in self.found):
            return None  # a duplicate key or a tag Forge's loader refuses: the file does not load
        if root.tag != _MAP:
            return self.fail("no-trainer", root.start_mark, _NOT_MAPPING, _NO_TRAINER)
        try:
            return self.trainer(root)
        except RecursionError:
            return self.fail("too-deep", None, "the YAML nests deeper than titan reads", _DEEP)

    def trainer(self, root: Any) -> dict[str, Any] | None:
        """The trainer mapping of a file that loads, its interpolations resolved."""
        whole = self.value(root, None)
        trainer = next((v for k, v in root.value if k.tag in _PLAIN and k.value == SECTION), None)
        if trainer is None or trainer.tag != _MAP:
            mark = trainer.start_mark if trainer is not None else root.start_mark
            return self.fail("no-trainer", mark, _no_trainer(trainer), _NO_TRAINER)
        document = self.value(trainer, ())
        for field in FORGE_ACTOR_FIELDS:
            document.pop(field, None)
        self.interpolate(document, whole, ())
        return document

    def fail(self, code: str, mark: Any, message: str, hint: str) -> None:
        """Record a finding that stops the reading."""
        self.found.append(self.finding(code, mark, message, hint))
        return None

    def finding(
        self, code: str, mark: Any, message: str, hint: str, *, path: str = "", warn: bool = False
    ) -> Diagnostic:
        """A finding at a YAML mark (line 1 when the parser gave none)."""
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        return Diagnostic(
            code=code,
            severity=Severity.WARNING if warn else Severity.ERROR,
            path=path,
            message=message,
            hint=hint,
            span=Span(file=self.file, line=line, col=col),
        )

    def expanded(self, node: Any) -> int:
        """How many nodes ``node`` becomes once its aliases are followed; checks keys and tags
        on the way. Each node is counted once (aliases share it), so this is linear."""
        known = self.sizes.get(id(node))
        if known is not None:
            return known
        if id(node) in self.active:
            raise _Cycle(node.start_mark)
        self.active.add(id(node))
        if node.tag not in _ForgeLoader.yaml_constructors and node.tag != _MERGE:
            self.found.append(self.finding("yaml-type", node.start_mark, *_unknown_tag(node.tag)))
        size = 1
        if isinstance(node, yaml.MappingNode):
            self.duplicates(node)
            for key, value in node.value:
                size += self.expanded(key) + self.expanded(value)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                size += self.expanded(item)
        self.active.discard(id(node))
        self.sizes[id(node)] = size = min(size, MAX_NODES + 1)
        return size

    def duplicates(self, node: Any) -> None:
        """A string key written twice in one mapping: OmegaConf's loader refuses the file."""
        first: dict[str, Any] = {}
        for key, _ in node.value:
            if key.tag != _PREFIX + "str":
                continue
            if key.value in first:
                where = first[key.value].line + 1
                self.found.append(
                    self.finding(
                        "yaml-syntax",
                        key.start_mark,
                        f"`{key.value}` is written twice in one mapping (first at line {where}): "
                        "Forge's loader refuses the file",
                        "delete one of the two, or merge them",
                    )
                )
            else:
                first[key.value] = key.start_mark

    def value(self, node: Any, path: tuple | None) -> Any:
        """The Python value of ``node``; ``path`` (inside the trainer) records spans and makes a
        value titan cannot hold a finding. Outside the trainer (``path`` None) such values are
        kept as None: they are not titan's, only references into them are."""
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ:
                return self.foreign(node, path)
            items = []
            for index, item in enumerate(node.value):
                if path is not None:
                    self.spans[(*path, index)] = _key_span(item, item)
                items.append(self.value(item, None if path is None else (*path, index)))
            return items
        if node.tag not in _PLAIN:
            return self.foreign(node, path)
        try:
            return self.loader.construct_object(node)
        except (ValueError, yaml.YAMLError):
            if path is not None:
                message = f"`{node.value}` is not a valid {node.tag.removeprefix(_PREFIX)}"
                self.found.append(
                    self.finding(
                        "yaml-type", node.start_mark, message, _PLAIN_HINT, path=_dot(path)
                    )
                )
            return None

    def mapping(self, node: Any, path: tuple | None) -> dict | None:
        """A mapping, with ``<<`` merge keys applied as PyYAML applies them."""
        if node.tag != _MAP:
            return self.foreign(node, path)
        try:
            self.loader.flatten_mapping(node)
        except yaml.MarkedYAMLError as error:
            self.found.append(
                self.finding("yaml-syntax", error.problem_mark, _syntax_message(error), _SYNTAX)
            )
            return None
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.value(key_node, None)
            if path is None:
                if isinstance(key, str | int | float | bool | None):
                    result[key] = self.value(value_node, None)
                continue  # a list or mapping as a key: no reference can reach it
            if not isinstance(key, str):
                message = f"the key `{key_node.value}` reads as {type(key).__name__}, not a name"
                hint = f'quote it ("{key_node.value}") if it is meant as a key'
                self.found.append(
                    self.finding("yaml-type", key_node.start_mark, message, hint, path=_dot(path))
                )
                continue
            self.spans[(*path, key)] = _key_span(key_node, value_node)
            result[key] = self.value(value_node, (*path, key))
        return result

    def foreign(self, node: Any, path: tuple | None) -> None:
        """A tagged value (date, binary, set, ...) a legacy JobConfig cannot hold."""
        if path is not None:
            name = node.tag.removeprefix(_PREFIX)
            self.found.append(
                self.finding(
                    "yaml-type",
                    node.start_mark,
                    f"`{_dot(path)}` is a YAML `!!{name}` value, which no legacy JobConfig "
                    "setting holds",
                    "write the value as a plain string, number, boolean, list or mapping",
                    path=_dot(path),
                )
            )
        return None

    def interpolate(self, tree: Any, whole: dict, path: tuple) -> None:
        """Resolve ``${...}`` in the trainer's strings from the whole file, in place; a key whose
        value titan cannot resolve is taken out of the check, with a warning."""
        items = tree.items() if isinstance(tree, dict) else enumerate(tree)
        for key, value in list(items):
            here = (*path, key)
            if isinstance(value, dict | list):
                self.interpolate(value, whole, here)
            elif isinstance(value, str) and "${" in value:
                resolved, ok = resolve(value, whole)
                if ok:
                    tree[key] = resolved
                    continue
                span = self.spans.get(here)
                mark = _Mark(span.line - 1, span.col - 1) if span else None
                message = (
                    f"`{_dot(here)}` is `{value}`, which Forge resolves at run time and titan "
                    "cannot: the value is not checked, and titan-migrate leaves the setting at "
                    "its default"
                )
                hint = "write the value itself, or refer to a plain value of this file (${a.b})"
                self.found.append(
                    self.finding("interpolation", mark, message, hint, path=_dot(here), warn=True)
                )
                if isinstance(tree, dict):
                    del tree[key]


class _Cycle(Exception):
    """An alias inside the node it names."""

    def __init__(self, mark: Any) -> None:
        super().__init__("cycle")
        self.mark = mark


class _Mark:
    """A 0-based position, shaped like a PyYAML mark."""

    __slots__ = ("line", "column")

    def __init__(self, line: int, column: int) -> None:
        self.line, self.column = line, column


def _key_span(key: Any, value: Any) -> KeySpan:
    """Where a key is written; a mapping value is a section (no value line), as a TOML table."""
    line, col = key.start_mark.line + 1, key.start_mark.column + 1
    same_line = key.end_mark.line == key.start_mark.line
    end_col = key.end_mark.column + 1 if same_line else col + 1
    value_line = None if isinstance(value, yaml.MappingNode) else value.start_mark.line + 1
    return KeySpan(line, col, end_col, value_line)


def _dot(path: tuple) -> str:
    """A trainer path as the checker's dotted key."""
    return ".".join(str(p) for p in path)


def _syntax_message(error: yaml.MarkedYAMLError) -> str:
    """PyYAML's words without its position block (the finding carries the position)."""
    words = " ".join(w for w in (error.context, error.problem) if w)
    return f"invalid YAML: {words or 'the file cannot be parsed'}"


def _unknown_tag(tag: str) -> tuple[str, str]:
    """Message and hint for a tag Forge's safe loader has no constructor for."""
    return (
        f"the tag `{tag}` names a Python object or a type Forge's safe YAML loader refuses "
        "(titan never constructs one)",
        "write the value as a plain string, number, boolean, list or mapping",
    )


def _no_trainer(trainer: Any) -> str:
    """Why the file has no trainer sections to check."""
    if trainer is None:
        return f"the app config has no `{SECTION}:` key holding legacy JobConfig sections"
    return f"`{SECTION}:` holds a {_kind(trainer)}, not a mapping of legacy JobConfig sections"


def _kind(node: Any) -> str:
    """A node's kind in the user's words."""
    if isinstance(node, yaml.SequenceNode):
        return "list"
    if node.tag == _PREFIX + "null":
        return "null value"
    return "scalar value" if isinstance(node, yaml.ScalarNode) else "value"


_SYNTAX = "fix the YAML at this position (indentation, a missing `:` or closing bracket)"
_DEEP = "an app config nests a few levels; flatten the value"
_BOMB = (
    f"aliases make this YAML expand to more than {MAX_NODES:,} nodes (an alias bomb): "
    "titan does not read it, and Forge's loader would not finish"
)
_CYCLE = "the anchor of this value is used inside the value itself: it has no end"
_BOMB_HINT = "write the values out, or use anchors only for small shared blocks"
_NOT_MAPPING = "the app config is not a mapping of keys (Forge reads a mapping at the top)"
_NO_TRAINER = (
    "put the legacy sections (model, optimizer, training, parallelism, ...) under a "
    f"`{SECTION}:` mapping"
)
_PLAIN_HINT = "write a value of the tag's type, or drop the tag"

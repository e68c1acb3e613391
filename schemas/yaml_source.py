"""Reading a TorchForge app config: its legacy JobConfig sections, under ``trainer:`` or at the top.

A Forge app YAML holds the whole job (generator, reward actors, services, ``${...}``); its legacy
JobConfig sections (``model``, ``training``, ...) are the ``trainer:`` mapping of an RL app, or the
top level of an SFT app, whose recipe merges it into ``ForgeJobConfig`` (``titan.schemas.forge_app``
says which keys around them are Forge's own: the trainer actor's arguments and spawner blocks in
``trainer:`` are findings, ``forge-app``, info). This module reads the file as Forge reads it and
hands the checker the sections with each key's position, so a finding points at ``app.yaml:l:c``.

How Forge reads it, and so how titan does: ``OmegaConf.load`` parses with PyYAML's ``SafeLoader``
(YAML 1.1) changed in three ways, all copied here as data: ``1e-5`` is a float (YAML 1.1 wants a
dot), dates stay strings (no implicit timestamps), and a key written twice in one mapping is an
error. So ``yes``/``no``/``on``/``off`` are booleans, ``~`` and ``null`` are None, ``0x10`` and
``1_000`` are ints. ``${a.b}`` interpolations are resolved from the same file as OmegaConf
resolves them; one titan cannot resolve (a resolver such as ``${oc.env:USER}``) leaves its key
unchecked, with a warning.

What a YAML file can do that a job config never needs becomes a finding, never a hang or an
object: a file over :data:`~titan.schemas.yaml_messages.MAX_BYTES` or of more than
:data:`MAX_NODES` values written out (too large: refused before PyYAML's slow parser reads it),
anchors and aliases expanding past :data:`MAX_NODES` nodes (an alias bomb) or into
themselves, nesting too deep for the parser, and tags (``!!python/...``, ``!!binary``,
``!!timestamp``, ``!!set``) — nothing but plain scalars, mappings and sequences is constructed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import yaml
from titan.schemas import forge_app
from titan.schemas import yaml_messages as words
from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.spans import KeySpan
from titan.schemas.yaml_interpolation import resolve_tree
from titan.schemas.yaml_messages import MAX_NODES

__all__ = ["MAX_NODES", "YamlSource", "parse"]

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
    """An app config as read: its legacy sections and their positions, or what stopped it."""

    __slots__ = ("text", "document", "spans", "problems", "problem", "app", "layout")

    text: str
    """The decoded text."""
    document: dict[str, Any] | None
    """The legacy sections (keys the checker must not see removed), when they were read."""
    spans: dict[tuple, KeySpan]
    """Positions of the sections' keys, by their path inside the sections."""
    problems: tuple[Diagnostic, ...]
    """Every finding of the reading itself, in file order."""
    problem: Diagnostic | None
    """The first error when there is no document."""
    app: dict[str, Any] | None
    """The whole file as Forge reads it, interpolations left as written (values titan cannot
    hold are None), when it loaded: what ``titan.schemas.forge_eras.forge_era`` dates."""
    layout: str | None
    """Where the sections were: ``trainer`` (an RL app) or ``top`` (an SFT app)."""

    def __init__(
        self,
        *,
        text: str,
        document: dict[str, Any] | None,
        spans: dict[tuple, KeySpan],
        problems: list[Diagnostic],
        app: dict[str, Any] | None = None,
        layout: str | None = None,
    ) -> None:
        self.text = text
        self.document = document
        self.spans = spans
        self.problems = tuple(sorted(problems, key=Diagnostic.sort_key))
        self.problem = None if document is not None else (self.problems or (None,))[0]
        self.app = app
        self.layout = layout


def parse(text: str, *, file: str) -> YamlSource:
    """Read an app config's text; every problem is a finding at the YAML's line and column."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > words.MAX_BYTES:
        span = Span(file=file, line=1, col=1)
        problem = Diagnostic(
            code="unreadable-file",
            severity=Severity.ERROR,
            path="",
            message=words.too_large(size),
            hint=words.TOO_LARGE_HINT,
            span=span,
        )
        return YamlSource(text=text, document=None, spans={}, problems=[problem])
    reader = _Reader(text, file)
    document = reader.run()
    return YamlSource(
        text=text,
        document=document,
        spans=reader.spans,
        problems=reader.found,
        app=reader.app,
        layout=reader.layout,
    )


class _Reader:
    """One reading of one file: composes the node graph, checks it, builds the sections."""

    def __init__(self, text: str, file: str) -> None:
        self.text, self.file = text, file
        self.spans: dict[tuple, KeySpan] = {}
        self.values: dict[tuple, Any] = {}  # where each value of the sections starts
        self.found: list[Diagnostic] = []
        self.loader = _ForgeLoader(text)
        self.app: dict[str, Any] | None = None
        self.layout: str | None = None

    def run(self) -> dict[str, Any] | None:
        """The legacy sections, or None with the reason among ``found``."""
        try:
            root = self.loader.get_single_node()
        except yaml.MarkedYAMLError as error:
            return self.fail("yaml-syntax", error.problem_mark, words.syntax_message(error))
        except yaml.YAMLError as error:
            return self.fail("yaml-syntax", None, f"invalid YAML: {error}")
        except RecursionError:
            return self.fail("too-deep", None, words.TOO_DEEP, words.DEEP)
        finally:
            self.loader.dispose()
        if root is None:
            return self.fail("no-trainer", None, words.NO_DOCUMENT, words.NO_TRAINER)
        try:
            self.sizes: dict[int, int] = {}
            self.active: set[int] = set()
            if self.expanded(root) > MAX_NODES:
                if len(self.sizes) > MAX_NODES:  # as many values written out: a large file
                    message = words.too_many_nodes(len(self.sizes))
                    return self.fail("unreadable-file", None, message, words.TOO_LARGE_HINT)
                return self.fail("yaml-syntax", root.start_mark, words.BOMB, words.BOMB_HINT)
        except _Cycle as cycle:
            return self.fail("yaml-syntax", cycle.mark, words.CYCLE, words.BOMB_HINT)
        except RecursionError:
            return self.fail("too-deep", None, words.TOO_DEEP, words.DEEP)
        if any(d.severity is Severity.ERROR for d in self.found):
            return None  # a duplicate key or a tag Forge's loader refuses: the file does not load
        if root.tag != _MAP:
            return self.fail("no-trainer", root.start_mark, words.NOT_MAPPING, words.NO_TRAINER)
        try:
            return self.sections(root)
        except RecursionError:
            return self.fail("too-deep", None, words.TOO_DEEP, words.DEEP)

    def sections(self, root: Any) -> dict[str, Any] | None:
        """The legacy sections of a file that loads, where its layout keeps them, with Forge's
        own keys taken out and the interpolations resolved."""
        from titan.schemas.legacy_spec import LEGACY_SPEC

        whole = self.value(root, None)
        self.app, self.layout = whole, forge_app.layout(whole)
        names = frozenset(field.name for field in LEGACY_SPEC.fields)
        if self.layout == "top":
            # The SFT recipe merges the whole file into ForgeJobConfig; the keys that are the
            # app's own (processes, model_name, ...) never reach the engine.
            own = {k for k, v in whole.items() if forge_app.app_level(k, v, sections=names)}
            document = self.mapping(root, (), skip=own.__contains__)
        else:
            keyed = ((k, v) for k, v in root.value if k.tag in _PLAIN)
            trainer = next((v for k, v in keyed if k.value == forge_app.TRAINER), None)
            if trainer is None or trainer.tag != _MAP:
                mark = trainer.start_mark if trainer is not None else root.start_mark
                kind = None if trainer is None else _kind(trainer)
                return self.fail("no-trainer", mark, words.no_trainer(kind), words.NO_TRAINER)
            document = self.value(trainer, ())
        self.forge_settings(document, sections=names)
        self.interpolate(document, whole)
        return document

    def forge_settings(self, document: dict[str, Any], *, sections: frozenset[str]) -> None:
        """Take Forge's own keys out of the sections (a ``trainer:`` block's actor arguments and
        spawner blocks, an SFT app's sections the engine never reads), each reported at its key
        as what it is."""
        for name, value in list(document.items()):
            found = forge_app.forge_setting(name, value, where=self.layout, sections=sections)
            if found is None:
                continue
            message, hint = forge_app.setting_message(name, found)
            mark = self.at((name,))
            self.found.append(
                self.finding("forge-app", mark, message, hint, path=name, severity=Severity.INFO)
            )
            del document[name]
            for path in [p for p in self.spans if p[:1] == (name,)]:
                del self.spans[path]

    def fail(self, code: str, mark: Any, message: str, hint: str = words.SYNTAX) -> None:
        """Record a finding that stops the reading."""
        self.found.append(self.finding(code, mark, message, hint))
        return None

    def finding(
        self,
        code: str,
        mark: Any,
        message: str,
        hint: str,
        *,
        path: str = "",
        severity: Severity = Severity.ERROR,
    ) -> Diagnostic:
        """A finding at a YAML mark (line 1 when the parser gave none)."""
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        end = getattr(mark, "end", None)  # a key's own span: the caret covers the key
        return Diagnostic(
            code=code,
            severity=severity,
            path=path,
            message=message,
            hint=hint,
            span=Span(file=self.file, line=line, col=col, end_col=end),
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
            self.found.append(
                self.finding("yaml-type", node.start_mark, *words.unknown_tag(node.tag))
            )
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
                message, hint = words.duplicate(key.value, first_line=where)
                self.found.append(self.finding("yaml-syntax", key.start_mark, message, hint))
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
                    self.values[(*path, index)] = _value_mark(item)
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
                        "yaml-type", node.start_mark, message, words.PLAIN_HINT, path=_dot(path)
                    )
                )
            return None

    def mapping(
        self, node: Any, path: tuple | None, *, skip: Callable[[Any], bool] | None = None
    ) -> dict | None:
        """A mapping, with ``<<`` merge keys applied as PyYAML applies them; keys ``skip``
        names are left out (an SFT app's own blocks, beside its sections)."""
        if node.tag != _MAP:
            return self.foreign(node, path)
        try:
            self.loader.flatten_mapping(node)
        except yaml.MarkedYAMLError as error:
            message = words.syntax_message(error)
            self.found.append(
                self.finding("yaml-syntax", error.problem_mark, message, words.SYNTAX)
            )
            return None
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = self.value(key_node, None)
            if skip is not None and skip(key):
                continue
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
            self.values[(*path, key)] = _value_mark(value_node)
            value = self.value(value_node, (*path, key))
            if value is _DROPPED:  # a tagged value of a known setting: reported as such
                continue
            result[key] = value
        return result

    def foreign(self, node: Any, path: tuple | None) -> Any:
        """A tagged value (date, binary, set, ...) a legacy JobConfig cannot hold: None, or
        :data:`_DROPPED` when it stands for a known setting, whose type the finding names (the
        checker would only see a None there)."""
        if path is None:
            return None
        name = node.tag.removeprefix(_PREFIX)
        expected = words.setting_type(path)
        message, hint = words.foreign(_dot(path), name, expected=expected)
        self.found.append(
            self.finding("yaml-type", node.start_mark, message, hint, path=_dot(path))
        )
        return None if expected is None else _DROPPED

    def interpolate(self, document: dict[str, Any], whole: dict) -> None:
        """Resolve ``${...}`` in the sections' strings from the whole file, in place; a key whose
        value titan cannot resolve is taken out of the check, with a warning."""
        for here, value, broken in resolve_tree(document, whole):
            if broken is not None:  # OmegaConf refuses it: at the reference itself
                message, hint = words.broken(
                    _dot(here), value, kind=broken.kind, chain=broken.chain
                )
                mark = self.values.get(here) or self.at(here)
                self.found.append(
                    self.finding("broken-interpolation", mark, message, hint, path=_dot(here))
                )
                continue
            message = words.unresolved(_dot(here), value)
            self.found.append(
                self.finding(
                    "interpolation",
                    self.at(here),
                    message,
                    words.UNRESOLVED_HINT,
                    path=_dot(here),
                    severity=Severity.WARNING,
                )
            )

    def at(self, path: tuple) -> _Mark | None:
        """The mark of a key of the sections, from its recorded span."""
        span = self.spans.get(path)
        return _Mark(span.line - 1, span.col - 1, end=span.end_col) if span else None


_DROPPED = object()
"""A value left out of the sections because its finding says all there is to say."""


class _Cycle(Exception):
    """An alias inside the node it names."""

    def __init__(self, mark: Any) -> None:
        super().__init__("cycle")
        self.mark = mark


class _Mark:
    """A 0-based position, shaped like a PyYAML mark."""

    __slots__ = ("line", "column", "end")

    def __init__(self, line: int, column: int, *, end: int | None = None) -> None:
        self.line, self.column, self.end = line, column, end


def _key_span(key: Any, value: Any) -> KeySpan:
    """Where a key is written; a mapping value is a section (no value line), as a TOML table."""
    line, col = key.start_mark.line + 1, key.start_mark.column + 1
    same_line = key.end_mark.line == key.start_mark.line
    end_col = key.end_mark.column + 1 if same_line else col + 1
    value_line = None if isinstance(value, yaml.MappingNode) else value.start_mark.line + 1
    return KeySpan(line, col, end_col, value_line)


def _value_mark(node: Any) -> _Mark:
    """Where a value is written; the caret covers it when it is on one line."""
    start, end = node.start_mark, node.end_mark
    return _Mark(start.line, start.column, end=end.column + 1 if end.line == start.line else None)


def _dot(path: tuple) -> str:
    """A path inside the sections as the checker's dotted key."""
    return ".".join(str(p) for p in path)


def _kind(node: Any) -> str:
    """A node's kind in the user's words."""
    if isinstance(node, yaml.SequenceNode):
        return "list"
    if node.tag == _PREFIX + "null":
        return "null value"
    return "scalar value" if isinstance(node, yaml.ScalarNode) else "value"

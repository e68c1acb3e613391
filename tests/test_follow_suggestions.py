"""Following a hint fixes what it is about, and breaks nothing else.

Real TOMLs (legacy_configs/ and, when ``../shared`` is here, the upstream v0.2.2 corpus) are
mutated the way people get them wrong: a misspelt key or table at every level, a key in the
wrong section, a value of the wrong type whose right value is plain (``"10"``, ``1`` for true,
``"a,b"`` for a list), a stale converter name, a string for the converter list, a choice in the
wrong case, a misspelt model name or flavor, and TOML written the Python or YAML way
(``key: value``, ``True``, ``None``, an unquoted string).

Each mutated file is checked; the finding at the mutated key is read as a user reads it and
its hint is applied: ``did you mean `X`?`` renames the key (or, for a model, flavor, choice or
converter, sets that value), ``use `k = v``` writes that statement, ``set `a.b = v``` writes that
key, "delete the ... line" deletes it. The file is checked again: the finding must be gone and
no error may appear that the unmutated file did not have. Hints that name two equally close
candidates, or none, are counted, not followed. The counts are printed (``pytest -s``).
"""

from __future__ import annotations

import dataclasses
import functools
import random
import re
import tomllib
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.spec import SectionSpec
from titan.schemas.toml_check import check_text

from tests.helpers import legacy_tomls
from tests.reference import CORPUS

REPO = Path(__file__).resolve().parents[1]
LEGACY = legacy_tomls()

Key = tuple[str, ...]


@dataclasses.dataclass
class Mutation:
    kind: str
    """What was done (``typo``, ``wrong section``, ``wrong type``...)."""
    at: Key
    """The key the finding must be about."""
    document: dict | None = None
    """The mutated document, or None when ``text`` is the mutation (TOML syntax)."""
    text: str | None = None
    line: int = 0
    """For a syntax mutation: the line that was changed."""


@dataclasses.dataclass
class Outcome:
    mutations: int = 0
    undetected: int = 0
    suggested: int = 0
    followed: int = 0
    ambiguous: int = 0
    unsuggested: int = 0
    kinds: Counter = dataclasses.field(default_factory=Counter)
    failures: list = dataclasses.field(default_factory=list)


# --------------------------------------------------------------------------- checking


def errors(text: str, folder: Path) -> tuple[set[tuple[str, str]], list]:
    checked = check_text(text, file="job.toml", base_dir=folder)
    found = {(d.code, d.path) for d in checked.diagnostics if d.severity.value == "error"}
    return found, checked.diagnostics


def dump(document: dict) -> str:
    return tomli_w.dumps(document)


# --------------------------------------------------------------------------- mutations

_ALPHABET = "abcdefghijklmnopqrstuvwxyz_"


def _typo(word: str, rng: random.Random) -> str:
    """One edit a hand makes: a letter dropped, doubled, swapped with the next, or replaced."""
    i = rng.randrange(len(word))
    kind = rng.randrange(4)
    if kind == 0 and len(word) > 3:
        return word[:i] + word[i + 1 :]
    if kind == 1:
        return word[:i] + word[i] + word[i:]
    if kind == 2 and i < len(word) - 1 and word[i] != word[i + 1]:
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    return word[:i] + rng.choice(_ALPHABET.replace(word[i], "")) + word[i + 1 :]


def _copy(document: dict) -> dict:
    return tomllib.loads(dump(document))


def _get(document: dict, key: Key) -> Any:
    node: Any = document
    for part in key:
        node = node[part]
    return node


def _pop(document: dict, key: Key) -> Any:
    """Remove a key, and the tables its removal empties."""
    tables = [document]
    for part in key[:-1]:
        tables.append(tables[-1][part])
    value = tables[-1].pop(key[-1])
    for depth in range(len(key) - 1, 0, -1):
        if tables[depth]:
            break
        del tables[depth - 1][key[depth - 1]]
    return value


def _put(document: dict, key: Key, value: Any) -> None:
    node = document
    for part in key[:-1]:
        node = node.setdefault(part, {})
    node[key[-1]] = value


def _annotation(key: Key) -> Any:
    node: Any = LEGACY_SPEC
    for part in key:
        field = node.field(part) if isinstance(node, SectionSpec) else None
        if field is None:
            return None
        node = field.annotation
    return node


def _keys(document: dict, prefix: Key = ()) -> Iterator[tuple[Key, Any]]:
    """Every table and key, tables first."""
    for name, value in document.items():
        yield (*prefix, name), value
        if isinstance(value, dict):
            yield from _keys(value, (*prefix, name))


def mutations(document: dict, rng: random.Random) -> Iterator[Mutation]:
    leaves = [(k, v) for k, v in _keys(document) if not isinstance(v, dict)]
    sections = [name for name, value in document.items() if isinstance(value, dict)]
    for key, _value in _keys(document):
        # A misspelt key or table, at every level.
        typo = _typo(key[-1], rng)
        parent = _get(document, key[:-1]) if key[:-1] else document
        if typo not in parent:
            mutated = _copy(document)
            _put(mutated, (*key[:-1], typo), _pop(mutated, key))
            yield Mutation("typo", (*key[:-1], typo), mutated)
    for key, value in leaves:
        # The key in another section.
        others = [s for s in sections if s != key[0] and key[-1] not in document[s]]
        if len(key) == 2 and others:
            mutated = _copy(document)
            _pop(mutated, key)
            target = (rng.choice(others), key[-1])
            _put(mutated, target, value)
            yield Mutation("wrong section", target, mutated)
        yield from _wrong_values(document, key, value)
    yield from _converters(document)
    yield from _model(document)
    yield from _syntax(document, leaves, rng)


def _wrong_values(document: dict, key: Key, value: Any) -> Iterator[Mutation]:
    """The value in a type it does not have, where the right one is plain."""
    wrong: list[tuple[str, Any]] = []
    if isinstance(value, bool):
        wrong += [("swapped boolean", int(value)), ("quoted boolean", str(value).lower())]
    elif isinstance(value, int | float):
        wrong += [("quoted number", repr(value) if isinstance(value, float) else str(value))]
        if isinstance(value, int):
            wrong += [("integral float", float(value))]
    elif isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        if not any("," in v for v in value):
            wrong += [("string for a list", ",".join(value))]
    elif isinstance(value, str) and _annotation(key) is not None:
        choices = _annotation(key)
        if "Literal" in repr(choices) and value.upper() != value:
            wrong += [("choice in capitals", value.upper())]
    for kind, bad in wrong:
        mutated = _copy(document)
        _put(mutated, key, bad)
        yield Mutation(kind, key, mutated)


_STALE = ("float8", "quantize.dense.float8", "mx", "quantize.dense.mx", "quantize.moe.float8")


def _converters(document: dict) -> Iterator[Mutation]:
    if not isinstance(document.get("model"), dict):
        return
    for name in _STALE:
        mutated = _copy(document)
        mutated["model"]["converters"] = [name]
        yield Mutation("stale converter", ("model", "converters"), mutated)
        mutated = _copy(document)
        mutated["model"]["converters"] = name
        yield Mutation("stale converter as a string", ("model", "converters"), mutated)


def _model(document: dict) -> Iterator[Mutation]:
    model = document.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("name"), str):
        return
    name = model["name"]
    if len(name) > 4:
        mutated = _copy(document)
        mutated["model"]["name"] = name[0] + name[2:]  # `lama3`
        yield Mutation("misspelt model", ("model", "name"), mutated)
    flavor = model.get("flavor")
    if isinstance(flavor, str) and flavor.lower() != flavor:
        mutated = _copy(document)
        mutated["model"]["flavor"] = flavor.lower()
        yield Mutation("flavor in lower case", ("model", "flavor"), mutated)


def _syntax(document: dict, leaves: list, rng: random.Random) -> Iterator[Mutation]:
    """TOML written the Python or YAML way, on one line of the dumped file."""
    text = dump(document)
    lines = text.split("\n")
    for key, value in rng.sample(leaves, min(6, len(leaves))):
        index = _line_of(lines, key)
        if index is None:
            continue
        line = lines[index]
        name, _, written = line.partition(" = ")
        variants = [("colon", f"{name}: {written}")]
        if isinstance(value, bool):
            variants.append(("Python boolean", f"{name} = {str(value)}"))
        if isinstance(value, str) and re.fullmatch(r"[\w./-]+", value):
            variants.append(("unquoted string", f"{name} = {value}"))
        if isinstance(value, int | float) and not isinstance(value, bool):
            variants.append(("None", f"{name} = None"))
        for kind, changed in variants:
            mutated = lines[:index] + [changed] + lines[index + 1 :]
            yield Mutation(kind, key, text="\n".join(mutated), line=index + 1)


def _line_of(lines: list[str], key: Key) -> int | None:
    """The line of ``key`` in a file tomli_w wrote (``[table]`` headers, ``name = value``)."""
    table: Key = ()
    for index, line in enumerate(lines):
        header = re.fullmatch(r"\[([\w.]+)\]", line)
        if header:
            table = tuple(header.group(1).split("."))
        elif line.startswith(f"{key[-1]} = ") and table == key[:-1]:
            return index
    return None


# --------------------------------------------------------------------------- following


_RENAME = re.compile(r"did you mean `([\w.]+)`\?$")
_VALUE = re.compile(r'^did you mean "([^"]+)"\?$')
_ELEMENT = re.compile(r'^did you mean `"([^"]+)"`\?$')
_USE = re.compile(r"^use `([^`]+)`")
_SET = re.compile(r"(?:set|with) `([\w.]+) = ([^`]+)`")
_DELETE = re.compile(r"delete the `[\w.]+` line")
_VALUE_CODES = ("unknown-model", "unknown-flavor")
_NOW = re.compile(r"`([\w.]+) = ([^`]+)`")
_ADD = re.compile(r'add "([^"]+)" to model\.converters')


def follow(finding: Any, mutation: Mutation) -> tuple[str, str] | None:
    """The file with the hint applied (its text), and the action taken; None when the hint
    offers nothing to follow. ``("ambiguous", ...)`` for two equally close candidates."""
    hint = finding.hint or ""
    if "` or `" in hint and hint.startswith(("did you mean", "`")) and "did you mean" in hint:
        return "ambiguous", ""
    key = mutation.at
    if mutation.text is not None:  # a syntax finding: the statement replaces the line
        lines = mutation.text.split("\n")
        use = _USE.search(hint)
        if use:
            lines[mutation.line - 1] = use.group(1)
            return "\n".join(lines), "use"
        if _DELETE.search(hint):
            del lines[mutation.line - 1]
            return "\n".join(lines), "delete"
        return None
    document = _copy(mutation.document)
    if (match := _ELEMENT.search(hint)) and finding.code == "unknown-converter":
        bad = re.search(r'converter `"([^"]+)"`', finding.message).group(1)
        listed = _get(document, key)
        _put(document, key, [match.group(1) if n == bad else n for n in listed])
        return dump(document), "did you mean (converter)"
    if (match := _VALUE.search(hint)) or (
        (match := _RENAME.search(hint)) and finding.code in _VALUE_CODES
    ):
        _put(document, key, match.group(1))
        return dump(document), "did you mean (value)"
    if finding.code == "moved-key":  # schemas.eras' words: `now `a.b = v` and ...`, or delete
        _pop(document, key)
        clause = hint.split(";", 1)[0]
        for dotted, value in _NOW.findall(clause.removeprefix("now ")):
            _put(document, tuple(dotted.split(".")), tomllib.loads(f"v = {value}")["v"])
        for name in _ADD.findall(hint.split(";")[1] if clause.startswith("now") else clause):
            listed = document.setdefault("model", {}).setdefault("converters", [])
            listed.extend(n for n in [name] if n not in listed)
        return dump(document), "moved"
    if match := _RENAME.search(hint):
        target = tuple(match.group(1).split("."))
        _put(document, target, _pop(document, key))
        return dump(document), "did you mean (key)"
    if match := _USE.search(hint):
        statement = tomllib.loads(match.group(1))
        (name, value), *_ = statement.items()
        _put(document, (*key[:-1], name), value)
        return dump(document), "use"
    if match := _SET.search(hint):
        _put(
            document, tuple(match.group(1).split(".")), tomllib.loads(f"v = {match.group(2)}")["v"]
        )
        return dump(document), "set"
    return None


def _finding_at(diagnostics: list, mutation: Mutation) -> Any:
    dotted = ".".join(mutation.at)
    if mutation.text is not None:
        return next((d for d in diagnostics if d.code == "toml-syntax"), None)
    for d in diagnostics:
        if d.path == dotted and d.severity.value in ("error", "warning"):
            return d
    return None


def run(files: list[Path]) -> Outcome:
    outcome = Outcome()
    for path in files:
        original = tomllib.loads(path.read_text(encoding="utf-8"))
        rng = random.Random(zlib.crc32(str(path.relative_to(path.parents[1])).encode()))
        baseline, _ = errors(dump(original), path.parent)
        for mutation in mutations(original, rng):
            outcome.mutations += 1
            text = mutation.text if mutation.text is not None else dump(mutation.document)
            _, found = errors(text, path.parent)
            finding = _finding_at(found, mutation)
            if finding is None:
                outcome.undetected += 1
                continue
            followed = follow(finding, mutation)
            if followed is None:
                outcome.unsuggested += 1
                continue
            fixed, how = followed
            if fixed == "ambiguous":
                outcome.ambiguous += 1
                continue
            outcome.suggested += 1
            after, diagnostics = errors(fixed, path.parent)
            still = [
                d
                for d in diagnostics
                if d.code == finding.code
                and d.path == finding.path
                and d.message == finding.message
            ]
            new = after - baseline
            if still or new:
                outcome.failures.append(
                    (path.name, mutation.kind, ".".join(mutation.at), finding.hint, sorted(new))
                )
                continue
            outcome.followed += 1
            outcome.kinds[mutation.kind] += 1
    return outcome


def _report(name: str, outcome: Outcome) -> None:
    print(
        f"\n{name}: {outcome.mutations} mutations, {outcome.undetected} not reported at the "
        f"mutated key, {outcome.unsuggested} without a suggestion, {outcome.ambiguous} naming "
        f"two candidates, {outcome.suggested} suggestions followed, {outcome.followed} fixed "
        f"the file, {len(outcome.failures)} failed"
    )
    print("  fixed by kind:", dict(sorted(outcome.kinds.items())))
    for failure in outcome.failures[:20]:
        print("  FAILED", failure)


@functools.cache
def legacy_outcome() -> Outcome:
    return run(LEGACY)


def test_following_each_suggestion_fixes_the_legacy_configs():
    outcome = legacy_outcome()
    _report("legacy_configs", outcome)
    assert not outcome.failures, outcome.failures[:10]
    assert outcome.followed > 0.85 * outcome.mutations


def test_following_each_suggestion_fixes_the_upstream_corpus():
    from tests.reference import corpus_files

    outcome = run(corpus_files())
    _report(str(CORPUS), outcome)
    assert not outcome.failures, outcome.failures[:10]
    assert outcome.followed > 0.85 * outcome.mutations


@pytest.mark.parametrize(
    "kind",
    [
        "typo",
        "wrong section",
        "quoted number",
        "integral float",
        "quoted boolean",
        "swapped boolean",
        "string for a list",
        "choice in capitals",
        "stale converter",
        "stale converter as a string",
        "misspelt model",
        "flavor in lower case",
        "colon",
        "Python boolean",
        "unquoted string",
        "None",
    ],
)
def test_every_kind_of_mistake_gets_a_suggestion_that_is_followed(kind):
    assert legacy_outcome().kinds[kind] > 0

"""The era chain applied: an old torchtitan TOML document rewritten with v0.2.2 keys.

torchtitan's ``JobConfig`` changed shape many times (argparse ``torchtrain/config_manager.py`` in
2024-H1, argparse then dataclass ``torchtitan/config_manager.py`` to mid 2025,
``torchtitan/config/job_config.py`` to v0.2.2). A TOML written for an older era fails at v0.2.2
with "Invalid field names". ``titan.schemas.moved_keys`` holds the researched rows (old key, v0.2.2
key, how the value changes, era, why); this module applies them: :func:`translate` says what one
old key becomes, :func:`upgrade` rewrites a whole document and lists the :class:`Step` taken per
key, :func:`hint` is the validator's sentence. The validator, ``titan-validate --fix`` and
``titan-migrate`` all read the same rows, so they cannot disagree.

Nothing is guessed: a value v0.2.2 cannot express is an ``unportable`` step with its era and
why, and an ``error`` when the run computed something v0.2.2 cannot (``titan.schemas.moved_keys``
``REFUSALS``: a LayerNorm model); a value that equals what v0.2.2 does anyway is an ``upgraded``
step that writes nothing; two settings that would land on one key with different values are
reported, never resolved. Values of keys v0.2.2 still has are read as their era read them too:
a comma-separated string for a list the era's loader split (``SPLITS``) becomes the list.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from titan.schemas._frozen import Frozen, _set
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.moved_keys import (
    CONVERTERS,
    OLD_MODULES,
    REFUSALS,
    RULES,
    SPLITS,
    STALE_CONVERTER_NAMES,
    Refusal,
    Rule,
    current_module,
    split_names,
)


class Step(Frozen):
    """What :func:`upgrade` did with one old key."""

    __slots__ = ("old", "era", "writes", "kind", "why", "severity", "hint")
    __match_args__ = ("old", "kind")

    old: tuple[str, ...]
    """The key's parts as written in the TOML, e.g. ``("training", "batch_size")``."""
    era: str
    """Where and when the key lived, e.g. ``torchtitan 2024-02 to 2025-05 (...; #1238)``."""
    writes: tuple[tuple[tuple[str, ...], Any], ...]
    """``(v0.2.2 key parts, value)`` pairs, ``()`` for a no-op or an unportable key; a write to
    ``model.converters`` is a list of names to append."""
    kind: str
    """``upgraded``, ``unportable``, or ``ignored``: a key the loader of the file's era no longer
    (or not yet) read, so the run did without it (:func:`titan.schemas.era_defaults.stale_keys`);
    it writes nothing and is never upgraded into a setting the run did not have."""
    why: str
    """One sentence: what changed, or why the key cannot be carried."""
    severity: str
    """``warning``, or ``error`` for an unportable value the run computed with (the model or
    its numbers would change): such a key is refused, not dropped."""
    hint: str
    """For an ``error`` step, what to do instead; otherwise empty."""

    def __init__(
        self,
        old: tuple[str, ...],
        era: str,
        writes: tuple[tuple[tuple[str, ...], Any], ...],
        kind: str,
        why: str,
        *,
        severity: str = "warning",
        hint: str = "",
    ) -> None:
        assert kind in ("upgraded", "unportable", "ignored"), kind
        assert severity in ("warning", "error"), severity
        _set(self, "old", old)
        _set(self, "era", era)
        _set(self, "writes", writes)
        _set(self, "kind", kind)
        _set(self, "why", why)
        _set(self, "severity", severity)
        _set(self, "hint", hint)

    @property
    def dotted(self) -> str:
        """The old key as one dotted path."""
        return ".".join(self.old)


_BY_OLD: dict[str, Rule] = {rule.old: rule for rule in RULES}
_TABLES: frozenset[str] = frozenset(rule.old for rule in RULES if rule.how == "table")
_V022_SECTIONS = frozenset(field.name for field in LEGACY_SPEC.fields)
OLD_TABLES: frozenset[str] = (
    frozenset(
        ".".join(rule.old.split(".")[:end])
        for rule in RULES
        for end in range(1, rule.old.count(".") + (rule.how == "table") + 1)
    )
    - _V022_SECTIONS
)
"""Tables only older eras had (``[float8]``, ``[mx]``, ``[estimate]``, ``[quantize.dense]``...):
the validator reports their keys one by one, each with its own destination."""


def rule_for(parts: tuple[str, ...] | str) -> Rule | None:
    """The rule for an old key: its own row, else the row of the old table above it."""
    if isinstance(parts, str):
        parts = tuple(parts.split("."))
    return _rule_for(parts)


@functools.lru_cache(maxsize=8192)
def _rule_for(parts: tuple[str, ...]) -> Rule | None:
    """:func:`rule_for` of a key's parts (asked for every key of every file checked)."""
    rule = _BY_OLD.get(".".join(parts))
    if rule is not None and rule.how != "table":
        return rule
    for end in range(len(parts) - 1, 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in _TABLES:
            return _BY_OLD[prefix]
    return None


def is_old_table(parts: tuple[str, ...]) -> bool:
    """Whether ``parts`` names a table only older eras had."""
    return ".".join(parts) in OLD_TABLES


def destination(parts: tuple[str, ...]) -> str | None:
    """The dotted v0.2.2 key an old key moves to, whatever its value (``None`` if none)."""
    rule = rule_for(parts)
    if rule is None or rule.to is None:
        return None
    return ".".join(_new_key(rule, parts))


def _new_key(rule: Rule, parts: tuple[str, ...]) -> tuple[str, ...]:
    new = tuple(rule.to.split(".")) if rule.to else ()
    if rule.how == "table":
        return new + parts[rule.old.count(".") + 1 :]
    return new


# --------------------------------------------------------------------------- one key


def translate(parts: tuple[str, ...], value: Any, document: dict | None = None) -> Step | None:
    """What one old key with ``value`` becomes, before collisions; ``None`` if it is not old.

    ``document`` is the whole parsed file: a few old settings only make sense with their
    neighbours (a DDP degree, a microbatch count over the batch size, the era ``training.compile``
    came from)."""
    rule = rule_for(parts)
    if rule is None:
        return None
    step = _HOWS[rule.how](rule, parts, value, document or {})
    refusal = _refusal(parts, value)
    if refusal is not None and step.kind == "unportable":
        return _refused(parts, refusal)
    return _split_writes(step)


def refusals(document: dict, flat: list | None = None) -> list[Step]:
    """Every ``error`` step of the document as written: a value (of an old key or of a v0.2.2
    key) the run computed with that v0.2.2 cannot express. ``flat`` is ``leaves(document)``
    when the caller has it already."""
    found = []
    for parts, value in leaves(document) if flat is None else flat:
        if rule_for(parts) is not None:
            step = translate(parts, value, document)
        elif ".".join(parts) in _REFUSED:  # only these values of a v0.2.2 key are errors
            step = value_step(parts, value)
        else:
            continue
        if step is not None and step.severity == "error":
            found.append(step)
    return found


_REFUSED = frozenset(refusal.key for refusal in REFUSALS)


def value_step(parts: tuple[str, ...], value: Any) -> Step | None:
    """What the value of a key v0.2.2 still has meant in its era, when v0.2.2 reads it otherwise:
    a comma-separated string the era split (upgraded to the list), or a value v0.2.2 cannot
    express (an error step); ``None`` when the value means the same."""
    refusal = _refusal(parts, value)
    if refusal is not None:
        return _refused(parts, refusal)
    if parts == _ARGS_MODULE and isinstance(value, str) and value:
        return _args_module(value)
    split = _SPLITS.get(".".join(parts))
    if split is None or not _is_names(value):
        return None  # one name is a one-element list in every era: no era question
    names = split_names(value)
    why = f"the loader of that era split {toml_value(value)} at its commas"
    return Step(parts, split.era, ((parts, names),), "upgraded", why)


_SPLITS = {split.key: split for split in SPLITS}
_ARGS_MODULE = ("experimental", "custom_args_module")


def _args_module(module: str) -> Step:
    """``experimental.custom_args_module``: from #767 (c1c2f55d, 2025-04-18) until #1871
    (7c104807, 2025-10-14) the dataclass module merged into the config, exactly what
    ``job.custom_config_module`` does; a built-in extension's earlier path becomes today's."""
    new = current_module(module)
    why = "the module whose sections the loader merged"
    if new != module:
        why += f"; `{module}` was {OLD_MODULES[module][1]}"
    era = (
        "torchtitan 2025-04 to 2025-10 (torchtitan/config_manager.py, #767, c1c2f55d; "
        "job.custom_config_module in #1871, 7c104807)"
    )
    return Step(_ARGS_MODULE, era, ((("job", "custom_config_module"), new),), "upgraded", why)


def _is_names(value: Any) -> bool:
    """A comma-separated string of names, as an era's loader split it."""
    return isinstance(value, str) and "," in value


def _refusal(parts: tuple[str, ...], value: Any) -> Refusal | None:
    dotted = ".".join(parts)
    return next(
        (
            r
            for r in REFUSALS
            if r.key == dotted
            and (
                any(_same(value, v) for v in r.values)
                or bool(r.suffix)
                and isinstance(value, str)
                and value.endswith(r.suffix)
            )
        ),
        None,
    )


def _refused(parts: tuple[str, ...], refusal: Refusal) -> Step:
    return Step(
        parts, refusal.era, (), "unportable", refusal.why, severity="error", hint=refusal.hint
    )


def _split_writes(step: Step) -> Step:
    """An old key's string written to a list key its era split (``float8.filter_fqns``)."""
    if step.kind != "upgraded":
        return step
    writes = tuple(
        (new, split_names(value) if ".".join(new) in _SPLITS and _is_names(value) else value)
        for new, value in step.writes
    )
    if writes == step.writes:
        return step
    note = f"{step.why}; its era split the string at its commas"
    return Step(step.old, step.era, writes, "upgraded", note)


def _upgraded(parts: tuple, rule: Rule, writes: tuple, note: str = "") -> Step:
    return Step(parts, rule.era, writes, "upgraded", f"{rule.why}; {note}" if note else rule.why)


def _unportable(parts: tuple, rule: Rule, why: str) -> Step:
    return Step(parts, rule.era, (), "unportable", why)


def _key(dotted: str) -> tuple[str, ...]:
    return tuple(dotted.split("."))


def _move(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    writes = ((_new_key(rule, parts), value),) + tuple((_key(k), value) for k in rule.values)
    return _upgraded(parts, rule, writes)


def _invert(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    if not isinstance(value, bool):
        return _unportable(parts, rule, f"expected true or false, got {toml_value(value)}")
    return _upgraded(parts, rule, ((_new_key(rule, parts), not value),))


def _values(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    for old, new in rule.values:
        if _same(value, old):
            if rule.to is None:
                return _upgraded(parts, rule, tuple((_key(k), v) for k, v in new))
            return _upgraded(parts, rule, ((_new_key(rule, parts), new),))
    return _unportable(parts, rule, f"{toml_value(value)} has no v0.2.2 equivalent: {rule.why}")


def _spelling(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    for old, new in rule.values:
        if _same(value, old):
            if new is None:
                return _unportable(
                    parts, rule, f"{toml_value(value)} cannot be carried: {rule.why}"
                )
            return _upgraded(parts, rule, ((_new_key(rule, parts), new),))
    return _upgraded(parts, rule, ((_new_key(rule, parts), value),))


def _same_as_v022(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    if any(_same(value, v) for v in rule.values):
        return _upgraded(parts, rule, (), f"{toml_value(value)} is what v0.2.2 does anyway")
    where = f"; the nearest v0.2.2 setting is `{rule.to}`" if rule.to else ""
    return _unportable(
        parts, rule, f"{toml_value(value)} has no v0.2.2 equivalent: {rule.why}{where}"
    )


def _ignored(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    return _upgraded(parts, rule, ())


def _never(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    return _unportable(
        parts,
        rule,
        f"torchtitan never read `{'.'.join(parts)}` (until #1644, 2025-08-28, its loaders "
        f"ignored keys they did not declare, so the run used the default); {rule.why}",
    )


_ON = (True,)
_OFF = (False, "")


def _converter(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    name, *also_on = rule.values
    if any(_same(value, v) for v in (*_ON, *also_on)):
        return _upgraded(parts, rule, ((CONVERTERS, [name]),))
    if any(_same(value, v) for v in _OFF):
        listed = _listed_as(document, name)
        if listed is not None:  # the file enables it the newer way too: it stays enabled
            return _upgraded(
                parts,
                rule,
                () if listed == name else ((CONVERTERS, [name]),),  # a stale name: today's
                f"{toml_value(value)}, but model.converters lists it (as {toml_value(listed)}), "
                f"so the converter stays enabled; to disable it, delete {toml_value(listed)} "
                "from model.converters",
            )
        return _upgraded(parts, rule, (), f"{toml_value(value)}: the converter is not listed")
    return _unportable(parts, rule, f"expected true or false, got {toml_value(value)}")


def _listed_as(document: dict, name: str) -> str | None:
    """How ``model.converters`` names the converter ``name`` (today's name or an older one), or
    ``None`` when it does not list it."""
    listed = get(document, CONVERTERS)
    for entry in listed if isinstance(listed, list) else ():
        if entry == name or STALE_CONVERTER_NAMES.get(entry) == name:
            return entry
    return None


def _moe(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    converter, linear = rule.values
    writes: tuple = ((_new_key(rule, parts), value),)
    listed = get(document, CONVERTERS)
    listed = listed if isinstance(listed, list) else []
    enabled = any(name in linear for name in listed) or _old_linear_on(document, linear)
    if enabled and value:
        return _upgraded(parts, rule, writes + ((CONVERTERS, [converter]),))
    return _upgraded(
        parts, rule, writes, f"the file does not list {linear[-1]!r}, so it stays inert"
    )


def _old_linear_on(document: dict, linear: tuple) -> bool:
    """Whether an old key of the same document turns the linear converter on."""
    for parts, value in leaves(document):
        rule = _BY_OLD.get(".".join(parts))
        if rule is not None and rule.how == "converter" and rule.values[0] in linear:
            if any(_same(value, v) for v in (*_ON, *rule.values[1:])):
                return True
    return False


def _compile(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    if not isinstance(value, bool):
        return _unportable(parts, rule, f"expected true or false, got {toml_value(value)}")
    if not value:
        return _upgraded(parts, rule, ((("compile", "enable"), False),))
    model_only, with_loss, since = rule.values
    older = sorted(r.old for r in _old_rules(document) if _until(r) < since[:7])
    if older:
        components, note = model_only, f"`{older[0]}` dates the file before {since}"
    else:
        components, note = with_loss, ""
    writes = ((("compile", "enable"), True), (("compile", "components"), list(components)))
    return _upgraded(parts, rule, writes, note)


def _folder(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    if not isinstance(value, str):
        return _unportable(parts, rule, f"expected a folder name, got {toml_value(value)}")
    if not value:
        return _upgraded(parts, rule, (), "an empty folder kept checkpointing off, as v0.2.2 does")
    writes = ((("checkpoint", "enable"), True), (_new_key(rule, parts), value))
    return _upgraded(parts, rule, writes)


def _extension(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    if len(rule.values) > 1:  # a non-zero value changed meaning at that commit
        return _cfg_dropout(rule, parts, value, document)
    return _upgraded(parts, rule, _extension_writes(rule, parts, value))


def _extension_writes(rule: Rule, parts: tuple, value: Any) -> tuple:
    return ((("job", "custom_config_module"), rule.values[0]), (_new_key(rule, parts), value))


def _cfg_dropout(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    """Flux's text dropout: 0 is exact in every era; otherwise the file must date itself after
    the switch to independent drops (training.local_batch_size came a day later)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return _unportable(parts, rule, f"expected a probability, got {toml_value(value)}")
    dated = get(document, ("training", "local_batch_size")) is not MISSING
    if value == 0 or dated:
        return _upgraded(parts, rule, _extension_writes(rule, parts, value))
    return Step(
        parts,
        rule.era,
        (),
        "unportable",
        f"if the run predates 744189f0 (2025-06-04), {toml_value(value)} dropped both text "
        f"encodings together, training the unconditional model in that share of the steps; "
        f"v0.2.2 drops each on its own draw (both together in p² of the steps)",
        severity="error",
        hint=f"on a torchtitan of 2025-06-04 or later set training.classifier_free_guidance_prob = "
        f"{toml_value(value)}; for an earlier run, {value**0.5:.3g} (its square root) trains the "
        "unconditional model as often, though each encoding is then also dropped alone",
    )


def _warmup_pct(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    steps = get(document, ("training", "steps"))
    if not isinstance(value, int | float) or isinstance(value, bool):
        return _unportable(parts, rule, f"expected a fraction, got {toml_value(value)}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        return _unportable(parts, rule, "it needs training.steps, which this file does not set")
    if not -(2**63) <= steps < 2**63 or not abs(value) < float("inf"):  # range findings
        return _unportable(parts, rule, "it needs a training.steps and a fraction in range")
    return _upgraded(parts, rule, ((_new_key(rule, parts), max(int(steps * value), 2)),))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _dp_degree(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    if get(document, ("training", "data_parallel_type")) != "ddp":
        return _upgraded(parts, rule, ((_new_key(rule, parts), value),))
    if not _is_count(value):
        return _unportable(parts, rule, "DDP over every rank needs the number of ranks at v0.2.2")
    writes = (
        (("parallelism", "data_parallel_replicate_degree"), value),
        (("parallelism", "data_parallel_shard_degree"), 1),
    )
    return _upgraded(parts, rule, writes, "DDP is replicate degree N with shard degree 1")


def _dp_type(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    if value == "fsdp":
        return _upgraded(parts, rule, (), '"fsdp" is what v0.2.2 does by default')
    if value == "ddp" and _is_count(get(document, ("training", "data_parallel_degree"))):
        return _upgraded(parts, rule, (), "carried by training.data_parallel_degree")
    if value == "ddp":
        return _unportable(parts, rule, f"{rule.why}, and this file does not set one")
    return _unportable(parts, rule, f"{toml_value(value)} was never a data parallel type")


_ERA_BATCH = 8  # training.batch_size's default in every era it existed


def _microbatches(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    if not _is_count(value):
        return _unportable(
            parts, rule, f"expected a number of microbatches, got {toml_value(value)}"
        )
    batch = get(document, ("training", "local_batch_size"))
    if batch is MISSING:
        batch = get(document, ("training", "batch_size"))
    if batch is MISSING:
        batch = _ERA_BATCH
    if not _is_count(batch) or batch % value:
        return _unportable(
            parts,
            rule,
            f"a local batch of {toml_value(batch)} does not split into {value} microbatches",
        )
    return _upgraded(parts, rule, ((_new_key(rule, parts), batch // value),))


def _config_folder(rule: Rule, parts: tuple, value: Any, document: dict) -> Step:
    if not isinstance(value, str):
        return _unportable(parts, rule, f"expected a folder name, got {toml_value(value)}")
    path = f"{value.rstrip('/')}/job_config.json" if value else "job_config.json"
    return _upgraded(parts, rule, ((_new_key(rule, parts), path),))


_HOWS = {
    "move": _move,
    "table": _move,
    "invert": _invert,
    "values": _values,
    "spelling": _spelling,
    "converter": _converter,
    "moe": _moe,
    "same": _same_as_v022,
    "ignored": _ignored,
    "never": _never,
    "compile": _compile,
    "folder": _folder,
    "extension": _extension,
    "warmup_pct": _warmup_pct,
    "dp_degree": _dp_degree,
    "dp_type": _dp_type,
    "microbatches": _microbatches,
    "config_folder": _config_folder,
}


def _same(value: Any, other: Any) -> bool:
    """Equal and of the same TOML type (``1 == true`` in Python, not in TOML)."""
    return type(value) is type(other) and value == other


def _old_rules(document: dict) -> list[Rule]:
    return [r for r in (rule_for(p) for p, _ in leaves(document)) if r is not None]


def _until(rule: Rule) -> str:
    """The last month a rule's key was on main (``9999`` for keys torchtitan never had)."""
    found = re.search(r" to (\d{4}-\d{2})", rule.era)
    return found.group(1) if found else "9999"


def toml_value(value: Any) -> str:
    """A value as TOML spells it (for messages and hints)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    return str(value)


# --------------------------------------------------------------------------- the document


def leaves(table: dict, prefix: tuple = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every key of the document in file order; an empty table is a key of its own."""
    found: list[tuple[tuple[str, ...], Any]] = []
    for key, value in table.items():
        here = (*prefix, key)
        if isinstance(value, dict) and value:
            found += leaves(value, here)
        else:
            found.append((here, value))
    return found


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


MISSING: Any = object()
"""What :func:`get` returns for a key the document does not have."""


def get(table: Any, parts: tuple[str, ...]) -> Any:
    """The value at ``parts`` in a parsed TOML document, or :data:`MISSING`."""
    for part in parts:
        if not isinstance(table, dict) or part not in table:
            return MISSING
        table = table[part]
    return table


def _remove(document: dict, parts: tuple[str, ...]) -> None:
    """Delete a key, and every table the deletion left empty."""
    tables = [document]
    for part in parts[:-1]:
        tables.append(tables[-1][part])
    del tables[-1][parts[-1]]
    for depth in range(len(parts) - 1, 0, -1):
        if tables[depth]:
            break
        del tables[depth - 1][parts[depth - 1]]


def put(document: dict, parts: tuple[str, ...], value: Any) -> bool:
    """Write a key (appending to ``model.converters``); False where a value is in the way."""
    table = document
    for part in parts[:-1]:
        table = table.setdefault(part, {})
        if not isinstance(table, dict):
            return False
    if parts == CONVERTERS:
        listed = table.setdefault(parts[-1], [])
        if not isinstance(listed, list):
            return False
        listed.extend(name for name in value if name not in listed)
        return True
    table[parts[-1]] = _copy(value)
    return True


def upgrade(
    document: dict, *, is_current=None, ignored: dict[str, str] | None = None
) -> tuple[dict, list[Step]]:
    """A copy of the parsed TOML document with every old-era key replaced by its v0.2.2 form
    (unportable keys removed), and the steps taken, in file order.

    ``ignored`` (dotted old key -> why) names the old keys the loader of the file's era did not
    read: each is removed with an ``ignored`` step, not upgraded.

    ``is_current(parts)`` says whether a key is valid as it stands (a custom config module may
    declare a key an older torchtitan also had); such keys are left alone, but for a value their
    era read otherwise (:func:`value_step`). A write that disagrees with a value the file sets
    at v0.2.2, or with an earlier old key's write, makes the step unportable and says so:
    neither value is silently preferred. An ``error`` step (a value the run computed with that
    v0.2.2 cannot express) is removed and listed like any unportable key; the validator reports
    it as an error from the file as written (:func:`refusals`), so it is never a quiet drop."""
    result = _copy(document)
    steps: list[Step] = []
    written: dict[tuple[str, ...], tuple[Any, str]] = {}  # new key -> (value, old key)
    for parts, value in leaves(document):
        dotted = ".".join(parts)
        if ignored and dotted in ignored and not (is_current is not None and is_current(parts)):
            rule = rule_for(parts)
            era = rule.era if rule is not None else "an older torchtitan"
            steps.append(Step(parts, era, (), "ignored", ignored[dotted]))
            _remove(result, parts)
            continue
        if is_current is not None and is_current(parts):
            step = value_step(parts, value)
        else:
            step = translate(parts, value, document) or value_step(parts, value)
        if step is None and value == {} and is_old_table(parts):
            step = Step(parts, "an older torchtitan", (), "upgraded", "an empty old table")
        if step is None:
            continue  # not an old key: the validator judges it as it stands
        _remove(result, parts)
        if step.kind == "upgraded":
            step = _settle(step, document, written)
        if step.kind == "upgraded":
            for new, new_value in step.writes:
                if not put(result, new, new_value):
                    step = Step(step.old, step.era, (), "unportable", _in_the_way(new))
                    break
                written[new] = (new_value, step.dotted)
        steps.append(step)
    return result, steps


def _settle(step: Step, document: dict, written: dict) -> Step:
    """The step, or an unportable one when its writes disagree with the file or another step."""
    for new, value in step.writes:
        if new == CONVERTERS or new == step.old:
            continue
        dotted = ".".join(new)
        current = get(document, new)
        if current is not MISSING and not _same(current, value):
            other = f"the file also sets `{dotted} = {toml_value(current)}`"
        elif new in written and not _same(written[new][0], value):
            other = f"`{written[new][1]}` already means `{dotted} = {toml_value(written[new][0])}`"
        else:
            continue
        why = f"it means `{dotted} = {toml_value(value)}` but {other}; keep one of them"
        return Step(step.old, step.era, (), "unportable", why)
    return step


def _in_the_way(new: tuple[str, ...]) -> str:
    return f"`{'.'.join(new)}` cannot be written: the file has a value where a table belongs"


def action(step: Step) -> str:
    """What an upgraded step writes, in a user's words: ``now `a.b = 1` ``, ``add "x" to
    model.converters``, or that nothing needs writing."""
    settings = [
        f"`{'.'.join(new)} = {toml_value(value)}`"
        for new, value in step.writes
        if new != CONVERTERS
    ]
    names = [toml_value(n) for new, value in step.writes if new == CONVERTERS for n in value]
    said = []
    if settings:
        said.append("now " + " and ".join(settings))
    if names:
        said.append("add " + ", ".join(names) + " to model.converters")
    return "; ".join(said) or "nothing to write: v0.2.2 does this anyway"

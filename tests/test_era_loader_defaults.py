"""The era defaults against the defaults torchtitan's loaders declared, commit by commit.

``tests/data/era_loader_defaults.json`` holds, for upstream commits from the first config manager
(2024-02-23) to v0.2.2, just before and after each change of a default and each rewrite of the
loader, every default that commit's loader declared (its argparse ``default=`` values, later its
dataclass field defaults), in that commit's own key names: ``{commit: {"day", "defaults"}}``.
Keys whose default was unset (``None``) are not there: TOML cannot say them. titan reads a day as
main stood at its end, so each commit's defaults are those of the last commit of its day (the
hours-long defaults of a day with two changes, such as 2024-03-15's single comm timeout, are
not among them).

A file that states all of them explicitly (so titan's era chain must upgrade every old name) and
a file that states none must migrate, dated to the commit's day, to the same config: where the
first differs, titan's table of old defaults (``titan.schemas.era_flips``) lacks a row or has a
wrong one. Each file also names the model (the model table both carry). Three variants: as the
defaults are, with checkpointing, profiling, TensorBoard and float8 on (the era defaults that
matter only then), and with the MX converter on where the era had it. The differences that are
not a missing row are listed below, each with its reason.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from titan.migrate.plan.build import build_plan
from titan.migrate.targets.live import instantiate
from titan.schemas import era_defaults
from titan.schemas.era_defaults import V022_DEFAULTS
from titan.schemas.era_flips import FLIPS

DATA = Path(__file__).parent / "data" / "era_loader_defaults.json"
COMMITS: dict[str, dict[str, Any]] = json.loads(DATA.read_text(encoding="utf-8"))

MODEL = {"model.name": "llama3", "model.flavor": "debugmodel"}
"""The model table of both files: it names the model, so the loaders' own defaults for these two
keys are never stated (before #1064, 2025-04-07, `model.name` defaulted to "llama")."""

UNSAYABLE = {
    "model.tokenizer_path": "invalid-choice",
    "training.dataset": "invalid-value",
    "training.steps": "out-of-range",
}
"""Defaults v0.2.2 cannot say, and the error the explicit file gets for stating one: the file
that omits it gets ``era-default-lost`` on the same key instead (a sentencepiece or tiktoken
``.model`` tokenizer until #1476; the alpaca and c4_mini datasets, the second one unregistered
from #512 until #863 made c4_test the default; ``steps = -1`` until #99)."""

INERT_WHILE_OFF = {
    "checkpoint.folder": "checkpointing",
    "checkpoint.interval": "checkpointing",
    "checkpoint.keep_latest_k": "checkpointing",
    "checkpoint.last_save_model_only": "checkpointing",
    "profiling.save_traces_folder": "profiling",
}
"""Config fields whose era defaults matter only with that feature on (their rows' ``only_if``):
the explicit file carries the value its loader declared, the other file gets v0.2.2's, and with
the feature off neither is read. The ``on`` variant compares them. (An empty checkpoint.folder
was how the loaders of 2024-02 to 2024-04-15 said that checkpointing was off.)"""

FT_MODULE_KEYS = {
    "fault_tolerance.sync_steps",
    "fault_tolerance.should_quantize",
    "fault_tolerance.fragment_sync_delay",
    "fault_tolerance.fragment_update_alpha",
}
"""Base keys from 2025-04-29 to #1516 (2025-08-05) that v0.2.2 reads only from the
fault-tolerance config module: stated, even at their defaults, they select titan's
FaultTolerantTrainer, whose config adds the [fault_tolerance] table; with
``fault_tolerance.enable = false`` it is the plain trainer, as in torchtitan. The two configs are
compared without that table and the class."""

FT_OFF = ("FaultTolerantTrainer.Config", False)
"""The class and ``fault_tolerance.enable`` of the explicit file's config in that era."""

WARMUP_OF_STEPS = "lr_scheduler.warmup_steps"
"""With ``training.steps = -1`` (the default until #99, 2024-02-28), the explicit file's
``training.warmup_pct`` cannot be upgraded (it needs a positive step count) and is dropped, while
the era default derives max(int(-1 * 0.2), 2) = 2 from the same -1 (what the run had); both files
are errors for the steps alone."""

KEPT = ("carried", "default", "structural", "upgraded", "renamed")
"""Outcomes of a stated key that keep its value, or the default it equals (``renamed``: an
old converter name, with ``--fix-stale-names``)."""

SKIPPED = ("inert", "ignored")
"""Outcomes of a stated key the run did not read either: a converter's table with the converter
off, and a key a loader of that same day had already dropped (titan dates a day's loader by the
last commit of that day)."""


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys as TOML tables."""
    document: dict[str, Any] = {}
    for key, value in flat.items():
        *tables, leaf = key.split(".")
        node = document
        for table in tables:
            node = node.setdefault(table, {})
        node[leaf] = value
    return document


def _first(defaults: dict[str, Any], choices: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """The first of ``choices`` whose key the era's loader declared."""
    for key, value in choices:
        if key in defaults:
            return {key: value}
    return {}


def switched_on(defaults: dict[str, Any]) -> dict[str, Any]:
    """Checkpointing, profiling, TensorBoard and float8 turned on, in the era's key names, for
    100 steps."""
    on = _first(
        defaults,
        (
            ("checkpoint.enable", True),
            ("checkpoint.enable_checkpoint", True),
            ("checkpoint.folder", "checkpoint"),  # 2024-04-05 to 2024-04-15: a folder turned it on
            ("training.checkpoint_folder", "checkpoint"),
        ),
    )
    on |= _first(defaults, (("profiling.enable_profiling", True), ("profiling.run_profiler", True)))
    on |= _first(defaults, (("metrics.enable_tensorboard", True),))
    on["training.steps"] = 100  # a number of steps: until #99 the default was -1, unsayable
    fp8 = defaults.get("training.fp8_linear")
    converter = (
        "quantize.linear.float8"
        if "quantize.linear.float8.recipe_name" in defaults
        or "quantize.linear.float8.emulate" in defaults
        else "quantize.dense.float8"
        if "quantize.dense.float8.emulate" in defaults
        else "float8"
    )
    on |= _first(
        defaults,
        (
            ("model.converters", [converter]),
            ("float8.enable_float8_linear", True),
            ("training.enable_float8_linear", True),
            ("training.enable_fp8_linear", True),
            # a string ("" off, "dynamic") until #436 (2024-07-08), then a boolean
            ("training.fp8_linear", "dynamic" if isinstance(fp8, str) else True),
        ),
    )
    return on


def mx_on(defaults: dict[str, Any]) -> dict[str, Any] | None:
    """The MX linear converter listed, where the era had it (2025-05-14 on)."""
    for table, name in (
        ("quantize.linear.mx", "quantize.linear.mx"),
        ("quantize.dense.mx", "quantize.dense.mx"),
        ("mx", "mx"),
    ):
        if f"{table}.recipe_name" in defaults:
            return {"model.converters": [name]}
    return None


def variants(defaults: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The switches of each variant: ``off`` (none), ``on`` and, where the era had it, ``mx``
    (``on`` with the MX converter instead of float8's)."""
    found = {"off": {}, "on": switched_on(defaults)}
    mx = mx_on(defaults)
    if mx is not None:
        found["mx"] = found["on"] | mx
    return found


def stated(defaults: dict[str, Any], switches: dict[str, Any]) -> dict[str, Any]:
    """Every default stated, then the variant's switches and the model table over them."""
    return {**{k: v for k, v in defaults.items() if k not in MODEL}, **switches, **MODEL}


def differences(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """The fields of two config trees that differ (``path: type`` where the classes do)."""
    if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
        found = [] if type(a) is type(b) else [(f"{path}: type", type(a), type(b))]
        theirs = {f.name for f in dataclasses.fields(b)}
        ours = {f.name for f in dataclasses.fields(a)}
        found += [(f"{path}.{n}".lstrip("."), "<field>", "<none>") for n in ours - theirs]
        found += [(f"{path}.{n}".lstrip("."), "<none>", "<field>") for n in theirs - ours]
        for name in sorted(ours & theirs):
            where = f"{path}.{name}" if path else name
            found += differences(getattr(a, name), getattr(b, name), where)
        return found
    return [] if a == b else [(path, a, b)]


def migrate(tmp_path: Path, name: str, flat: dict[str, Any], day: str, *, stale: bool) -> Any:
    path = tmp_path / f"{name}.toml"
    path.write_text(tomli_w.dumps(nest(flat)), encoding="utf-8")
    return build_plan(path, era=day, fix_stale_names=stale)


def compare(tmp_path: Path, commit: str, variant: str) -> list[str]:
    """What differs between the two migrations of ``commit``'s defaults, as messages; the
    expected differences above are left out (and checked for what they claim)."""
    row = COMMITS[commit]
    day, defaults = row["day"], row["defaults"]
    switches = variants(defaults)[variant]
    stale = variant != "off"  # the era's converter names ("float8", "mx") are stale at v0.2.2
    full = migrate(
        tmp_path, f"{commit}-{variant}-explicit", stated(defaults, switches), day, stale=stale
    )
    bare = migrate(tmp_path, f"{commit}-{variant}-minimal", {**switches, **MODEL}, day, stale=stale)
    problems: list[str] = []

    lost = {d.path for d in bare.errors() if d.code == "era-default-lost"}
    problems += [
        f"minimal file: {d.code} {d.path}: {d.message}"
        for d in bare.errors()
        if d.code != "era-default-lost"
    ]
    told = {(d.path, d.code) for d in full.errors()}
    wanted = {(key, UNSAYABLE[key]) for key in lost if key in UNSAYABLE}
    problems += [
        f"minimal file: era-default-lost {k} is not a known unsayable default"
        for k in lost - set(UNSAYABLE)
    ]
    problems += [
        f"explicit file: no {code} for {key}, the minimal file's era-default-lost"
        for key, code in wanted - told
    ]
    problems += [
        f"explicit file: {code} {key} without an era-default-lost in the minimal file"
        for key, code in told - wanted
    ]

    for key, outcome in full.outcomes.items():
        if key not in defaults or key in MODEL:
            continue
        if outcome.status in KEPT or outcome.status in SKIPPED:
            continue
        if key in UNSAYABLE and outcome.status == "rejected":
            continue
        if key == "training.warmup_pct" and "training.steps" in lost:
            continue  # WARMUP_OF_STEPS
        problems.append(f"explicit file: {key} is {outcome.status}: {outcome.note}")

    a, b = instantiate(full), instantiate(bare)
    ft = bool(FT_MODULE_KEYS & set(defaults))
    if ft and (type(a).__qualname__, a.fault_tolerance.enable) != FT_OFF:
        problems.append(f"explicit file: {type(a).__qualname__}, not {FT_OFF[0]} with FT off")
    for path, mine, theirs in differences(a, b):
        if path in INERT_WHILE_OFF and variant == "off":
            continue
        if path == WARMUP_OF_STEPS and "training.steps" in lost:
            continue
        if ft and path in (": type", "fault_tolerance"):
            continue
        problems.append(f"{path}: explicit {mine!r}, minimal {theirs!r}")
    return problems


CASES = [
    pytest.param(commit, variant, id=f"{row['day']}-{commit}-{variant}")
    for commit, row in COMMITS.items()
    for variant in variants(row["defaults"])
]


@pytest.mark.parametrize(("commit", "variant"), CASES)
def test_stating_the_loaders_defaults_changes_nothing(
    tmp_path: Path, commit: str, variant: str
) -> None:
    assert compare(tmp_path, commit, variant) == []


@pytest.mark.parametrize("commit", COMMITS, ids=lambda c: f"{COMMITS[c]['day']}-{c}")
def test_the_loaders_default_model(tmp_path: Path, commit: str) -> None:
    # the model table names the model above; here the loader's model.name default is stated,
    # or omitted, with the flavor alone
    row = COMMITS[commit]
    day, name = row["day"], row["defaults"]["model.name"]
    flavor = {"model.flavor": MODEL["model.flavor"]}
    full = migrate(tmp_path, "named", {"model.name": name, **flavor}, day, stale=False)
    bare = migrate(tmp_path, "unnamed", flavor, day, stale=False)
    lost = {d.path for d in bare.errors() if d.code == "era-default-lost"}
    if name == "llama":
        # Llama 2 until #256 (2024-04-19), then no registered model until #1064 (2025-04-07):
        # titan records the stated name as a model it cannot train; the omitted one is an error
        assert "model.name" in lost
        assert "unknown-model" in {d.code for d in full.diagnostics if d.path == "model.name"}
    else:
        assert "model.name" not in lost
        assert differences(instantiate(full), instantiate(bare)) == []


def test_the_last_loader_declares_v022s_defaults() -> None:
    # the extraction read v0.2.2's own job_config.py as titan's spec of it does
    (last,) = [row for row in COMMITS.values() if row["day"] == "2026-02-20"]
    assert last["defaults"] == {k: v for k, v in V022_DEFAULTS.items() if v is not None}


RELIED_ON = [
    # (row key, row since, a commit on a day it holds, the variant that states its key)
    ("job.dump_folder", "2024-02-23", "bec909be0", "off"),
    ("job.dump_folder", "2024-04-11", "c22d1a8d1", "off"),
    ("model.tokenizer_path", "2024-01-18", "bec909be0", "off"),
    ("model.tokenizer_path", "2024-04-11", "c22d1a8d1", "off"),
    ("model.tokenizer_path", "2025-02-24", "6e4988550", "off"),
    ("model.tokenizer_path", "2025-04-18", "c1c2f55d1", "off"),
    ("training.dataset", "2024-01-18", "bec909be0", "off"),
    ("training.dataset", "2024-04-17", "9a4eebe1c", "off"),
    ("training.steps", "2024-01-18", "bec909be0", "off"),
    ("lr_scheduler.warmup_steps", "2024-02-14", "bec909be0", "on"),
    ("optimizer.implementation", "2024-01-18", "fa8cdd48e", "off"),
    ("activation_checkpoint.selective_ac_option", "2024-02-29", "2c8cec2bf", "off"),
    ("activation_checkpoint.mode", "2024-03-04", "268214404", "off"),
    ("activation_checkpoint.preserve_rng_state", "2024-01-24", "fde830de2", "off"),
    ("checkpoint.interval", "2024-02-06", "bec909be0", "on"),
    ("checkpoint.enable", "2024-04-05", "07a3ec8e5", "on"),
    ("checkpoint.keep_latest_k", "2024-02-06", "fa8cdd48e", "on"),
    ("checkpoint.last_save_model_only", "2024-02-06", "07a3ec8e5", "on"),
    ("comm.train_timeout_seconds", "2024-03-15", "9eb6a2162", "off"),
    ("profiling.save_traces_folder", "2024-02-23", "bec909be0", "on"),
    ("metrics.disable_color_printing", "2024-04-10", "07a3ec8e5", "off"),
    ("quantize.linear.mx.filter_fqns", "2025-05-14", "49d5cab1c", "mx"),
]
"""The rows whose key some loader above declared: the comparison notices each one missing. (The
others are behaviours no loader declared yet, such as the foreach optimizer before
optimizer.fused, or the days before 2024-02-23; ``model.name``'s is checked by
:func:`test_the_loaders_default_model`.)"""


@pytest.mark.parametrize(("key", "since", "commit", "variant"), RELIED_ON, ids=lambda v: str(v))
def test_the_comparison_notices_a_missing_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str, since: str, commit: str, variant: str
) -> None:
    (row,) = [flip for flip in FLIPS if flip.key == key and flip.since == since]
    assert row.since <= COMMITS[commit]["day"] < row.until
    monkeypatch.setattr(era_defaults, "FLIPS", tuple(f for f in FLIPS if f is not row))
    assert compare(tmp_path, commit, variant) != []

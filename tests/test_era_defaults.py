"""Era defaults: a legacy file is dated from what it holds, and the old defaults it relied on
for the keys it omits are listed (written where v0.2.2 can take them, reported where not).

The upstream files under ``tests/eras/upstream/`` are torchtitan's own TOMLs of each era,
verbatim (each names its commit); the 2024-05 one comes with the effective config its era's
loader produced, which v0.2.2 settings must reproduce wherever v0.2.2 can express them.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from titan.schemas.era_clues import ERA_START, OLD_KEYS, V022
from titan.schemas.era_defaults import V022_DEFAULTS, date_file, era_defaults, spelled
from titan.schemas.era_flips import FLIPS, Flip
from titan.schemas.era_names import era_error, parse_era
from titan.schemas.moved_keys import RULES

from tests.reference import corpus_files_if_present

UPSTREAM = Path(__file__).parent / "eras" / "upstream"


def load(name: str) -> dict:
    """A TOML of ``tests/eras/upstream`` as the loaders parsed it."""
    return tomllib.loads((UPSTREAM / f"{name}.toml").read_text(encoding="utf-8"))


def listed(document: dict, era: str) -> dict[str, tuple[Any, bool]]:
    """The era defaults of ``document`` at ``era``: key -> (value, portable)."""
    return {d.key: (d.value, d.portable) for d in era_defaults(document, era)}


# --------------------------------------------------------------------------- the table


@pytest.mark.parametrize("flip", FLIPS, ids=lambda f: f"{f.key}@{f.since}")
def test_each_flip_is_a_real_change_of_a_v022_default(flip: Flip) -> None:
    assert flip.key in V022_DEFAULTS
    new = V022_DEFAULTS[flip.key]
    assert type(new) is type(flip.new) and new == flip.new
    assert flip.derive or flip.old != flip.new
    assert ERA_START[:7] <= flip.since < flip.until <= V022
    assert all(key in V022_DEFAULTS for key, _, _ in flip.only_if)
    # a commit pushed without a pull request has none to name
    assert flip.commit and (flip.pr.startswith("#") or flip.pr == "") and flip.why


def test_flips_of_one_key_never_overlap_unless_their_conditions_differ() -> None:
    for a in FLIPS:
        for b in FLIPS:
            if a is not b and a.key == b.key and a.only_if == b.only_if:
                assert a.until <= b.since or b.until <= a.since, (a, b)


def test_every_old_key_of_the_base_config_can_date_a_file() -> None:
    known = {key for key, *_ in OLD_KEYS}
    base = ("config_manager.py", "job_config.py")  # rows of fork or experiment files aside
    real = [r.old for r in RULES if r.how != "table" and any(f in r.era for f in base)]
    assert len(real) > 90
    assert [old for old in real if old not in known] == []


# --------------------------------------------------------------------------- dating

DATED = [
    # [global] was read before the first config manager (bec909be, 2024-02-23)
    ("2024_01_upstream_train_config", "2024-02-22", "global.dump_folder"),
    # profiling.run_profiler and profile_every_x_iter were renamed on 2024-04-15
    ("2024_04_upstream_debug_model", "2024-04-14", "profiling.run_profiler"),
    # fp8_linear = "" was a string until #436 made it a boolean (2024-07-08); the file itself
    # was committed on 2024-05-29, and nothing in it rules out the five weeks after
    ("2024_05_upstream_debug_model", "2024-07-07", "training.fp8_linear"),
    # training.warmup_steps moved to [lr_scheduler] in #938 (2025-03-10)
    ("2025_02_upstream_debug_model", "2025-03-09", "training.warmup_steps"),
]


@pytest.mark.parametrize(("name", "day", "latest"), DATED, ids=[d[0] for d in DATED])
def test_an_upstream_file_is_dated_by_its_latest_consistent_day(
    name: str, day: str, latest: str
) -> None:
    guess = date_file(load(name))
    assert (guess.date, guess.era, guess.current) == (day, day[:7], False)
    assert guess.stale == ()
    bounding = [c for c in guess.evidence if c.last == day]
    assert latest in {c.key for c in bounding}
    assert all(c.since <= day for c in guess.evidence)


def test_a_value_only_an_old_era_accepted_dates_the_file() -> None:
    guess = date_file({"training": {"fp8_linear": ""}})
    assert guess.date == "2024-07-07"
    assert any("#436" in c.says for c in guess.evidence)
    # a boolean fp8_linear was still accepted after #436, until the key went (#413, 2024-07-16)
    assert date_file({"training": {"fp8_linear": False}}).date == "2024-07-15"


def test_a_dataset_name_dates_the_file_only_without_a_dataset_path() -> None:
    assert date_file({"training": {"dataset": "alpaca"}}).date == "2024-04-16"
    unlisted = {"training": {"dataset": "alpaca", "dataset_path": "/data/alpaca"}}
    assert date_file(unlisted).current


def test_an_empty_old_table_dates_the_file() -> None:
    assert date_file({"float8": {}}).date == "2025-09-25"


def test_an_old_key_left_beside_its_successor_is_stale_not_evidence() -> None:
    document = {"training": {"batch_size": 8, "local_batch_size": 8, "compile": True}}
    guess = date_file(document)
    assert [c.key for c in guess.stale] == ["training.batch_size"]
    assert guess.date == "2025-08-19"  # training.compile became [compile] on 2025-08-20


def test_a_file_without_older_evidence_is_v022_and_gets_no_era_default() -> None:
    document = {"training": {"local_batch_size": 4}, "checkpoint": {"enable": True}}
    guess = date_file(document)
    assert guess.current and guess.date == V022 and guess.stale == ()
    assert era_defaults(document, guess.date) == []


@pytest.mark.parametrize("path", corpus_files_if_present(), ids=lambda p: p.name)
def test_every_upstream_v022_file_is_dated_v022(path: Path) -> None:
    document = tomllib.loads(path.read_text(encoding="utf-8"))
    guess = date_file(document)
    assert guess.current, [c for c in guess.evidence if c.until]
    assert era_defaults(document, guess.date) == []


# --------------------------------------------------------------------------- era defaults


def conditions_met(flip: Flip) -> dict:
    """A document in which every ``only_if`` of ``flip`` holds (and nothing else is set)."""
    document: dict = {}
    for key, op, value in flip.only_if:
        section, name = key.rsplit(".", 1)
        if op == "!=":
            continue  # the only "!=" row, AC on, holds with every era's own default
        if op == "has":
            given: Any = [value[0]]
        elif op == ">":
            given = value + 1
        else:
            given = "ckpt" if op == "set" else value
        document.setdefault(section, {})[name] = given
    if flip.derive == "pp_microbatches":
        document["training"] = {"local_batch_size": 8}
    return document


DERIVED = {"warmup_pct": 2, "pp_microbatches": 4}
"""Derived values for :func:`conditions_met`'s documents: 20% of that era's -1 steps is under
the floor of 2; a batch of 8 over 2 pipeline ranks (1F1B: one stage each) is 4."""


@pytest.mark.parametrize("flip", FLIPS, ids=lambda f: f"{f.key}@{f.since}")
def test_each_flip_applies_in_its_era_to_a_file_that_omits_its_key(flip: Flip) -> None:
    document = conditions_met(flip)
    value = DERIVED[flip.derive] if flip.derive else flip.old
    assert listed(document, flip.since)[flip.key] == (value, flip.portable)
    assert listed(document, flip.until).get(flip.key, (None,))[0] != flip.old
    section, name = flip.key.rsplit(".", 1)
    document.setdefault(section, {})[name] = flip.new
    assert flip.key not in listed(document, flip.since)


def test_a_key_spelt_under_an_old_name_is_not_omitted() -> None:
    document = {"checkpoint": {"enable_checkpoint": True, "model_weights_only": True}}
    assert "checkpoint.last_save_model_only" not in listed(document, "2024-05")
    assert spelled(document)["checkpoint.last_save_model_only"] is True
    # [global] predates the moved-key rows; its dump_folder still spells job.dump_folder
    assert "job.dump_folder" not in listed({"global": {"dump_folder": "out"}}, "2024-02-20")
    # a day the loader no longer read [global]: the run wrote under the era's default folder
    assert "job.dump_folder" in listed({"global": {"dump_folder": "out"}}, "2024-03")


def test_a_2024_file_with_checkpointing_on_made_full_last_saves() -> None:
    """The case #1336 (2025-06-25) broke: model_weights_only omitted meant a full last save."""
    document = {"training": {"batch_size": 8}, "checkpoint": {"enable_checkpoint": True}}
    guess = date_file(document)
    assert guess.date == "2025-06-04"  # training.batch_size became local_batch_size (#1238)
    assert listed(document, guess.date) == {
        "job.dump_folder": ("./torchtitan/outputs", True),
        "model.tokenizer_path": ("./torchtitan/datasets/tokenizer/tokenizer.model", False),
        "checkpoint.last_save_model_only": (False, True),
        "checkpoint.enable_first_step_checkpoint": (True, True),
        "activation_checkpoint.preserve_rng_state": (False, True),
    }


def test_checkpoint_defaults_matter_only_when_checkpointing_is_on() -> None:
    off = {"training": {"batch_size": 8}}
    assert not any(k.startswith("checkpoint.") for k in listed(off, "2024-05"))
    folder_era = {"training": {"checkpoint_folder": "ckpt"}}  # a folder turned it on then
    assert listed(folder_era, "2024-03")["checkpoint.keep_latest_k"] == (0, True)
    assert listed(folder_era, "2024-03")["checkpoint.interval"] == (3600, True)


def test_a_condition_reads_that_eras_default_when_the_file_is_silent() -> None:
    no_ac = {"activation_checkpoint": {"mode": "none"}}
    assert "activation_checkpoint.preserve_rng_state" not in listed(no_ac, "2024-05")
    # before [activation_checkpoint] (2024-03-14) every block was checkpointed by default
    assert listed({}, "2024-02-15")["activation_checkpoint.preserve_rng_state"] == (False, True)
    adam = {"optimizer": {"name": "Adam"}}
    assert listed(adam, "2024-02")["optimizer.weight_decay"] == (0.0, True)
    assert listed({}, "2024-02")["optimizer.weight_decay"] == (0.01, True)


def test_a_looped_schedule_without_split_points_cannot_be_worked_out() -> None:
    document = {
        "parallelism": {
            "pipeline_parallel_degree": 2,
            "pipeline_parallel_schedule": "ZBVZeroBubble",
        },
        "training": {"local_batch_size": 8},
    }
    (found,) = [d for d in era_defaults(document, "2025-02") if d.key.endswith("microbatch_size")]
    assert (found.value, found.portable) == (None, False)
    assert "could not be worked out" in found.why
    document["parallelism"]["pipeline_parallel_split_points"] = ["layers.1", "layers.2", "layers.3"]
    assert listed(document, "2025-02")["parallelism.pipeline_parallel_microbatch_size"] == (2, True)


# --------------------------------------------------------------------------- --era


@pytest.mark.parametrize(
    ("text", "day"),
    [
        ("2024-05", "2024-05-01"),
        (" 2025-06-12 ", "2025-06-12"),
        ("2026-02", "2026-02-01"),
        # a release is the day its tag was made (torchtitan's tags, commit dates)
        ("v0.2.2", "2026-02-20"),
        ("v0.2.1", "2025-12-26"),
        ("0.2.0", "2025-10-17"),
        ("torchtitan==0.1.0", "2025-06-17"),
        ("TorchTitan 0.2.1", "2025-12-26"),
    ],
)
def test_a_good_era_is_a_day(text: str, day: str) -> None:
    assert era_error(text) is None and parse_era(text) == day


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("2024", "YYYY-MM, YYYY-MM-DD or one of v0.1.0"),
        ("v0.3.0", "YYYY-MM, YYYY-MM-DD or one of v0.1.0"),  # no TOML release after v0.2.2
        ("v0.2", "YYYY-MM, YYYY-MM-DD or one of v0.1.0"),
        ("24-05", "YYYY-MM, YYYY-MM-DD or one of v0.1.0"),
        ("", "YYYY-MM, YYYY-MM-DD or one of v0.1.0"),
        # digits of other scripts are digits to Python's \d, not to a date
        ("2024-0\uff15", "YYYY-MM, YYYY-MM-DD or one of v0.1.0"),
        ("\u0662\u0660\u0662\u0664-05", "YYYY-MM, YYYY-MM-DD or one of v0.1.0"),
        ("v0.2.\uff12", "YYYY-MM, YYYY-MM-DD or one of v0.1.0"),
        ("2024-13", "not a calendar date"),
        ("2024-02-30", "not a calendar date"),
        ("2023-12", "outside the legacy eras"),
        ("2026-03", "outside the legacy eras"),
    ],
)
def test_a_bad_era_says_why_and_how_to_write_it(text: str, says: str) -> None:
    problem = era_error(text)
    assert problem is not None and says in problem and repr(text) in problem
    with pytest.raises(ValueError, match="--era"):
        parse_era(text)


# --------------------------------------------------------------------------- the must-show case

# The config torchtitan's loader built from 2024_05_upstream_debug_model.toml at its commit
# 187773810a66 (argparse defaults of torchtitan/config_manager.py as of 0779207e9, then the
# TOML's values), and what train.py's build_optimizer hard-coded then (foreach=True).
EFFECTIVE_2024_05 = {
    "job.config_file": None,
    "job.dump_folder": "./outputs",
    "job.description": "Llama 3 debug training",
    "job.use_for_integration_test": True,
    "profiling.enable_profiling": True,
    "profiling.save_traces_folder": "profile_trace",
    "profiling.profile_freq": 10,
    "metrics.log_freq": 1,
    "metrics.enable_color_printing": True,
    "metrics.enable_tensorboard": True,
    "metrics.save_tb_folder": "tb",
    "metrics.rank_0_only": True,
    "model.name": "llama3",
    "model.flavor": "debugmodel",
    "model.norm_type": "fused_rmsnorm",
    "model.tokenizer_path": "./test/assets/test_tiktoken.model",
    "optimizer.name": "AdamW",
    "optimizer.lr": 8e-4,
    "training.dataset": "c4_mini",
    "training.dataset_path": None,
    "training.batch_size": 8,
    "training.seq_len": 2048,
    "training.warmup_steps": 2,
    "training.max_norm": 1.0,
    "training.steps": 10,
    "training.data_parallel_degree": -1,
    "training.tensor_parallel_degree": 1,
    "training.enable_loss_parallel": True,
    "experimental.pipeline_parallel_degree": 1,
    "experimental.pipeline_parallel_split_points": [],
    "experimental.pipeline_parallel_schedule": "1f1b",
    "experimental.pipeline_parallel_split_mode": "manual",
    "experimental.pipeline_parallel_microbatches": None,
    "training.mixed_precision_param": "bfloat16",
    "training.mixed_precision_reduce": "float32",
    "training.compile": False,
    "training.fp8_linear": "",
    "training.gc_freq": 50,
    "checkpoint.enable_checkpoint": False,
    "checkpoint.folder": "checkpoint",
    "checkpoint.interval_type": "steps",
    "checkpoint.interval": 5,
    "checkpoint.model_weights_only": False,
    "checkpoint.export_dtype": "float32",
    "checkpoint.create_seed_checkpoint": False,
    "checkpoint.async_mode": "disabled",
    "activation_checkpoint.mode": "selective",
    "activation_checkpoint.selective_ac_option": "2",
    "comm.init_timeout_seconds": 300,
    "comm.train_timeout_seconds": 100,
    "comm.trace_buf_size": 20000,
    # hard-coded in train.py's build_optimizer and the AC wrapper at that commit
    "optimizer.foreach": True,
    "activation_checkpoint.preserve_rng_state": False,
}

# The same run in v0.2.2 settings, wherever v0.2.2 can express it. Left out, with why:
# job.config_file (command line only), job.use_for_integration_test (never read by training),
# model.norm_type (v0.2.2 models use RMSNorm), model.tokenizer_path (a tiktoken .model file),
# training.dataset ("c4_mini" is no v0.2.2 dataset), experimental.pipeline_parallel_split_mode
# and pipeline microbatches (pipeline parallel is off), training.fp8_linear ("" is off: no
# converter), checkpoint.interval_type (always steps).
V022_2024_05 = {
    "job.dump_folder": "./outputs",
    "job.description": "Llama 3 debug training",
    "profiling.enable_profiling": True,
    "profiling.save_traces_folder": "profile_trace",
    "profiling.profile_freq": 10,
    "metrics.log_freq": 1,
    "metrics.disable_color_printing": False,
    "metrics.enable_tensorboard": True,
    "metrics.save_tb_folder": "tb",
    "metrics.save_for_all_ranks": False,
    "model.name": "llama3",
    "model.flavor": "debugmodel",
    "model.converters": [],
    "optimizer.name": "AdamW",
    "optimizer.lr": 8e-4,
    "optimizer.implementation": "foreach",
    "optimizer.beta1": 0.9,
    "optimizer.beta2": 0.95,
    "optimizer.eps": 1e-8,
    "optimizer.weight_decay": 0.1,
    "training.dataset_path": None,
    "training.local_batch_size": 8,
    "training.seq_len": 2048,
    "lr_scheduler.warmup_steps": 2,
    "training.max_norm": 1.0,
    "training.steps": 10,
    "parallelism.data_parallel_shard_degree": -1,
    "parallelism.tensor_parallel_degree": 1,
    "parallelism.disable_loss_parallel": False,
    "parallelism.pipeline_parallel_degree": 1,
    "parallelism.pipeline_parallel_schedule": "1F1B",
    "training.mixed_precision_param": "bfloat16",
    "training.mixed_precision_reduce": "float32",
    "compile.enable": False,
    "training.gc_freq": 50,
    "checkpoint.enable": False,
    "checkpoint.folder": "checkpoint",
    "checkpoint.interval": 5,
    "checkpoint.last_save_model_only": False,
    "checkpoint.export_dtype": "float32",
    "checkpoint.create_seed_checkpoint": False,
    "checkpoint.async_mode": "disabled",
    "activation_checkpoint.mode": "selective",
    "activation_checkpoint.selective_ac_option": "2",
    "activation_checkpoint.preserve_rng_state": False,
    "comm.init_timeout_seconds": 300,
    "comm.train_timeout_seconds": 100,
    "comm.trace_buf_size": 20000,
}


def test_the_2024_05_upstream_file_needs_exactly_its_eras_foreach_optimizer_and_ac_rng() -> None:
    document = load("2024_05_upstream_debug_model")
    guess = date_file(document)
    assert guess.era == "2024-07"
    assert listed(document, guess.date) == {
        "optimizer.implementation": ("foreach", True),
        "activation_checkpoint.preserve_rng_state": (False, True),
    }
    # the file was written on 2024-05-29: the same defaults held then
    assert listed(document, "2024-05-29") == listed(document, guess.date)


def test_the_2024_05_run_is_reproduced_wherever_v022_can_express_it() -> None:
    document = load("2024_05_upstream_debug_model")
    view = spelled(document)
    written = {d.key: d.value for d in era_defaults(document, date_file(document).date)}
    for key, value in V022_2024_05.items():
        got = view[key] if key in view else written.get(key, V022_DEFAULTS[key])
        assert type(got) is type(value) and got == value, key
    # every effective value is either carried above or named as out of v0.2.2's reach
    assert EFFECTIVE_2024_05["optimizer.foreach"] and V022_2024_05["optimizer.implementation"]

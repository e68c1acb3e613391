"""Every v0.2.2 setting whose default was different in an older torchtitan era.

A legacy file says only what it changed; the rest came from the defaults of the torchtitan that
ran it. Where such a default differs from v0.2.2's, a key the file omits means something else
today: a 2024 file with checkpointing on and no ``model_weights_only`` saved a *full* last
checkpoint, v0.2.2 saves the model alone. Each :class:`Flip` is one such default, researched
from the history of torchtitan's config managers and of the code that read them, with the
commit that changed it. A behaviour the code had before its key existed counts as that key's
default (AdamW's betas before #123, the foreach optimizer before #881). Pure data.
"""

from __future__ import annotations

from typing import Any

from titan.schemas._frozen import Frozen, _set
from titan.schemas.era_clues import ERA_START

OPS = ("==", "!=", ">", "has", "set", "unset")
"""Condition operators of :attr:`Flip.only_if`: equal, not equal, greater than, a list that
holds any of the given names, and ``set`` (the file itself spells the key with a value that is
not empty or false)."""

DERIVATIONS = ("warmup_pct", "pp_microbatches")
"""Old defaults computed from other settings (see ``titan.schemas.era_defaults``)."""


class Flip(Frozen):
    """One default that differed from v0.2.2's from ``since`` until ``until``.

    Built as ``Flip(key, (since, until), old, new, (commit, pr), why, ...)``."""

    __slots__ = ("key", "since", "until", "old", "new", "commit", "pr", "why", "only_if")
    __slots__ += ("portable", "derive")
    __match_args__ = ("key", "old")

    key: str
    """The dotted v0.2.2 key."""
    since: str
    """The first day (YYYY-MM-DD) the old default was in force."""
    until: str
    """The day (YYYY-MM-DD) the change landed on main: the old default held before it."""
    old: Any
    """The old default; the parameter of :attr:`derive` when it is computed."""
    new: Any
    """v0.2.2's default."""
    commit: str
    """The short hash of the upstream commit that changed it."""
    pr: str
    """Its pull request (``#1336``); empty for a commit pushed without one."""
    why: str
    """One sentence: what a run that omitted the key did differently."""
    only_if: tuple[tuple[str, str, Any], ...]
    """``(dotted key, operator, value)`` conditions, all needed for the default to matter."""
    portable: bool
    """False where v0.2.2 cannot express the old default: it is reported, not written."""
    derive: str
    """One of :data:`DERIVATIONS` when the old default depends on other settings, else ``""``."""

    def __init__(
        self,
        key: str,
        span: tuple[str, str],
        old: Any,
        new: Any,
        change: tuple[str, str],
        why: str,
        *,
        only_if: tuple[tuple[str, str, Any], ...] = (),
        portable: bool = True,
        derive: str = "",
    ) -> None:
        since, until = span
        commit, pr = change
        assert since < until, (key, since, until)
        assert all(op in OPS for _, op, _ in only_if), only_if
        assert derive in ("", *DERIVATIONS), derive
        _set(self, "key", key)
        _set(self, "since", since)
        _set(self, "until", until)
        _set(self, "old", old)
        _set(self, "new", new)
        _set(self, "commit", commit)
        _set(self, "pr", pr)
        _set(self, "why", why)
        _set(self, "only_if", only_if)
        _set(self, "portable", portable)
        _set(self, "derive", derive)

    @property
    def era(self) -> str:
        """``2024-04-10 to 2024-12-03 (6a6f755d, #699)``: when the old default held."""
        change = f"{self.commit}, {self.pr}" if self.pr else self.commit
        return f"{self.since} to {self.until} ({change})"


_F = Flip
_CKPT_ON = (("checkpoint.enable", "==", True),)
_AC_ON = (("activation_checkpoint.mode", "!=", "none"),)
_TOKENIZER = (
    "v0.2.2 reads a Hugging Face tokenizer directory (model.hf_assets_path), not a "
    "sentencepiece or tiktoken .model file"
)

ANSWERED_BY = {"model.tokenizer_path": "model.hf_assets_path"}
"""Keys whose old default v0.2.2 cannot say, and the v0.2.2 key that answers for them: a file
that sets it chose what the migrated run reads instead."""

FLIPS: tuple[Flip, ...] = (
    # --- [job], [model], [training]: what every run used ---
    _F(
        "job.dump_folder",
        ("2024-02-23", "2024-04-11"),
        "./torchtrain/outputs",
        "./outputs",
        ("c22d1a8d", "#221"),
        "outputs (checkpoints, traces, TensorBoard) went under ./torchtrain/outputs",
    ),
    _F(
        "job.dump_folder",
        ("2024-04-11", "2025-10-21"),
        "./torchtitan/outputs",
        "./outputs",
        ("755ce8ff", "#1904"),
        "outputs (checkpoints, traces, TensorBoard) went under ./torchtitan/outputs",
    ),
    _F(
        "model.name",
        (ERA_START, "2025-04-07"),
        "llama",
        "llama3",
        ("e4e48349", "#1064"),
        'the default model "llama" was Llama 2 (sentencepiece tokenizer), which v0.2.2 does '
        'not have; once #256 (2024-04-19) registered "llama2" and "llama3" it named no model, '
        "so a run that omitted model.name failed at start",
        portable=False,
    ),
    *(
        _F(
            "model.tokenizer_path",
            span,
            path,
            None,
            change,
            f"the run tokenized with {path}; {_TOKENIZER}",
            only_if=(("model.hf_assets_path", "unset", None),),
            portable=False,
        )
        for span, path, change in (
            (
                (ERA_START, "2024-04-11"),
                "./torchtrain/datasets/tokenizer/tokenizer.model",
                ("c22d1a8d", "#221"),
            ),
            (
                ("2024-04-11", "2025-02-24"),
                "./torchtitan/datasets/tokenizer/tokenizer.model",
                ("3aff9bd9", "#880"),
            ),
            (
                ("2025-02-24", "2025-04-18"),
                "./assets/tokenizer/original/tokenizer.model",
                ("c1c2f55d", "#767"),
            ),
            (
                ("2025-04-18", "2025-07-29"),
                "./torchtitan/datasets/tokenizer/tokenizer.model",
                ("8dd5a7e9", "#1476"),
            ),
        )
    ),
    _F(
        "training.dataset",
        (ERA_START, "2024-04-17"),
        "alpaca",
        "c4_test",
        ("bfe99987", "#252"),
        "the run trained on the Alpaca instruction set, which v0.2.2 does not register",
        portable=False,
    ),
    _F(
        "training.dataset",
        ("2024-04-17", "2025-02-20"),
        "c4_mini",
        "c4_test",
        ("3cabf56b", "#863"),
        "the run trained on c4_mini, a local 45K-row subset of C4 that "
        "v0.2.2 does not have (c4_test is its first 2K rows); once #512 (2024-08-08) "
        "unregistered it, a run that omitted training.dataset failed at start unless it named "
        "a training.dataset_path",
        portable=False,
    ),
    _F(
        "training.steps",
        (ERA_START, "2024-02-28"),
        -1,
        10000,
        ("7acab70a", "#99"),
        "-1 trained until the job was stopped (from 2024-02-01 with a learning rate that turned "
        "negative after the fourth step); v0.2.2 needs a number of steps",
        portable=False,
    ),
    # --- torchtrain's first weeks: train.py's argparse flags, before any TOML could say them
    _F(
        "optimizer.lr",
        (ERA_START, "2024-02-01"),
        2e-5,
        8e-4,
        ("bd5176c1", "#23"),
        "the learning rate was 2e-5 (train.py's --lr default)",
    ),
    _F(
        "lr_scheduler.warmup_steps",
        (ERA_START, "2024-02-01"),
        0,
        200,
        ("bd5176c1", "#23"),
        "there was no learning-rate scheduler: no warmup",
    ),
    _F(
        "lr_scheduler.decay_ratio",
        (ERA_START, "2024-02-01"),
        0.0,
        None,
        ("bd5176c1", "#23"),
        "there was no learning-rate scheduler: the rate never decayed (with no warmup, a "
        "constant rate)",
    ),
    _F(
        "lr_scheduler.warmup_steps",
        ("2024-02-01", "2024-02-14"),
        0.1,
        200,
        ("41303e15", "#54"),
        "warmup was 10% of training.steps (at least 2), not 200 steps",
        derive="warmup_pct",
    ),
    _F(
        "lr_scheduler.warmup_steps",
        ("2024-02-14", "2024-02-28"),
        0.2,
        200,
        ("7acab70a", "#99"),
        "warmup was 20% of training.steps (at least 2), not 200 steps",
        derive="warmup_pct",
    ),
    _F(
        "training.max_norm",
        (ERA_START, "2024-01-31"),
        float("inf"),
        1.0,
        ("b8c1719b", "#28"),
        "gradients were not clipped (inf computes the norm and never clips)",
    ),
    _F(
        "training.mixed_precision_param",
        (ERA_START, "2024-01-24"),
        "float32",
        "bfloat16",
        ("7d905feb", ""),
        "training ran in float32: there was no FSDP mixed precision nor autocast yet",
    ),
    _F(
        "metrics.disable_color_printing",
        (ERA_START, "2024-02-27"),
        True,
        False,
        ("6d9e4e6e", "#93"),
        "console logs had no colours (they came in #93)",
    ),
    _F(
        "profiling.profiler_warmup",
        (ERA_START, "2024-04-25"),
        1,
        3,
        ("aea510d1", "#270"),
        "each profiling cycle warmed the profiler up for 1 step, not 3",
        only_if=(("profiling.enable_profiling", "==", True),),
    ),
    # --- [optimizer]: hard-coded before they were settings ---
    _F(
        "optimizer.beta2",
        (ERA_START, "2024-03-08"),
        0.999,
        0.95,
        ("ab05f669", "#123"),
        "Adam and AdamW ran with torch's default betas (0.9, 0.999)",
    ),
    _F(
        "optimizer.weight_decay",
        (ERA_START, "2024-03-08"),
        0.01,
        0.1,
        ("ab05f669", "#123"),
        "AdamW ran with torch's default weight decay 0.01",
        only_if=(("optimizer.name", "==", "AdamW"),),
    ),
    _F(
        "optimizer.weight_decay",
        (ERA_START, "2024-03-08"),
        0.0,
        0.1,
        ("ab05f669", "#123"),
        "Adam ran with torch's default weight decay 0",
        only_if=(("optimizer.name", "==", "Adam"),),
    ),
    _F(
        "optimizer.implementation",
        (ERA_START, "2025-02-24"),
        "foreach",
        "fused",
        ("6e498855", "#881"),
        "the optimizer step used torch's foreach kernels, not the fused one",
    ),
    # --- [activation_checkpoint] (then applied only under data parallel) ---
    _F(
        "activation_checkpoint.mode",
        (ERA_START, "2024-01-24"),
        "none",
        "selective",
        ("7d905feb", ""),
        "no activation checkpointing: the model was moved to the GPU as it was",
    ),
    _F(
        "activation_checkpoint.mode",
        ("2024-01-24", "2024-02-29"),
        "full",
        "selective",
        ("2c8cec2b", "#97"),
        "every transformer block was fully checkpointed",
    ),
    _F(
        "activation_checkpoint.selective_ac_option",
        ("2024-02-29", "2024-03-04"),
        "op",
        "2",
        ("26821440", "#111"),
        "training.enable_selective_ac defaulted to true: per-op selective "
        "checkpointing of every block",
    ),
    _F(
        "activation_checkpoint.mode",
        ("2024-03-04", "2024-03-14"),
        "full",
        "selective",
        ("0d415d78", "#125"),
        "training.enable_selective_ac defaulted to false: every block was fully checkpointed",
    ),
    _F(
        "activation_checkpoint.preserve_rng_state",
        ("2024-01-24", "2026-02-15"),
        False,
        True,
        ("e347b1e5", "#2380"),
        "checkpointed blocks did not stash and restore the RNG state, so "
        "random ops recomputed in backward drew new numbers",
        only_if=_AC_ON,
    ),
    # --- [checkpoint]: they matter only when checkpointing is on ---
    _F(
        "checkpoint.interval",
        ("2024-02-06", "2024-04-05"),
        3600,
        500,
        ("5d2c148b", "#204"),
        "a checkpoint was saved every 3600 steps",
        only_if=_CKPT_ON,
    ),
    _F(
        "checkpoint.enable",
        ("2024-04-05", "2024-04-15"),
        True,
        False,
        ("65962192", "#230"),
        "a non-empty checkpoint.folder turned checkpointing on; enable_checkpoint came in #230",
        only_if=(("checkpoint.folder", "set", None),),
    ),
    _F(
        "checkpoint.keep_latest_k",
        ("2024-02-06", "2025-03-04"),
        0,
        10,
        ("9a2f5784", "#926"),
        "every checkpoint was kept, not the latest 10",
        only_if=_CKPT_ON,
    ),
    _F(
        "checkpoint.last_save_model_only",
        ("2024-02-06", "2025-06-25"),
        False,
        True,
        ("adae6b6f", "#1336"),
        "the last checkpoint was a full one (optimizer, scheduler, "
        "dataloader and train state too), not the model alone",
        only_if=_CKPT_ON,
    ),
    _F(
        "checkpoint.enable_first_step_checkpoint",
        ("2025-03-04", "2025-06-17"),
        True,
        False,
        ("f4048f8e", "#1310"),
        "a checkpoint was forced at step 1 (from #925) to fail fast",
        only_if=_CKPT_ON,
    ),
    # --- [comm], [profiling], [metrics] ---
    _F(
        "comm.train_timeout_seconds",
        ("2024-03-15", "2024-04-03"),
        5,
        100,
        ("c233ecdd", "#189"),
        "a collective after the first step timed out after 5 seconds",
    ),
    _F(
        "profiling.save_traces_folder",
        ("2024-02-23", "2024-04-16"),
        "profiling/traces",
        "profile_traces",
        ("c9454d35", "#245"),
        "profiler traces went to profiling/traces",
        only_if=(("profiling.enable_profiling", "==", True),),
    ),
    _F(
        "metrics.disable_color_printing",
        ("2024-04-10", "2024-12-03"),
        True,
        False,
        ("6a6f755d", "#699"),
        "console logs had no colours (enable_color_printing was false)",
    ),
    _F(
        "metrics.save_for_all_ranks",
        ("2024-02-15", "2024-05-29"),
        True,
        False,
        ("0779207e", "#339"),
        "every rank wrote TensorBoard logs to its own rank_N folder",
        only_if=(("metrics.enable_tensorboard", "==", True),),
    ),
    # --- converters and pipeline parallel ---
    _F(
        "quantize.linear.float8.filter_fqns",
        ("2024-07-19", "2025-04-07"),
        ["output"],
        [],
        ("a6524d8a", "#1063"),
        "the output projection stayed in high precision (#469)",
        only_if=(("model.converters", "has", ("quantize.linear.float8", "float8")),),
    ),
    _F(
        "quantize.linear.mx.filter_fqns",
        ("2025-05-14", "2025-05-20"),
        [],
        ["output"],
        ("13830e00", "#1208"),
        "the output projection was converted to MX too",
        only_if=(("model.converters", "has", ("quantize.linear.mx", "mx")),),
    ),
    _F(
        "parallelism.pipeline_parallel_microbatch_size",
        ("2024-05-21", "2025-01-07"),
        "degree",
        1,
        ("90567fc9", "#781"),
        "the batch was split into one microbatch per pipeline rank",
        only_if=(("parallelism.pipeline_parallel_degree", ">", 1),),
        derive="pp_microbatches",
    ),
    _F(
        "parallelism.pipeline_parallel_microbatch_size",
        ("2025-01-07", "2025-04-07"),
        "stages",
        1,
        ("5e2033c7", "#1073"),
        "the batch was split into one microbatch per pipeline stage",
        only_if=(("parallelism.pipeline_parallel_degree", ">", 1),),
        derive="pp_microbatches",
    ),
)
"""Every flip, grouped by section; ``titan.schemas.era_defaults`` applies them."""

"""The pipeline split rules: stage counts, modules per stage, rank placement, schedule names.

Expected tables are computed by hand from torchtitan's rules (``E = N + in + out`` units, the
first ``E % S`` stages one more), not by re-running the code under test.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from titan.distributed.pipeline_split import (
    SCHEDULE_KWARGS,
    SCHEDULES,
    PipelineSplitError,
    canonical_schedule_name,
    check_module_fqns,
    pipeline_layout,
    schedule_class,
    schedule_facts,
    stage_count,
    stage_modules,
    stages_of_rank,
)


def _layers(start: int, stop: int) -> list[str]:
    return [f"layers.{i}" for i in range(start, stop)]


def _layer_counts(parts: list[list[str]]) -> list[int]:
    return [sum(name.startswith("layers.") for name in part) for part in parts]


# ------------------------------------------------------------------ hand-computed tables


def test_32_layers_on_4_stages_are_8_9_8_7():
    # E = 34, base 8, extra 2: budgets 9, 9, 8, 8; minus in on stage 0, minus out on stage 3.
    parts = stage_modules(n_layers=32, stages=4)
    assert parts == [
        ["tok_embeddings", *_layers(0, 8)],
        _layers(8, 17),
        _layers(17, 25),
        [*_layers(25, 32), "norm", "output"],
    ]


def test_head_name_is_the_targets():
    parts = stage_modules(n_layers=32, stages=4, head="lm_head")
    assert parts[-1][-2:] == ["norm", "lm_head"]


def test_16_layers_with_4_per_stage():
    # E = 18 units at 4 per stage: ceil(18 / 4) = 5 stages; 5 % pp must be 0.
    assert stage_count(n_layers=16, pp=5, schedule="1F1B", layers_per_stage=4) == 5
    # base 3, extra 3: budgets 4, 4, 4, 3, 3 -> layers 3, 4, 4, 3, 2.
    parts = stage_modules(n_layers=16, stages=5)
    assert _layer_counts(parts) == [3, 4, 4, 3, 2]
    assert parts[0] == ["tok_embeddings", *_layers(0, 3)]
    assert parts[4] == ["layers.14", "layers.15", "norm", "output"]
    # With in = out = 0 the 16 layers make exactly 4 stages of 4.
    assert (
        stage_count(
            n_layers=16,
            pp=2,
            schedule="Interleaved1F1B",
            layers_per_stage=4,
            first_stage_less_layers=0,
            last_stage_less_layers=0,
        )
        == 4
    )
    parts = stage_modules(
        n_layers=16, stages=4, first_stage_less_layers=0, last_stage_less_layers=0
    )
    assert parts == [
        ["tok_embeddings", *_layers(0, 4)],
        _layers(4, 8),
        _layers(8, 12),
        [*_layers(12, 16), "norm", "output"],
    ]


@pytest.mark.parametrize(
    ("n_layers", "stages", "first", "last", "counts"),
    [
        (6, 4, 1, 1, [1, 2, 2, 1]),  # E = 8, base 2
        (2, 4, 1, 1, [0, 1, 1, 0]),  # E = 4, base 1: embeddings and head stand alone
        (6, 4, 0, 0, [2, 2, 1, 1]),  # E = 6, base 1, extra 2
        (7, 2, 0, 0, [4, 3]),
        (10, 3, 2, 1, [3, 4, 3]),  # E = 13, base 4, extra 1: budgets 5, 4, 4
        (30, 8, 1, 1, [3, 4, 4, 4, 4, 4, 4, 3]),  # E = 32, base 4
        (5, 1, 1, 1, [5]),  # one stage holds everything
    ],
)
def test_layer_counts(n_layers, stages, first, last, counts):
    parts = stage_modules(
        n_layers=n_layers, stages=stages, first_stage_less_layers=first, last_stage_less_layers=last
    )
    assert _layer_counts(parts) == counts
    assert parts[0][0] == "tok_embeddings"
    assert parts[-1][-2:] == ["norm", "output"]


@pytest.mark.parametrize(
    ("schedule", "pp", "stages"),
    [
        ("1F1B", 4, 4),
        ("GPipe", 2, 2),
        ("Interleaved1F1B", 4, 8),
        ("LoopedBFS", 2, 4),
        ("InterleavedZeroBubble", 3, 6),
        ("ZBVZeroBubble", 4, 8),
        ("DualPipeV", 2, 4),
    ],
)
def test_stage_count_without_layers_per_stage(schedule, pp, stages):
    assert stage_count(n_layers=32, pp=pp, schedule=schedule) == stages


@pytest.mark.parametrize(
    ("n_layers", "pp", "schedule", "per", "stages"),
    [
        (32, 4, "1F1B", 9, 4),  # ceil(34 / 9) = 4
        (32, 2, "Interleaved1F1B", 6, 6),  # ceil(34 / 6) = 6
        (32, 4, "Interleaved1F1B", 3, 12),  # ceil(34 / 3) = 12
        (38, 2, "Interleaved1F1B", 2, 20),  # ceil(40 / 2) = 20: 10 stages per rank
        (30, 2, "LoopedBFS", 2, 16),  # ceil(32 / 2) = 16: 8 stages per rank
        (62, 4, "ZBVZeroBubble", 8, 8),  # ceil(64 / 8) = 8
        (14, 2, "DualPipeV", 4, 4),  # ceil(16 / 4) = 4
    ],
)
def test_stage_count_with_layers_per_stage(n_layers, pp, schedule, per, stages):
    assert stage_count(n_layers=n_layers, pp=pp, schedule=schedule, layers_per_stage=per) == stages


def test_loop_placement():
    assert [stages_of_rank(r, pp=4, stages=8, style="loop") for r in range(4)] == [
        (0, 4),
        (1, 5),
        (2, 6),
        (3, 7),
    ]
    assert [stages_of_rank(r, pp=2, stages=6, style="loop") for r in range(2)] == [
        (0, 2, 4),
        (1, 3, 5),
    ]
    assert stages_of_rank(2, pp=4, stages=4, style="loop") == (2,)


def test_v_placement_for_pp_4_and_8_stages():
    assert [stages_of_rank(r, pp=4, stages=8, style="v") for r in range(4)] == [
        (0, 7),
        (1, 6),
        (2, 5),
        (3, 4),
    ]
    assert stages_of_rank(1, pp=2, stages=4, style="v") == (1, 2)


def test_layout_puts_v_schedules_on_v_placement():
    layout = pipeline_layout(n_layers=32, pp=4, schedule="zbvzerobubble")
    assert layout.stages == 8
    assert layout.rank_stages == [(0, 7), (1, 6), (2, 5), (3, 4)]
    looped = pipeline_layout(n_layers=32, pp=4, schedule="LOOPEDBFS")
    assert looped.rank_stages[0] == (0, 4)
    assert _layer_counts(layout.modules) == [4, 5, 4, 4, 4, 4, 4, 3]  # E = 34, base 4, extra 2


# ------------------------------------------------------------------ schedule names


SPELLINGS = {
    "1F1B": ["1F1B", "1f1b", " 1f1B "],
    "GPipe": ["GPipe", "gpipe", "GPIPE"],
    "Interleaved1F1B": ["Interleaved1F1B", "interleaved1f1b", "INTERLEAVED1F1B"],
    "LoopedBFS": ["LoopedBFS", "loopedbfs", "Loopedbfs"],
    "InterleavedZeroBubble": [
        "InterleavedZeroBubble",
        "interleavedzerobubble",
        "INTERLEAVEDzeroBUBBLE",
    ],
    "ZBVZeroBubble": ["ZBVZeroBubble", "zbvzerobubble", "ZbvZeroBubble"],
    "DualPipeV": ["DualPipeV", "dualpipev", "DUALPIPEV"],
}
KINDS = {
    "1F1B": ("single", "loop"),
    "GPipe": ("single", "loop"),
    "Interleaved1F1B": ("multi", "loop"),
    "LoopedBFS": ("multi", "loop"),
    "InterleavedZeroBubble": ("multi", "loop"),
    "ZBVZeroBubble": ("multi", "v"),
    "DualPipeV": ("multi", "v"),
}


@pytest.mark.parametrize(
    ("canonical", "spelling"),
    [(name, spelling) for name, spellings in SPELLINGS.items() for spelling in spellings],
)
def test_every_schedule_in_several_spellings(canonical, spelling):
    assert canonical_schedule_name(spelling) == canonical
    facts = schedule_facts(spelling)
    assert (facts.kind, facts.style) == KINDS[canonical]


@pytest.mark.parametrize("name", ["PipelineScheduleSingle", "pipelineschedulemulti"])
def test_base_classes_need_a_csv(name):
    with pytest.raises(PipelineSplitError, match="base class.*schedule_csv") as caught:
        schedule_facts(name)
    assert caught.value.key == "parallelism.pipeline_parallel_schedule"
    assert schedule_facts(name, csv=True).base_class


@pytest.mark.parametrize("name", ["1F2B", "", "interleaved 1f1b", "ZeroBubble", None, 3])
def test_unknown_schedule(name):
    with pytest.raises(PipelineSplitError, match="unknown pipeline schedule") as caught:
        stage_count(n_layers=8, pp=2, schedule=name)
    assert "Interleaved1F1B" in str(caught.value)
    assert caught.value.hint.startswith("set parallelism.pipeline_parallel_schedule")


def test_schedule_table_agrees_with_torch():
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    single = schedules.PipelineScheduleSingle
    v_classes = (schedules.ScheduleZBVZeroBubble, schedules.ScheduleDualPipeV)
    for facts in SCHEDULES:
        cls = schedules.get_schedule_class(facts.name)
        for spelling in (facts.name, facts.name.lower(), facts.name.upper()):
            assert schedules.get_schedule_class(spelling) is cls
            assert canonical_schedule_name(spelling) == facts.name
        assert schedule_class(facts.name, csv=facts.base_class) is (
            schedules._PipelineScheduleRuntime if facts.base_class else cls
        )
        assert facts.kind == ("single" if issubclass(cls, single) else "multi"), facts.name
        assert (facts.style == "v") == (cls in v_classes), facts.name
        assert facts.base_class == (cls in (single, schedules.PipelineScheduleMulti)), facts.name
    # Every name torch knows is in the table: an unknown one raises naming all of them.
    with pytest.raises(ValueError, match="valid options are") as caught:
        schedules.get_schedule_class("no-such-schedule")
    torch_names = caught.value.args[0].split("valid options are ", 1)[1]
    assert sorted(eval(torch_names)) == sorted(f.name for f in SCHEDULES)  # noqa: S307
    assert SCHEDULE_KWARGS == {"scale_grads": False}


def test_csv_builds_the_runtime_schedule():
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    assert schedule_class("Interleaved1F1B", csv=True) is schedules._PipelineScheduleRuntime
    assert schedule_class("gpipe") is schedules.ScheduleGPipe


def test_import_does_not_load_torch():
    code = (
        "import sys, titan.schemas.pipeline_split as p, titan.distributed.pipeline_split\n"
        "p.pipeline_layout(n_layers=32, pp=4, schedule='interleaved1f1b')\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ errors


def _error(call, **kwargs) -> PipelineSplitError:
    with pytest.raises(PipelineSplitError) as caught:
        call(**kwargs)
    return caught.value


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (
            dict(n_layers=32, pp=3, schedule="1F1B", layers_per_stage=8),
            ["5 stages", "multiple of 3"],
        ),
        (
            dict(n_layers=32, pp=4, schedule="GPipe", layers_per_stage=4),
            ["9 stages", "multiple of 4"],
        ),
        (
            dict(n_layers=30, pp=4, schedule="1F1B", layers_per_stage=4),
            ["8 stages", "2 per rank", "exactly 1 stage"],
        ),
        (
            dict(n_layers=32, pp=4, schedule="Interleaved1F1B", layers_per_stage=9),
            ["4 stages", "1 per rank", "at least 2"],
        ),
        (
            dict(n_layers=32, pp=2, schedule="ZBVZeroBubble", layers_per_stage=6),
            ["6 stages", "3 per rank", "exactly 2"],
        ),
        (
            dict(n_layers=32, pp=2, schedule="DualPipeV", layers_per_stage=3),
            ["12 stages", "6 per rank"],
        ),
    ],
)
def test_stage_count_errors_name_the_numbers(kwargs, words):
    error = _error(stage_count, **kwargs)
    for word in words:
        assert word in str(error)
    assert f"= {kwargs['n_layers'] + 2} units at {kwargs['layers_per_stage']} per stage" in str(
        error
    )
    assert error.key == "parallelism.pipeline_parallel_layers_per_stage"
    assert error.hint.startswith("set parallelism.pipeline_parallel_layers_per_stage")


def test_stage_count_hints_give_a_working_value():
    # The suggested value must itself be accepted.
    for kwargs in (
        dict(n_layers=32, pp=3, schedule="1F1B", layers_per_stage=8),
        dict(n_layers=32, pp=4, schedule="Interleaved1F1B", layers_per_stage=9),
        dict(n_layers=32, pp=2, schedule="ZBVZeroBubble", layers_per_stage=6),
        dict(n_layers=32, pp=4, schedule="DualPipeV", layers_per_stage=2),  # 17 stages
        dict(n_layers=32, pp=4, schedule="LoopedBFS", layers_per_stage=2),  # 17 stages
        dict(n_layers=32, pp=4, schedule="GPipe", layers_per_stage=2),  # 17 stages
    ):
        hint = _error(stage_count, **kwargs).hint
        if "for example" in hint:
            value = int(hint.split("for example ")[1].split(")")[0])
        else:  # 34 units: 4 per stage make 9 stages, 5 make 7; none makes DualPipeV's 8
            assert kwargs["schedule"] == "DualPipeV"
            assert "no value gives 8 stages for 34 units: leave it unset for 8" in hint
            value = None
        stage_count(**{**kwargs, "layers_per_stage": value})


@pytest.mark.parametrize(
    ("kwargs", "words", "key"),
    [
        (
            dict(n_layers=2, stages=5),
            ["4 units on 5 stages", "at most 4 stages"],
            "layers_per_stage",
        ),
        (dict(n_layers=0, stages=2), ["no layers"], "degree"),
        (
            dict(n_layers=3, stages=4, first_stage_less_layers=2),
            ["6 units on 4 stages", "as few as 1", "2 (first_stage_less_layers)", "embeddings"],
            "first_stage_less_layers",
        ),
        (
            dict(n_layers=20, stages=8, last_stage_less_layers=4),
            ["25 units on 8 stages", "as few as 3", "4 (last_stage_less_layers)", "norm and head"],
            "last_stage_less_layers",
        ),
        (
            dict(n_layers=8, stages=2, first_stage_less_layers=-1),
            ["0 or more", "-1"],
            "first_stage_less_layers",
        ),
        (dict(n_layers=8, stages=0), ["1 or more", "0"], "layers_per_stage"),
    ],
)
def test_stage_modules_errors(kwargs, words, key):
    error = _error(stage_modules, **kwargs)
    for word in words:
        assert word in str(error) + error.hint
    assert error.key == f"parallelism.pipeline_parallel_{key}"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (dict(n_layers=8, pp=0, schedule="1F1B"), ["pipeline_parallel_degree", "1 or more"]),
        (
            dict(n_layers=8, pp=2, schedule="1F1B", layers_per_stage=0),
            ["layers_per_stage", "1 or more"],
        ),
        (
            dict(n_layers=8, pp=2, schedule="1F1B", layers_per_stage=True),
            ["layers_per_stage", "True"],
        ),
    ],
)
def test_bad_degrees(kwargs, words):
    error = _error(stage_count, **kwargs)
    for word in words:
        assert word in str(error)


def test_layout_too_few_layers_for_the_stages():
    # pp = 4 with an interleaved schedule wants 8 stages; 4 layers + 2 make only 6 units.
    error = _error(pipeline_layout, n_layers=4, pp=4, schedule="Interleaved1F1B")
    assert "6 units on 8 stages" in str(error)


@pytest.mark.parametrize(
    ("parts", "words"),
    [
        (
            [["tok_embeddings", "layers.0"], ["layers.1", "norm", "lm_head"]],
            ["'lm_head'", "no module"],
        ),
        (
            [["tok_embeddings", "layers.0", "layers.7"], ["layers.1", "norm", "output"]],
            ["'layers.7'"],
        ),
        ([["tok_embeddings", "layers"], ["norm", "output"]], ["'layers'"]),
        ([["tok_embeddings", "layers.0"], ["norm", "output"]], ["leaves out layers.1"]),
        (
            [["tok_embeddings"], ["layers.0", "layers.1"], ["norm", "output"]],
            ["3 parts", "2 stages"],
        ),
        ([["tok_embeddings", "layers.0", "layers.1", "norm", "output"]], ["1 parts", "2 stages"]),
        (
            [["tok_embeddings", "layers.0"], ["layers.0", "layers.1", "norm", "output"]],
            ["'layers.0' more than once"],
        ),
        (
            [["tok_embeddings", "layers.1"], ["layers.0", "norm", "output"]],
            ["'layers.1' out of the model's order"],
        ),
        (
            [["layers.0", "tok_embeddings"], ["layers.1", "norm", "output"]],
            ["out of the model's order"],
        ),
        ([["tok_embeddings", "layers.0", "layers.1", "norm", "output"], []], ["stage 1 empty"]),
        ("tok_embeddings", ["list of lists"]),
        ([["tok_embeddings", 3]], ["list of lists"]),
        ([[f"layers.{i}" for i in range(500)] + [None]], ["list of lists", "..."]),
    ],
)
def test_module_fqns_errors(parts, words):
    error = _error(check_module_fqns, parts=parts, n_layers=2, stages=2)
    for word in words:
        assert word in str(error)
    assert error.key == "parallelism.module_fqns_per_model_part"


def test_module_fqns_accepted_and_used():
    parts = [["tok_embeddings", "layers.0"], ["layers.1", "norm", "lm_head"]]
    assert check_module_fqns(parts, n_layers=2, stages=2, head="lm_head") == parts
    layout = pipeline_layout(
        n_layers=2, pp=2, schedule="1F1B", module_fqns_per_model_part=parts, head="lm_head"
    )
    assert layout.modules == parts
    with pytest.raises(PipelineSplitError, match="3 parts but the pipeline has 4 stages"):
        pipeline_layout(
            n_layers=2, pp=2, schedule="ZBVZeroBubble", module_fqns_per_model_part=parts[:1] * 3
        )


def test_rank_errors():
    assert "outside 0..3" in str(_error(stages_of_rank, rank=4, pp=4, stages=8, style="loop"))
    assert "shared evenly" in str(_error(stages_of_rank, rank=0, pp=4, stages=6, style="loop"))
    assert "exactly 2 stages" in str(_error(stages_of_rank, rank=0, pp=2, stages=8, style="v"))


# ------------------------------------------------------------------ properties


@st.composite
def splits(draw):
    first = draw(st.integers(0, 3))
    last = draw(st.integers(0, 3))
    n_layers = draw(st.integers(1, 80))
    units = n_layers + first + last
    stages = draw(st.integers(2, units + 1))  # one past: a stage left empty
    return n_layers, stages, first, last


@settings(max_examples=300, deadline=None)
@given(splits())
def test_every_layer_once_in_order_and_even(split):
    n_layers, stages, first, last = split
    base = (n_layers + first + last) // stages
    try:
        parts = stage_modules(
            n_layers=n_layers,
            stages=stages,
            first_stage_less_layers=first,
            last_stage_less_layers=last,
        )
    except PipelineSplitError:
        assert base == 0 or first > base or last > base
        return
    assert 0 < base and first <= base and last <= base
    flat = [name for part in parts for name in part]
    assert flat == ["tok_embeddings", *_layers(0, n_layers), "norm", "output"]
    assert len(parts) == stages
    # Units per stage (embeddings weigh `first`, norm + head `last`) differ by at most 1.
    units = _layer_counts(parts)
    units[0] += first
    units[-1] += last
    assert max(units) - min(units) <= 1
    assert units == sorted(units, reverse=True)  # the larger stages come first
    # The split is exactly the one check_module_fqns accepts.
    assert check_module_fqns(parts, n_layers=n_layers, stages=stages) == parts


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 16), st.integers(1, 4), st.sampled_from(["loop", "v"]))
def test_every_stage_on_exactly_one_rank(pp, per_rank, style):
    per_rank = 2 if style == "v" else per_rank
    stages = pp * per_rank
    held = [stages_of_rank(r, pp=pp, stages=stages, style=style) for r in range(pp)]
    assert sorted(s for ranks in held for s in ranks) == list(range(stages))
    assert all(len(ranks) == per_rank for ranks in held)


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 64),
    st.integers(1, 8),
    st.one_of(st.none(), st.integers(1, 20)),
    st.sampled_from([facts.name for facts in SCHEDULES if not facts.base_class]),
    st.integers(0, 2),
    st.integers(0, 2),
)
def test_a_layout_is_whole_or_refused(n_layers, pp, per, schedule, first, last):
    """Either every rule holds on the layout, or the refusal names the setting to change."""
    try:
        layout = pipeline_layout(
            n_layers=n_layers,
            pp=pp,
            schedule=schedule,
            layers_per_stage=per,
            first_stage_less_layers=first,
            last_stage_less_layers=last,
        )
    except PipelineSplitError as error:
        assert error.key.startswith("parallelism.") and error.hint.strip()
        return
    facts = schedule_facts(schedule)
    per_rank = layout.stages // pp
    assert layout.stages % pp == 0
    assert per_rank == 1 if facts.kind == "single" else per_rank >= 2
    assert facts.style == "loop" or per_rank == 2
    if per is not None:
        assert layout.stages == -(-(n_layers + first + last) // per)
    held = sorted(s for stages in layout.rank_stages for s in stages)
    assert held == list(range(layout.stages))
    assert [n for part in layout.modules for n in part] == [
        "tok_embeddings",
        *_layers(0, n_layers),
        "norm",
        "output",
    ]

"""``titan-validate`` refuses pipeline layouts the trainer cannot build, in both config forms:
each problem is one ``pipeline-layout`` finding at the line of the key it is about, with the
message and hint of ``titan.schemas.pipeline_split`` (the trainer's own rules)."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
from titan.schemas.pipeline_split import PipelineSplitError, pipeline_layout

from tests.helpers import validate
from tests.reference import CORPUS, require

LAYERS = {"debugmodel": 6, "8B": 32}
"""Transformer blocks of the llama3 flavors these cases use (titan's flavor table)."""


def _toml(tmp_path: Path, body: str, *, flavor: str = "debugmodel") -> Path:
    """A llama3 job file: the flavor, then ``body`` (its ``[parallelism]`` table)."""
    path = tmp_path / "job.toml"
    text = f'[model]\nname = "llama3"\nflavor = "{flavor}"\n\n' + textwrap.dedent(body)
    path.write_text(text, encoding="utf-8")
    return path


def _findings(*args: object) -> list[dict]:
    """The JSON findings of ``titan-validate --format json ARGS``."""
    result = validate("--format", "json", *args)
    assert result.code in (0, 1), result.err
    return result.json()["diagnostics"]


def _pipeline(findings: list[dict]) -> list[dict]:
    return [f for f in findings if f["code"] == "pipeline-layout"]


def _line_of(path: Path, key: str) -> int:
    """The 1-based line of the file where ``key`` is written."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if re.match(rf"\s*{key}\s*=", line))


def _expected(path: Path, n_layers: int) -> PipelineSplitError:
    """What the split module says about the file's ``[parallelism]`` table."""
    table = tomllib.loads(path.read_text(encoding="utf-8"))["parallelism"]
    setting = "pipeline_parallel_"
    with pytest.raises(PipelineSplitError) as caught:
        pipeline_layout(
            n_layers=n_layers,
            pp=table["pipeline_parallel_degree"],
            schedule=table.get(f"{setting}schedule", "1F1B"),
            layers_per_stage=table.get(f"{setting}layers_per_stage"),
            first_stage_less_layers=table.get(f"{setting}first_stage_less_layers", 1),
            last_stage_less_layers=table.get(f"{setting}last_stage_less_layers", 1),
            module_fqns_per_model_part=table.get("module_fqns_per_model_part"),
            head="output",
        )
    return caught.value


# (case, [parallelism] body, flavor, the key the finding stands at, a phrase of the message)
BAD = [
    (
        "stages-not-shared",
        "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_layers_per_stage = 3\n",
        "debugmodel",
        "pipeline_parallel_layers_per_stage",
        "make 3 stages, which 2 pipeline ranks",
    ),
    (
        "single-stage-schedule-given-two",
        "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = 'GPipe'\n"
        "pipeline_parallel_layers_per_stage = 2\n",
        "debugmodel",
        "pipeline_parallel_layers_per_stage",
        "2 per rank on 2 pipeline ranks, but schedule 'GPipe' runs exactly 1 stage",
    ),
    (
        "v-schedule-given-four",
        "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = 'ZBVZeroBubble'\n"
        "pipeline_parallel_layers_per_stage = 1\n",
        "debugmodel",
        "pipeline_parallel_layers_per_stage",
        "runs exactly 2 stages (a V) per rank",
    ),
    (
        "unknown-schedule-underscore",
        "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = '1f1b_interleaved'\n",
        "debugmodel",
        "pipeline_parallel_schedule",
        "unknown pipeline schedule '1f1b_interleaved'",
    ),
    (
        "unknown-schedule-hyphen",
        "[parallelism]\npipeline_parallel_degree = 4\npipeline_parallel_schedule = 'Interleaved-1F1B'\n",
        "8B",
        "pipeline_parallel_schedule",
        "unknown pipeline schedule 'Interleaved-1F1B'",
    ),
    (
        "unknown-schedule-empty",
        "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = ''\n",
        "debugmodel",
        "pipeline_parallel_schedule",
        "unknown pipeline schedule ''",
    ),
    (
        "base-class-without-csv",
        "[parallelism]\npipeline_parallel_degree = 2\n"
        "pipeline_parallel_schedule = 'PipelineScheduleMulti'\n",
        "debugmodel",
        "pipeline_parallel_schedule",
        "is a base class that runs only a schedule read",
    ),
    (
        "more-stages-than-layers",
        "[parallelism]\npipeline_parallel_degree = 8\npipeline_parallel_schedule = 'Interleaved1F1B'\n",
        "debugmodel",
        "pipeline_parallel_degree",
        "8 units on 16 stages: there are fewer units than stages",
    ),
    (
        "first-stage-heavier-than-a-stage",
        "[parallelism]\npipeline_parallel_degree = 4\n"
        "pipeline_parallel_first_stage_less_layers = 3\n",
        "debugmodel",
        "pipeline_parallel_first_stage_less_layers",
        "fewer than the 3 (first_stage_less_layers)",
    ),
    (
        "fqns-unknown-layer",
        "[parallelism]\npipeline_parallel_degree = 2\nmodule_fqns_per_model_part = ["
        '["tok_embeddings", "layers.0", "layers.1", "layers.2"], '
        '["layers.3", "layers.4", "layers.5", "layers.6", "norm", "output"]]\n',
        "debugmodel",
        "module_fqns_per_model_part",
        "names 'layers.6', which is no module of this 6-layer model",
    ),
    (
        "fqns-unknown-head",
        "[parallelism]\npipeline_parallel_degree = 2\nmodule_fqns_per_model_part = ["
        '["tok_embeddings", "layers.0", "layers.1", "layers.2"], '
        '["layers.3", "layers.4", "layers.5", "norm", "lm_head"]]\n',
        "debugmodel",
        "module_fqns_per_model_part",
        "names 'lm_head', which is no module",
    ),
    (
        "fqns-missing",
        "[parallelism]\npipeline_parallel_degree = 2\nmodule_fqns_per_model_part = ["
        '["tok_embeddings", "layers.0", "layers.1", "layers.2"], '
        '["layers.4", "layers.5", "norm", "output"]]\n',
        "debugmodel",
        "module_fqns_per_model_part",
        "leaves out layers.3",
    ),
    (
        "fqns-duplicated",
        "[parallelism]\npipeline_parallel_degree = 2\nmodule_fqns_per_model_part = ["
        '["tok_embeddings", "layers.0", "layers.1", "layers.2"], '
        '["layers.2", "layers.3", "layers.4", "layers.5", "norm", "output"]]\n',
        "debugmodel",
        "module_fqns_per_model_part",
        "names 'layers.2' more than once",
    ),
    (
        "fqns-out-of-order",
        "[parallelism]\npipeline_parallel_degree = 2\nmodule_fqns_per_model_part = ["
        '["tok_embeddings", "layers.0", "layers.2", "layers.1"], '
        '["layers.3", "layers.4", "layers.5", "norm", "output"]]\n',
        "debugmodel",
        "module_fqns_per_model_part",
        "lists 'layers.2' out of the model's order",
    ),
    (
        "fqns-three-parts-for-two-stages",
        "[parallelism]\npipeline_parallel_degree = 2\nmodule_fqns_per_model_part = ["
        '["tok_embeddings", "layers.0"], ["layers.1", "layers.2", "layers.3"], '
        '["layers.4", "layers.5", "norm", "output"]]\n',
        "debugmodel",
        "module_fqns_per_model_part",
        "has 3 parts but the pipeline has 2 stages",
    ),
    (
        "fqns-two-parts-for-eight-stages",
        "[parallelism]\npipeline_parallel_degree = 4\npipeline_parallel_schedule = 'LoopedBFS'\n"
        'module_fqns_per_model_part = [["tok_embeddings", "layers.0"], '
        '["layers.1", "layers.2", "layers.3", "layers.4", "layers.5", "norm", "output"]]\n',
        "debugmodel",
        "module_fqns_per_model_part",
        "has 2 parts but the pipeline has 8 stages",
    ),
    # the run refuses an empty list (not the same as leaving the key unset) and an empty part
    (
        "fqns-empty-list",
        "[parallelism]\npipeline_parallel_degree = 2\nmodule_fqns_per_model_part = []\n",
        "debugmodel",
        "module_fqns_per_model_part",
        "is an empty list, which gives the 2 stages no modules",
    ),
    (
        "fqns-last-part-empty",
        "[parallelism]\npipeline_parallel_degree = 2\nmodule_fqns_per_model_part = ["
        '["tok_embeddings", "layers.0", "layers.1", "layers.2", "layers.3", "layers.4", '
        '"layers.5", "norm", "output"], []]\n',
        "debugmodel",
        "module_fqns_per_model_part",
        "leaves stage 1 empty (part 1 is [])",
    ),
    (
        "fqns-first-part-empty-and-its-modules-left-out",
        "[parallelism]\npipeline_parallel_degree = 2\nmodule_fqns_per_model_part = ["
        '[], ["layers.3", "layers.4", "layers.5", "norm", "output"]]\n',
        "debugmodel",
        "module_fqns_per_model_part",
        "leaves stage 0 empty (part 0 is [])",
    ),
]


@pytest.mark.parametrize(
    ("body", "flavor", "key", "phrase"),
    [pytest.param(*case[1:], id=case[0]) for case in BAD],
)
@pytest.mark.parametrize("form", ["toml", "as-registry"])
def test_bad_layout_is_one_finding_at_its_key(tmp_path, body, flavor, key, phrase, form):
    path = _toml(tmp_path, body, flavor=flavor)
    args = ("--as-registry", path) if form == "as-registry" else (path,)
    found = _findings(*args)
    expected = _expected(path, LAYERS[flavor])
    assert [(f["code"], f["severity"], f["line"], f["col"]) for f in found] == [
        ("pipeline-layout", "error", _line_of(path, key), 1)
    ], found
    (finding,) = found
    assert phrase in finding["message"]
    assert (finding["message"], finding["hint"]) == (expected.message, expected.hint)
    assert finding["path"] == f"parallelism.{key}"


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ('[["tok_embeddings", 5, "layers.0"], ["norm"]]', "element [0][1] is integer 5"),
        ('[["tok_embeddings"], ["norm", true]]', "element [1][1] is boolean true"),
        ('[["tok_embeddings"], "norm"]', 'element 1 is string "norm"'),
    ],
)
def test_a_module_name_that_is_no_string_is_named_with_its_position(tmp_path, value, where):
    body = f"[parallelism]\npipeline_parallel_degree = 2\nmodule_fqns_per_model_part = {value}\n"
    path = _toml(tmp_path, body)
    (finding,) = _findings("--ngpu", "2", path)
    assert finding["code"] == "wrong-type"
    assert finding["message"].endswith(where), finding["message"]


# Valid layouts, schedules spelled in any letter case ([parallelism] body, flavor, --ngpu).
GOOD = [
    ("pipeline_parallel_degree = 4\npipeline_parallel_schedule = 'Interleaved1F1B'\n", "8B", 4),
    ("pipeline_parallel_degree = 4\npipeline_parallel_schedule = 'interleaved1f1b'\n", "8B", 8),
    ("pipeline_parallel_degree = 2\npipeline_parallel_schedule = 'GPIPE'\n", "debugmodel", 2),
    ("pipeline_parallel_degree = 2\npipeline_parallel_schedule = 'dualpipev'\n", "debugmodel", 4),
    ("pipeline_parallel_degree = 2\npipeline_parallel_schedule = 'zbvZeroBubble'\n", "8B", 2),
    ("pipeline_parallel_degree = 3\npipeline_parallel_schedule = '1f1b'\n", "debugmodel", 6),
    (
        "pipeline_parallel_degree = 2\npipeline_parallel_schedule = 'loopedbfs'\n"
        "pipeline_parallel_layers_per_stage = 2\n",
        "debugmodel",
        None,
    ),
    (
        "pipeline_parallel_degree = 2\nmodule_fqns_per_model_part = ["
        '["tok_embeddings", "layers.0", "layers.1"], '
        '["layers.2", "layers.3", "layers.4", "layers.5", "norm", "output"]]\n',
        "debugmodel",
        2,
    ),
]


@pytest.mark.parametrize(("body", "flavor", "ngpu"), GOOD)
@pytest.mark.parametrize("form", ["toml", "as-registry"])
def test_good_layout_has_no_finding(tmp_path, body, flavor, ngpu, form):
    path = _toml(tmp_path, "[parallelism]\n" + body, flavor=flavor)
    args = [path] if ngpu is None else ["--ngpu", ngpu, path]
    if form == "as-registry":
        args.insert(0, "--as-registry")
    assert _findings(*args) == []


def test_32_layers_on_pp4_interleaved_is_clean_from_the_command_line(tmp_path):
    """The real command: exit 0 for 32 layers on 4 ranks, 8 stages (2 per rank)."""
    path = _toml(
        tmp_path,
        "[parallelism]\npipeline_parallel_degree = 4\n"
        "pipeline_parallel_schedule = 'Interleaved1F1B'\n",
        flavor="8B",
    )
    run = subprocess.run(
        [sys.executable, "-m", "titan.cli.validate", "--ngpu", "8", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no problems" in run.stdout
    expected = pipeline_layout(n_layers=32, pp=4, schedule="Interleaved1F1B")
    assert expected.stages == 8 and expected.rank_stages[1] == (1, 5)


@pytest.mark.parametrize(
    ("body", "ngpu"),
    [
        ("pipeline_parallel_degree = 3\n", 8),
        ("pipeline_parallel_degree = 2\ntensor_parallel_degree = 2\n", 6),
        ("pipeline_parallel_degree = 4\n", 2),
    ],
)
@pytest.mark.parametrize("form", ["toml", "as-registry"])
def test_world_size_pp_does_not_divide(tmp_path, body, ngpu, form):
    """A pipeline degree that does not divide the GPUs is the world-size finding, and the
    layout itself (fine) adds none."""
    path = _toml(tmp_path, "[parallelism]\n" + body)
    args = ["--ngpu", ngpu, path]
    if form == "as-registry":
        args.insert(0, "--as-registry")
    found = _findings(*args)
    assert [f["code"] for f in found] == ["world-size"], found
    assert f"{ngpu} GPUs cannot be split by" in found[0]["message"]


@pytest.mark.parametrize("form", ["toml", "as-registry"])
def test_module_fqns_without_pipeline_is_a_warning(tmp_path, form):
    """torchtitan reads the list only to split a pipeline: with degree 1 it is ignored."""
    path = _toml(
        tmp_path,
        "[parallelism]\npipeline_parallel_degree = 1\n"
        'module_fqns_per_model_part = [["tok_embeddings", "layers.0"]]\n'
        "pipeline_parallel_schedule = 'no such schedule'\n",
    )
    args = ("--as-registry", path) if form == "as-registry" else (path,)
    found = _findings(*args)
    assert [(f["code"], f["severity"], f["line"], f["col"]) for f in found] == [
        ("pipeline-layout", "warning", _line_of(path, "module_fqns_per_model_part"), 1)
    ]
    assert found[0]["message"] == (
        "parallelism.module_fqns_per_model_part is ignored: pipeline_parallel_degree is 1, so "
        "the model is not split into stages"
    )
    assert found[0]["hint"] == "remove it, or set pipeline_parallel_degree above 1"
    assert validate(path).code == 0  # a warning: fails only under --strict
    assert validate("--strict", path).code == 1


def test_unknown_family_skips_the_layer_checks(tmp_path):
    """A model titan cannot size (a project's own family) gets no layer finding; a schedule
    name is still checked, since it does not depend on the model."""
    path = tmp_path / "job.toml"
    path.write_text(
        '[model]\nname = "myfork"\nflavor = "tiny"\n[parallelism]\npipeline_parallel_degree = 2\n'
        'module_fqns_per_model_part = [["layers.99"]]\n',
        encoding="utf-8",
    )
    assert _pipeline(_findings(path)) == []
    path.write_text(
        path.read_text(encoding="utf-8") + "pipeline_parallel_schedule = '2F2B'\n",
        encoding="utf-8",
    )
    (finding,) = _pipeline(_findings(path))
    assert finding["line"] == _line_of(path, "pipeline_parallel_schedule")
    assert finding["message"].startswith("unknown pipeline schedule '2F2B'")


@pytest.mark.parametrize(
    "body",
    [
        "pipeline_parallel_degree = 2\npipeline_parallel_schedule = 5\n",
        "pipeline_parallel_degree = 2\nmodule_fqns_per_model_part = 'layers.0'\n",
        "pipeline_parallel_degree = 2\nmodule_fqns_per_model_part = [['layers.0', 3]]\n",
        "pipeline_parallel_degree = 2\npipeline_parallel_layers_per_stage = 0\n",
        "pipeline_parallel_degree = 2\npipeline_parallel_first_stage_less_layers = -1\n",
        "pipeline_parallel_degree = 0\n",
    ],
)
def test_wrong_types_and_ranges_are_not_reported_twice(tmp_path, body):
    """A wrong type or range is the type or range check's finding; the layout rule stays out."""
    found = _findings(_toml(tmp_path, "[parallelism]\n" + body))
    assert found and _pipeline(found) == [], found


def test_a_huge_degree_is_answered(tmp_path):
    """A degree far above the model's size is refused at once, not counted through."""
    path = _toml(tmp_path, "[parallelism]\npipeline_parallel_degree = 9223372036854775807\n")
    found = _findings(path)
    assert [(f["code"], f["line"]) for f in found] == [
        ("pipeline-layout", _line_of(path, "pipeline_parallel_degree"))
    ]
    assert "there are fewer units than stages" in found[0]["message"]


REGISTRY = """\
from titan.config import ParallelismConfig
from titan.models.llama3 import model_registry
from titan.trainer import Trainer


def uneven():
    return Trainer.Config(
        model_spec=model_registry("debugmodel"),
        parallelism=ParallelismConfig(
            pipeline_parallel_degree=2,
            pipeline_parallel_layers_per_stage=3,
        ),
    )


def odd_name():
    config = Trainer.Config(model_spec=model_registry("8B"))
    config.parallelism.pipeline_parallel_degree = 4
    config.parallelism.pipeline_parallel_schedule = "Interleaved_1F1B"
    return config


def shallow():
    config = Trainer.Config(model_spec=model_registry("debugmodel"))
    config.model_spec.model.n_layers = 2
    config.parallelism.pipeline_parallel_degree = 4
    config.parallelism.pipeline_parallel_schedule = "interleaved1f1b"
    return config


def deeper():
    config = Trainer.Config(model_spec=model_registry("debugmodel"))
    config.model_spec.model.n_layers = 30
    config.parallelism.pipeline_parallel_degree = 4
    config.parallelism.pipeline_parallel_schedule = "interleaved1f1b"
    return config


def listed():
    return Trainer.Config(
        model_spec=model_registry("debugmodel"),
        parallelism=ParallelismConfig(
            pipeline_parallel_degree=2,
            module_fqns_per_model_part=[
                ["tok_embeddings", "layers.0", "layers.1", "layers.2"],
                ["layers.3", "layers.4", "layers.5", "norm"],
            ],
        ),
    )


def good():
    return Trainer.Config(
        model_spec=model_registry("8B"),
        parallelism=ParallelismConfig(
            pipeline_parallel_degree=4, pipeline_parallel_schedule="Interleaved1F1B"
        ),
    )
"""

# (function, the text the finding's column points at, the split module's arguments)
REGISTRY_CASES = [
    (
        "uneven",
        "pipeline_parallel_layers_per_stage=3",
        {"n_layers": 6, "pp": 2, "layers_per_stage": 3},
    ),
    (
        "odd_name",
        "config.parallelism.pipeline_parallel_schedule",
        {"n_layers": 32, "pp": 4, "schedule": "Interleaved_1F1B"},
    ),
    (
        "shallow",
        "config.parallelism.pipeline_parallel_degree",
        {"n_layers": 2, "pp": 4, "schedule": "Interleaved1F1B"},
    ),
    (
        "listed",
        "module_fqns_per_model_part=[",
        {
            "n_layers": 6,
            "pp": 2,
            "module_fqns_per_model_part": [
                ["tok_embeddings", "layers.0", "layers.1", "layers.2"],
                ["layers.3", "layers.4", "layers.5", "norm"],
            ],
        },
    ),
]


@pytest.mark.parametrize(("function", "anchor", "layout"), REGISTRY_CASES)
def test_registry_function_layout_is_refused_at_its_line(tmp_path, function, anchor, layout):
    """A registry module's function: the finding stands where the key is set, and the model's
    layer count is the config tree's (an edited ``n_layers`` counts)."""
    registry = tmp_path / "config_registry.py"
    registry.write_text(REGISTRY, encoding="utf-8")
    found = _findings("--registry", registry, "--config", function, "--ngpu", 8)
    with pytest.raises(PipelineSplitError) as caught:
        pipeline_layout(**layout)
    lines = REGISTRY.splitlines()
    line = next(
        i for i, text in enumerate(lines, 1) if anchor in text and i > _def_line(lines, function)
    )
    col = lines[line - 1].index(anchor) + 1
    assert [(f["code"], f["line"], f["col"]) for f in found] == [("pipeline-layout", line, col)]
    assert (found[0]["message"], found[0]["hint"]) == (caught.value.message, caught.value.hint)


def _def_line(lines: list[str], function: str) -> int:
    return next(i for i, text in enumerate(lines, 1) if text.startswith(f"def {function}("))


@pytest.mark.parametrize("function", ["good", "deeper"])
def test_registry_function_good_layout(tmp_path, function):
    registry = tmp_path / "config_registry.py"
    registry.write_text(REGISTRY, encoding="utf-8")
    assert _findings("--registry", registry, "--config", function, "--ngpu", 8) == []


# --------------------------------------------------------------------------- upstream files


def _pp_corpus_files() -> list[Path]:
    """The upstream TOMLs that set pipeline_parallel_degree."""
    return sorted(
        p
        for p in CORPUS.rglob("*.toml")
        if re.search(r"^\s*pipeline_parallel_degree\s*=", p.read_text(encoding="utf-8"), re.M)
    )


def _intended_gpus(path: Path) -> int:
    """The GPU count a file's degrees are written for: the product of the fixed degrees, with
    the FSDP shard degree (-1) the smallest that lets expert parallel borrow its ranks."""
    table = tomllib.loads(path.read_text(encoding="utf-8")).get("parallelism", {})
    degree = {
        name: table.get(f"{name}_degree", 1)
        for name in (
            "data_parallel_replicate",
            "data_parallel_shard",
            "tensor_parallel",
            "pipeline_parallel",
            "context_parallel",
            "expert_parallel",
            "expert_tensor_parallel",
        )
    }
    tp, cp, ep = degree["tensor_parallel"], degree["context_parallel"], degree["expert_parallel"]
    borrowed = cp * (tp if degree["expert_tensor_parallel"] == 1 else 1)
    shard = degree["data_parallel_shard"]
    if shard == -1:
        shard = ep // math.gcd(ep, borrowed)
    others = degree["data_parallel_replicate"] * tp * degree["pipeline_parallel"] * cp
    return others * shard


PP_CODES = {"pipeline-layout", "world-size", "parallel-degree", "expert-parallel", "tp-heads"}


UPSTREAM_PIPELINE_FAULTS = {
    # PP 4 (1F1B, one stage per rank) fed local_batch_size 1 / microbatch size 1 = 1 microbatch:
    # torch's Schedule1F1B refuses fewer microbatches than stages ("must be greater than or
    # equal to the number of stages"), so this file could not start its pipeline upstream
    # either; titan-validate says so before launch.
    "llama4_17bx128e.toml": "schedule '1F1B' needs at least as many microbatches as stages (4)",
}
"""Upstream files whose pipeline torch cannot run, with the finding that says why."""


def test_upstream_files_with_pipeline_degrees_pass():
    """Every upstream file that sets a pipeline degree passes the layout and world-size rules
    at the size it is written for, in both forms, except those whose pipeline torch cannot run,
    which get exactly that finding."""
    require(CORPUS)
    files = _pp_corpus_files()
    assert files, "no upstream file sets pipeline_parallel_degree"
    assert any(
        tomllib.loads(p.read_text(encoding="utf-8"))["parallelism"]["pipeline_parallel_degree"] > 1
        for p in files
    ), "no upstream file runs a pipeline"
    for path in files:
        ngpu = _intended_gpus(path)
        for form in ((), ("--as-registry",)):
            found = _findings(*form, "--ngpu", ngpu, path)
            layout = [f["message"] for f in found if f["code"] in PP_CODES]
            fault = UPSTREAM_PIPELINE_FAULTS.get(path.name)
            assert layout == ([] if fault is None else layout[:1]), (path, ngpu, form, layout)
            assert fault is None or fault in layout[0], (path, layout)


def test_a_huge_module_list_is_answered(tmp_path):
    """A list far longer than the model is refused by its length, not searched name by name."""
    names = ", ".join(['"layers.0"'] * 200_000)
    path = _toml(
        tmp_path,
        f"[parallelism]\npipeline_parallel_degree = 2\nmodule_fqns_per_model_part = [[{names}]]\n",
    )
    found = _findings(path)
    assert [(f["code"], f["line"], f["col"]) for f in found] == [
        ("pipeline-layout", _line_of(path, "module_fqns_per_model_part"), 1)
    ]
    assert found[0]["message"] == (
        "parallelism.module_fqns_per_model_part names 200000 modules, but this 6-layer model has 9"
    )
    assert found[0]["hint"] == "give every module of the model to one stage, once"


@pytest.mark.parametrize("form", ["toml", "as-registry"])
@pytest.mark.parametrize(
    ("schedule", "parts", "named"),
    [
        (
            "1f1b_interleaved",
            [
                ["tok_embeddings", "layers.0", "layers.1", "layers.2"],
                ["layers.3", "layers.4", "layers.5", "norm", "outptu"],
            ],
            "'outptu'",
        ),
        (
            "nope",
            [
                ["tok_embeddings", "layers.0", "layers.1"],
                ["layers.1", "layers.2", "layers.3", "layers.4", "layers.5", "norm", "output"],
            ],
            "layers.1",
        ),
    ],
)
def test_an_unknown_schedule_does_not_hide_a_bad_module_list(
    tmp_path, form, schedule, parts, named
):
    """Every problem in one pass: without a schedule there is no stage count, but the list's
    names are still checked."""
    import json

    path = _toml(
        tmp_path,
        f'[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "{schedule}"\n'
        f"module_fqns_per_model_part = {json.dumps(parts)}\n",
    )
    args = ("--as-registry", path) if form == "as-registry" else (path,)
    found = _pipeline(_findings(*args))
    assert [f["line"] for f in found] == [
        _line_of(path, "pipeline_parallel_schedule"),
        _line_of(path, "module_fqns_per_model_part"),
    ], found
    assert f"unknown pipeline schedule '{schedule}'" in found[0]["message"]
    assert named in found[1]["message"]

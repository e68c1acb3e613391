"""Pipeline parallel in one process: stages split off the model run as the whole model, their
names stay the model's, the loss weights add up to the batch mean, the pipeline degree joins
the mesh outermost, and what cannot run is refused with the setting to change."""

from __future__ import annotations

import pytest
import torch

from titan.config.configs import ParallelismConfig
from titan.distributed.parallel_dims import ParallelDims
from titan.distributed.pipeline_parallel import (
    layout_of,
    refuse_unpipelinable,
    split_model,
)
from titan.models.llama3 import model_registry
from titan.models.qwen3 import model_registry as qwen3_registry
from titan.training.pipeline_step import scaled_loss

SEQ = 16


def full_model(n_layers: int = 5, flavor: str = "debugmodel") -> torch.nn.Module:
    """A small llama3 with real weights on CPU."""
    config = model_registry(flavor).model
    config.n_layers = n_layers
    config.max_seq_len = SEQ
    config.dim, config.vocab_size = 64, 256  # small: the test compares, it does not train
    with torch.device("meta"):
        model = config.build()
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    return model


@pytest.mark.parametrize(
    ("pp", "schedule", "stages"),
    [(2, "1F1B", 2), (2, "Interleaved1F1B", 4), (3, "GPipe", 3), (2, "ZBVZeroBubble", 4)],
)
def test_stages_run_one_after_another_give_the_whole_models_logits(pp, schedule, stages):
    model = full_model()
    layout = layout_of(
        ParallelismConfig(pipeline_parallel_degree=pp, pipeline_parallel_schedule=schedule),
        n_layers=5,
    )
    assert layout.stages == stages
    parts = [split_model(model, modules) for modules in layout.modules]
    tokens = torch.randint(0, 256, (2, SEQ), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        h = tokens
        for part in parts:
            h = part(h)
        whole = model(tokens)
    assert torch.equal(h, whole)


def test_a_stage_keeps_the_models_names_and_only_its_own_modules():
    model = full_model()
    layout = layout_of(ParallelismConfig(pipeline_parallel_degree=2), n_layers=5)
    first, last = (split_model(model, modules) for modules in layout.modules)
    # 5 layers + 1 + 1 = 7 units on 2 stages: 4 then 3, the ends paying one each.
    assert layout.modules == [
        ["tok_embeddings", "layers.0", "layers.1", "layers.2"],
        ["layers.3", "layers.4", "norm", "output"],
    ]
    assert first.norm is None and first.output is None and last.tok_embeddings is None
    keys = set(first.state_dict()) | set(last.state_dict())
    assert keys == set(model.state_dict())
    assert not set(first.state_dict()) & set(last.state_dict())
    assert {k.split(".")[1] for k in last.state_dict() if k.startswith("layers.")} == {"3", "4"}
    for key, value in last.state_dict().items():
        assert torch.equal(value, model.state_dict()[key])
    # The meta model the stages are cut from is left whole.
    assert model.norm is not None and len(model.layers) == 5


def test_microbatch_losses_add_up_to_the_batch_mean_over_accumulation_steps():
    logits = torch.randn(4, SEQ, 32, generator=torch.Generator().manual_seed(2))
    labels = torch.randint(0, 32, (4, SEQ), generator=torch.Generator().manual_seed(3))
    mean = torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())
    loss = scaled_loss(lambda p, t: torch.nn.functional.cross_entropy(p.flatten(0, 1), t.flatten()))
    for rows in (1, 2, 4):
        parts = [
            loss(p, t, batch_tokens=labels.numel(), accumulation_steps=3)
            for p, t in zip(logits.split(rows), labels.split(rows), strict=True)
        ]
        torch.testing.assert_close(torch.stack(parts).sum(), mean / 3, rtol=1e-6, atol=0)


@pytest.mark.parametrize(
    ("world_size", "degrees", "names", "shard"),
    [
        (2, {"pipeline_parallel_degree": 2}, ("pp",), 1),
        (4, {"pipeline_parallel_degree": 2}, ("pp", "dp_shard"), 2),
        (
            8,
            {"pipeline_parallel_degree": 2, "tensor_parallel_degree": 2},
            ("pp", "dp_shard", "tp"),
            2,
        ),
        (
            8,
            {"pipeline_parallel_degree": 2, "data_parallel_replicate_degree": 2},
            ("pp", "dp_replicate", "dp_shard"),
            2,
        ),
    ],
)
def test_the_pipeline_degree_is_the_outermost_mesh_dimension(world_size, degrees, names, shard):
    dims = ParallelDims.from_config(ParallelismConfig(**degrees), world_size=world_size)
    assert dims.pp_enabled and dims.pp == 2
    assert dims.mesh_dim_names == names and dims.dp_shard == shard
    assert dims.non_data_parallel_size == world_size // dims.dp_degree


@pytest.mark.parametrize(
    ("world_size", "degrees", "texts"),
    [
        (
            4,
            {"pipeline_parallel_degree": 2, "data_parallel_shard_degree": 4},
            ["multiply to 8 (pipeline_parallel_degree=2 × dp_shard=4)"],
        ),
        (
            6,
            {"pipeline_parallel_degree": 4},
            ["6 GPUs cannot be split by pipeline_parallel_degree=4"],
        ),
        (2, {"pipeline_parallel_degree": 0}, ["`parallelism.pipeline_parallel_degree` is 0"]),
    ],
)
def test_pipeline_degrees_that_do_not_fit_the_world_size_are_refused(world_size, degrees, texts):
    """By the layout rules every command shares; ParallelDims never builds such a mesh."""
    from titan.models.llama3.config_registry import llama3_debugmodel
    from titan.training.run_checks import ConfigFindings, refuse_findings

    config = llama3_debugmodel()
    config.parallelism = ParallelismConfig(**degrees)
    with pytest.raises(ConfigFindings) as raised:
        refuse_findings(config, world_size=world_size)
    for text in texts:
        assert text in str(raised.value)
    with pytest.raises(ValueError, match="titan-validate --ngpu N names what to change"):
        ParallelDims.from_config(ParallelismConfig(**degrees), world_size=world_size)


def meta_model(flavor: str = "debugmodel") -> torch.nn.Module:
    """The 6-layer debug llama3 on the meta device (what the run's checks see)."""
    with torch.device("meta"):
        return model_registry(flavor).model.build()


def _findings(*, batch=4, validation=None, world_size=2, **degrees) -> str:
    """The errors the run's checks (the rules titan-validate reports) find in llama3's debug
    config with a pipeline of degree 2 and ``degrees``; "" when there are none."""
    from titan.models.llama3.config_registry import llama3_debugmodel
    from titan.training.run_checks import ConfigFindings, refuse_findings

    config = llama3_debugmodel()
    config.parallelism = ParallelismConfig(pipeline_parallel_degree=2, **degrees)
    config.training.local_batch_size = batch
    config.validator.enable = validation is not None
    config.validator.local_batch_size = validation
    try:
        refuse_findings(config, world_size=world_size)
    except ConfigFindings as refused:
        assert {f.code for f in refused.findings} == {"pipeline-layout"}, refused
        return str(refused)
    return ""


@pytest.mark.parametrize(
    ("degrees", "batch", "texts"),
    [
        (
            {"pipeline_parallel_microbatch_size": 3},
            4,
            ["pipeline_parallel_microbatch_size (3) must divide training.local_batch_size (4)"],
        ),
        (
            {"pipeline_parallel_schedule": "1F1B"},
            1,
            ["'1F1B' needs at least as many microbatches as stages (2)", "gives 1", "hint:"],
        ),
        (
            {"pipeline_parallel_schedule": "DualPipeV"},
            2,
            ["'DualPipeV' needs at least as many microbatches as stages (4)", "gives 2"],
        ),
        (
            {"pipeline_parallel_schedule": "Interleaved1F1B"},
            5,
            ["'Interleaved1F1B' needs a microbatch count that is a multiple of", "(2)", "gives 5"],
        ),
        (
            {"pipeline_parallel_schedule": "1F2B"},
            4,
            ["1F2B", "hint:"],
        ),
        (
            {"pipeline_parallel_layers_per_stage": 3},
            4,
            ["make 3 stages", "multiple of 2", "hint: set parallelism.pipeline_parallel_layers"],
        ),
    ],
)
def test_layouts_and_batches_the_schedule_cannot_run_are_refused(degrees, batch, texts):
    """By the shared pipeline rule (titan-validate, --preflight and the run alike)."""
    message = _findings(batch=batch, **degrees)
    for text in texts:
        assert text in message


@pytest.mark.parametrize(
    ("batch", "schedule"),
    [(2, "1F1B"), (4, "DualPipeV"), (4, "GPipe"), (1, "GPipe"), (6, "Interleaved1F1B")],
)
def test_batches_the_schedule_runs_pass(batch, schedule):
    assert _findings(batch=batch, pipeline_parallel_schedule=schedule) == ""


def test_validation_through_the_schedule_is_the_rules_too():
    for schedule in ("ZBVZeroBubble", "DualPipeV"):
        message = _findings(validation=4, pipeline_parallel_schedule=schedule)
        assert f"validation does not run with schedule {schedule!r}" in message
        assert "turn validation off" in message
    message = _findings(validation=6)
    assert "the validation batch (6 rows) must be a multiple of the pipeline's 4 microbatches" in (
        message
    )
    assert _findings(validation=8, pipeline_parallel_schedule="LoopedBFS") == ""


def test_tied_embeddings_and_a_missing_schedule_csv_are_refused(tmp_path):
    """What titan-train's pipeline does not run although the layout is sound."""

    def refusal(model_config=None, documents=False, **parallelism) -> str:
        with pytest.raises(ValueError) as raised:
            refuse_unpipelinable(
                ParallelismConfig(pipeline_parallel_degree=2, **parallelism),
                model_config=model_config,
                documents=documents,
            )
        return str(raised.value)

    tied = qwen3_registry("debugmodel").model
    tied.enable_weight_tying = True
    message = refusal(model_config=tied)
    assert "tied to its embeddings" in message and "enable_weight_tying = False" in message
    missing = tmp_path / "schedule.csv"
    message = refusal(pipeline_parallel_schedule_csv=str(missing))
    assert f"parallelism.pipeline_parallel_schedule_csv {str(missing)!r} is not a file" in message
    # Per-document masks and Hugging Face checkpoints run under pipeline parallel.
    for flavor in ("debugmodel", "debugmodel_flex_attn"):
        refuse_unpipelinable(
            ParallelismConfig(pipeline_parallel_degree=2),
            model_config=model_registry(flavor).model,
            documents=flavor.endswith("flex_attn"),
        )
    # ... but not together with context parallel, whose cut of the batch keeps the masks whole.
    for cp in (2, 4):
        message = refusal(documents=True, context_parallel_degree=cp)
        assert f"together with context parallel (context_parallel_degree = {cp})" in message
        assert "attn_mask_type to 'causal'" in message
    refuse_unpipelinable(
        ParallelismConfig(pipeline_parallel_degree=2, context_parallel_degree=2),
        model_config=model_registry("debugmodel").model,
    )

"""Parallelizing llama3: torchrun runs over gloo checked against one process, plus the refusals,
activation checkpointing, compile, autocast and the single-process helpers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import subprocess
import sys

import pytest
import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointWrapper,
)

from tests.dist_scripts.parallel_check import SEQ, VOCAB, build_on_meta, model_config
from tests.training_runs import HANG_SECONDS
from titan.components.loss import cross_entropy_loss
from titan.config.configs import (
    ActivationCheckpointConfig,
    CommConfig,
    CompileConfig,
    DebugConfig,
    ParallelismConfig,
    TrainingConfig,
)
from titan.distributed.amp import amp_context
from titan.distributed.determinism import set_determinism
from titan.distributed.grad_norm import clip_grad_norm_
from titan.distributed.parallel_dims import ParallelDims
from titan.distributed.parallelize import parallelize_model
from titan.distributed.process_group import init_distributed
from titan.distributed.reductions import dist_max, dist_mean
from titan.models.llama3 import model_registry
from titan.protocols.model_spec import ModelSpec

REPO = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "dist_scripts" / "parallel_check.py"

# One torchrun launch per world size; each checks several scenarios in one process group.
LAUNCHES = {
    2: ["fsdp", "tp", "tp_no_loss_parallel", "ddp", "fsdp_cpu_offload", "fsdp_bf16"],
    4: ["hsdp", "fsdp_tp"],
}


@pytest.mark.slow
@pytest.mark.parametrize("nproc", sorted(LAUNCHES))
def test_parallelized_model_matches_one_process(nproc):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={nproc}",
        str(SCRIPT),
        *LAUNCHES[nproc],
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=HANG_SECONDS)
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    for scenario in LAUNCHES[nproc]:
        assert f"OK {scenario}:" in done.stdout


# Single process: the same tiny llama3, materialised on CPU.
def tiny_model(seed: int = 0) -> torch.nn.Module:
    model = build_on_meta()
    model.to_empty(device="cpu")
    torch.manual_seed(seed)
    model.init_weights()
    return model


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    return (
        torch.randint(0, VOCAB, (2, SEQ), generator=generator),
        torch.randint(0, VOCAB, (2, SEQ), generator=generator),
    )


def loss_and_grads(model: torch.nn.Module) -> tuple[float, dict[str, torch.Tensor]]:
    tokens, labels = batch()
    loss = cross_entropy_loss(model(tokens), labels)
    loss.backward()
    grads = {
        name.replace("_checkpoint_wrapped_module.", ""): p.grad
        for name, p in model.named_parameters()
    }
    return loss.item(), grads


def tiny_spec() -> ModelSpec:
    """llama3's spec with the tiny model's config (whose heads TP must divide)."""
    return dataclasses.replace(model_registry("debugmodel"), model=model_config())


def parallelize(model, *, world_size=1, parallelism=None, ac=None, compile=None, training=None):
    parallelism = parallelism or ParallelismConfig()
    return parallelize_model(
        model,
        spec=tiny_spec(),
        parallel_dims=ParallelDims.from_config(parallelism, world_size=world_size),
        world_mesh=None,
        training=training or TrainingConfig(seq_len=SEQ),
        parallelism=parallelism,
        activation_checkpoint=ac or ActivationCheckpointConfig(mode="none"),
        compile=compile or CompileConfig(),
    )


@pytest.mark.parametrize(
    ("option", "wrapped"),
    [("op", ["0", "1"]), ("1", ["0", "1"]), ("2", ["1"]), ("3", [])],
)
def test_selective_checkpointing_wraps_every_nth_block_and_keeps_the_math(option, wrapped):
    want_loss, want_grads = loss_and_grads(tiny_model())
    model = parallelize(
        tiny_model(), ac=ActivationCheckpointConfig(mode="selective", selective_ac_option=option)
    )
    got = [n for n, b in model.layers.items() if isinstance(b, CheckpointWrapper)]
    assert got == wrapped
    loss, grads = loss_and_grads(model)
    assert loss == pytest.approx(want_loss, abs=1e-6)
    for name, grad in want_grads.items():
        torch.testing.assert_close(grads[name], grad)


def test_full_checkpointing_and_eager_compile_keep_the_math_and_the_names():
    want_loss, want_grads = loss_and_grads(tiny_model())
    model = parallelize(
        tiny_model(),
        ac=ActivationCheckpointConfig(mode="full"),
        compile=CompileConfig(enable=True, backend="eager"),
    )
    assert all(isinstance(b, CheckpointWrapper) for b in model.layers.values())
    assert not any("_orig_mod" in name for name, _ in model.named_parameters())
    loss, grads = loss_and_grads(model)
    assert loss == pytest.approx(want_loss, abs=1e-6)
    for name, grad in want_grads.items():
        torch.testing.assert_close(grads[name], grad)


@pytest.mark.parametrize(
    ("world_size", "parallelism", "ac", "compile", "training", "code"),
    [
        (3, {"tensor_parallel_degree": 3}, None, None, None, "tp-heads"),  # 4 heads
        (4, {"tensor_parallel_degree": 4}, None, None, None, "tp-heads"),  # 2 key/value heads
        (2, {"tensor_parallel_degree": 2}, None, None, {"seq_len": 15}, "seq-len"),
        (
            2,
            {"tensor_parallel_degree": 2, "enable_async_tensor_parallel": True},
            None,
            None,
            None,
            "async-tp",
        ),
        (
            2,
            {"tensor_parallel_degree": 2, "enable_async_tensor_parallel": True},
            None,
            {"enable": True, "components": ["loss"]},
            None,
            "async-tp",
        ),
        (
            4,
            {
                "data_parallel_replicate_degree": 2,
                "data_parallel_shard_degree": 1,
                "tensor_parallel_degree": 2,
            },
            None,
            None,
            None,
            "ddp-layout",
        ),
        (1, {}, {"mode": "memory_budget"}, None, None, "activation-checkpoint"),
        (
            1,
            {},
            {"mode": "selective", "selective_ac_option": "0"},
            None,
            None,
            "activation-checkpoint",
        ),
        (
            1,
            {},
            {"mode": "selective", "selective_ac_option": "every"},
            None,
            None,
            "activation-checkpoint",
        ),
        (1, {}, None, None, {"enable_cpu_offload": True}, "cpu-offload"),
    ],
)
def test_unrunnable_layouts_are_refused_by_the_rules_titan_validate_reports(
    world_size, parallelism, ac, compile, training, code
):
    """The run's checks refuse what titan-validate reports, with its code (one implementation:
    titan.schemas.layout_rules), before anything is built."""
    from titan.trainer import Trainer
    from titan.training.run_checks import ConfigFindings, refuse_findings

    config = Trainer.Config(
        model_spec=tiny_spec(),
        parallelism=ParallelismConfig(**parallelism),
        activation_checkpoint=ActivationCheckpointConfig(**ac)
        if ac
        else ActivationCheckpointConfig(),
        compile=CompileConfig(**compile) if compile else CompileConfig(),
        training=TrainingConfig(**{"seq_len": SEQ, **(training or {})}),
    )
    with pytest.raises(ConfigFindings) as raised:
        refuse_findings(config, world_size=world_size)
    assert code in [f.code for f in raised.value.findings]
    assert f"error[{code}]" in str(raised.value) and "hint: " in str(raised.value)


def test_async_tensor_parallel_off_cuda_is_refused_before_the_model_changes():
    from titan.distributed.parallelize import refuse_unrunnable

    parallelism = ParallelismConfig(tensor_parallel_degree=2, enable_async_tensor_parallel=True)
    with pytest.raises(ValueError, match="async tensor parallel needs CUDA"):
        refuse_unrunnable(parallelism=parallelism, device_type="cpu")
    refuse_unrunnable(parallelism=parallelism, device_type="cuda")


def test_amp_context_autocasts_only_when_nothing_else_handles_precision():
    mixed = TrainingConfig(dtype="float32", mixed_precision_param="bfloat16")
    single = ParallelDims.from_config(ParallelismConfig(), world_size=1)
    context = amp_context(single, training=mixed, device_type="cpu")
    assert isinstance(context, torch.autocast)
    with context:
        # On CPU, autocast runs linears in bf16 and the loss's log-softmax in float32.
        logits = tiny_model()(batch()[0])
        assert logits.dtype == torch.bfloat16
        assert cross_entropy_loss(logits, batch()[1]).dtype == torch.float32

    ddp = ParallelDims.from_config(
        ParallelismConfig(data_parallel_replicate_degree=2, data_parallel_shard_degree=1),
        world_size=2,
    )
    assert isinstance(amp_context(ddp, training=mixed, device_type="cpu"), torch.autocast)
    for dims, training in (
        (ParallelDims.from_config(ParallelismConfig(), world_size=2), mixed),  # FSDP casts
        (
            ParallelDims.from_config(ParallelismConfig(tensor_parallel_degree=2), world_size=2),
            mixed,
        ),
        (single, TrainingConfig(dtype="bfloat16", mixed_precision_param="bfloat16")),
        (single, TrainingConfig(dtype="float32", mixed_precision_param="float32")),
    ):
        assert isinstance(
            amp_context(dims, training=training, device_type="cpu"), contextlib.nullcontext
        )


def test_clip_grad_norm_matches_torch_and_skips_missing_grads():
    model = tiny_model()
    loss_and_grads(model)
    model.output.weight.grad = None
    want_model = tiny_model()
    loss_and_grads(want_model)
    want_model.output.weight.grad = None
    want = torch.nn.utils.clip_grad_norm_(want_model.parameters(), 0.1)
    got = clip_grad_norm_(model.parameters(), 0.1)
    torch.testing.assert_close(got, want)
    for p, q in zip(model.parameters(), want_model.parameters(), strict=True):
        if q.grad is not None:
            torch.testing.assert_close(p.grad, q.grad)
    assert dist_mean(got) == pytest.approx(got.item()) and dist_max(got) == pytest.approx(
        got.item()
    )


@pytest.fixture
def restore_determinism():
    before = torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.benchmark
    fill = torch.utils.deterministic.fill_uninitialized_memory
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.benchmark = before[1]
    torch.utils.deterministic.fill_uninitialized_memory = fill


def test_set_determinism_seeds_and_switches_kernels(restore_determinism, monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    debug = DebugConfig(seed=42, deterministic=True)
    assert set_determinism(None, device=torch.device("cpu"), debug=debug) == 42
    first = torch.rand(3)
    set_determinism(None, device=torch.device("cpu"), debug=debug)
    assert torch.equal(first, torch.rand(3))
    assert torch.are_deterministic_algorithms_enabled() and os.environ["PYTHONHASHSEED"] == "42"
    assert set_determinism(None, device=torch.device("cpu"), debug=DebugConfig()) is None


def test_init_distributed_without_torchrun_is_one_process(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    placement = init_distributed(CommConfig(), device_type="cpu")
    assert (placement.world_size, placement.rank, placement.device) == (1, 0, torch.device("cpu"))
    assert not torch.distributed.is_initialized()
    with pytest.raises(ValueError, match="'local_tensor' is not supported"):
        init_distributed(CommConfig(mode="local_tensor"), device_type="cpu")
    with pytest.raises(ValueError, match="runs on cpu or cuda, not 'mps'"):
        init_distributed(CommConfig(), device_type="mps")


def test_fsdp_units_are_the_models_own_when_it_names_them():
    from titan.distributed.parallelize import fsdp_units

    model = build_on_meta()
    default = fsdp_units(model)
    assert default[0] == [model.tok_embeddings] and default[-1] == [model.norm, model.output]
    assert [unit[0] for unit in default[1:-1]] == list(model.layers.values())

    class Tied(torch.nn.Module):
        def __init__(self, base):
            super().__init__()
            self.base = base

        def fsdp_units(self):
            return [[self.base.tok_embeddings, self.base.output]]

    tied = Tied(model)
    assert fsdp_units(tied) == [[model.tok_embeddings, model.output]]

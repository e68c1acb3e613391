"""Optimizer, LR schedule, metrics and float8 converter of titan-train, on CPU with tiny models."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import logging

import pytest
import torch

from titan.components import optional_packages
from titan.components.lr_scheduler import LRSchedulersContainer
from titan.components.metrics import METRICS_FILE, MetricsProcessor
from titan.components.metrics_flops import peak_flops
from titan.components.optimizer import (
    OptimizersContainer,
    OptimizersInBackwardContainer,
)
from titan.components.optional_packages import MissingPackageError
from titan.components.quantization.float8 import (
    Float8GroupedMMConverter,
    Float8LinearConverter,
)
from titan.components.quantization.mx import MXGroupedMMConverter, MXLinearConverter
from titan.config.configurable import NotBuildableError
from titan.protocols.model_converter import ModelConvertersContainer

PEAK_LR = 0.1


class TinyMLP(torch.nn.Module):
    """Dims divisible by 16, so every linear is eligible for float8."""

    def __init__(self) -> None:
        super().__init__()
        self.proj_in = torch.nn.Linear(16, 32)
        self.hidden = torch.nn.Linear(32, 32)
        self.output = torch.nn.Linear(32, 16)

    def forward(self, x):
        return self.output(torch.relu(self.hidden(torch.relu(self.proj_in(x)))))


def tiny_model(seed: int = 0) -> TinyMLP:
    torch.manual_seed(seed)
    return TinyMLP()


def batches(count: int) -> list[tuple]:
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(8, 16, generator=generator), torch.randn(8, 16, generator=generator))
        for _ in range(count)
    ]


def train(model, optimizers, data, schedulers=None) -> list[float]:
    losses = []
    for inputs, targets in data:
        optimizers.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizers.step()
        if schedulers is not None:
            schedulers.step()
        losses.append(loss.item())
    return losses


# ---- learning-rate schedule -------------------------------------------------------------------


def lr_factors(steps: int, **schedule) -> list[float]:
    """The lr of each of ``steps`` training steps, divided by the peak lr."""
    model = torch.nn.Linear(2, 2)
    optimizers = OptimizersContainer.Config(lr=PEAK_LR).build(model_parts=[model])
    schedulers = LRSchedulersContainer.Config(**schedule).build(
        optimizers=optimizers, training_steps=steps
    )
    factors = []
    for _ in range(steps):
        factors.append(optimizers.param_groups[0]["lr"] / PEAK_LR)
        assert schedulers.last_lr() == optimizers.param_groups[0]["lr"]
        optimizers.step()  # no gradients: a no-op that keeps LambdaLR's order check quiet
        schedulers.step()
    return factors


# Hand-written: 10 steps, warmup 2 -> warmup (s+1)/2, one virtual stable step, then 8 decay steps
# with progress (s-2)/8 (torchtitan's tests/unit_tests/test_lr_scheduler.py tables).
SCHEDULES = {
    "linear": dict(
        schedule=dict(warmup_steps=2, decay_type="linear"),
        expected=[0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125],
    ),
    "sqrt": dict(
        schedule=dict(warmup_steps=2, decay_type="sqrt"),
        # 1 - sqrt(k/8) for k = 1..7
        expected=[
            0.5,
            1.0,
            1.0,
            0.6464466,
            0.5,
            0.3876275,
            0.2928932,
            0.2094306,
            0.1339746,
            0.0645856,
        ],
    ),
    "cosine": dict(
        schedule=dict(warmup_steps=2, decay_type="cosine"),
        # (1 + cos(pi k / 8)) / 2 for k = 1..7
        expected=[
            0.5,
            1.0,
            1.0,
            0.9619398,
            0.8535534,
            0.6913417,
            0.5,
            0.3086583,
            0.1464466,
            0.0380602,
        ],
    ),
    "wsd": dict(
        schedule=dict(warmup_steps=2, decay_ratio=0.5, decay_type="linear"),
        expected=[0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2],
    ),
    "wsd-floor": dict(
        schedule=dict(warmup_steps=2, decay_ratio=0.5, min_lr_factor=0.2),
        expected=[0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 0.84, 0.68, 0.52, 0.36],
    ),
    "no-decay": dict(
        schedule=dict(warmup_steps=2, decay_ratio=0.0),
        expected=[0.5] + [1.0] * 9,
    ),
    "warmup-longer-than-run": dict(
        schedule=dict(warmup_steps=8, total_steps=5),
        expected=[0.2, 0.4, 0.6, 0.8, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
    ),
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_lr_schedule_matches_the_hand_written_table(name):
    case = SCHEDULES[name]
    assert lr_factors(10, **case["schedule"]) == pytest.approx(case["expected"], abs=1e-7)


def test_lr_schedule_horizon_comes_from_total_steps_and_holds_its_floor_after_it():
    factors = lr_factors(8, warmup_steps=1, total_steps=4, min_lr_factor=0.1)
    # total 4: warmup 1, stable 1 (virtual), decay 3 -> 1, 1, 1 - 0.9/3, 1 - 1.8/3, then the floor
    assert factors == pytest.approx([1.0, 1.0, 0.7, 0.4, 0.1, 0.1, 0.1, 0.1])


def test_lr_schedule_warns_when_warmup_and_decay_exceed_the_run(caplog):
    with caplog.at_level(logging.WARNING, logger="titan.components.lr_scheduler"):
        factors = lr_factors(10, warmup_steps=5, decay_ratio=0.8)
    assert "exceed the total steps" in caplog.text
    assert factors == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0, 1.0, 0.8, 0.6, 0.4, 0.2])


def test_lr_scheduler_refuses_an_unknown_decay_type():
    optimizers = OptimizersContainer.Config().build(model_parts=[torch.nn.Linear(2, 2)])
    with pytest.raises(ValueError, match="linear, sqrt, cosine"):
        LRSchedulersContainer.Config(decay_type="step").build(
            optimizers=optimizers, training_steps=4
        )


# ---- optimizers -------------------------------------------------------------------------------


@pytest.mark.parametrize("container", [OptimizersContainer, OptimizersInBackwardContainer])
def test_resume_from_state_dicts_continues_bitwise(container):
    data = batches(7)
    schedule = LRSchedulersContainer.Config(warmup_steps=2, decay_type="cosine")
    config = container.Config(lr=1e-2, implementation="for-loop")

    model = tiny_model()
    optimizers = config.build(model_parts=[model])
    schedulers = schedule.build(optimizers=optimizers, training_steps=7)
    train(model, optimizers, data[:4], schedulers)
    # deepcopy: the optimizer state dict holds the live moment tensors.
    saved = copy.deepcopy((model.state_dict(), optimizers.state_dict(), schedulers.state_dict()))
    train(model, optimizers, data[4:], schedulers)

    resumed = tiny_model(seed=123)
    resumed.load_state_dict(saved[0])
    resumed_optimizers = config.build(model_parts=[resumed])
    resumed_schedulers = schedule.build(optimizers=resumed_optimizers, training_steps=7)
    resumed_optimizers.load_state_dict(saved[1])
    resumed_schedulers.load_state_dict(saved[2])
    assert resumed_schedulers.last_lr() == schedulers_last_lr_after(schedule, 4)
    train(resumed, resumed_optimizers, data[4:], resumed_schedulers)

    for before, after in zip(model.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(before, after)
    assert resumed_schedulers.last_lr() == schedulers.last_lr()


def schedulers_last_lr_after(schedule, steps: int) -> float:
    optimizers = OptimizersContainer.Config(lr=1e-2).build(model_parts=[torch.nn.Linear(2, 2)])
    schedulers = schedule.build(optimizers=optimizers, training_steps=7)
    for _ in range(steps):
        optimizers.step()
        schedulers.step()
    return schedulers.last_lr()


@pytest.mark.parametrize("implementation", ["for-loop", "foreach", "fused"])
def test_in_backward_optimizer_gives_bitwise_the_plain_optimizers_weights(implementation):
    data = batches(4)
    weights = []
    for container in (OptimizersContainer, OptimizersInBackwardContainer):
        model = tiny_model()
        config = container.Config(lr=1e-2, implementation=implementation)
        train(model, config.build(model_parts=[model]), data)
        weights.append(list(model.parameters()))
    for plain, in_backward in zip(*weights, strict=True):
        assert torch.equal(plain, in_backward)


def test_in_backward_optimizer_frees_gradients_and_refuses_accumulation():
    model = tiny_model()
    optimizers = OptimizersInBackwardContainer.Config().build(model_parts=[model])
    assert optimizers.steps_in_backward and len(optimizers) == len(list(model.parameters()))
    train(model, optimizers, batches(1))
    assert all(p.grad is None for p in model.parameters())
    with pytest.raises(ValueError, match="cannot accumulate gradients over 4 micro-batches"):
        OptimizersInBackwardContainer.Config().build(
            model_parts=[tiny_model()], gradient_accumulation_steps=4
        )


@pytest.mark.parametrize("container", [OptimizersContainer, OptimizersInBackwardContainer])
def test_step_post_hooks_run_after_every_step(container):
    model = tiny_model()
    optimizers = container.Config().build(model_parts=[model])
    seen = []
    optimizers.register_step_post_hook(lambda opts: seen.append(opts))
    train(model, optimizers, batches(3))
    assert seen == [optimizers] * 3


def test_optimizer_names_outside_adam_and_adamw_are_refused():
    with pytest.raises(ValueError, match="'SGD' is not supported; choose one of Adam, AdamW"):
        OptimizersContainer.Config(name="SGD").build(model_parts=[tiny_model()])
    adam = OptimizersContainer.Config(name="Adam", implementation="foreach")
    (inner,) = adam.build(model_parts=[tiny_model()]).optimizers
    assert type(inner) is torch.optim.Adam and inner.defaults["foreach"] is True


# ---- metrics ----------------------------------------------------------------------------------


def metrics(tmp_path, **overrides):
    runtime = dict(
        dump_folder=str(tmp_path),
        rank=0,
        is_logging_rank=True,
        device_type="cpu",
        num_flops_per_token=1000,
        peak_flops=None,
        total_steps=7,
    )
    fields = {f.name for f in dataclasses.fields(MetricsProcessor.Config)}
    config = MetricsProcessor.Config(**{k: v for k, v in overrides.items() if k in fields})
    return config.build(**{**runtime, **{k: v for k, v in overrides.items() if k not in fields}})


def read_jsonl(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / METRICS_FILE).read_text().splitlines()]


def test_metrics_jsonl_has_every_logged_step_with_the_exact_loss(tmp_path, capsys):
    processor = metrics(tmp_path, log_freq=3, disable_color_printing=True, peak_flops=1e12)
    losses = {step: 0.1 * step + 1 / 3 for step in range(1, 8)}
    for step, loss in losses.items():
        processor.log(step=step, loss=loss, grad_norm=0.5, lr=1e-3, ntokens=64)
    processor.log_validation(step=7, loss=2.0 / 7)
    processor.close()

    records = read_jsonl(tmp_path)
    assert [r["step"] for r in records] == [1, 3, 6, 7]
    for record in records[:3]:
        assert record["loss"] == losses[record["step"]]  # bitwise: json writes repr(float)
        assert record["tps"] > 0 and record["tflops"] == pytest.approx(1000 * record["tps"] / 1e12)
        assert record["mfu"] == pytest.approx(100 * 1000 * record["tps"] / 1e12)
        assert record["memory_gib"] > 0 and record["elapsed_s"] > 0
        assert {"grad_norm", "lr", "memory_allocated_gib"} <= set(record)
    assert records[3]["validation_loss"] == 2.0 / 7
    out = capsys.readouterr().out
    assert "step:     3" in out and "validate step:     7" in out and "\x1b[" not in out


def test_metrics_log_rule_is_the_first_step_and_every_log_freq_steps(tmp_path):
    processor = metrics(tmp_path, log_freq=5, num_flops_per_token=None)
    assert [s for s in range(1, 16) if processor.should_log(s)] == [1, 5, 10, 15]
    processor.log(step=1, loss=1.0, grad_norm=1.0, lr=1.0, ntokens=10)
    for step in range(2, 5):
        processor.count(ntokens=10, step=step)
    processor.log(step=5, loss=1.0, grad_norm=1.0, lr=1.0, ntokens=10, extra={"aux": 2.5})
    processor.close()
    last = read_jsonl(tmp_path)[-1]
    assert last["aux"] == 2.5 and last["tflops"] is None and last["mfu"] is None


def test_metrics_non_logging_rank_writes_nothing(tmp_path):
    processor = metrics(tmp_path, rank=1, is_logging_rank=False)
    processor.log(step=1, loss=1.0, grad_norm=1.0, lr=1.0, ntokens=10)
    processor.close()
    assert not (tmp_path / METRICS_FILE).exists()


def test_metrics_tensorboard_writes_an_event_file(tmp_path):
    processor = metrics(tmp_path, enable_tensorboard=True, save_tb_folder="tb")
    processor.log(step=1, loss=1.5, grad_norm=1.0, lr=1e-3, ntokens=10)
    processor.close()
    assert list((tmp_path / "tb").glob("events.out.tfevents.*"))

    per_rank = metrics(tmp_path, enable_tensorboard=True, save_for_all_ranks=True, rank=3)
    per_rank.close()
    assert list((tmp_path / "tb" / "rank_3").glob("events.out.tfevents.*"))


def test_metrics_missing_sink_packages_fail_at_construction(tmp_path, monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        optional_packages.importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("tensorboard", "wandb") else real_find_spec(name, *a),
    )
    with pytest.raises(MissingPackageError, match="pip install tensorboard"):
        metrics(tmp_path, enable_tensorboard=True)
    with pytest.raises(MissingPackageError, match="metrics.enable_wandb needs the wandb"):
        metrics(tmp_path, enable_wandb=True)


def test_peak_flops():
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert peak_flops("NVIDIA H200") == 989e12
    assert peak_flops(None) is None and peak_flops("Some CPU") is None


# ---- float8 and the converter container -------------------------------------------------------


def float8_converters(**options):
    config = ModelConvertersContainer.Config(converters=[Float8LinearConverter.Config(**options)])
    return config.build(parallel_dims=None, model_compile_enabled=False)


def test_float8_emulation_converts_unfiltered_linears_and_trains():
    from torchao.float8.float8_linear import Float8Linear

    converters = float8_converters(emulate=True, filter_fqns=["output"])
    model = tiny_model()
    converters.convert(model)
    assert isinstance(model.proj_in, Float8Linear) and isinstance(model.hidden, Float8Linear)
    assert type(model.output) is torch.nn.Linear

    optimizers = OptimizersContainer.Config(lr=1e-2).build(model_parts=[model])
    optimizers.register_step_post_hook(lambda _: converters.post_optimizer_hook([model]))
    data = batches(1) * 6
    losses = train(model, optimizers, data)
    assert losses[-1] < losses[0]


@pytest.mark.skipif(
    torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9),
    reason="this GPU runs float8",
)
def test_float8_without_a_float8_gpu_asks_for_emulation():
    with pytest.raises(ValueError, match=r"SM89\+.*set emulate=true"):
        float8_converters(emulate=False)


def test_float8_errors_are_clear(monkeypatch):
    with pytest.raises(ValueError, match="emulate=true runs in eager mode only"):
        Float8LinearConverter.Config(emulate=True).build(model_compile_enabled=True)
    with pytest.raises(ValueError, match="only supports tensorwise"):
        float8_converters(emulate=True, recipe_name="rowwise", enable_fsdp_float8_all_gather=True)
    for config in (
        Float8GroupedMMConverter.Config(),
        MXLinearConverter.Config(),
        MXGroupedMMConverter.Config(),
    ):
        with pytest.raises(NotBuildableError, match="is not supported by titan-train yet"):
            config.build(parallel_dims=None, model_compile_enabled=False)

    monkeypatch.setattr(optional_packages.importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(MissingPackageError, match=r"pip install 'titan\[float8\]'"):
        Float8LinearConverter.Config(emulate=True).build()


def test_converter_container_refuses_mixed_families_and_duplicates():
    mixed = [Float8LinearConverter.Config(emulate=True), MXLinearConverter.Config()]
    with pytest.raises(ValueError, match="mixes quantization families"):
        ModelConvertersContainer.Config(converters=mixed).build()
    twice = [Float8LinearConverter.Config(emulate=True)] * 2
    with pytest.raises(ValueError, match="twice"):
        ModelConvertersContainer.Config(converters=twice).build()
    assert ModelConvertersContainer.Config().build().converters == []

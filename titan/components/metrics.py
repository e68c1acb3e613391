"""Metric logging: console, TensorBoard, Weights & Biases."""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any

from titan.components.metrics_flops import peak_flops as peak_flops_of
from titan.config.configurable import Configurable

METRICS_FILE = "metrics.jsonl"
"""File under dump_folder that receives one JSON object per logged step (logging rank only).

Every line is valid JSON: a NaN or infinite value (a diverged loss) is written as ``null``. Runs
in one dump folder append to the same file; a run that appends after earlier records, or that
resumes from a checkpoint, first writes ``{"event": "run_start", "step": S, "resumed_from": ...,
"time": ...}``, where ``S`` is the last step already trained, so the step records after it
replace any earlier ones of the same steps."""

TENSORBOARD_TAGS = {
    # metrics.jsonl key -> TensorBoard / W&B tag; torchtitan's tags, so dashboards carry over.
    "loss": "loss_metrics/global_avg_loss",
    "grad_norm": "grad_norm",
    "lr": "lr",
    "tps": "throughput(tps)",
    "tflops": "tflops",
    "mfu": "mfu(%)",
    "memory_gib": "memory/max_reserved(GiB)",
    "memory_allocated_gib": "memory/max_allocated(GiB)",
    "elapsed_s": "time_metrics/elapsed(s)",
    "validation_loss": "validation_metrics/loss",
}


class MetricsProcessor(Configurable):
    """Collects loss, grad norm, throughput and memory and sends them to the enabled sinks."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Logging frequency and metric sinks."""

        log_freq: int = 10
        """Log metrics every N steps."""
        enable_tensorboard: bool = False
        """Write TensorBoard logs."""
        disable_color_printing: bool = False
        """Print console logs without ANSI colours."""
        save_tb_folder: str = "tb"
        """Sub-folder of dump_folder that receives TensorBoard logs."""
        save_for_all_ranks: bool = False
        """Log TensorBoard / W&B on every rank instead of only one."""
        enable_wandb: bool = False
        """Log to Weights & Biases."""

    def __init__(
        self,
        *,
        config: Config,
        dump_folder: str,
        rank: int,
        is_logging_rank: bool,
        device_type: str,
        num_flops_per_token: int | None,
        peak_flops: float | None,
        total_steps: int | None = None,
        non_data_parallel_size: int = 1,
    ) -> None:
        from titan.components import metric_sinks as sinks

        check_metrics_settings(config)
        self.config = config
        self.device_type = device_type
        self.num_flops_per_token = num_flops_per_token
        if peak_flops is None:
            peak_flops = peak_flops_of(sinks.accelerator_name(device_type))
        self.peak_flops = peak_flops
        self.non_data_parallel_size = non_data_parallel_size

        folder = Path(dump_folder)
        self.jsonl = sinks.JsonlSink(folder / METRICS_FILE) if is_logging_rank else None
        self.console = (
            sinks.ConsoleSink(color=not config.disable_color_printing, total_steps=total_steps)
            if is_logging_rank
            else None
        )
        self.scalar_sinks: list[Any] = []
        if is_logging_rank or config.save_for_all_ranks:
            log_dir = folder / config.save_tb_folder
            if config.save_for_all_ranks:
                log_dir = log_dir / f"rank_{rank}"
            if config.enable_tensorboard:
                self.scalar_sinks.append(sinks.TensorBoardSink(log_dir))
            if config.enable_wandb:
                self.scalar_sinks.append(sinks.WandbSink(log_dir))

        self._start_marked = False
        self.ntokens_since_last_log = 0
        self.time_started = self.time_last_log = time.perf_counter()
        sinks.reset_peak_memory(device_type)

    def mark_start(self, *, step: int, resumed_from: str | None) -> None:
        """Record where this run starts when readers could confuse it with an earlier one: the
        file already held records, or the run resumes after ``step`` (from ``resumed_from``).
        A new run from an initial checkpoint (step 0, a new file) needs no mark."""
        if self.jsonl is None or self._start_marked:
            return
        self._start_marked = True
        if not (self.jsonl.had_records or step > 0):
            return
        self.jsonl.write(
            {
                "event": "run_start",
                "step": step,
                "resumed_from": resumed_from,
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
        )

    def should_log(self, step: int) -> bool:
        """torchtitan's rule: the first step, then every ``log_freq`` steps."""
        return step == 1 or step % self.config.log_freq == 0

    def count(self, *, ntokens: int, step: int | None = None) -> None:
        """Add the tokens of a step that is not logged (``step`` moves the progress bar)."""
        self.ntokens_since_last_log += ntokens
        if step is not None and self.console is not None:
            self.console.advance_to(step)

    def log(
        self,
        *,
        step: int,
        loss: float,
        grad_norm: float,
        lr: float,
        ntokens: int,
        extra: dict[str, Any] | None = None,
        force: bool = False,
    ) -> None:
        """Count ``ntokens``; on a logged step, report everything since the last logged step.

        ``ntokens``: tokens this rank trained on in this step. Call it every step, or call
        ``count`` on the steps ``should_log`` rejects and ``log`` on the others. ``force`` logs
        a step that is not due (the last one of a run that stops).
        """
        from titan.components import metric_sinks as sinks

        self.count(ntokens=ntokens, step=step)
        if not (force or self.should_log(step)):
            return
        now = time.perf_counter()
        # Guard a zero interval (a coarse clock) rather than divide by it.
        elapsed = max(now - self.time_last_log, 1e-9)
        # Ranks of one tensor-parallel group train on the same tokens: per device, divide by them.
        tps = self.ntokens_since_last_log / (elapsed * self.non_data_parallel_size)
        flops = self.num_flops_per_token
        tflops = flops * tps / 1e12 if flops else None
        # MFU as defined in the PaLM paper (appendix B), in percent.
        mfu = 100 * flops * tps / self.peak_flops if flops and self.peak_flops else None
        memory = sinks.peak_memory(self.device_type)
        record = {
            "step": step,
            "loss": float(loss),
            "grad_norm": float(grad_norm),
            "lr": float(lr),
            "tps": tps,
            "tflops": tflops,
            "mfu": mfu,
            "memory_gib": memory.reserved_gib,
            "memory_allocated_gib": memory.allocated_gib,
            "elapsed_s": now - self.time_started,
        }
        clash = set(record) & set(extra or {})
        if clash:
            raise ValueError(f"extra metrics may not replace {', '.join(sorted(clash))}")
        record.update(extra or {})
        self._emit(record, step)
        if self.console is not None:
            self.console.print(_train_line(record))
        self._start_window(now)

    def log_validation(self, *, step: int, loss: float) -> None:
        """Report a validation loss; the next throughput window starts after validation."""
        from titan.components import metric_sinks as sinks

        now = time.perf_counter()
        memory = sinks.peak_memory(self.device_type)
        record = {
            "step": step,
            "validation_loss": float(loss),
            "memory_gib": memory.reserved_gib,
            "elapsed_s": now - self.time_started,
        }
        self._emit(record, step)
        if self.console is not None:
            self.console.print(
                f"[yellow]validate step: {step:>5}[/]  [green]loss: {float(loss):8.4f}[/]  "
                f"[turquoise2]memory: {memory.reserved_gib:6.2f}GiB[/]"
            )
        # torchtitan's choice: time spent validating must not count as training time.
        self._start_window(now)

    def _emit(self, record: dict[str, Any], step: int) -> None:
        if self.jsonl is not None:
            self.jsonl.write(record)
        scalars = {
            TENSORBOARD_TAGS.get(key, key): float(value)
            for key, value in record.items()
            if key != "step" and isinstance(value, int | float) and not isinstance(value, bool)
        }
        for sink in self.scalar_sinks:
            sink.log(scalars, step)

    def _start_window(self, now: float) -> None:
        from titan.components import metric_sinks as sinks

        self.ntokens_since_last_log = 0
        self.time_last_log = now
        sinks.reset_peak_memory(self.device_type)

    def close(self) -> None:
        """Stop the progress bar and flush and close every sink; safe to call twice."""
        for sink in self.scalar_sinks:
            sink.close()
        self.scalar_sinks = []
        if self.jsonl is not None:
            self.jsonl.close()
        if self.console is not None:
            self.console.close()


def check_metrics_settings(config: MetricsProcessor.Config) -> None:
    """Refuse a logging frequency below 1, or a sink whose package is not installed."""
    from titan.components import metric_sinks as sinks

    if config.log_freq < 1:
        raise ValueError(f"metrics.log_freq must be at least 1, not {config.log_freq}")
    # Checked on every rank, so a missing package fails the whole job at once.
    if config.enable_tensorboard:
        sinks.check_tensorboard()
    if config.enable_wandb:
        sinks.check_wandb()


def _train_line(record: dict[str, Any]) -> str:
    """The console line of a logged training step (rich markup)."""
    parts = [
        f"[red]step: {record['step']:>5}[/]",
        f"[green]loss: {record['loss']:8.4f}[/]",
        f"[orange3]grad_norm: {record['grad_norm']:8.4f}[/]",
        f"[cyan]lr: {record['lr']:.4e}[/]",
        f"[turquoise2]memory: {record['memory_gib']:6.2f}GiB[/]",
        f"[blue]tps: {_thousands(record['tps'])}[/]",
    ]
    if record["tflops"] is not None:
        parts.append(f"[cyan]tflops: {record['tflops']:,.2f}[/]")
    if record["mfu"] is not None:
        parts.append(f"[magenta]mfu: {record['mfu']:.2f}%[/]")
    return "  ".join(parts)


def _thousands(value: float) -> str:
    return f"{round(value):,}" if math.isfinite(value) else str(value)

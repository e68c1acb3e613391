"""``Trainer.Config``: one typed object that says everything about a training run.

It replaces the legacy TOML ``JobConfig``. A registry function returns one; ``config.build()``
constructs the trainer that runs it. Every section is the config of the component that reads it,
so a component receives only its own settings.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Annotated, Any

import tyro

from titan.components.checkpoint import CheckpointManager
from titan.components.dataloader import BaseDataLoader
from titan.components.lr_scheduler import LRSchedulersContainer
from titan.components.metrics import MetricsProcessor
from titan.components.optimizer import OptimizersContainer
from titan.components.tokenizer import BaseTokenizer, HuggingFaceTokenizer
from titan.components.validate import Validator
from titan.config.configs import (
    ActivationCheckpointConfig,
    CommConfig,
    CompileConfig,
    DebugConfig,
    ParallelismConfig,
    TrainingConfig,
)
from titan.config.configurable import Configurable
from titan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from titan.protocols.model_converter import ModelConvertersContainer
from titan.protocols.model_spec import ModelSpec
from titan.tools.profiling import ProfilingConfig
from titan.training.library import TrainerLibrary
from titan.training.stopping import (
    NonFiniteLoss,
    RunStopped,
    StopRequests,
    abandoned_message,
    agree,
    stopped_message,
)


class Trainer(TrainerLibrary, Configurable):
    """Builds the model, data, optimizer and checkpointing from its config and runs the loop.

    ``train`` runs the whole run; the library calls (``forward_backward``, ``optim_step``,
    checkpoints, ``model_state_dict``, ``close``; ``titan.training.library``) run it step by
    step for a controller of its own, through the same code.
    """

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """A whole training run."""

        # The flavor is chosen by the registry function (one function per variant), never by a
        # flag, exactly as in torchtitan; so the CLI does not offer it.
        model_spec: Annotated[ModelSpec | None, tyro.conf.Suppress] = None
        """The model family, flavor and hyperparameters, from ``model_registry(flavor)``."""
        description: str = "default job"
        """Free text describing the run, shown when it starts (the legacy job.description)."""
        hf_assets_path: str = "./tests/assets/tokenizer"
        """Folder with Hugging Face assets: tokenizer files, config.json and safetensors weights."""
        dump_folder: str = "./outputs"
        """Root output folder for checkpoints, traces, TensorBoard logs and the saved config."""
        profiling: ProfilingConfig = field(default_factory=ProfilingConfig)
        """Profiler and memory-snapshot settings."""
        metrics: MetricsProcessor.Config = field(default_factory=MetricsProcessor.Config)
        """Metric logging frequency and sinks."""
        # No flags: the tokenizer has no options of its own (it reads hf_assets_path), and tyro
        # would turn ``X | None`` into a pair of subcommands.
        tokenizer: Annotated[BaseTokenizer.Config | None, tyro.conf.Suppress] = field(
            default_factory=HuggingFaceTokenizer.Config
        )
        """Tokenizer, read from hf_assets_path; None for models that bring their own."""
        # torchtitan defaults to an abstract loader that cannot be built; titan defaults to the
        # text loader on c4_test, which is also what a legacy TOML without a dataset meant.
        dataloader: BaseDataLoader.Config = field(default_factory=HuggingFaceTextDataLoader.Config)
        """Training data loader and its dataset."""
        model_converters: ModelConvertersContainer.Config = field(
            default_factory=ModelConvertersContainer.Config
        )
        """Converters (float8, MX) applied to the model after it is built."""
        optimizer: OptimizersContainer.Config = field(default_factory=OptimizersContainer.Config)
        """Optimizer; the in-backward class steps each parameter during backward."""
        lr_scheduler: LRSchedulersContainer.Config = field(
            default_factory=LRSchedulersContainer.Config
        )
        """Learning-rate schedule."""
        training: TrainingConfig = field(default_factory=TrainingConfig)
        """Batch, sequence length, steps and precision."""
        parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)
        """Parallel degrees and their options."""
        checkpoint: CheckpointManager.Config = field(default_factory=CheckpointManager.Config)
        """Checkpoint saving, loading and export."""
        activation_checkpoint: ActivationCheckpointConfig = field(
            default_factory=ActivationCheckpointConfig
        )
        """Activation recomputation."""
        compile: CompileConfig = field(default_factory=CompileConfig)
        """torch.compile settings."""
        comm: CommConfig = field(default_factory=CommConfig)
        """Collective timeouts and the flight recorder."""
        validator: Validator.Config = field(default_factory=Validator.Config)
        """Validation loop."""
        debug: DebugConfig = field(default_factory=DebugConfig)
        """Seeds, determinism and debugging switches."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        # Everything torch is built by titan.training.setup, imported here so that reading,
        # validating and printing configs never pays for torch; an unsupported torch is refused
        # before it is imported.
        from titan import torch_support

        torch_support.check()
        from titan.training.setup import build_run

        self.config = config
        self.parts = build_run(config, **runtime)
        self.step = 0
        self.finished = False
        """Whether every rank ended ``train`` at the same point: it returned, or all ranks agreed to
        stop (a signal, a non-finite loss); then closing may wait for the others."""

    def train(self) -> None:
        """Run ``training.steps`` steps, resuming from the latest checkpoint when there is one.

        SIGINT / SIGTERM end it after the current step, saved (``RunStopped``); a non-finite
        loss ends it before that step changes the weights or is saved (``NonFiniteLoss``).
        """
        parts, training = self.parts, self.config.training
        parts.checkpointer.load(step=self.config.checkpoint.load_step)
        self.step = parts.train_state.step
        if self.config.checkpoint.create_seed_checkpoint:
            if parts.parallel_dims.world_size != 1:
                raise ValueError(
                    "checkpoint.create_seed_checkpoint builds the unsharded model: run it as one "
                    f"process, not {parts.parallel_dims.world_size}"
                )
            parts.checkpointer.save_seed()
            parts.log.info("seed checkpoint written; nothing is trained in a seed run")
            self.finished = True
            return
        parts.metrics.mark_start(step=self.step, resumed_from=parts.checkpointer.loaded_from)
        parts.log.info(
            "training %s from step %d to %d (%s)",
            self.config.description,
            self.step + 1,
            training.steps,
            parts.summary,
        )
        with StopRequests() as requests:
            try:
                self._loop(requests)
            except RunStopped:
                raise
            except BaseException:
                # A second signal raised its KeyboardInterrupt (or Terminated) wherever the run
                # was; what it interrupted may end in an error of its own instead (torch's file
                # writer turns it into a RuntimeError mid-save). Either way the stop is the user's.
                if not requests.abandoned:
                    raise
                signum = requests.abandoned
                raise RunStopped(
                    abandoned_message(
                        signum=signum,
                        step=self.step,
                        checkpoint=parts.checkpointer.last_checkpoint(),
                    ),
                    signum=signum,
                    abandoned=True,
                ) from None
        self.finished = True

    def _loop(self, requests: StopRequests) -> None:
        parts, training = self.parts, self.config.training
        batches = iter(parts.dataloader)
        with parts.profiler() as profiler:
            while self.step < training.steps:
                try:
                    micro_batches = [
                        parts.to_device(next(batches)) for _ in range(parts.accumulation_steps)
                    ]
                except StopIteration:  # a finite loader (dataloader.infinite = false) ran out
                    parts.log.warning(
                        "the training data ran out after step %d of %d; stopping there",
                        self.step,
                        training.steps,
                    )
                    break
                self.step += 1
                parts.gc.run(self.step)
                signum = self.train_step(micro_batches, stop_signal=requests.signum)
                last_step = self.step == training.steps
                parts.checkpointer.save(self.step, last_step=last_step)
                if signum and not last_step:
                    self._stop(signum)
                if parts.validator is not None and parts.validator.should_validate(self.step):
                    parts.validator.validate(parts.model_parts, self.step)
                profiler.step()
                if self.step == 1:
                    parts.after_first_step()
        parts.log.info("training done after step %d", self.step)

    def _stop(self, signum: int) -> None:
        """Every rank agreed to stop after this step: save it and end with ``RunStopped``."""
        checkpointer = self.parts.checkpointer
        checkpoint = checkpointer.save_on_stop(self.step)
        # Every rank got here together, so closing may wait for the others as after a full run.
        self.finished = True
        raise RunStopped(
            stopped_message(
                signum=signum,
                step=self.step,
                checkpoint=checkpoint,
                saving=checkpointer.config.enable,
            ),
            signum=signum,
        )

    def train_step(self, micro_batches: list[tuple[Any, Any]], *, stop_signal: int = 0) -> int:
        """One optimizer step over ``micro_batches`` (gradient accumulation), then logging.

        Returns the stop signal all ranks agreed on (0: go on). ``stop_signal`` is the signal
        this rank received, if any.
        """
        import torch

        from titan.training import step_api

        parts = self.parts
        parts.optimizers.zero_grad()
        losses = self._accumulate(micro_batches)
        grad_norm = step_api.clip_gradients(parts)
        loss = torch.stack(losses).sum()
        verdict = agree(loss=loss, grad_norm=grad_norm, signum=stop_signal)
        ntokens = sum(labels.numel() for _, labels in micro_batches)
        if verdict.nonfinite:
            self._nonfinite(loss=loss, grad_norm=grad_norm, ntokens=ntokens)
        lr = step_api.apply_update(parts)
        parts.train_state.step = self.step
        parts.train_state.ntokens_seen += ntokens * parts.dp_degree
        if not parts.metrics.should_log(self.step):
            parts.metrics.count(ntokens=ntokens, step=self.step)
            return verdict.signum
        parts.metrics.log(
            step=self.step,
            loss=parts.dp_mean(loss),
            grad_norm=grad_norm.item(),
            lr=lr,
            ntokens=ntokens,
        )
        return verdict.signum

    def _accumulate(self, micro_batches: list[tuple[Any, Any]]) -> list[Any]:
        """Forward and backward of the step's ``(inputs, labels)`` micro-batches; each loss (as
        backward saw it) is its mean divided by the accumulation steps: every label counts."""
        from titan.training import step_api

        parts = self.parts
        if parts.pipeline_step is not None:  # the schedule runs forward and backward
            return [parts.pipeline_step.forward_backward(x, y) for x, y in micro_batches]
        batches = [step_api.Microbatch(token_ids=x, labels=y) for x, y in micro_batches]
        # Each rank's loss sees its share of the sequence under context parallel.
        local = [y.numel() // parts.parallel_dims.cp for _, y in micro_batches]
        mesh_size = step_api.loss_mesh_size(parts)
        return step_api.accumulate(
            parts,
            batches,
            local_valid=local,
            num_global_valid_tokens=sum(local) * mesh_size,
        )

    def _nonfinite(self, *, loss: Any, grad_norm: Any, ntokens: int) -> None:
        """Some rank's loss or gradient norm is not finite: warn and go on
        (``training.on_nonfinite_loss = "warn"``), or log this step and stop before its
        optimizer step and before anything is saved for it ("stop", the default)."""
        parts = self.parts
        here = f"here: loss {loss.item()}, gradient norm {grad_norm.item()}"
        if self.config.training.on_nonfinite_loss == "warn":
            parts.log.warning(
                "step %d: the loss or gradient norm is not finite (%s); training goes on "
                "(training.on_nonfinite_loss = 'warn')",
                self.step,
                here,
            )
            return
        parts.metrics.log(
            step=self.step,
            loss=parts.dp_mean(loss),
            grad_norm=grad_norm.item(),
            lr=parts.lr_schedulers.last_lr(),
            ntokens=ntokens,
            force=True,
        )
        last = parts.checkpointer.last_checkpoint()
        kept = f"the newest checkpoint is {last}" if last else "no checkpoint was saved"
        # Every rank saw the same verdict and stops here, so closing may wait for the others.
        self.finished = True
        raise NonFiniteLoss(
            f"step {self.step}: the loss or gradient norm is not finite ({here}), so the run "
            f"stopped before that step's optimizer update and before anything was saved for it; "
            f"{kept}. A lower optimizer.lr (or a longer warmup) "
            "usually helps; training.on_nonfinite_loss = 'warn' trains on regardless"
        )

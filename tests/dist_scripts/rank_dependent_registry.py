"""Registry functions whose config or behaviour depends on the process's rank, the mistakes a
real registry can make under torchrun (``--registry`` this file, ``--config <function>``).

Every function starts from the llama3 debug run, shrunk so a step takes milliseconds on CPU.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time

from titan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
from titan.models.llama3.config_registry import llama3_debugmodel
from titan.trainer import Trainer

RANK = int(os.environ.get("RANK", "0"))
# The step at which a misbehaving rank's loader misbehaves (after the first step, so the run is
# under the training timeout).
BAD_BATCH = 3


def _small() -> Trainer.Config:
    config = llama3_debugmodel()
    config.training.seq_len = 32
    config.training.local_batch_size = 2
    config.training.steps = 6
    config.debug.seed = 7
    config.checkpoint.enable = False
    config.validator.enable = False
    return config


def steps_by_rank() -> Trainer.Config:
    """Rank r trains 4 + r steps (a registry that reads RANK)."""
    config = _small()
    config.training.steps = 4 + RANK
    return config


def width_and_lr_by_rank() -> Trainer.Config:
    """Ranks 1 and up build a wider model with another learning rate."""
    config = _small()
    if RANK > 0:
        config.model_spec.model.dim = 512
        config.optimizer.lr = 1e-3
    return config


def wider_on_odd_ranks() -> Trainer.Config:
    """Odd ranks build a wider model (a registry that alternates by rank)."""
    config = _small()
    if RANK % 2:
        config.model_spec.model.dim = 512
    return config


def same_on_every_rank() -> Trainer.Config:
    """Identical everywhere: the run must train."""
    return _small()


def rank1_never_joins() -> Trainer.Config:
    """Rank 1 hangs before the process group exists (a stuck filesystem, a debugger)."""
    if RANK == 1:
        time.sleep(3600)
    return _small()


def rank0_never_joins() -> Trainer.Config:
    """Rank 0 hangs before the process group exists; the others must still say so."""
    if RANK == 0:
        time.sleep(3600)
    return _small()


def rank1_registry_raises() -> Trainer.Config:
    """Only rank 1's registry function fails."""
    if RANK == 1:
        raise RuntimeError("rank 1 cannot read its cluster settings")
    return _small()


def rank1_invalid_batch() -> Trainer.Config:
    """Only rank 1's config breaks a rule titan-validate checks."""
    config = _small()
    if RANK == 1:
        config.training.global_batch_size = 3
    return config


def invalid_everywhere() -> Trainer.Config:
    """Every rank's config breaks the same rule."""
    config = _small()
    config.training.global_batch_size = 3
    return config


class MisbehavingLoader(HuggingFaceTextDataLoader):
    """The text loader, except that on rank ``bad_rank`` its ``BAD_BATCH``-th batch stalls
    forever or raises, as a rank with a hung filesystem or a broken shard would."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(HuggingFaceTextDataLoader.Config):
        """The text loader with a failure planted on one rank."""

        bad_rank: int = 1
        """The rank that misbehaves."""
        behaviour: str = "stall"
        """'stall' (sleep forever), 'stop' (SIGSTOP itself: frozen, as under a debugger or a
        stopped job) or 'raise' (an unexpected exception)."""

    def __iter__(self):
        for count, batch in enumerate(super().__iter__(), start=1):
            if count == BAD_BATCH and RANK == self.config.bad_rank:
                if self.config.behaviour == "stall":
                    time.sleep(3600)
                if self.config.behaviour == "stop":
                    os.kill(os.getpid(), signal.SIGSTOP)
                raise RuntimeError(f"shard of rank {RANK} is corrupt at batch {count}")
            yield batch


def rank1_stalls_mid_training() -> Trainer.Config:
    config = _small()
    config.dataloader = MisbehavingLoader.Config(behaviour="stall")
    return config


def rank1_stops_mid_pipeline() -> Trainer.Config:
    """Two pipeline stages; the second stage's process is stopped (SIGSTOP) at its third batch."""
    config = _small()
    config.parallelism.pipeline_parallel_degree = 2
    config.parallelism.pipeline_parallel_microbatch_size = 1
    config.dataloader = MisbehavingLoader.Config(behaviour="stop")
    return config


def rank0_stops_mid_pipeline() -> Trainer.Config:
    """Two pipeline stages; the first stage's process is stopped (SIGSTOP) at its third batch."""
    config = rank1_stops_mid_pipeline()
    config.dataloader = MisbehavingLoader.Config(behaviour="stop", bad_rank=0)
    return config


def rank1_crashes_mid_training() -> Trainer.Config:
    config = _small()
    config.dataloader = MisbehavingLoader.Config(behaviour="raise")
    return config

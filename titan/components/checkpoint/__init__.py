"""Distributed checkpoints: save, resume, export.

``CheckpointManager`` decides when to save and what to load. The work is done by the modules of
this package, imported only when a manager is built, so reading configs stays torch-free. Imports
go one way: ``errors`` (the error types) <- ``folders`` (the on-disk layout and atomic
publishing) <- ``resume`` (which step a run resumes from), ``layout`` (the data-parallel layout
a checkpoint was saved with) and ``safe_read`` (reading DCP's pickles without running code) <-
``state`` (what a checkpoint holds, ``ModelState``, loading with clear errors) <- ``writer``
(foreground and background DCP saves) and ``hf`` (Hugging Face safetensors) <- ``initial`` (a
new run's starting weights) <- ``checks`` (the refusals a run meets before its first step,
shared with ``titan-train --preflight``) <- this module.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from dataclasses import field
from typing import Any, Literal

from titan.components.checkpoint.checks import (
    SEED_NEEDS_SAVING,
    check_folder,
    check_settings,
    check_start,
    load_when_disabled,
)
from titan.components.checkpoint.errors import CheckpointError, DamagedCheckpoint, UnsafeCheckpoint
from titan.config.configurable import Configurable, NotBuildableError

__all__ = [
    "CheckpointError",
    "CheckpointManager",
    "DamagedCheckpoint",
    "ModelState",
    "UnsafeCheckpoint",
    "check_folder",
    "check_settings",
    "check_start",
]

log = logging.getLogger("titan")


def __getattr__(name: str) -> Any:
    # ModelState needs torch and this module must import without it; PEP 562 keeps
    # ``from titan.components.checkpoint import ModelState`` working all the same.
    if name == "ModelState":
        from titan.components.checkpoint.state import ModelState

        return ModelState
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class CheckpointManager(Configurable):
    """Saves and loads model, optimizer, scheduler, data loader and RNG state."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Saving, loading and exporting checkpoints."""

        enable: bool = False
        """Enable checkpointing."""
        enable_ft_dataloader_checkpoints: bool = True
        """Under fault tolerance, also checkpoint the data loader position."""
        folder: str = "checkpoint"
        """Sub-folder of dump_folder that holds checkpoints."""
        interval: int = 500
        """Save a checkpoint every N steps."""
        initial_load_path: str | None = None
        """Directory to load from when the run's own checkpoint folder is empty."""
        initial_load_model_only: bool = True
        """The initial load restores only the model weights."""
        initial_load_in_hf: bool = False
        """The initial load reads Hugging Face safetensors (model only)."""
        initial_load_in_hf_quantized: bool = False
        """The Hugging Face initial load has quantized keys."""
        last_save_model_only: bool = True
        """The last save keeps only the model weights."""
        last_save_in_hf: bool = False
        """The last save writes Hugging Face safetensors (model only)."""
        export_dtype: Literal["float16", "bfloat16", "float32"] = "float32"
        """Dtype of the final model-only export."""
        async_mode: Literal["disabled", "async", "async_with_pinned_mem"] = "disabled"
        """Asynchronous checkpointing mode."""
        keep_latest_k: int = 10
        """Keep only the latest k checkpoints; 0 keeps all, 1 is not allowed."""
        load_step: int = -1
        """Step to load; -1 loads the latest."""
        exclude_from_loading: list[str] = field(default_factory=list)
        """State keys not to load, e.g. optimizer, lr_scheduler or dataloader."""
        enable_first_step_checkpoint: bool = False
        """Save a checkpoint right after the first step."""
        create_seed_checkpoint: bool = False
        """Build the unparallelised model on one device and save it as a seed checkpoint."""
        load_only: bool = False
        """Load checkpoints but never save."""

    def __init__(
        self,
        *,
        config: Config,
        dump_folder: str,
        states: dict[str, Any],
        model_parts: list[Any],
        sd_adapter: Any = None,
        export_config_json: dict[str, Any] | None = None,
        ft_manager: Any = None,
    ) -> None:
        """``states``: the Statefuls to checkpoint, by name (``model``, ``optimizer``,
        ``lr_scheduler``, ``dataloader``, ``train_state``); ``model`` defaults to a
        ``ModelState`` of ``model_parts``. ``sd_adapter`` maps the model's state dict to Hugging
        Face names and back (``to_hf`` / ``from_hf``); ``export_config_json`` becomes the
        ``config.json`` of a Hugging Face export."""
        if ft_manager is not None:
            raise NotBuildableError("fault-tolerant checkpointing is not supported by titan-train")
        from titan.components.checkpoint.folders import CheckpointFolders
        from titan.components.checkpoint.state import ModelState

        self.config = config
        self.states = dict(states)
        self.states.setdefault("model", ModelState(model_parts))
        self.sd_adapter = sd_adapter
        self.export_config_json = export_config_json
        self.folders = CheckpointFolders(os.path.join(dump_folder, config.folder))
        self.writer: Any = None
        self.loaded_from: str | None = None
        """The checkpoint folder ``load`` restored the run from (its own or the initial one)."""
        if not config.enable:
            return
        check_settings(config, states=self.states, sd_adapter=sd_adapter)
        if not config.load_only:
            from titan.components.checkpoint.writer import CheckpointWriter

            self.writer = CheckpointWriter(
                folders=self.folders,
                async_mode=config.async_mode,
                keep_latest_k=config.keep_latest_k,
            )

    def should_save(self, curr_step: int, *, last_step: bool = False) -> bool:
        """Whether ``save(curr_step, last_step=...)`` writes a checkpoint."""
        config = self.config
        if self.writer is None:
            return False
        if last_step or (curr_step == 1 and config.enable_first_step_checkpoint):
            return True
        return curr_step % config.interval == 0

    def save(self, curr_step: int, *, last_step: bool = False) -> None:
        """Save after step ``curr_step`` when it is due; at the last step, the export.

        Step 0 is the seed checkpoint (see ``save_seed``). A full save runs in the background
        under ``async_mode``; the last step's save is always finished before this returns.
        """
        if not self.should_save(curr_step, last_step=last_step):
            return
        if curr_step == 0:
            self.save_seed()
            return
        from titan.components.checkpoint.state import saved_states

        begin = time.monotonic()
        if last_step:
            what = self._save_last_step(curr_step)
        elif self.writer.async_mode == "disabled":
            self.writer.save(
                saved_states(self.states, model_only=False), step=curr_step, purge=True
            )
            what = "full checkpoint"
        else:
            self.writer.save_in_background(
                saved_states(self.states, model_only=False), step=curr_step
            )
            what = "full checkpoint, staged; writing it in the background"
        log.info(
            "checkpoint of step %d (%s) -> %s in %.2f s",
            curr_step,
            what,
            self.folders.step_path(curr_step),
            time.monotonic() - begin,
        )

    def save_seed(self) -> None:
        """Write ``step-0``: the freshly initialised model alone, in full precision.

        A later run with the same folder starts from it (``load`` reads step 0 as model-only),
        so every parallel layout starts from the same weights.
        """
        if self.writer is None:
            raise CheckpointError(SEED_NEEDS_SAVING)
        from titan.components.checkpoint.state import saved_states

        begin = time.monotonic()
        self.writer.save(saved_states(self.states, model_only=True), step=0, purge=False)
        log.info(
            "seed checkpoint (model only) -> %s in %.2f s",
            self.folders.step_path(0),
            time.monotonic() - begin,
        )

    def load(self, step: int = -1) -> bool:
        """Restore the run: its own latest checkpoint (or ``step``), else the initial load.

        Returns whether anything was loaded. A checkpoint of the run's own folder restores every
        state but ``exclude_from_loading`` (step 0, the seed, restores the model only); the
        initial load restores the model only unless ``initial_load_model_only`` is off. A
        ``step`` that the folder does not hold, or a step folder titan cannot load, is an error.
        """
        config = self.config
        if not config.enable:
            if step != -1:
                raise CheckpointError(load_when_disabled(step))
            return False
        from titan.components.checkpoint.resume import recover_and_choose

        if self.writer is not None:
            self.writer.wait()
        begin = time.monotonic()
        # Every rank must take the same branch below (each one enters the same collectives),
        # so rank 0's view of the folder decides, even where a file system lags between hosts;
        # a failure there is part of the verdict, so that no rank waits for a broadcast forever.
        point = _from_rank0(lambda: recover_and_choose(self.folders, load_step=step))
        if point.error is not None:
            raise CheckpointError(point.error)
        if point.step is not None:
            if config.initial_load_path:
                log.warning(
                    "checkpoint.initial_load_path is ignored: resuming from %s", self.folders.root
                )
            path = self._load_own(point)
            what = "seed checkpoint (model only)" if point.step == 0 else "checkpoint"
        elif config.initial_load_path or config.initial_load_in_hf:
            from titan.components.checkpoint.initial import initial_load

            path, what = initial_load(config, states=self.states, sd_adapter=self.sd_adapter)
        else:
            return False
        log.info("loaded %s from %s in %.2f s", what, path, time.monotonic() - begin)
        self.loaded_from = path
        return True

    def last_checkpoint(self) -> str | None:
        """The newest complete checkpoint folder of this run, or ``None`` (also when
        checkpointing is off)."""
        if not self.config.enable:
            return None
        steps = self.folders.checkpoint_steps()
        return self.folders.step_path(steps[-1]) if steps else None

    def save_on_stop(self, curr_step: int, *, last_step: bool = False) -> str | None:
        """A run stopped early (a signal) after ``curr_step``: make sure that step is saved.

        Waits for a background save in flight, then writes a full checkpoint of ``curr_step``
        unless the regular schedule just did. Returns the folder that now holds the newest
        checkpoint (``None`` when checkpointing is off or nothing was ever saved).
        """
        if self.writer is None:
            return self.last_checkpoint() if self.config.enable else None
        from titan.components.checkpoint.state import saved_states

        if not self.should_save(curr_step, last_step=last_step):
            begin = time.monotonic()
            self.writer.save(
                saved_states(self.states, model_only=False), step=curr_step, purge=True
            )
            log.info(
                "checkpoint of step %d (full checkpoint, the run is stopping) -> %s in %.2f s",
                curr_step,
                self.folders.step_path(curr_step),
                time.monotonic() - begin,
            )
        self.writer.wait()
        return self.last_checkpoint()

    def maybe_wait_for_staging(self) -> None:
        """Call before the optimizer changes the weights: waits until a background save has
        its own copy of them (a no-op unless ``async_with_pinned_mem``); also raises if an
        earlier background save failed."""
        if self.writer is not None:
            self.writer.wait_for_staging()

    def close(self, *, wait_for_peers: bool = True) -> None:
        """Finish (and publish) the pending background save.

        ``wait_for_peers=False`` after a failure: no collective, since peers may be gone.
        """
        if self.writer is not None:
            self.writer.close(wait_for_peers=wait_for_peers)

    def _load_own(self, point: Any) -> str:
        """Load step ``point.step`` of the run's own folder; a damaged one names the way back."""
        from titan.components.checkpoint.resume import damaged_hint, unsafe_hint
        from titan.components.checkpoint.state import load_dcp

        path = self.folders.step_path(point.step)
        hint = (
            "; load an earlier step with checkpoint.load_step, or start a new run from it with "
            "checkpoint.initial_load_path"
        )
        try:
            load_dcp(
                path,
                self.states,
                model_only=point.step == 0,
                exclude=self.config.exclude_from_loading,
                hint=hint,
            )
        except DamagedCheckpoint as error:
            raise DamagedCheckpoint(f"{error}{damaged_hint(self.folders, point)}") from None
        except UnsafeCheckpoint as error:
            raise UnsafeCheckpoint(f"{error}{unsafe_hint(self.folders, point)}") from None
        return path

    def _save_last_step(self, step: int) -> str:
        import torch

        from titan.components.checkpoint.state import saved_states

        config = self.config
        dtype = getattr(torch, config.export_dtype)
        if config.last_save_in_hf:
            from titan.components.checkpoint.hf import write_hf

            model_state = self.states["model"]
            self.writer.save_files(
                lambda path: write_hf(
                    path,
                    model_state,
                    sd_adapter=self.sd_adapter,
                    dtype=dtype,
                    config_json=self.export_config_json,
                ),
                step=step,
            )
            return f"model only, Hugging Face safetensors in {config.export_dtype}"
        if config.last_save_model_only:
            states = saved_states(self.states, model_only=True, dtype=dtype)
            self.writer.save(states, step=step, purge=False)
            return f"model only, in {config.export_dtype}"
        self.writer.save(saved_states(self.states, model_only=False), step=step, purge=False)
        return "full checkpoint"


def _from_rank0(compute: Any) -> Any:
    """``compute()`` on rank 0, broadcast to every rank."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return compute()
    value = [compute() if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(value, src=0)
    return value[0]

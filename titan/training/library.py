"""The trainer as a library: what an RL controller calls between its own rollouts.

``forward_backward`` (any number of times) accumulates gradients, ``optim_step`` applies them;
``save_checkpoint`` / ``load_checkpoint`` go through the run's checkpointer;
``model_state_dict`` gathers the full weights for a generator. Every rank of the job makes the
same calls in the same order (each one runs collectives). ``Trainer.train`` runs the same steps
(``titan.training.step_api``), so both paths give the same weights bit for bit.

Pipeline parallel stays with ``train``: its schedule owns forward and backward, and the library
calls refuse it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# torch is imported inside the methods: titan.trainer (which mixes this in) is read by config
# tools that never pay for torch.


class TrainerLibrary:
    """``forward_backward``, ``optim_step``, checkpoints, ``model_state_dict``, ``close`` and
    the context-manager protocol, on a built trainer (``self.parts``, ``self.config``)."""

    parts: Any
    config: Any
    step: int
    finished: bool
    _closed: bool = False
    _pending: int = 0
    """Micro-batches run since the last optimizer step."""
    _pending_tokens: int = 0
    """Their valid tokens over every data-parallel rank."""
    _library_used: bool = False
    """Whether a library call ran: closing then waits for the other ranks, which make the same
    calls."""

    # ------------------------------------------------------------------ steps

    def forward_backward(
        self,
        microbatches: Sequence[Any],
        *,
        num_global_valid_tokens: int | None = None,
        loss_fn: Any = None,
    ) -> Any:
        """Forward and backward of ``microbatches``, accumulating gradients (call it any number
        of times before ``optim_step``; the first call of a step starts from zero gradients);
        returns ``StepMetrics``.

        Each item is a ``Microbatch`` or an ``(inputs, labels)`` pair as ``train`` uses. Each
        micro-batch's loss is divided by ``num_global_valid_tokens``, the valid tokens of the
        whole step over every data-parallel rank; left out, it is this call's own count,
        summed over the data-parallel ranks. ``loss_fn(logits, microbatch)``, when given,
        returns the sum of the per-token losses of the micro-batch's valid tokens (the default
        is the run's cross entropy). Not under pipeline parallel, nor with a custom
        ``loss_fn`` under context parallel.

        Token ids and labels outside the vocabulary, and ranks holding different numbers of
        micro-batches, are refused (``TrainerUsageError``) on every rank before any forward.
        """
        return self._forward_backward(
            "forward_backward",
            microbatches,
            num_global_valid_tokens=num_global_valid_tokens,
            loss_fn=loss_fn,
        )

    def _forward_backward(
        self,
        call: str,
        microbatches: Sequence[Any],
        *,
        num_global_valid_tokens: int | None = None,
        loss_fn: Any = None,
    ) -> Any:
        """``forward_backward``, its refusals spoken in the name of ``call`` (the public call
        that received the micro-batches)."""
        import torch
        import torch.distributed as dist

        from titan.distributed.reductions import dist_sum
        from titan.training import step_api as api

        self._usable(call)
        parts = self.parts
        try:
            batches, local_valid = self._checked(microbatches, num_global_valid_tokens, loss_fn)
            refused = None
        except api.TrainerUsageError as error:
            batches, local_valid, refused = [], [], error
        # Every rank learns every rank's micro-batch count and refusal first: then all refuse
        # together before the forward's collectives, instead of the others waiting in them.
        self._agree(call, len(batches), refused)
        # The valid tokens, summed over the data-parallel ranks. float64: a float32 sum stops
        # counting exactly past 2**24 tokens.
        mesh = api.loss_mesh(parts)
        counts = torch.tensor([float(sum(local_valid))], dtype=torch.float64, device=parts.device)
        if mesh is not None:
            dist.all_reduce(counts, op=dist.ReduceOp.SUM, group=mesh.get_group())
        valid_tokens = int(counts.item())
        if num_global_valid_tokens is None:
            num_global_valid_tokens = valid_tokens
        if num_global_valid_tokens < valid_tokens:
            raise api.TrainerUsageError(
                f"num_global_valid_tokens is {num_global_valid_tokens}, but these micro-batches "
                f"alone hold {valid_tokens} valid tokens over the data-parallel ranks; it must "
                "count every valid token of the step"
            )
        if not self._pending:
            # The step's first call drops the previous step's gradients, as train() does at
            # the start of each step: freeing them right after the update instead costs ~4,000
            # page faults a step on CPU (the allocator returns them, the forward maps them again).
            parts.optimizers.zero_grad()
        losses = api.accumulate(
            parts,
            batches,
            local_valid=local_valid,
            num_global_valid_tokens=num_global_valid_tokens,
            loss_fn=loss_fn,
        )
        self._pending += len(batches)
        self._pending_tokens += valid_tokens
        total = torch.stack([_local(loss) for loss in losses]).sum()
        return api.StepMetrics(
            loss=dist_sum(total, mesh) / api.loss_mesh_size(parts),
            valid_tokens=valid_tokens,
            num_global_valid_tokens=num_global_valid_tokens,
            microbatches=len(batches),
        )

    def _checked(
        self, microbatches: Any, num_global_valid_tokens: Any, loss_fn: Any
    ) -> tuple[list[Any], list[int]]:
        """This rank's micro-batches, checked and on the device, and their valid tokens;
        ``TrainerUsageError`` for anything ``forward_backward`` cannot run."""
        from titan.training import step_api as api

        parts = self.parts
        api.check_microbatch_list(microbatches)
        api.check_count("num_global_valid_tokens", num_global_valid_tokens)
        if loss_fn is not None and not callable(loss_fn):
            raise api.TrainerUsageError(f"loss_fn must be callable, not {type(loss_fn).__name__}")
        if loss_fn is not None and parts.parallel_dims.cp_enabled:
            raise api.TrainerUsageError(
                "a custom loss_fn is not supported under context parallel (each rank sees a "
                "share of the sequence); use the run's loss or cp = 1"
            )
        vocab_size = api.vocab_size_of(self.config)
        batches = []
        for index, item in enumerate(microbatches):
            batch = api.as_microbatch(item, index)
            api.check_token_range(batch, index, vocab_size)
            api.check_sequence(parts, batch, index)
            batches.append(api.to_device(batch, parts.device))
        return batches, [api.local_valid_tokens(parts, batch.labels) for batch in batches]

    def _agree(self, call: str, count: int, refused: Any) -> None:
        """Every rank's micro-batch count and refusal, gathered over the job: this rank's own
        refusal, the others', or different counts (each rank's named) raise on every rank, so
        no rank waits in a collective the others never reach."""
        import torch
        import torch.distributed as dist

        from titan.training import step_api as api

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            api.raise_refusals(call, refused, 0)
            return
        mine = torch.tensor([count, int(refused is not None)], dtype=torch.int64)
        mine = mine.to(self.parts.device)
        every = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(every, mine)
        counts, refusals = zip(*(tuple(int(x) for x in t.tolist()) for t in every), strict=True)
        api.raise_refusals(call, refused, sum(refusals))
        if len(set(counts)) > 1:
            each = ", ".join(f"rank {r}: {n}" for r, n in enumerate(counts))
            raise api.TrainerUsageError(
                f"{call}: the ranks hold different numbers of micro-batches "
                f"({each}); every rank must pass the same number in each call (their forwards "
                "and backwards run collectives together); no rank ran this call"
            )

    def optim_step(self) -> Any:
        """Apply the accumulated gradients; returns ``OptimStepOutput``.

        Clips the gradient norm to ``training.max_norm``, steps the optimizer (the model
        converters' post-optimizer hooks, e.g. float8's, run inside it) and the LR schedule,
        and adds one to the policy version (the run's step). The next step's first
        ``forward_backward`` starts from zero gradients. A non-finite
        gradient norm drops the gradients and raises ``NonFiniteLoss`` before the update, unless
        ``training.on_nonfinite_loss = "warn"``.
        """
        import torch

        from titan.training import step_api as api
        from titan.training.stopping import NonFiniteLoss

        self._usable("optim_step")
        if not self._pending:
            raise api.TrainerUsageError(
                "optim_step: there are no gradients to apply; call forward_backward first"
            )
        parts = self.parts
        grad_norm = api.clip_gradients(parts)
        norm = float(_local(grad_norm))
        tokens, self._pending, self._pending_tokens = self._pending_tokens, 0, 0
        if not torch.isfinite(torch.tensor(norm)):
            if self.config.training.on_nonfinite_loss != "warn":
                parts.optimizers.zero_grad()
                raise NonFiniteLoss(
                    f"optim_step: the gradient norm is {norm}; the gradients were dropped and "
                    f"the weights are those of policy version {parts.train_state.step}. "
                    "training.on_nonfinite_loss = 'warn' applies such updates regardless"
                )
            parts.log.warning("optim_step: the gradient norm is %s; applying it anyway", norm)
        lr = api.apply_update(parts)
        parts.train_state.step += 1
        parts.train_state.ntokens_seen += tokens
        self.step = parts.train_state.step
        return api.OptimStepOutput(
            policy_version=self.step,
            metrics={"grad_norm": norm, "lr": float(lr), "tokens": float(tokens)},
        )

    @property
    def policy_version(self) -> int:
        """Optimizer steps taken so far (restored by ``load_checkpoint``)."""
        return self.parts.train_state.step

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(self, *, step: int, last_step: bool = False) -> bool:
        """Save through the run's checkpointer when ``step`` is due (``checkpoint.interval``,
        the first step under ``enable_first_step_checkpoint``, or ``last_step``, which also
        writes the export); returns whether it saved. Every rank must call it."""
        from titan.training import step_api as api

        self._usable("save_checkpoint")
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise api.TrainerUsageError(f"save_checkpoint: step must be an int >= 1, not {step!r}")
        checkpointer = self.parts.checkpointer
        due = checkpointer.should_save(step, last_step=last_step)
        checkpointer.save(step, last_step=last_step)
        return due

    def load_checkpoint(
        self, *, step: int | None = None, path: str | None = None, model_only: bool = False
    ) -> bool:
        """Restore a checkpoint; returns whether anything was loaded.

        Without ``path``: this run's own checkpoint of ``step`` (None: the newest, else the
        initial load, as ``train`` resumes). With ``path``: that DCP step folder, every state
        (``model_only``: the weights alone). The policy version becomes the loaded step.
        """
        from titan.training import step_api as api

        self._usable("load_checkpoint")
        if step is not None and path is not None:
            raise api.TrainerUsageError("load_checkpoint takes step or path, not both")
        parts = self.parts
        if path is None:
            if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
                raise api.TrainerUsageError(f"load_checkpoint: step must be an int, not {step!r}")
            loaded = parts.checkpointer.load(step=-1 if step is None else step)
        else:
            from titan.components.checkpoint.state import load_dcp

            load_dcp(str(path), parts.checkpointer.states, model_only=model_only, exclude=[])
            loaded = True
        self.step = parts.train_state.step
        self._pending = self._pending_tokens = 0
        parts.optimizers.zero_grad()
        return loaded

    # ------------------------------------------------------------------ weights

    def model_state_dict(self, *, dtype: Any = None, hf_names: bool = False) -> dict[str, Any]:
        """The full (unsharded) weights, on **every rank**, on the training device.

        Shards of FSDP, TP and EP are gathered (a collective: every rank must call it).
        ``dtype`` casts the parameters; buffers keep their own dtype (as a generator registers
        them). ``hf_names`` renames and reshapes them through the family's Hugging Face
        state-dict adapter.
        """
        from titan.training.library_weights import full_state_dict

        self._usable("model_state_dict")
        return full_state_dict(self.parts, dtype=dtype, hf_names=hf_names)

    # ------------------------------------------------------------------ lifetime

    def close(self, *, wait_for_peers: bool | None = None) -> None:
        """Finish pending checkpoint saves, close the metric sinks and the process group.

        ``wait_for_peers`` (default: when ``train`` ended on every rank together, or the
        library calls were used) waits for the other ranks before the process group ends;
        after a failure pass False, as they may never arrive. Closing twice does nothing; any
        other call after it is refused.
        """
        if self._closed:
            return
        self._closed = True
        if wait_for_peers is None:
            wait_for_peers = self.finished or self._library_used
        self.parts.close(finished=wait_for_peers)

    def __enter__(self) -> Any:
        """The trainer itself; leaving the block closes it."""
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        """Close; after an error, without waiting for the other ranks (they may have failed)."""
        # Leaving the block normally is every rank's agreed end, so closing waits for the others.
        self.close(wait_for_peers=kind is None)

    def _usable(self, call: str) -> None:
        """Refuse ``call`` on a closed trainer or under pipeline parallel."""
        from titan.training.step_api import TrainerUsageError

        if self._closed:
            raise TrainerUsageError(f"{call}: the trainer is closed")
        if self.parts.pipeline_step is not None:
            raise TrainerUsageError(
                f"{call}: the library calls do not run under pipeline parallel (its schedule "
                "runs forward and backward); use train(), or parallelism.pipeline_parallel_degree "
                "= 1"
            )
        self._library_used = True


def _local(value: Any) -> Any:
    """A plain tensor of ``value`` (a loss-parallel loss or a TP norm is a DTensor)."""
    from torch.distributed.tensor import DTensor

    return value.full_tensor() if isinstance(value, DTensor) else value


__all__ = ["TrainerLibrary"]

"""``PolicyTrainer``: the trainer an RL controller drives, with the GRPO clipped loss.

Its config is a ``Trainer.Config`` with the policy loss (``clip_eps``, ``loss_mean``) and the
dtype of the weights it pushes to a generator (``generator_dtype``). Its rules
(``titan.schemas.policy_rules``: a generator dtype, no loss parallel under TP, no pipeline
parallel) are reported by ``titan-validate --config`` and refused when the trainer is built.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

from titan.schemas.ranges import Range
from titan.trainer import Trainer

GENERATOR_TORCH_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}
"""``generator_dtype`` -> the name of its ``torch`` dtype."""


class PolicyTrainer(Trainer):
    """A ``Trainer`` whose ``forward_backward`` runs the GRPO clipped policy-gradient loss on
    micro-batches carrying the generator's log-probabilities and the advantages
    (``titan.rl.policy_microbatch``), and whose ``push_model_state_dict`` hands the weights, in
    the generator's dtype, to a folder of versioned snapshots or to a callable."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Trainer.Config):
        """A policy trainer's run: a ``Trainer.Config`` and the policy loss."""

        _ranges: ClassVar[dict[str, Any]] = {
            "clip_eps": Range(gt=0, finite=True),
            "keep_snapshots": Range(ge=1),
        }
        clip_eps: float = 0.2
        """The ratio of new to generator probability is clipped to ``1 ± clip_eps``."""
        loss_mean: Literal["token", "sequence"] = "token"
        """``token``: mean over every valid token of the step; ``sequence``: each sequence's
        token mean, averaged over the sequences."""
        generator_dtype: str = "bfloat16"
        """The dtype the pushed weights are cast to: bfloat16, float16 or float32 (buffers keep
        their own)."""
        keep_snapshots: int = 2
        """Versions a snapshot folder keeps (the newest always)."""

        def rule_findings(self, locate: Callable[[str], Any]) -> list[Any]:
            """The policy rules' findings (``titan.schemas.policy_rules``) on this config."""
            from titan.schemas.policy_rules import PolicyFacts, check_policy
            from titan.schemas.rule_facts import Setting

            def setting(path: str) -> Setting:
                """The value at ``path`` with where it is written."""
                node: Any = self
                for part in path.split("."):
                    node = getattr(node, part)
                return Setting(node, path, locate(path))

            return check_policy(
                PolicyFacts(
                    tp=setting("parallelism.tensor_parallel_degree"),
                    pp=setting("parallelism.pipeline_parallel_degree"),
                    disable_loss_parallel=setting("parallelism.disable_loss_parallel"),
                    generator_dtype=setting("generator_dtype"),
                )
            )

    config: Config

    @classmethod
    def config_of(cls, base: Any, **policy: Any) -> Config:
        """A ``PolicyTrainer.Config`` holding every section of the ``Trainer.Config``
        ``base`` (from ``trainer_config`` or a registry function) and the ``policy`` fields."""
        sections = {field.name: getattr(base, field.name) for field in dataclasses.fields(base)}
        return cls.Config(**sections, **policy)

    def forward_backward(
        self,
        microbatches: Sequence[Any],
        *,
        num_global_valid_tokens: int | None = None,
        num_global_sequences: int | None = None,
        loss_fn: Any = None,
    ) -> Any:
        """The GRPO loss's forward and backward (see ``Trainer.forward_backward``); every
        micro-batch carries ``advantages`` and ``generator_logprobs``
        (``titan.rl.policy_microbatch``). Under ``loss_mean = "sequence"`` the losses are
        divided by ``num_global_sequences``, the sequences (with a valid token) of the whole
        step over every data-parallel rank; left out, this call's own count. A ``loss_fn``
        given replaces the GRPO loss; ``cross_entropy_step`` runs the run's cross entropy."""
        from titan.rl.grpo import GRPOLoss
        from titan.training import step_api as api

        if loss_fn is not None:  # the caller's loss: the base step, with its checks
            return Trainer.forward_backward(
                self, microbatches, num_global_valid_tokens=num_global_valid_tokens, loss_fn=loss_fn
            )
        self._usable("forward_backward")
        refused: api.TrainerUsageError | None = None
        batches: list[Any] = []
        try:
            api.check_count("num_global_sequences", num_global_sequences)
            api.check_count("num_global_valid_tokens", num_global_valid_tokens)
            batches = self._checked_policy(microbatches)
        except api.TrainerUsageError as error:
            refused, batches = error, []
        # Every rank learns every rank's micro-batch count and refusal first: then all refuse
        # together before the forward's collectives rather than waiting in them.
        self._agree("forward_backward", len(batches), refused)
        tokens, sequences = self._global_counts(batches)
        if num_global_sequences is not None and num_global_sequences < sequences:
            raise api.TrainerUsageError(
                f"num_global_sequences is {num_global_sequences}, but these micro-batches alone "
                f"hold {sequences} sequences over the data-parallel ranks"
            )
        loss = GRPOLoss(
            clip_eps=self.config.clip_eps,
            loss_mean=self.config.loss_mean,
            num_global_valid_tokens=num_global_valid_tokens or tokens,
            num_global_sequences=num_global_sequences or sequences,
        )
        return Trainer.forward_backward(
            self, batches, num_global_valid_tokens=num_global_valid_tokens, loss_fn=loss
        )

    def cross_entropy_step(self, microbatches: Sequence[Any], **kwargs: Any) -> Any:
        """``Trainer.forward_backward`` with the run's cross entropy (supervised warm-up, or
        a loss-parity check); token ids and labels outside the vocabulary, and ranks holding
        different numbers of micro-batches, are refused on every rank first."""
        return self._forward_backward("cross_entropy_step", microbatches, **kwargs)

    def _checked_policy(self, microbatches: Any) -> list[Any]:
        """The micro-batches as checked ``Microbatch``es (``titan.rl.batch_checks``: token
        ranges, the GRPO fields and a token whose loss counts)."""
        from titan.rl import batch_checks
        from titan.training import step_api as api

        api.check_microbatch_list(microbatches)
        vocab = batch_checks.vocab_size_of(self.config)
        batches = []
        for index, item in enumerate(microbatches):
            batch = api.as_microbatch(item, index)
            batch_checks.check_all(batch, index, vocab_size=vocab, policy=True)
            batches.append(batch)
        return batches

    def _global_counts(self, batches: Sequence[Any]) -> tuple[int, int]:
        """Valid tokens and sequences with at least one, summed over the data-parallel
        ranks."""
        import torch
        import torch.distributed as dist

        from titan.rl.batch_checks import valid_tokens
        from titan.training import step_api as api

        tokens = sequences = 0
        for batch in batches:
            valid = valid_tokens(batch)
            tokens += int(valid.sum())
            sequences += int(valid.any(dim=1).sum())
        mesh = api.loss_mesh(self.parts)
        if mesh is None:
            return tokens, sequences
        # float64: a float32 sum stops counting exactly past 2**24 tokens.
        counts = torch.tensor(
            [float(tokens), float(sequences)], dtype=torch.float64, device=self.parts.device
        )
        dist.all_reduce(counts, group=mesh.get_group())
        total_tokens, total_sequences = (int(x) for x in counts.tolist())
        return total_tokens, total_sequences

    def push_model_state_dict(
        self,
        target: str | os.PathLike[str] | Callable[[dict[str, Any]], Any],
        *,
        version: int | None = None,
    ) -> Any:
        """Hand the full weights, cast to ``generator_dtype`` with Hugging Face names, to
        ``target``: a folder receives snapshot ``v<policy_version>`` (``titan.rl.snapshots``,
        rank 0 writes; returns its path; ``version`` names another version), a callable is called with the state dict on every
        rank (returns what it returns). Every rank must call it (the gather is a collective)."""
        import torch
        import torch.distributed as dist

        from titan.rl import snapshots
        from titan.training.step_api import TrainerUsageError

        dtype = getattr(torch, GENERATOR_TORCH_DTYPES[self.config.generator_dtype])
        if not (callable(target) or isinstance(target, str | os.PathLike)):
            raise TrainerUsageError(
                "push_model_state_dict: target must be a folder path or a callable, not "
                f"{type(target).__name__}"
            )
        state = self.model_state_dict(dtype=dtype, hf_names=True)
        if callable(target):
            return target(state)
        if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
            return None
        adapter = getattr(self.parts.checkpointer, "sd_adapter", None)
        describe = getattr(adapter, "config_json", None)
        config_json = describe(torch_dtype=self.config.generator_dtype) if describe else None
        return snapshots.push(
            state,
            target,
            self.policy_version if version is None else version,
            keep=self.config.keep_snapshots,
            config_json=config_json,
        )


__all__ = ["PolicyTrainer"]

"""A plain-torch generator that samples from the weights a ``PolicyTrainer`` pushes.

The sampler owns its own copy of the model (never the trainer's module): ``refresh`` reads the
newest snapshot of the weights folder (``titan.rl.snapshots``: safetensors with Hugging Face
names), maps the names back through the family's state-dict adapter and loads them. What it
samples therefore comes from the pushed weights only, as it would in a separate inference
server.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from titan.rl import snapshots


@dataclass(frozen=True)
class Samples:
    """A batch of completions: ``tokens`` [n, prompt + new] (prompt then completion),
    ``completion`` [n, new] and the sampler's log-probability of each completion token
    (``logprobs`` [n, new]), sampled by the weights of ``version``."""

    tokens: torch.Tensor
    completion: torch.Tensor
    logprobs: torch.Tensor
    version: int


class SnapshotSampler:
    """Temperature sampling from the newest weight snapshot in a folder."""

    def __init__(self, trainer_config: Any, folder: str, *, seed: int) -> None:
        """A model of ``trainer_config``'s flavor (built on the CPU, weights loaded by
        ``refresh``) reading snapshots from ``folder``; ``seed`` seeds the sampling."""
        spec = trainer_config.model_spec
        self.model_config = copy.deepcopy(spec.model)
        adapter_class = spec.resolve("state_dict_adapter")
        self.adapter = adapter_class(model_config=self.model_config, hf_assets_path=None)
        with torch.device("cpu"):
            self.model = self.model_config.build()
        self.model.eval().requires_grad_(False)
        self.folder = folder
        self.version: int | None = None
        self.generator = torch.Generator().manual_seed(seed)

    def refresh(self) -> int:
        """Load the newest complete snapshot unless it is already loaded; returns its version."""
        newest = snapshots.latest_version(self.folder)
        if newest is None:
            raise snapshots.SnapshotError(f"{self.folder} holds no weight snapshot yet")
        if newest != self.version:
            hf_state = snapshots.load(self.folder, newest)
            state = self.adapter.from_hf(hf_state)
            # strict: a name the adapter did not map, or one it missed, is an error here.
            self.model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
            self.version = newest
        return newest

    @torch.no_grad()
    def sample(self, prompts: torch.Tensor, *, new_tokens: int, temperature: float) -> Samples:
        """``new_tokens`` tokens after each row of ``prompts`` [n, prompt], drawn one at a time
        from ``softmax(logits / temperature)`` (no cache: the sequences are short)."""
        if self.version is None:
            raise snapshots.SnapshotError("refresh() before sampling: no weights are loaded")
        tokens = prompts.clone()
        picked, logprobs = [], []
        for _ in range(new_tokens):
            logits = self.model(tokens)[:, -1, :].float() / temperature
            log_probs = torch.log_softmax(logits, dim=-1)
            token = torch.multinomial(log_probs.exp(), 1, generator=self.generator)
            picked.append(token)
            # The log-probability of the policy itself (temperature 1): the trainer's ratio
            # compares against the same distribution it computes.
            logprobs.append(torch.log_softmax(logits * temperature, dim=-1).gather(-1, token))
            tokens = torch.cat([tokens, token], dim=1)
        return Samples(
            tokens=tokens,
            completion=torch.cat(picked, dim=1),
            logprobs=torch.cat(logprobs, dim=1),
            version=self.version,
        )


__all__ = ["Samples", "SnapshotSampler"]

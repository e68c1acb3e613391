"""Reinforcement learning on titan's trainer: the policy trainer with the GRPO loss
(``PolicyTrainer``), versioned weight snapshots for a generator (``snapshots``) and a
TorchForge-style actor on legacy config sections (``TitanTrainer``).

Importing this package imports torch lazily: the names load on first use.
"""

from __future__ import annotations

from typing import Any

_NAMES = {
    "PolicyTrainer": "titan.rl.policy_trainer",
    "TitanTrainer": "titan.rl.forge_actor",
    "policy_microbatch": "titan.rl.grpo",
    "GRPOLoss": "titan.rl.grpo",
}


def __getattr__(name: str) -> Any:
    """Import the module that defines ``name`` on first use."""
    import importlib

    if name not in _NAMES:
        raise AttributeError(f"module 'titan.rl' has no attribute {name!r}")
    return getattr(importlib.import_module(_NAMES[name]), name)


__all__ = sorted(_NAMES)

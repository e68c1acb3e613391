"""The parts every family's ``model_registry`` shares: flavor lookup, errors, capabilities."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping

from titan.protocols.model_spec import Capabilities, ModelSpec
from titan.protocols.module import BaseModel


def close_names(name: str, known: Iterable[str]) -> list[str]:
    """Up to three of ``known`` that look like ``name`` (case is ignored: ``8b`` finds ``8B``)."""
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)
    return [by_lower[c] for c in close]


def unknown_name(kind: str, name: str, known: Iterable[str]) -> ValueError:
    """The error for a ``kind`` (``"llama3 flavor"``, ``"model family"``) that does not exist."""
    known = list(known)
    close = close_names(name, known)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return ValueError(f"unknown {kind} {name!r}{hint} (known: {', '.join(known)})")


def deferred_training(family: str) -> str:
    """The training refusal of a family titan-train cannot train (flux)."""
    return (
        f"titan-train does not train {family} yet (it trains the language models: llama3, "
        f"llama4, qwen3, deepseek_v3 and gpt_oss); {family} configs can still be migrated, "
        "validated and compared"
    )


def flavor_model_spec(
    family: str,
    name: str,
    *,
    flavors: Mapping[str, Callable[[], BaseModel.Config]],
    capabilities: Capabilities,
    build_loss_fn: str | None = None,
    parallelize_fn: str | None = None,
    pipelining_fn: str | None = None,
    post_optimizer_build_fn: str | None = None,
    state_dict_adapter: str | None = None,
) -> ModelSpec:
    """A fresh ``ModelSpec`` for flavor ``name``, its config tree built by the family's
    ``flavors`` factory of that name; ``ValueError`` naming the flavors if there is none.

    The ``*_fn`` and ``state_dict_adapter`` import paths are left ``None`` by a family whose
    training has not landed.
    """
    factory = flavors.get(name)
    if factory is None:
        raise unknown_name(f"{family} flavor", name, flavors)
    return ModelSpec(
        name=family,
        flavor=name,
        model=factory(),
        capabilities=capabilities,
        build_loss_fn=build_loss_fn,
        parallelize_fn=parallelize_fn,
        pipelining_fn=pipelining_fn,
        post_optimizer_build_fn=post_optimizer_build_fn,
        state_dict_adapter=state_dict_adapter,
    )

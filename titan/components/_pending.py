"""The message a component gives while its implementation has not landed."""

from __future__ import annotations

from titan.config.configurable import NotBuildableError


def not_yet(component: str) -> NotBuildableError:
    """The error a component's constructor raises until titan-train implements it."""
    return NotBuildableError(
        f"{component} is configured here but built only by titan-train, which is not part of "
        "this titan yet; the config itself is complete and can be validated, diffed and saved"
    )

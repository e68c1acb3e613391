"""The message of a component whose config titan reads but whose training titan-train lacks."""

from __future__ import annotations

from titan.config.configurable import NotBuildableError


def not_yet(component: str, *, what: str | None = None) -> NotBuildableError:
    """The error a component's constructor raises while titan-train cannot run it."""
    subject = f"{what} ({component})" if what else component
    return NotBuildableError(
        f"{subject} is not supported by titan-train yet; the config itself is complete and can "
        "be validated, diffed and migrated"
    )

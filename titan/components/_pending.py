"""The message of a component whose config titan reads but whose training titan-train lacks."""

from __future__ import annotations

from titan.config.configurable import NotBuildableError


def not_yet(
    component: str, *, what: str | None = None, fix: str | None = None
) -> NotBuildableError:
    """The error a component's constructor raises while titan-train cannot run it.

    ``what`` names the feature in the user's words; ``fix`` says what to change to train anyway.
    """
    subject = f"{what} ({component})" if what else component
    fix = f"{fix}; " if fix else ""
    return NotBuildableError(
        f"{subject} is not supported by titan-train yet; {fix}the config itself is complete and "
        "can be validated, diffed and migrated"
    )

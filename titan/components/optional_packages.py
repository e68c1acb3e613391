"""Optional packages a component needs only when a setting turns it on."""

from __future__ import annotations

import importlib.util

from titan.config.configurable import NotBuildableError


class MissingPackageError(NotBuildableError, ImportError):
    """A setting needs a package that is not installed; the message says how to install it.

    A ``NotBuildableError`` so ``titan-train`` shows it as a user error, and an ``ImportError``
    for callers that test for missing imports.
    """


def require_package(package: str, *, needed_for: str, install: str) -> None:
    """Raise ``MissingPackageError`` unless ``package`` can be imported."""
    if importlib.util.find_spec(package) is None:
        raise MissingPackageError(
            f"{needed_for} needs the {package} package, which is not installed; "
            f"install it with: {install}"
        )

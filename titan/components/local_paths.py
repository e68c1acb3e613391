"""Relative paths to the files that ship with titan's repository (test corpus, tokenizer).

The debug configs name them relative to the repository (``./tests/assets/tokenizer``), which only
works from its root. A relative path that does not exist under the working directory is also
looked up under the checkout titan was imported from (an editable install), and then among
the copies a wheel installs as the package ``titan.assets`` (the tokenizer and the ``c4_test``
documents), so the debug configs run from any folder, with or without a checkout. Torch-free.
"""

from __future__ import annotations

from pathlib import Path

# The checkout this titan was imported from, where tests/assets lives.
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]

SHIPPED = ("tests", "assets")
"""Where the shipped files live in the checkout; a wheel installs that folder as
``titan/assets``."""
INSTALLED_ASSETS = Path(__file__).resolve().parents[1] / "assets"


def existing_path(path: str) -> Path | None:
    """``path`` under the current folder, else under the repository root; None when in neither."""
    given = Path(path).expanduser()
    if given.exists():
        return given
    if given.is_absolute():
        return None
    if (REPOSITORY_ROOT / given).exists():
        return REPOSITORY_ROOT / given
    parts = given.parts[1:] if given.parts[:1] == (".",) else given.parts
    if tuple(parts[:2]) == SHIPPED and (INSTALLED_ASSETS.joinpath(*parts[2:])).exists():
        return INSTALLED_ASSETS.joinpath(*parts[2:])
    return None

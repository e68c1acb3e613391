"""Relative paths to the files that ship with titan's repository (test corpus, tokenizer).

The debug configs name them relative to the repository (``./tests/assets/tokenizer``), which only
works from its root. A relative path that does not exist under the working directory is also
looked up under the checkout titan was imported from (an editable install), so the debug
configs run from any folder. Torch-free.
"""

from __future__ import annotations

from pathlib import Path

# The checkout this titan was imported from, where tests/assets lives.
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]


def existing_path(path: str) -> Path | None:
    """``path`` under the current folder, else under the repository root; None when in neither."""
    given = Path(path).expanduser()
    if given.exists():
        return given
    if not given.is_absolute() and (REPOSITORY_ROOT / given).exists():
        return REPOSITORY_ROOT / given
    return None

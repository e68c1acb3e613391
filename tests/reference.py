"""Readers for ``../shared`` (the reference tables and the upstream corpus), shared by the tests.

CI clones the repository with ``shared/`` beside it; elsewhere the tests that need it skip.
"""

from __future__ import annotations

import ast
import dataclasses
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SCHEMA_MD = SHARED / "reference" / "schema_v022.md"
CORPUS = SHARED / "corpus" / "torchtitan-v0.2.2"
CUSTOM_HEADING = "## Sections added by the shipped custom config modules"
_ROW = re.compile(r"^\| ([a-z_][a-z0-9_.]*) \| `(.+?)` \| `(.+?)` \|", re.MULTILINE)


@dataclasses.dataclass(frozen=True)
class ReferenceKey:
    """One row of a reference table."""

    path: str
    type: str
    default: object


def _row(match: re.Match) -> ReferenceKey:
    type_text = match.group(2).replace("\\|", "|")
    return ReferenceKey(match.group(1), type_text, ast.literal_eval(match.group(3)))


def require(path: Path) -> None:
    """Skip when ``path`` (under shared/) is absent; under CI, where shared/ is promised, fail."""
    if path.exists():
        return
    message = f"{path} is not here (shared/ is not beside the repository)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def reference_keys() -> dict[str, ReferenceKey]:
    """The 149 base keys of schema_v022.md (skips the test when shared/ is absent)."""
    require(SCHEMA_MD)
    base = SCHEMA_MD.read_text(encoding="utf-8").partition(CUSTOM_HEADING)[0]
    return {row.path: row for row in map(_row, _ROW.finditer(base))}


def extension_keys() -> dict[str, tuple[ReferenceKey, str]]:
    """Rows of the custom-module table: path -> (key, module short name)."""
    require(SCHEMA_MD)
    custom = SCHEMA_MD.read_text(encoding="utf-8").partition(CUSTOM_HEADING)[2]
    rows = re.finditer(
        r"^\| ([a-z_][a-z0-9_.]*) \| `(.+?)` \| `(.+?)` \| (\w+)", custom, re.MULTILINE
    )
    return {m.group(1): (_row(m), m.group(4)) for m in rows}


def corpus_files() -> list[Path]:
    """Every upstream v0.2.2 TOML (skips the test when the corpus is absent)."""
    require(CORPUS)
    return sorted(CORPUS.rglob("*.toml"))


def corpus_files_if_present() -> list[Path]:
    """The upstream v0.2.2 TOMLs, or none when the corpus is absent (for tests that also check
    the project's own files and should not skip them); under CI a missing corpus still fails."""
    if not CORPUS.exists() and not os.environ.get("CI"):
        return []
    return corpus_files()

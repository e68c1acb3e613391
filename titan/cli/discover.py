"""Which files ``titan-validate PATH...`` checks: named files as given, folders walked.

Walking a folder takes its ``*.toml`` job files, skipping tool configs (``pyproject.toml`` ...)
and hidden or tool folders, and its registry modules: every ``config_registry.py``, and the
``.py`` files matching the ``registry-files`` patterns of the project declaration (the
``[tool.titan]`` table of the nearest ``pyproject.toml`` above the working folder; see
``titan.cli.project``). Two things met on the way are not silently passed over: a folder
that cannot be listed is a finding (a run that could not see every file must not say "All
checks passed"), and a ``.toml`` name that is not a regular file (a FIFO, a device) is skipped
with a note (reading it could block or never end). A FIFO named explicitly is checked, and the
reader (``titan.schemas.toml_source``) reports it without opening it for a blocking read.

pathlib is too slow to import for a pre-commit hook, so paths are strings here; names are spelt
and sorted exactly as pathlib does (``a//./b/`` is ``a/b``, and ``a/b`` sorts before ``a-c``
because paths compare by component), so the report does not depend on it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence

# Names of TOML files that are never torchtitan jobs when met while walking a directory: the
# configs of Python, Rust and other tools. The pre-commit hooks exclude the same names
# (.pre-commit-hooks.yaml holds hook_exclude(), and a test keeps the two equal).
NOT_JOB_TOMLS = frozenset(
    {
        # Python packaging and tools
        "pyproject.toml",
        "poetry.toml",
        "poetry.lock",
        "pdm.toml",
        ".pdm.toml",
        "hatch.toml",
        "uv.toml",
        "uv.lock",
        "pixi.toml",
        "ruff.toml",
        ".ruff.toml",
        "ty.toml",
        "pyrefly.toml",
        "pytest.toml",
        ".pytest.toml",
        "tox.toml",
        "cz.toml",
        ".cz.toml",
        ".bumpversion.toml",
        # Rust
        "Cargo.toml",
        "Cargo.lock",
        "rustfmt.toml",
        ".rustfmt.toml",
        "clippy.toml",
        ".clippy.toml",
        "rust-toolchain.toml",
        "deny.toml",
        "Cross.toml",
        # formatters, linters and other tools
        "taplo.toml",
        ".taplo.toml",
        "typos.toml",
        "_typos.toml",
        ".typos.toml",
        "lychee.toml",
        ".lychee.toml",
        "stylua.toml",
        ".stylua.toml",
        "cliff.toml",
        "book.toml",
        "netlify.toml",
        "wrangler.toml",
        "fly.toml",
        ".pre-commit-config.toml",
    }
)
SKIPPED_DIRS = frozenset({"venv", "node_modules", "__pycache__"})
"""Folders a walk never enters, besides every hidden one (``.git``, ``.venv``, ``.tox`` ...)."""


def hook_exclude() -> str:
    """The ``exclude`` pattern of the pre-commit hooks: the files a folder walk leaves out (a
    tool's TOML by name, anything in a hidden or skipped folder), as one regular expression."""
    import re

    names = "|".join(re.escape(name) for name in sorted(NOT_JOB_TOMLS))
    folders = "|".join([r"\.[^/]*", *(re.escape(d) for d in sorted(SKIPPED_DIRS))])
    return f"(^|/)(({names})$|({folders})/)"


class Discovered:
    """The files to check, and what the walk could not take."""

    __slots__ = ("files", "skipped", "unlisted")

    def __init__(self) -> None:
        self.files: list[tuple[str, str]] = []
        """(path to open, name to show) of each file to check."""
        self.skipped: list[tuple[str, str]] = []
        """(name, what it is) of each ``.toml`` met in a folder that is not a regular file."""
        self.unlisted: list[tuple[str, str]] = []
        """(folder, reason) of each folder that could not be listed."""

    def findings(self) -> list:
        """Each folder that could not be listed, as an ``unreadable-file`` error."""
        from titan.schemas.diagnostics import Diagnostic, Severity

        return [
            Diagnostic(
                code="unreadable-file",
                severity=Severity.ERROR,
                path="",
                message=f"cannot list the folder {folder}: {reason}; its files were not checked",
                hint="give this user read access to the folder, or leave it out of the paths",
            )
            for folder, reason in self.unlisted
        ]


REGISTRY_FILE = "config_registry.py"
"""The registry module name every folder walk takes."""


def is_registry(path: str) -> bool:
    """Whether a file to check is a registry module (Python) rather than a TOML job."""
    return path.endswith(".py")


def discover(paths: Sequence[str]) -> Discovered:
    """The files ``paths`` name: each file as given, each folder walked."""
    found = Discovered()
    if os.name != "posix":  # drives and both separators: leave the spelling to pathlib itself
        from pathlib import Path

        for name in paths:
            path = Path(name)
            if not path.is_dir():
                found.files.append((str(path), name))
                continue
            walked = [
                str(Path(root) / f) for root, files in _walk(str(path), found=found) for f in files
            ]
            found.files += ((file, file) for file in sorted(walked, key=lambda f: Path(f).parts))
        return found
    for name in paths:
        path = _posix_path(name)
        if not _is_dir(path):
            found.files.append((path, name))
            continue
        walked = [
            _posix_path(os.path.join(root, f))
            for root, files in _walk(path, found=found)
            for f in files
        ]
        found.files += ((file, file) for file in sorted(walked, key=lambda text: text.split("/")))
    return found


def _walk(top: str, *, found: Discovered) -> Iterator[tuple[str, list[str]]]:
    """Each folder under ``top`` with its TOML job files and registry modules (tool configs and
    hidden dirs skipped)."""
    from titan.cli.project import declaration, declared_registry

    declaration()  # read up front: a declaration titan cannot use is an error, .py files or not

    def unlisted(error: OSError) -> None:
        found.unlisted.append((error.filename or top, error.strerror or str(error)))

    for root, dirs, files in os.walk(top, onerror=unlisted):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS and not d.startswith("."))
        # A link to a folder is not followed (it may lead out of the project, or in a loop);
        # it is said, as git and pre-commit never look inside one either.
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        for link in links:
            path = os.path.join(root, link)
            found.skipped.append((_posix_path(path) if os.name == "posix" else path, LINK))
        dirs[:] = [d for d in dirs if d not in links]
        names = [
            f
            for f in files
            if (f.endswith(".toml") and f not in NOT_JOB_TOMLS)
            or f == REGISTRY_FILE
            or (f.endswith(".py") and declared_registry(os.path.join(root, f)))
        ]
        yield root, [f for f in names if _regular_or_missing(os.path.join(root, f), found=found)]


LINK = "a link to a folder; folder walks do not follow links (name it to check it)"
"""What a skipped link to a folder is, as the note says."""


def skipped_note(name: str, kind: str) -> str:
    """The note for a path a walk skipped: a link to a folder, or a ``.toml`` that is not a
    regular file."""
    return f"skipped {name}: it is {kind}" + ("" if kind == LINK else ", not a regular file")


# What a file met while walking is, when it is not a regular file.
_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _regular_or_missing(path: str, *, found: Discovered) -> bool:
    """Keep a regular file (or one that cannot be stat'ed: checking it reports why); note and
    drop anything else."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return True
    kind = next((name for test, name in _KINDS if test(mode)), None)
    if kind is not None:
        found.skipped.append((_posix_path(path) if os.name == "posix" else path, kind))
    return kind is None


def _posix_path(name: str) -> str:
    """``str(pathlib.PurePosixPath(name))``: empty and ``.`` parts dropped, ``//`` kept as a root."""
    stripped = name.lstrip("/")
    root = "//" if len(name) - len(stripped) == 2 else "/" if stripped != name else ""
    return root + "/".join(part for part in stripped.split("/") if part and part != ".") or "."


def _is_dir(path: str) -> bool:
    """Whether ``path`` is a folder; one that cannot be stat'ed is not (reading it says why)."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False

"""The torch releases titan's trainer runs on, checked before torch is imported.

titan-validate and titan-migrate never need torch. ``titan-train`` and the trainer as a library
(``Trainer.Config.build()``, the RL library) call ``check()`` first: a torch outside the range is
refused with the range and the install line, instead of failing later on an API that release
lacks (an older torch) or one it changed (a newer one). ``TITAN_ANY_TORCH=1`` turns the refusal
into a warning, for a user who wants to try an untested release at their own risk.

The range is the releases the whole suite (``make test-fast``) has passed on: both ends are run
by ``make test-torch TORCH=<version>`` and recorded in ``bench/RESULTS.md``.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
import re

OLDEST = (2, 11)
"""The oldest torch release (major, minor) titan's trainer supports."""
NEWEST = (2, 14)
"""The newest torch release (major, minor) titan's trainer supports."""
RANGE = f"torch {OLDEST[0]}.{OLDEST[1]} to {NEWEST[0]}.{NEWEST[1]}"
OVERRIDE = "TITAN_ANY_TORCH"
"""The environment variable that turns the refusal of an untested torch into a warning."""

_RELEASE = re.compile(r"(\d+)\.(\d+)")
_warned = False
"""Whether this process has said that it goes on with an untested torch (``titan-train``
checks before reading its config, and its trainer checks again when it is built)."""


class UnsupportedTorch(ValueError):
    """The installed torch is outside the releases titan's trainer supports."""


def installed_version() -> str | None:
    """The installed torch's version as its package metadata gives it (torch is not imported),
    or None when this Python has no torch package."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def refusal(version: str) -> str | None:
    """Why torch ``version`` is refused, or None when it is in the range. A local or
    pre-release build of a supported release (``2.11.0a0+git1234``, ``2.13.0+cpu``, NVIDIA's
    ``2.12.0a0+abc.nv26.03``) is that release."""
    match = _RELEASE.match(version)
    if match is None:
        return f"titan cannot read the version of the installed torch ({version!r})"
    release = (int(match[1]), int(match[2]))
    if OLDEST <= release <= NEWEST:
        return None
    side = "older" if release < OLDEST else "newer"
    return f"titan's trainer runs on {RANGE}; this Python has torch {version}, which is {side}"


def check() -> None:
    """Refuse (``UnsupportedTorch``) a torch outside the range, before it is imported; with
    ``TITAN_ANY_TORCH=1``, log a warning instead (once a process). Without torch, do nothing:
    the import that follows names the package to install."""
    version = installed_version()
    why = None if version is None else refusal(version)
    if why is None:
        return
    if os.environ.get(OVERRIDE) == "1":
        global _warned
        if not _warned:
            logging.getLogger("titan").warning("%s; going on untested (%s=1)", why, OVERRIDE)
            _warned = True
        return
    raise UnsupportedTorch(
        f"{why}: install a supported one, e.g. pip install 'torch=={NEWEST[0]}.{NEWEST[1]}.*' "
        f"(or set {OVERRIDE}=1 to try this one untested)"
    )

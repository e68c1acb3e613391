"""The digest titan-migrate writes on the last line of every module, and what it says later.

A module titan-migrate wrote ends with one comment line that holds the SHA-256 of everything
above it::

    def llama3_debugmodel() -> Trainer.Config:
        ...


    # titan-migrate sha256: 3f1c0a...

Before a later run replaces the file, it reads the file back: when the digest still matches, the
text is exactly what titan-migrate wrote and replacing it loses nothing; when it does not (a line
was added, changed or removed, even the digest line itself), someone edited the module and it is
kept, unless the user says ``--force``. The digest lives in the file, not in a manifest beside
it, so it travels with the module through copies, ``git`` and renames, and it adds no file to the
user's folders. It covers the bytes exactly: an editor that changes the line endings has edited
the file too.
"""

from __future__ import annotations

import hashlib
import re

STAMP_PREFIX = "# titan-migrate sha256: "
"""How the digest line begins."""

DIGEST_CHARS = 32
"""Hex digits of the SHA-256 kept: 128 bits tell an edit from the original as well as 256 do,
in a line that stays short."""

_STAMP = re.compile(rb"# titan-migrate sha256: ([0-9a-f]{%d})\n\Z" % DIGEST_CHARS)

INTACT, EDITED, UNSTAMPED = "intact", "edited", "unstamped"
"""What :func:`state` finds: the digest matches, it does not, or there is no digest line."""


def _digest(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()[:DIGEST_CHARS]


def stamped(code: str) -> str:
    """``code`` with the digest line after it (two blank lines first, as ``ruff format`` puts
    them before a comment that follows a function)."""
    body = code.rstrip("\n") + "\n\n\n"
    return body + STAMP_PREFIX + _digest(body.encode("utf-8")) + "\n"


def state(data: bytes) -> str:
    """:data:`INTACT` when ``data`` is exactly what :func:`stamped` wrote, :data:`EDITED` when
    its last line is a digest that no longer matches the text above it, else
    :data:`UNSTAMPED`."""
    cut = data.rfind(b"\n", 0, len(data) - 1) + 1  # the start of the last line
    found = _STAMP.match(data, cut)
    if found is None:
        return EDITED if STAMP_PREFIX.encode() in data else UNSTAMPED
    return INTACT if _digest(data[:cut]) == found[1].decode() else EDITED

"""Which exceptions of a run are the user's to fix, and how they are shown.

A config the trainer cannot honour, a missing tokenizer or dataset, a checkpoint that does not
fit: these are raised as ``ValueError`` / ``FileNotFoundError`` / ``NotBuildableError`` (and their
subclasses) with a message that names the setting, and ``titan-train`` prints the message alone.
Anything else is a bug in titan and keeps its traceback.
"""

from __future__ import annotations

from titan.config.configurable import NotBuildableError

USER_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    FileNotFoundError,
    NotADirectoryError,
    PermissionError,
    NotBuildableError,
)


def describe(error: BaseException) -> str:
    """The message of ``error``; a file error names its path."""
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        return f"{error.strerror}: {error.filename}"
    return str(error) or type(error).__name__

"""The one error type of checkpointing, in a leaf module so that every other module of the
package can raise it without importing the manager."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint that cannot be saved or loaded as configured; the message says what to fix."""


class DamagedCheckpoint(CheckpointError):
    """A checkpoint whose files exist but cannot be read back (truncated, corrupted)."""


class UnsafeCheckpoint(CheckpointError):
    """A checkpoint file that asks for more than plain data when unpickled (it could run code)."""

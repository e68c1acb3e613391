"""Which reader a config file takes, by its name: a Forge app config (YAML) or a job config
(TOML). Apart from the readers so that telling them apart imports neither."""

from __future__ import annotations

import os

APP_CONFIG_SUFFIXES = (".yaml", ".yml")
"""The names read as a Forge app config (the ``trainer:`` block); every other file is a TOML.
Folder walks never pick these up: a YAML is checked only when it is named."""


def is_app_config(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` names a YAML app config."""
    return os.fspath(path).lower().endswith(APP_CONFIG_SUFFIXES)

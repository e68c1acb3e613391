"""Fixtures shared by several test files."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """titan-validate's registry cache goes to a folder of the test session, never the user's
    (subprocesses inherit the variable)."""
    import os

    before = os.environ.get("TITAN_CACHE_DIR")
    os.environ["TITAN_CACHE_DIR"] = str(tmp_path_factory.mktemp("titan-cache"))
    yield
    if before is None:
        os.environ.pop("TITAN_CACHE_DIR", None)
    else:
        os.environ["TITAN_CACHE_DIR"] = before


@pytest.fixture
def fresh_module_name():
    """A new top-level module name per test, so imports never hit a cached sys.modules entry."""
    name = f"titan_test_ext_{uuid.uuid4().hex[:12]}"
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]


@pytest.fixture(scope="session")
def generated_registry(tmp_path_factory) -> Path:
    """``titan-migrate legacy_configs/llama3/debug_model.toml -o config_registry.py``."""
    from tests.training_runs import DEBUG_TOML, migrated

    return migrated(DEBUG_TOML, tmp_path_factory.mktemp("migrated"), function="llama3_debugmodel")

"""Fixtures shared by several test files."""

from __future__ import annotations

import sys
import uuid

import pytest


@pytest.fixture
def fresh_module_name():
    """A new top-level module name per test, so imports never hit a cached sys.modules entry."""
    name = f"titan_test_ext_{uuid.uuid4().hex[:12]}"
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
        del sys.modules[module]

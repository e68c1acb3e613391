"""Tests against upstream torchtitan itself, run by ``make test-upstream``.

They need a second virtual environment with ``torchtitan`` installed (``.venv-upstream``, which
the make target creates); titan's own environment never has torchtitan. The target passes that
environment's interpreter in ``TITAN_UPSTREAM_PYTHON``. ``make test`` leaves this folder out;
a plain ``pytest`` run without the variable skips these tests with the reason, and under
``CI=true`` a missing interpreter is a failure, not a skip.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV = "TITAN_UPSTREAM_PYTHON"


def _interpreter() -> Path | None:
    value = os.environ.get(ENV)
    return Path(value) if value else None


@pytest.fixture(scope="session")
def upstream_python() -> Path:
    """The interpreter of the environment that has torchtitan installed."""
    found = _interpreter()
    if found is None or not found.exists():
        why = (
            f"{ENV} is not set: run `make test-upstream`"
            if found is None
            else f"{ENV}={found} does not exist"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return found

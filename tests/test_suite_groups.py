"""Every test module that launches ``torchrun`` is in the conftest's multi-process group, so that
two such launches never load the CI machine's two cores at once under pytest-xdist."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import MULTI_PROCESS_MODULES

LAUNCHES = re.compile(r"torch\.distributed\.run|parallel_check\(")


def test_every_torchrun_module_is_in_the_multi_process_group():
    here = Path(__file__).parent
    launching = {
        path.name
        for path in here.glob("test_*.py")
        if path.name != Path(__file__).name and LAUNCHES.search(path.read_text(encoding="utf-8"))
    }
    assert launching, "the pattern finds no launching module: it no longer matches the tests"
    assert sorted(launching - MULTI_PROCESS_MODULES) == []

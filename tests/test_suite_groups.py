"""Every test module that launches ``torchrun`` is in the conftest's multi-process group, so that
two such launches never load the CI machine's two cores at once under pytest-xdist."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import MULTI_PROCESS_MODULES

LAUNCHES = re.compile(r"torch\.distributed\.run|parallel_check\(|\bnproc=(?!1\b)\w+")
"""A module that starts torchrun itself, through a check script, or through ``tests.training_runs``
(``Launch(..., nproc=N)`` / ``titan_train(..., nproc=N)``)."""


def test_every_torchrun_module_is_in_the_multi_process_group():
    here = Path(__file__).parent
    launching = {
        path.name
        for path in here.glob("test_*.py")
        if path.name != Path(__file__).name and LAUNCHES.search(path.read_text(encoding="utf-8"))
    }
    assert launching, "the pattern finds no launching module: it no longer matches the tests"
    assert sorted(launching - MULTI_PROCESS_MODULES) == []


# A module named like a multi-process one (a module-scoped fixture shared by its slow tests) and
# another module of plain tests, run on two xdist workers with the suite's conftest.
GROUPED_MODULE = """
import os

import pytest


@pytest.fixture(scope="module")
def shared(request):
    with open(os.environ["GROUPS_LOG"], "a", encoding="utf-8") as log:
        log.write(f"fixture {os.environ['PYTEST_XDIST_WORKER']}\\n")


@pytest.mark.slow
@pytest.mark.parametrize("case", range(6))
def test_slow(shared, case, request):
    with open(os.environ["GROUPS_LOG"], "a", encoding="utf-8") as log:
        log.write(f"test {os.environ['PYTEST_XDIST_WORKER']} {request.node.nodeid}\\n")
"""
PLAIN_MODULE = """
import pytest


@pytest.mark.parametrize("case", range(20))
def test_plain(case):
    pass
"""


def test_a_modules_grouped_tests_run_on_one_worker_and_share_its_fixture(tmp_path):
    import os
    import subprocess
    import sys

    module = sorted(MULTI_PROCESS_MODULES)[0]
    (tmp_path / module).write_text(GROUPED_MODULE, encoding="utf-8")
    (tmp_path / "test_plain.py").write_text(PLAIN_MODULE, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow\n", encoding="utf-8")
    log = tmp_path / "groups.log"
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest"]
        + ["-n", "2", "--dist", "loadgroup", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ, PYTHONPATH=str(repo), GROUPS_LOG=str(log)),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = log.read_text(encoding="utf-8").splitlines()
    tests = [line.split() for line in lines if line.startswith("test ")]
    assert len(tests) == 6
    # The scheduler's group is the node id's suffix, and every test of the group ran on one
    # worker, after the one build of the module's fixture there.
    assert all(nodeid.endswith(f"@{module}") for _, _, nodeid in tests), tests
    assert len({worker for _, worker, _ in tests}) == 1, tests
    assert [line for line in lines if line.startswith("fixture ")] == [f"fixture {tests[0][1]}"]

"""The suite passes from the repository alone, as a user who clones it without ``../shared`` runs it.

The repository is copied (every file git tracks or would track) into a temporary folder with no
``shared/`` beside it; there the whole suite must collect, a fast subset must pass with the tests
that read ``../shared`` skipped, and the same tests must fail under ``CI=true``, where ``shared/``
is promised.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.reference import REPO

# Files that read ../shared for part of their tests and hold project-only tests besides.
FAST_SUBSET = [
    "tests/test_homes.py",
    "tests/test_moved_keys.py",
    "tests/test_legacy_schema.py",
    "tests/test_validate_cli.py",
    "tests/test_json_schema.py",
]


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """The working tree's files, as git sees them, in ``<tmp>/work/titan`` (no ``<tmp>/work/shared``)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    target = tmp_path_factory.mktemp("fresh") / "work" / "titan"
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if not source.is_file():  # deleted in the working tree but still in the index
            continue
        (target / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / name)
    assert not (target.parent / "shared").exists()
    return target


def pytest_in(clone: Path, *args: str, ci: bool) -> subprocess.CompletedProcess:
    """``pytest ARGS`` in the clone, in one process: not as a worker of this run's pytest-xdist
    (whose variables it would otherwise inherit)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CI", "PYTEST_ADDOPTS") and not k.startswith("PYTEST_XDIST_")
    }
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_whole_suite_collects_without_shared(clone):
    done = pytest_in(clone, "--collect-only", "-q", ci=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "error" not in done.stdout.splitlines()[-1].lower()
    # the tests ran from the copy, not from this checkout
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import titan.migrate, titan.schemas, titan.cli; "
            "print(titan.__file__, titan.schemas.__file__, titan.migrate.__file__)",
        ],
        cwd=clone,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.count(str(clone)) == 3, probe.stdout


def test_a_fast_subset_passes_with_the_shared_tests_skipped(clone):
    done = pytest_in(clone, "-q", "-m", "not slow", "-rs", *FAST_SUBSET, ci=False)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-3000:]
    summary = done.stdout.strip().splitlines()[-1]
    assert " passed" in summary and " skipped" in summary, summary
    assert "shared/ is not beside the repository" in done.stdout


def test_under_ci_a_missing_shared_fails(clone):
    done = pytest_in(clone, "-q", "tests/test_legacy_schema.py", ci=True)
    assert done.returncode == 1, done.stdout[-3000:]
    assert "shared/ is not beside the repository" in done.stdout

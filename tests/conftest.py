"""Fixtures shared by several test files."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.configuration import set_hypothesis_home_dir

# Hypothesis runs the same examples on every run and every worker: no per-example deadline and no
# too-slow health check (both are wall-clock bounds, which fail on a loaded machine), and no
# example database in the working tree (parallel workers would share it, and a stored example
# would make one run differ from the next).
settings.register_profile(
    "titan-tests",
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("titan-tests")

# Each test process computes on one thread unless the caller chose otherwise: `make test` runs two
# workers on a machine it assumes has two cores, and torch's default of one thread per core made
# each worker's OpenMP threads wait on the other worker's (the model tests took 1.6x the CPU time
# and twice the wall time). Set here, before any test imports torch; subprocesses inherit it.
if "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"
    if "torch" in sys.modules:  # a plugin imported it before this file: too late for the variable
        sys.modules["torch"].set_num_threads(1)

# Test modules whose slow tests launch several processes (torchrun over gloo). Under
# pytest-xdist (`make test` runs two workers with --dist loadgroup) each module's slow tests form
# one group, run one after another on one worker: a module-scoped fixture (the runs several tests
# compare) is built once, never once per worker. One group for all of them would queue every slow
# run of the suite on one worker while the other ran out of work.
MULTI_PROCESS_MODULES = frozenset(
    {
        "test_checkpoint.py",
        "test_context_parallel.py",
        "test_context_parallel_train.py",
        "test_corpus_training.py",
        "test_deepseek_v3_train.py",
        "test_distributed_failures.py",
        "test_dump_lock.py",
        "test_expert_parallel.py",
        "test_expert_parallel_tp.py",
        "test_flux_model.py",
        "test_flux_train.py",
        "test_gpt_oss_train.py",
        "test_llama4_train.py",
        "test_moe.py",
        "test_parallelize.py",
        "test_pipeline_checkpoint.py",
        "test_pipeline_families.py",
        "test_pipeline_hf_seed.py",
        "test_pipeline_train.py",
        "test_qwen3_train.py",
        "test_rl_distributed.py",
        "test_rl_example.py",
        "test_run_files_safety.py",
        "test_run_safety.py",
        "test_run_signals.py",
        "test_train_cli.py",
        "test_train_distributed.py",
        "test_trainer_library.py",
        "test_warm_start.py",
    }
)
# Modules whose module-scoped fixture is costly (a copy of the repository): one group each, so
# the fixture is built once, on one worker.
ONE_WORKER_MODULES = frozenset({"test_fresh_clone.py"})


def pytest_configure(config):
    """Hypothesis keeps its caches (Unicode tables, collected constants) in a folder of this
    process's own, never ``.hypothesis`` in the working tree, which parallel workers would share.

    SIGINT is handled again if this process started with it ignored (a shell starts background
    jobs so, e.g. ``make test &`` in a script): the processes the tests start would inherit the
    ignored SIGINT, and the tests that interrupt them would wait for an exit that never comes."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    worker = getattr(config, "workerinput", {}).get("workerid", "main")
    config._titan_hypothesis_home = tempfile.mkdtemp(prefix=f"titan-hypothesis-{worker}-")
    set_hypothesis_home_dir(config._titan_hypothesis_home)


def pytest_unconfigure(config):
    """Remove this process's Hypothesis folder."""
    home = getattr(config, "_titan_hypothesis_home", None)
    if home is not None:
        shutil.rmtree(home, ignore_errors=True)


def xdist_group_of(item) -> str | None:
    """The xdist group of a test: its module's name for the slow tests of
    ``MULTI_PROCESS_MODULES`` and every test of ``ONE_WORKER_MODULES``, else None."""
    module = item.path.name
    if module in MULTI_PROCESS_MODULES and item.get_closest_marker("slow"):
        return module
    if module in ONE_WORKER_MODULES:
        return module
    return None


def pytest_collection_modifyitems(config, items):
    """Mark each grouped test with its ``xdist_group`` (see ``xdist_group_of``), and, on an xdist
    worker under ``--dist loadgroup``, end its node id with the ``@group`` the scheduler reads.

    The slow tests come first, each module's in its own order: the scheduler hands out groups
    (largest first) and then single tests in this order, so the long runs start early and the
    thousands of short tests fill in around them, instead of a long run starting last while the
    other worker has nothing left."""
    loadgroup = getattr(config.option, "loadgroup", False)
    for item in items:
        group = xdist_group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
            if loadgroup:
                suffix_node_id(item, f"@{group}")
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def suffix_node_id(item, suffix: str) -> None:
    """Append ``suffix`` to ``item``'s node id. pytest-xdist's loadgroup schedules by that
    suffix, and pytest-xdist 3.8 writes it to ``item._nodeid``, which pytest 9.2 no longer reads
    (the id is the NodeId ``item._id``): without this every grouped test ran wherever a worker
    was free, and each worker built the module-scoped fixtures again."""
    node_id = getattr(item, "_id", None)
    if hasattr(type(node_id), "parse") and not item.nodeid.endswith(suffix):
        item._id = type(node_id).parse(item.nodeid + suffix)


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

"""The inputs the benchmarks generate stay what each benchmark says they are.

A benchmark that times ``titan-validate`` over "valid" configs measures nothing once a new rule
finds a problem in them (the bench then stops with an exit status instead of a table). Each
generator is run here once, at the sizes and seeds its benchmark uses and a few others, and its
output is checked as the benchmark would check it.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import pytest

from tests.helpers import validate
from tests.reference import REPO


def bench(name: str) -> ModuleType:
    """``bench/NAME.py`` as a module (the benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("functions", "seed"), [(200, 0), (120, 1), (120, 2)])
def test_the_registry_bench_module_is_valid_with_and_without_its_world(tmp_path, functions, seed):
    """bench/validate_registry.py's module: no finding at all, alone and at ``--ngpu 64``."""
    generated = bench("validate_registry")
    module = tmp_path / "config_registry.py"
    module.write_text(generated.generate(functions, seed=seed), encoding="utf-8")
    for options in ([], ["--ngpu", str(generated.WORLD)]):
        done = validate("--no-cache", "--format", "json", *options, module)
        assert done.code == 0, done.out[-4000:] + done.err[-2000:]
        assert done.json()["diagnostics"] == [], (options, done.out[-4000:])


def test_the_tree_bench_files_migrate_and_validate(tmp_path):
    """bench/migrate_tree.py's legacy files: each validates and the tree migrates (exit 0)."""
    from titan.cli import migrate

    generated = bench("migrate_tree")
    root = tmp_path / "configs"
    paths = generated.generate(root, 60)
    done = validate("--format", "json", root)
    assert done.code == 0, done.out[-4000:]
    errors = [d for d in done.json()["diagnostics"] if d["severity"] == "error"]
    assert errors == [], errors[:5]
    out = tmp_path / "out"
    assert migrate.main([str(root), "--out-dir", str(out)]) == 0
    assert len(list(out.rglob("*.py"))) >= len({p.parent for p in paths})

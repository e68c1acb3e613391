"""How ``titan-validate --fix``, ``--diff`` and the plain check grow with the number of tables.

Each size N is one generated legacy TOML with N tables besides a job's usual sections: half
are a fork's own sections (``[infra.node_17]``, unknown keys the fix leaves where they are), half
are tables of an older era (``[quantize.dense.float8.layer_17]``, renamed
``[quantize.linear.float8.layer_17]`` by the fix, their keys kept in place), so the fix has work
in proportion to N. The job's sections carry old keys whose fixes take every kind of edit: a
rename in place (``training.batch_size``), moves into a table that exists
(``training.data_parallel_degree``), into a table the fix adds at the end
(``training.seed``), a table renamed (``[float8]``), a switch that joins ``model.converters``.

Every command runs as a fresh process (``--fix`` on a fresh copy of the file each time) with warm
bytecode caches; the best of ``--repeat`` runs is reported with the time per table and the ratio
of each size's time to the smallest size's, next to the ratio of the sizes themselves. A
log-log fit gives the growth exponent: 1 is linear, 2 quadratic. A size is skipped once a
command took longer than ``--limit`` seconds on a smaller one.

The code measured is the one ``PYTHONPATH`` names (the checkout this file is in by default),
so an older tree can be measured with this file::

    .venv/bin/python bench/fix_scaling.py [--sizes 2000,4000,8000,16000,32000] [--repeat 3]
    PYTHONPATH=/path/to/older/tree .venv/bin/python bench/fix_scaling.py --limit 60
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ERA = ("--era", "2026-02-20")  # dated, so that the fix adds no era defaults of its own
COMMANDS = {
    "check": (),
    "--diff": ("--diff",),
    "--fix": ("--fix",),
}

HEAD = """\
# A fork's job, written over several torchtitan releases
[job]
dump_folder = "./outputs"
description = "fork job with {tables} extra tables"

[model]
name = "llama3"
flavor = "debugmodel"

[training]
# per device
batch_size = 8  # tokens: 8 x 2048
seq_len = 2048
steps = 10
data_parallel_degree = -1   # all the GPUs
tensor_parallel_degree = 1
seed = 42

[parallelism]
pipeline_parallel_degree = 1

# float8 settings
[float8]  # fp8 options
enable_float8_linear = true
enable_fsdp_float8_all_gather = true
"""

FORK = """
[infra.node_{i}]  # the fork's own section
host = "node-{i}"
slots = {slots}
"""

OLD = """
# layer {i}: its own float8 recipe
[quantize.dense.float8.layer_{i}]
recipe_name = "rowwise"  # per layer
filter_fqns = ["layers.{i}.attention"]
"""


def legacy_toml(tables: int) -> str:
    """A legacy TOML with ``tables`` tables besides the job's own sections."""
    parts = [HEAD.format(tables=tables)]
    for i in range(tables):
        parts.append((FORK if i % 2 == 0 else OLD).format(i=i, slots=i % 8 + 1))
    return "".join(parts)


def _run(command: list[str], *, env: dict[str, str], cwd: Path, codes: tuple[int, ...]) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, cwd=cwd, env=env)
    elapsed = time.perf_counter() - start
    if done.returncode not in codes:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]!r}")
    return elapsed


def _time(
    name: str, source: Path, *, repeat: int, env: dict[str, str], cwd: Path
) -> tuple[float, str]:
    """Best seconds of ``repeat`` runs of one command on ``source``, and its fixed text."""
    best = math.inf
    text = ""
    for _ in range(repeat):
        target = cwd / "job.toml"
        shutil.copyfile(source, target)
        command = [sys.executable, "-m", "titan.cli.validate", *COMMANDS[name], *ERA, "job.toml"]
        best = min(best, _run(command, env=env, cwd=cwd, codes=(0, 1)))
        text = target.read_text(encoding="utf-8")
    return best, text


def _exponent(sizes: list[int], times: list[float]) -> float:
    """The slope of log(time) over log(size), least squares."""
    xs = [math.log(s) for s in sizes]
    ys = [math.log(t) for t in times]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    num = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    den = sum((x - mx) ** 2 for x in xs)
    return num / den if den else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2000,4000,8000,16000,32000")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--limit", type=float, default=300.0, help="seconds; larger sizes skip")
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        env["PYTHONPATH"] = env.get("PYTHONPATH") or str(REPO)
        probe = [sys.executable, "-c", "import titan.migrate.tomledit as m; print(m.__path__[0])"]
        measured = subprocess.run(probe, capture_output=True, text=True, cwd=work, env=env)
        print(f"measuring {measured.stdout.strip()}")
        results: dict[str, list[tuple[int, float]]] = {name: [] for name in COMMANDS}
        small = work / "small.toml"
        small.write_text(legacy_toml(20), encoding="utf-8")
        fixed = _time("--fix", small, repeat=1, env=env, cwd=work)[1]  # warm-up
        assert "[quantize.linear.float8.layer_1]" in fixed and "local_batch_size" in fixed, fixed
        print(
            f"{'tables':>7} {'command':>7} {'best s':>9} {'ms/table':>9} {'ratio':>7} {'size x':>7}"
        )
        over: set[str] = set()
        for size in sizes:
            source = work / f"tables_{size}.toml"
            source.write_text(legacy_toml(size), encoding="utf-8")
            for name in COMMANDS:
                if name in over:
                    print(f"{size:>7} {name:>7}   skipped: a smaller size took over {args.limit} s")
                    continue
                seconds, _ = _time(name, source, repeat=args.repeat, env=env, cwd=work)
                results[name].append((size, seconds))
                base_size, base = results[name][0]
                print(
                    f"{size:>7} {name:>7} {seconds:>9.3f} {seconds / size * 1000:>9.3f} "
                    f"{seconds / base:>7.2f} {size / base_size:>7.2f}",
                    flush=True,
                )
                if seconds > args.limit:
                    over.add(name)
        for name, rows in results.items():
            if len(rows) > 1:
                exponent = _exponent([s for s, _ in rows], [t for _, t in rows])
                print(f"{name}: growth exponent {exponent:.2f} (1 linear, 2 quadratic)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

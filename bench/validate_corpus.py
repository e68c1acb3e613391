"""Time titan-validate over the upstream corpus against check-jsonschema on the same files.

Both tools run as fresh processes (as in pre-commit and CI) on the same 23 TOMLs, with
check-jsonschema using titan's exported JSON Schema; each is run several times and the best and
median wall times are reported, with their ratio. Targets: >= 5x faster, < 0.3 s for the corpus.

Both run with warm bytecode caches, as after ``pip install`` (which compiles every module): the
runs get a private ``PYTHONPYCACHEPREFIX`` that the warm-up runs fill, and bytecode writing on
even where the environment sets ``PYTHONDONTWRITEBYTECODE`` (which otherwise makes an editable
titan recompile its own sources on every run, while check-jsonschema's were compiled at install).
``--inherit-env`` times with the environment exactly as given instead.

    .venv/bin/python bench/validate_corpus.py [--repeat N] [--corpus DIR] [--inherit-env]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO.parent / "shared" / "corpus" / "torchtitan-v0.2.2"
BIN = Path(sys.executable).parent


def _time(command: list[str], repeat: int, env: dict[str, str]) -> tuple[list[float], int]:
    times, code = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, env=env
        )
        times.append(time.perf_counter() - start)
        code = done.returncode
    return times, code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument(
        "--inherit-env",
        action="store_true",
        help="run the tools with this environment as is (no bytecode cache of their own)",
    )
    args = parser.parse_args()
    files = sorted(str(p) for p in args.corpus.rglob("*.toml"))
    if not files:
        print(f"no TOML files under {args.corpus}", file=sys.stderr)
        return 2
    baseline = shutil.which("check-jsonschema", path=str(BIN)) or shutil.which("check-jsonschema")
    if baseline is None:
        print(
            "check-jsonschema is not installed: pip install -r requirements-bench.txt",
            file=sys.stderr,
        )
        return 2
    titan = [str(BIN / "titan-validate"), *files]
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        if not args.inherit_env:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        schema = Path(tmp) / "schema.json"
        subprocess.run(
            [str(BIN / "titan-validate"), "--export-json-schema", str(schema)],
            check=True,
            capture_output=True,
        )
        jsonschema_cmd = [baseline, "--schemafile", str(schema), *files]
        # Warm the file cache and Python's bytecode caches for both before measuring.
        _time(titan, 2, env)
        _time(jsonschema_cmd, 2, env)
        titan_times, titan_code = _time(titan, args.repeat, env)
        base_times, base_code = _time(jsonschema_cmd, args.repeat, env)

    def row(name, times, code):
        print(
            f"{name:<18} best {min(times) * 1000:7.1f} ms   median {statistics.median(times) * 1000:7.1f} ms   exit {code}"
        )

    caches = "as inherited" if args.inherit_env else "warm bytecode caches"
    print(f"{len(files)} files, {args.repeat} runs each, fresh process per run, {caches}")
    row("titan-validate", titan_times, titan_code)
    row("check-jsonschema", base_times, base_code)
    ratio_best = min(base_times) / min(titan_times)
    ratio_median = statistics.median(base_times) / statistics.median(titan_times)
    print(
        f"ratio (check-jsonschema / titan-validate): best {ratio_best:.1f}x, median {ratio_median:.1f}x   (target >= 5x)"
    )
    print(
        f"titan-validate corpus time: {statistics.median(titan_times):.3f} s median   (target < 0.3 s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Time titan-validate's static check of torchtitan 0.3.0's registry modules against its check of titan's own.

``titan-validate config_registry.py`` on a module that imports ``torchtitan`` reads it without
running it (``titan.migrate.registry_check``: every 0.3.0 config call checked against generated
tables, titan's rules on what each function returns); on one of titan's own modules it imports
the module in its worker process, calls every registry function and checks each config. This
bench times the first against the second, in the same run, as ``bench/validate_registry.py``
times a check (a fresh process per run, private ``TITAN_CACHE_DIR`` and a private
``PYTHONPYCACHEPREFIX`` filled by warm-up rounds, one of each command per round):

- ``upstream 0.3.0, static``: ``titan-validate --no-cache`` on every
  ``torchtitan/**/config_registry.py`` of the release wheel (extracted into a temporary folder,
  laid out as in the package so relative imports resolve; never installed, never imported);
- ``baseline: titan's own``: ``titan-validate --no-cache titan/models/*/config_registry.py``
  (titan's real registry modules: the generated module ``bench/validate_registry.py`` times no
  longer passes titan's rules, and a check that finds anything is no bench);
- ``floor: import titan.trainer``: what any check of titan's modules imports (as there);
- each side's smallest module (one function) alone, so that, as there, ``(all - one) / (functions
  - 1)`` gives a marginal cost per function, start-up left out.

Times are per file and per registry function (``titan.config.scan``; an upstream module's
functions are the ones the static check reads, ``f.certain or not f.needs``). The same two checks
also run in-process (``titan.cli.validate.run``, one process, after warm-up calls), and
the static reading alone (``check_tree`` over the parsed modules) is timed per function. The
ratio is upstream / titan's own per function (lower is better). A check that does not exit 0,
or a static check that imports torch or torchtitan (a fresh process running it in-process),
makes the bench exit 1; timings are never asserted.

    .venv/bin/python bench/upstream_static.py [--repeat N] [--wheel PATH] [--verbose]
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
DEFAULT_WHEEL = REPO / ".venv" / "upstream-wheel" / "torchtitan-0.3.0-py3-none-any.whl"

UPSTREAM = "upstream 0.3.0, static"
OWN = "baseline: titan's own"
FLOOR = "floor: import titan.trainer"
ONE = "  1 function: "

PROBE = (
    "import io, sys\n"
    "from titan.cli import validate\n"
    "out, err = io.StringIO(), io.StringIO()\n"
    "status = validate.run(['--no-cache', *sys.argv[1:]], stdout=out, stderr=err)\n"
    "sys.stderr.write(out.getvalue() + err.getvalue())\n"
    "print('torch' in sys.modules, 'torchtitan' in sys.modules, status)\n"
)


def extract(wheel: Path, root: Path) -> list[str]:
    """The wheel's ``torchtitan/**/config_registry.py`` under ``root``, as paths relative to it."""
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith("torchtitan/") and name.endswith("/config_registry.py"):
                target = root / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(name))
    return sorted(str(p.relative_to(root)) for p in root.glob("torchtitan/**/config_registry.py"))


def functions(folder: Path, files: list[str], *, upstream: bool) -> int:
    """How many registry functions titan-validate checks in ``files``."""
    from titan.config.scan import scan

    count = 0
    for name in files:
        text = (folder / name).read_text(encoding="utf-8")
        found = scan(ast.parse(text), text).functions
        count += sum(1 for f in found if f.certain or not f.needs) if upstream else len(found)
    return count


def _smallest(folder: Path, files: list[str], *, upstream: bool) -> str:
    """The first of ``files`` with the fewest registry functions (at least one)."""
    counts = {name: functions(folder, [name], upstream=upstream) for name in files}
    return min((n for n in files if counts[n]), key=lambda n: counts[n])


def _fail(name: str, code: int, output: str) -> str:
    return f"{name}: exit {code}\n{output[-4000:]}"


def _in_process(argv: list[str], cwd: Path) -> tuple[float, int, str]:
    from titan.cli import validate

    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(cwd):
        start = time.perf_counter()
        code = validate.run(argv, stdout=out, stderr=err)
        elapsed = time.perf_counter() - start
    return elapsed, code, out.getvalue() + err.getvalue()


def _static_alone(release: Path, files: list[str], repeat: int) -> tuple[float, list[float]]:
    """``check_tree`` over every upstream module (parsed and scanned beforehand): the first call
    (which imports the tables) and ``repeat`` more."""
    from titan.config.scan import scan

    parsed = []
    for name in files:
        text = (release / name).read_text(encoding="utf-8")
        tree = ast.parse(text, filename=name)
        wanted = [
            (f.name, f.line, f.col) for f in scan(tree, text).functions if f.certain or not f.needs
        ]
        parsed.append((tree, str(release / name), name, wanted, text))

    def once() -> float:
        start = time.perf_counter()
        from titan.migrate.registry_check import check_tree

        for tree, path, shown, wanted, text in parsed:
            check_tree(tree, path=path, shown=shown, functions=wanted, ngpu=None, text=text)
        return time.perf_counter() - start

    first = once()
    return first, [once() for _ in range(repeat)]


def _table(
    median: dict[str, float], times: dict[str, list[float]], checks: dict[str, tuple]
) -> None:
    print(f"{'check':<24} {'files':>5} {'fns':>4} {'total ms':>17} {'ms / file':>9} {'ms / fn':>8}")
    for name in (UPSTREAM, OWN):
        _, _, files, fns = checks[name]
        total, best = median[name] * 1000, min(times[name]) * 1000
        print(
            f"{name:<24} {files:>5} {fns:>4} {total:>8.1f} ({best:>6.1f}) {total / files:>9.1f} "
            f"{total / fns:>8.2f}"
        )


def _ratios(median: dict[str, float], checks: dict[str, tuple]) -> tuple[float, float, float]:
    """upstream / titan's own: per function, per file, in total."""
    (_, _, up_files, up_fns), (_, _, own_files, own_fns) = checks[UPSTREAM], checks[OWN]
    up, own = median[UPSTREAM], median[OWN]
    return (up / up_fns) / (own / own_fns), (up / up_files) / (own / own_files), up / own


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument(
        "--wheel",
        type=Path,
        default=Path(os.environ.get("TITAN_UPSTREAM_WHEEL") or DEFAULT_WHEEL),
        help="torchtitan 0.3.0's wheel (default: the one `make test` downloads)",
    )
    parser.add_argument("--verbose", action="store_true", help="print every run's time")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if not args.wheel.is_file():
        try:
            shown = args.wheel.resolve().relative_to(REPO)
        except ValueError:
            shown = args.wheel
        print(f"no wheel at {args.wheel}: `make {shown}` downloads it", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        return _run(Path(tmp), args)


def _run(tmp: Path, args: argparse.Namespace) -> int:
    release = tmp / "release"
    release.mkdir()
    upstream_files = extract(args.wheel, release)
    own_files = sorted(
        str(p.relative_to(REPO)) for p in REPO.glob("titan/models/*/config_registry.py")
    )
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    env["TITAN_CACHE_DIR"] = str(tmp / "titan-cache")
    validate = str(BIN / "titan-validate")

    # (argv after the program, folder, files, functions)
    checks: dict[str, tuple[list[str], Path, int, int]] = {
        UPSTREAM: (
            ["--no-cache", *upstream_files],
            release,
            len(upstream_files),
            functions(release, upstream_files, upstream=True),
        ),
        OWN: (
            ["--no-cache", *own_files],
            REPO,
            len(own_files),
            functions(REPO, own_files, upstream=False),
        ),
    }

    # The static check never imports torch or torchtitan (in-process, in a fresh interpreter).
    probe = subprocess.run(
        [sys.executable, "-c", PROBE, *upstream_files], capture_output=True, cwd=release, env=env
    )
    answer = probe.stdout.decode().split()
    if probe.returncode != 0 or answer[2:] != ["0"]:
        print(_fail("in-process probe", probe.returncode, probe.stderr.decode()), file=sys.stderr)
        return 1
    imported = [
        name
        for name, flag in zip(("torch", "torchtitan"), answer[:2], strict=True)
        if flag == "True"
    ]

    commands = {name: ([validate, *argv], cwd) for name, (argv, cwd, _, _) in checks.items()}
    smallest = {
        UPSTREAM: _smallest(release, upstream_files, upstream=True),
        OWN: _smallest(REPO, own_files, upstream=False),
    }
    for name, file in smallest.items():
        commands[ONE + file] = ([validate, "--no-cache", file], checks[name][1])
    commands[FLOOR] = ([sys.executable, "-c", "import titan.trainer"], REPO)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for round_ in range(2 + args.repeat):  # two warm-up rounds fill the bytecode cache
        for name, (command, cwd) in commands.items():
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, cwd=cwd, env=env)
            elapsed = time.perf_counter() - start
            if done.returncode != 0:
                output = (done.stdout + done.stderr).decode(errors="replace")
                print(_fail(name, done.returncode, output), file=sys.stderr)
                return 1
            if round_ >= 2:
                times[name].append(elapsed)
            if args.verbose:
                print(f"  round {round_} {name}: {elapsed * 1000:.1f} ms", file=sys.stderr)

    # The static reading alone, before anything in this process has imported its tables.
    first, alone = _static_alone(release, upstream_files, args.repeat)

    # The same checks in this process (titan.cli.validate.run), interleaved, after warm-up.
    in_process: dict[str, list[float]] = {name: [] for name in checks}
    for round_ in range(2 + args.repeat):
        for name, (argv, cwd, _, _) in checks.items():
            elapsed, code, output = _in_process(argv, cwd)
            if code != 0:
                print(_fail(f"in-process {name}", code, output), file=sys.stderr)
                return 1
            if round_ >= 2:
                in_process[name].append(elapsed)

    median = {name: statistics.median(values) for name, values in times.items()}
    print(
        f"titan-validate --no-cache, {args.repeat} runs each (interleaved) after 2 warm-up "
        "rounds; fresh process per run, warm bytecode cache; median ms (best)"
    )
    _table(median, times, checks)
    for name in (UPSTREAM, OWN):
        print(f"{ONE + smallest[name]}: {median[ONE + smallest[name]] * 1000:.1f} ms")
    print(f"{FLOOR}: {median[FLOOR] * 1000:.1f} ms ({min(times[FLOOR]) * 1000:.1f})")
    marginal = {
        name: (median[name] - median[ONE + smallest[name]]) / (checks[name][3] - 1)
        for name in (UPSTREAM, OWN)
    }
    print(
        "per function above a one-function module, (all - one) / (functions - 1): "
        f"upstream {marginal[UPSTREAM] * 1000:.2f} ms, titan's own {marginal[OWN] * 1000:.2f} ms, "
        f"ratio {marginal[UPSTREAM] / marginal[OWN]:.3f}x"
    )
    ratios = _ratios(median, checks)
    print(
        f"upstream static / titan's own (medians): {ratios[0]:.3f}x per function (target <= 1.0), "
        f"{ratios[1]:.3f}x per file, {ratios[2]:.3f}x in total"
    )

    print(f"\nin-process (titan.cli.validate.run, one process), {args.repeat} calls each")
    in_median = {name: statistics.median(values) for name, values in in_process.items()}
    _table(in_median, in_process, checks)
    ratios = _ratios(in_median, checks)
    print(
        f"upstream static / titan's own (medians): {ratios[0]:.3f}x per function, "
        f"{ratios[1]:.3f}x per file, {ratios[2]:.3f}x in total"
    )

    fns = checks[UPSTREAM][3]
    print(
        f"\nstatic reading alone (check_tree over {len(upstream_files)} parsed modules, {fns} "
        f"functions): {statistics.median(alone) * 1000:.1f} ms median "
        f"({min(alone) * 1000:.1f} best) = {statistics.median(alone) * 1000 / fns:.3f} ms per "
        f"function; first call, tables imported: {first * 1000:.1f} ms"
    )
    print(f"torch or torchtitan imported by the static check: {', '.join(imported) or 'neither'}")
    return 1 if imported else 0


if __name__ == "__main__":
    raise SystemExit(main())

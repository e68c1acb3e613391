"""CPU seconds of the test suite's titan-train launches, started cold and warm.

The suite (``make test``) starts hundreds of short ``titan-train`` runs, on one process and
under torchrun, on a 2-core machine where its CPU time is its wall time. ``tests.warm_start``
forks them from a server that has imported torch and titan's modules; this bench measures what
that saves, against the named baseline of the same launches started cold (``TITAN_TEST_COLD=1``:
``python -m titan.train`` and torchrun's ``-m titan.train`` workers), in the same run:

- ``one process``: ``--runs`` two-step runs of the debug TOML, one after another;
- ``torchrun, 2 ranks``: ``--runs`` two-step FSDP launches of the same TOML.

CPU time is this process's children's (``RUSAGE_CHILDREN``), so the warm side includes its
server: started, used for every run of one kind and closed inside that kind's measurement. Each side
also checks that its runs log the same losses, bit for bit, as the cold ones.

    .venv/bin/python bench/suite_launches.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import warm_start  # noqa: E402
from tests.training_runs import (  # noqa: E402
    DEBUG_TOML,
    SEED,
    SMALL,
    Launch,
    loss_bits,
    titan_trains,
)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def launches(folder: Path, runs: int, nproc: int) -> list[list[str]]:
    """``runs`` launches one after another; each one's losses, as bits."""
    args = ["--job.config_file", str(DEBUG_TOML), *SMALL, *SEED, "--training.steps", "2"]
    found = []
    for index in range(runs):
        (run,) = titan_trains(
            [Launch(args, dump_folder=folder / f"{nproc}-{index}", legacy=True, nproc=nproc)]
        )
        run.check()
        found.append(loss_bits(run.losses))
    return found


def measure(how: str, runs: int) -> dict[str, tuple[float, float, list]]:
    """{kind: (CPU seconds, wall seconds, losses)} for both kinds of launch, started ``how``.
    A warm kind starts its own server and closes it (its CPU counts once it has been waited
    for), so each kind pays for one server start."""
    if how == "cold":
        os.environ["TITAN_TEST_COLD"] = "1"
    else:
        os.environ.pop("TITAN_TEST_COLD", None)
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for kind, nproc in (("one process", 1), ("torchrun, 2 ranks", 2)):
            before, wall = children_cpu(), time.perf_counter()
            losses = launches(Path(folder), runs, nproc)
            if warm_start._server is not None:
                warm_start._server.close()
                warm_start._server = None
            results[kind] = (children_cpu() - before, time.perf_counter() - wall, losses)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    cold = measure("cold", options.runs)
    warm = measure("warm", options.runs)
    print(
        f"{options.runs} two-step debug runs of each kind; CPU seconds per run (wall in brackets)"
    )
    print(f"{'launch':<20} {'cold (baseline)':>18} {'warm':>18} {'warm/cold':>10}")
    same = True
    for kind in cold:
        (cold_cpu, cold_wall, cold_losses), (warm_cpu, warm_wall, warm_losses) = (
            cold[kind],
            warm[kind],
        )
        same &= cold_losses == warm_losses
        runs = options.runs
        print(
            f"{kind:<20} {cold_cpu / runs:>8.2f} ({cold_wall / runs:5.2f} s) "
            f"{warm_cpu / runs:>8.2f} ({warm_wall / runs:5.2f} s) {warm_cpu / cold_cpu:>9.2f}x"
        )
    print("losses: " + ("the same bits, cold and warm" if same else "DIFFER between cold and warm"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

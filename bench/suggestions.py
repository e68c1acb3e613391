"""Precision and recall of titan-validate's did-you-mean on fork-style keys and on typos.

Runs every case of tests/data/fork_keys.toml (fork settings, values and sections read from
public torchtitan forks, keys of older torchtitan eras, and typos) through the check, and a
random slip of the hand in every v0.2.2 key and section (three seeds), and prints:

- misleading suggestions: a did-you-mean naming another setting for a fork's own key or value,
  a wrong name for a typo, or a did-you-mean for an older era's key or value;
- typo recall: typos whose hint names the intended key or value alone;
- precision: hints offering a name that offer the right one alone.

To measure another checkout of titan with the same cases, put it first on the path:

    .venv/bin/python bench/suggestions.py [--show N]
    PYTHONPATH=/path/to/other/checkout .venv/bin/python bench/suggestions.py
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.append(str(REPO))  # appended: a checkout on PYTHONPATH is the one measured

from tests import fork_key_cases as cases  # noqa: E402

SEEDS = (0, 1, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", type=int, default=20, help="how many misleading hints to list")
    args = parser.parse_args()

    import titan.schemas

    print(f"titan schemas from {Path(titan.schemas.__file__).parent.parent}")
    start = time.perf_counter()
    outcomes = cases.run_all()
    took = time.perf_counter() - start
    summary = cases.summarize(outcomes)
    counts = ", ".join(f"{summary.cases[v]} {v}" for v in cases.VERDICTS)
    print(f"{cases.DATA.relative_to(REPO)}: {len(outcomes)} cases ({counts}), {took:.2f} s")
    for verdict in cases.VERDICTS:
        judged = {j: n for (v, j), n in sorted(summary.judged.items()) if v == verdict}
        print(f"  {verdict:<6} {judged}")
    print(f"misleading suggestions: {summary.misleading}")
    for outcome in [o for o in outcomes if o.judged == "misleading"][: args.show]:
        print(f"  {outcome.case.label}  ->  {outcome.hint}")
    print(f"typo recall (data file): {summary.typos_right}/{summary.typos} = {summary.recall:.1%}")
    print(
        f"precision (data file): {summary.offered_right}/{summary.offered} hints that name "
        f"something name the right one alone = {summary.precision:.1%}"
    )
    right = total = offered = offered_right = 0
    for seed in SEEDS:
        slips = cases.summarize(cases.run_all(cases.random_typos(seed)))
        right, total = right + slips.typos_right, total + slips.typos
        offered, offered_right = offered + slips.offered, offered_right + slips.offered_right
    print(
        f"typo recall (a random slip in every v0.2.2 name, seeds {SEEDS}): "
        f"{right}/{total} = {right / total:.1%}; precision {offered_right}/{offered} = "
        f"{offered_right / offered:.1%}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

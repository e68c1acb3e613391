"""Train a registry function in upstream torchtitan 0.3.0 on CPU and write what it logged as JSON.

Run by the tests with the upstream environment's interpreter (never imported by titan's)::

    python tests/upstream/train_runner.py MODULE.py FUNCTION --out run.json \\
        [--set training.steps=3 ...] [--batches batches.pt | --repeat-first-batch]
        [--save-initial-weights DIR]

``--set PATH=VALUE`` sets a field of the returned ``Trainer.Config`` (VALUE is a Python literal,
else a string), so a test shrinks a run without editing the module it came from. ``--batches``
is a ``torch.save``\\d list of ``(inputs, labels)`` pairs to train on instead of the config's data
loader (``bench/upstream_shim.FixedBatches``); ``--repeat-first-batch`` trains every step on the
first batch of the config's own loader. The JSON holds the shim's ``Run`` fields.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import upstream_shim  # noqa: E402  (found through the path above)


def literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def set_field(config: Any, assignment: str) -> None:
    """``a.b.c=VALUE``: set field ``c`` of ``config.a.b``, which must already have it."""
    path, eq, value = assignment.partition("=")
    if not eq:
        raise SystemExit(f"--set {assignment!r}: expected PATH=VALUE")
    *parents, name = path.split(".")
    owner = config
    for part in parents:
        owner = getattr(owner, part)
    if not hasattr(owner, name):
        raise SystemExit(f"--set {path}: {type(owner).__qualname__} has no field {name!r}")
    setattr(owner, name, literal(value))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("module", help="registry module file")
    parser.add_argument("function", help="function of the module that returns Trainer.Config")
    parser.add_argument("--out", required=True, help="where to write the JSON result")
    parser.add_argument("--set", action="append", default=[], metavar="PATH=VALUE")
    parser.add_argument("--batches", help="torch.save'd list of (inputs, labels) to train on")
    parser.add_argument("--repeat-first-batch", action="store_true")
    parser.add_argument("--save-initial-weights", metavar="DIR")
    args = parser.parse_args()

    upstream_shim.apply()
    from torchtitan.tools.logging import init_logger

    init_logger()
    config = upstream_shim.load_config(args.module, args.function)
    for assignment in args.set:
        set_field(config, assignment)
    batches = None
    if args.batches:
        import torch

        batches = torch.load(args.batches, weights_only=True)
    run = upstream_shim.train(
        config,
        batches=batches,
        repeat_first_batch=args.repeat_first_batch,
        save_initial_weights=args.save_initial_weights,
    )
    Path(args.out).write_text(json.dumps(dataclasses.asdict(run), indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()

"""``titan-train``: run a training job from a registry config or from a legacy TOML.

    titan-train --config llama3_debugmodel --training.steps 3
    titan-train --job.config_file legacy_configs/llama3/debug_model.toml --training.steps 3
    torchrun --nproc-per-node 8 -m titan.train --config llama3_8b

Exit status: 0 the run finished, 1 the config or the run failed (the message says why),
2 the command line is malformed, 130 interrupted.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

USAGE = __doc__.split("\n\n")[1].rstrip() + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """The ``titan-train`` command; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        sys.stdout.write(f"usage:\n{USAGE}\n{__doc__.split(chr(10) * 2)[2]}\n")
        return 0 if args else 2
    from titan.cli.train_config import UsageError, load

    rank = int(os.environ.get("RANK", "0"))
    _configure_logging(rank)
    try:
        loaded = load(
            args,
            world_size=int(os.environ.get("WORLD_SIZE", "1")),
            stdout=sys.stdout,
            stderr=sys.stderr,
        )
    except UsageError as error:
        sys.stderr.write(f"titan-train: error: {error}\n")
        return 2
    if loaded.config is None:
        return loaded.exit_code
    logging.getLogger("titan").info("running the %s", loaded.form)
    return run(loaded.config)


def run(config: object) -> int:
    """Build the trainer ``config`` describes and train; user errors become a message."""
    from titan.training.errors import USER_ERRORS, describe

    trainer = None
    try:
        trainer = config.build()  # type: ignore[attr-defined]
        trainer.train()
    except USER_ERRORS as error:
        sys.stderr.write(f"titan-train: error: {describe(error)}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("titan-train: interrupted\n")
        return 130
    finally:
        if trainer is not None:
            trainer.close()
    return 0


def _configure_logging(rank: int) -> None:
    """``[titan rank R] time LEVEL message`` on stderr; other ranks only show warnings."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"[titan rank{rank}] %(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
    )
    logger = logging.getLogger("titan")
    logger.handlers[:] = [handler]
    logger.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    logger.propagate = False


if __name__ == "__main__":
    sys.exit(main())

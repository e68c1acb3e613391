"""What ``titan-train --preflight``'s checks cost against building the model on the meta device.

Pre-flight and the run's setup call the same checks (``titan.training.run_checks``): tokenizer,
meta model with converters, throw-away optimizer and LR schedule over the meta parameters, rank
0's data loader (locating the dataset, reading no batch), state-dict adapter, output folders and
checkpoint folder. The baseline is the meta-model build with its converters alone, which was the
largest part of pre-flight before it made every check; the ratio says what the other checks add.
A run pays the checks once more than before (its own meta build follows them), so the same
number is its added setup time.

Each config is loaded once; then the baseline and the checks alternate, ``--repeats`` times
after one warm-up each, and the medians are compared. The configs use the test tokenizer and
``c4_test`` (the full-size configs' own assets are not on a development machine).

    .venv/bin/python bench/preflight_cost.py [--repeats N]
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
HERE = ["--hf_assets_path", str(REPO / "tests/assets/tokenizer"), "--dataloader.dataset", "c4_test"]
CASES = {
    "llama3_debugmodel, 1 GPU": (1, ["--config", "llama3_debugmodel"]),
    "llama3_8b, 8 GPUs": (8, ["--config", "llama3_8b", *HERE]),
    "llama3_70b, 64 GPUs": (64, ["--config", "llama3_70b", *HERE]),
}


def _load(args: list[str], ngpu: int, dump: str):
    from titan.cli.train_config import load

    sink = io.StringIO()
    loaded = load([*args, "--dump_folder", dump], world_size=ngpu, stdout=sink, stderr=sink)
    assert loaded.config is not None, sink.getvalue()
    return loaded.config


def _meta_build(config, ngpu: int) -> None:
    from titan.distributed.parallel_dims import ParallelDims
    from titan.training.run_checks import model_config_of
    from titan.training.weights import DTYPES, default_dtype

    parallel_dims = ParallelDims.from_config(config.parallelism, world_size=ngpu)
    model_config = model_config_of(config, None)
    with torch.device("meta"), default_dtype(DTYPES[config.training.dtype]):
        model = model_config.build()
    converters = config.model_converters.build(
        parallel_dims=parallel_dims, model_compile_enabled=False
    )
    converters.convert(model)


def _checks(config, ngpu: int) -> None:
    from titan.training.folder_checks import check_folders
    from titan.training.run_checks import check_config

    checked = check_config(config, world_size=ngpu, warn=False)
    check_folders(config, sd_adapter=checked.sd_adapter, probe_locks=True)


def main() -> None:
    """Print one line per config: baseline and checks, medians, and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    torch.set_num_threads(1)
    print(f"{'config':<28} {'meta build':>12} {'all checks':>12} {'ratio':>7}")
    for name, (ngpu, args) in CASES.items():
        with tempfile.TemporaryDirectory() as dump:
            config = _load(args, ngpu, str(Path(dump) / "run"))
            timings: dict[str, list[float]] = {"meta": [], "checks": []}
            for repeat in range(options.repeats + 1):
                for label, work in (("meta", _meta_build), ("checks", _checks)):
                    begin = time.perf_counter()
                    work(config, ngpu)
                    if repeat:  # the first round warms caches and imports
                        timings[label].append(time.perf_counter() - begin)
        meta, checks = (statistics.median(timings[k]) for k in ("meta", "checks"))
        print(f"{name:<28} {meta * 1000:>10.0f}ms {checks * 1000:>10.0f}ms {checks / meta:>6.2f}x")


if __name__ == "__main__":
    main()

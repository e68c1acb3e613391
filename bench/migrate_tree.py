"""Time ``titan-migrate DIR --out-dir OUT`` on a generated tree of 500 job TOMLs against
``titan-validate DIR`` on the same folder.

The TOMLs are generated (fixed seed) to look like a team's config folder: six model families and
their flavors, FSDP / HSDP / tensor parallel layouts, checkpoint, float8 and compile sections,
activation checkpointing, and comments, in ``configs/<family>/<group>/`` folders of about 20
files each. Every one is valid: ``titan-validate`` must pass the tree before anything is timed.

Both commands run as fresh processes (as a user or CI runs them), with warm bytecode caches (a
private ``PYTHONPYCACHEPREFIX`` the warm-up runs fill, bytecode writing on even where the
environment sets ``PYTHONDONTWRITEBYTECODE``); best and median of ``--repeat`` runs, the time per
file, and the ratio migrate / validate (migrating reads and checks each file exactly as
validating does, then plans and writes code: the ratio is what the migration itself costs).
One in-process run checks that migrating never imports torch; ``--profile`` prints where an
in-process migration spends its time.

    .venv/bin/python bench/migrate_tree.py [--files 500] [--repeat 7] [--profile]
"""

from __future__ import annotations

import argparse
import io
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
sys.path.insert(0, str(REPO))

# family -> flavors to draw from (names of titan.schemas.flavors.FLAVORS)
FAMILIES = {
    "llama3": ("debugmodel", "8B", "70B", "405B"),
    "qwen3": ("debugmodel", "0.6B", "1.7B", "8B", "32B", "debugmodel_moe", "30B-A3B"),
    "deepseek_v3": ("debugmodel", "16B", "671B"),
    "llama4": ("debugmodel", "17bx16e", "17bx128e"),
    "gpt_oss": ("debugmodel", "20b"),
    "llama3_ft": ("debugmodel", "8B"),
}
GROUPS = ("pretrain", "ablations", "long_context", "smoke")


def job_toml(index: int, rng: random.Random) -> tuple[str, str, str]:
    """(family folder, group, TOML text) of the ``index``-th generated job."""
    from titan.schemas.flavors import flavor

    family = rng.choice(sorted(FAMILIES))
    name = rng.choice(FAMILIES[family])
    spec = flavor(family, name)
    tp = rng.choice(
        [t for t in (1, 1, 2, 4, 8) if spec.n_heads % t == 0 and spec.n_kv_heads % t == 0]
    )
    replicate = rng.choice((1, 1, 1, 2))
    compile_on = rng.random() < 0.4
    float8 = family in ("llama3", "qwen3") and rng.random() < 0.3
    lines = []
    if rng.random() < 0.5:
        lines += [f"# {family} {name}: generated job {index} for the migrate-tree bench", ""]
    lines += [
        "[job]",
        f'dump_folder = "./outputs/{family}_{index}"',
        f'description = "{family} {name} run {index}"',
        "",
        "[model]",
        f'name = "{"llama3" if family == "llama3_ft" else family}"',
        f'flavor = "{name}"',
        'hf_assets_path = "./assets/hf/tokenizer"',
    ]
    if float8:
        lines.append('converters = ["quantize.linear.float8"]  # float8 linears')
    steps = rng.choice((10, 100, 1000, 3000, 10000))
    lines += [
        "",
        "[training]",
        f"local_batch_size = {rng.choice((1, 2, 4, 8))}",
        f"seq_len = {rng.choice((2048, 4096, 8192))}",
        f"steps = {steps}",
        f'dataset = "{rng.choice(("c4", "c4_test"))}"',
        f"max_norm = {rng.choice((1.0, 0.5))}  # grad norm clipping",
        "",
        "[optimizer]",
        'name = "AdamW"',
        f"lr = {rng.choice((8e-4, 3e-4, 1.5e-4))}",
        "eps = 1e-8",
        "",
        "[lr_scheduler]",
        f"warmup_steps = {max(1, steps // 5)}",
        f'decay_type = "{rng.choice(("linear", "cosine", "sqrt"))}"',
        "",
        "[parallelism]",
        f"data_parallel_replicate_degree = {replicate}",
        "data_parallel_shard_degree = -1",
        f"tensor_parallel_degree = {tp}",
    ]
    if tp > 1 and compile_on and rng.random() < 0.5:
        lines.append("enable_async_tensor_parallel = true  # needs compile")
    if rng.random() < 0.6:
        lines += [
            "",
            "[checkpoint]",
            "enable = true",
            f'folder = "checkpoint_{index}"',
            f"interval = {rng.choice((100, 500, 1000))}",
            f"keep_latest_k = {rng.choice((0, 2, 5))}",
            f'async_mode = "{rng.choice(("disabled", "async"))}"',
        ]
    mode = rng.choice(("none", "selective", "full"))
    lines += ["", "[activation_checkpoint]", f'mode = "{mode}"']
    if mode == "selective":
        lines.append(f'selective_ac_option = "{rng.choice(("op", "2"))}"  # op-level or every 2nd')
    if compile_on:
        lines += ["", "[compile]", "enable = true", 'components = ["model", "loss"]']
    if float8:
        lines += [
            "",
            "[quantize.linear.float8]",
            "enable_fsdp_float8_all_gather = true",
            "precompute_float8_dynamic_scale_for_fsdp = true",
            'filter_fqns = ["output"]',
        ]
    lines += ["", "[metrics]", f"log_freq = {rng.choice((1, 10, 50))}"]
    if rng.random() < 0.3:
        lines.append("enable_tensorboard = true")
    return family, rng.choice(GROUPS), "\n".join(lines) + "\n"


def generate(root: Path, count: int) -> list[Path]:
    rng = random.Random(20261123)
    paths = []
    for index in range(count):
        family, group, text = job_toml(index, rng)
        path = root / family / group / f"job_{index:04d}.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def _time(command: list[str], repeat: int, env: dict[str, str], cwd: Path) -> list[float]:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, cwd=cwd, env=env)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr!r}")
    return times


def _in_process(root: Path, out: Path) -> float:
    """One migration in this process; asserts torch stayed out of it."""
    from titan.cli import migrate

    start = time.perf_counter()
    status = migrate.run(
        [str(root), "--out-dir", str(out)], stdout=io.StringIO(), stderr=io.StringIO()
    )
    elapsed = time.perf_counter() - start
    assert status == 0, f"titan-migrate exited {status}"
    assert "torch" not in sys.modules, "titan-migrate imported torch"
    return elapsed


def _profile(root: Path, out: Path) -> None:
    import cProfile
    import pstats

    from titan.cli import migrate

    profiler = cProfile.Profile()
    profiler.enable()
    migrate.run([str(root), "--out-dir", str(out)], stdout=io.StringIO(), stderr=io.StringIO())
    profiler.disable()
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.sort_stats("cumulative").print_stats(30)
    stats.sort_stats("tottime").print_stats(15)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="also profile one in-process run")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        root = work / "configs"
        generate(root, args.files)
        env = dict(os.environ)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        validate = [str(BIN / "titan-validate"), "configs"]
        migrate = [str(BIN / "titan-migrate"), "configs", "--out-dir", "out"]
        # Warm-up, and the promise that the tree is valid: both must exit 0.
        _time(validate, 2, env, work)
        _time(migrate, 2, env, work)
        modules = sorted((work / "out").rglob("config_registry.py"))
        in_process = _in_process(root, work / "out-in-process")
        results = {
            "titan-validate DIR": _time(validate, args.repeat, env, work),
            "titan-migrate DIR --out-dir OUT": _time(migrate, args.repeat, env, work),
        }
        if args.profile:
            _profile(root, work / "out-profile")
    print(
        f"{args.files} files in {len(modules)} folders, {args.repeat} runs each, fresh process "
        "per run, warm bytecode caches"
    )
    print(
        f"{'command':<34} {'best s':>8} {'median s':>9} {'best ms/file':>13} {'median ms/file':>15}"
    )
    for name, times in results.items():
        best, median = min(times), statistics.median(times)
        print(
            f"{name:<34} {best:>8.3f} {median:>9.3f} {best * 1000 / args.files:>13.2f} "
            f"{median * 1000 / args.files:>15.2f}"
        )
    migrate_times = results["titan-migrate DIR --out-dir OUT"]
    validate_times = results["titan-validate DIR"]
    print(
        f"ratio (migrate / validate): best {min(migrate_times) / min(validate_times):.2f}x, "
        f"median {statistics.median(migrate_times) / statistics.median(validate_times):.2f}x"
    )
    print(f"in-process migration: {in_process:.3f} s; torch never imported")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``make demo``: what titan does today, on the project's own legacy configs.

1. validate every TOML in legacy_configs/ (clean);
2. plant typical mistakes in a copy of the llama3 debug config and show what titan-validate says;
3. export the JSON Schema that editors use for completion;
4. check the hand-written registry twin of the llama3 debug config (titan-validate --config),
   once as written and once with a tensor-parallel override that cannot fit 8 GPUs;
5. titan-diff the debug config against its float8 variant;
6. titan-migrate the llama3 debug TOML into a config_registry.py, validate the generated
   module, and titan-diff the TOML against it (no differences: one plan, two renderers);
7. titan-train both forms a few steps on CPU (the TOML through --job.config_file, the generated
   registry through --config) and compare their losses bit for bit.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

from titan.cli.validate import run

REPO = Path(__file__).resolve().parents[1]
DEBUG_TOML = REPO / "legacy_configs" / "llama3" / "debug_model.toml"

# A few steps of the debug config, shortened to 8 × 512 tokens per step and computed in float32
# (most CPUs have no bfloat16 matrix instructions and emulate them far slower), so both forms train
# in about a minute on two cores. The seed is given because torch otherwise seeds every process
# randomly, and two runs could not agree bit for bit.
TRAIN_FLAGS = [
    "--training.steps",
    "4",
    "--training.seq_len",
    "512",
    "--training.mixed_precision_param",
    "float32",
    "--debug.seed",
    "0",
]

# (what the user meant, the line as they wrote it wrongly)
MISTAKES = {
    "steps = ": "stpes = 10  # typo of training.steps",
    "seq_len = ": 'seq_len = "2048"  # a string where an int belongs',
}


def _banner(text: str) -> None:
    print(f"\n=== {text} ===", flush=True)


def main() -> int:
    _banner("1. titan-validate legacy_configs/")
    clean = run([str(REPO / "legacy_configs")])

    _banner("2. the llama3 debug config with mistakes planted in it")
    lines = DEBUG_TOML.read_text(encoding="utf-8").splitlines()
    for start, wrong in MISTAKES.items():  # first occurrence only: the [training] one
        index = next(i for i, line in enumerate(lines) if line.startswith(start))
        lines[index] = wrong
    lines += ["", "[parallelizm]", "tensor_parallel_degree = 2", "", "[float8]", "emulate = true"]
    with tempfile.TemporaryDirectory() as tmp:
        broken = Path(tmp) / "debug_model_with_typos.toml"
        broken.write_text("\n".join(lines) + "\n", encoding="utf-8")
        caught = run([str(broken), "--ngpu", "8"])
        schema = Path(tmp) / "torchtitan-v0.2.2.schema.json"
        _banner("3. titan-validate --export-json-schema")
        exported = run(["--export-json-schema", str(schema)])
        size = schema.stat().st_size if exported == 0 else 0
        print(f"JSON Schema: {size} bytes (the repository ships it as schemas/json/)")

    _banner("4. titan-validate --config llama3_debugmodel (the registry form)")
    registry_clean = run(["--config", "llama3_debugmodel", "--ngpu", "8"])
    print("... and with --parallelism.tensor_parallel_degree 3 on 8 GPUs:")
    registry_caught = run(
        [
            "--config",
            "llama3_debugmodel",
            "--ngpu",
            "8",
            "--parallelism.tensor_parallel_degree",
            "3",
        ]
    )

    _banner("5. titan-diff llama3_debugmodel llama3_debugmodel_float8")
    from titan.cli.diff import main as diff

    differs = diff(["llama3_debugmodel", "llama3_debugmodel_float8", "--color", "never"])

    _banner("6. titan-migrate legacy_configs/llama3/debug_model.toml -o config_registry.py")
    from titan.cli.migrate import main as migrate

    with tempfile.TemporaryDirectory() as tmp:
        generated = Path(tmp) / "config_registry.py"
        toml = os.path.relpath(DEBUG_TOML)  # as a user would name it, from the repository
        migrated = migrate([toml, "-o", str(generated), "--color", "never"])
        print(generated.read_text(encoding="utf-8"))
        print("... titan-validate config_registry.py (every function in the module):")
        migrated_clean = run([str(generated), "--no-cache"])
        print("... titan-diff debug_model.toml config_registry.py:llama3_debugmodel:")
        twins = diff([toml, f"{generated}:llama3_debugmodel", "--color", "never"])

        _banner("7. titan-train both forms on CPU, 4 steps each")
        forms = {
            "TOML": ["--job.config_file", toml, *TRAIN_FLAGS, "--job.dump_folder"],
            "registry": [
                "--registry",
                str(generated),
                "--config",
                "llama3_debugmodel",
                *TRAIN_FLAGS,
                "--dump_folder",
            ],
        }
        losses: dict[str, list[float]] = {}
        trained = []
        for name, flags in forms.items():
            dump = Path(tmp) / f"run-{name}"
            print(f"$ titan-train {' '.join(flags)} {dump.name}", flush=True)
            trained.append(
                subprocess.call([sys.executable, "-m", "titan.train", *flags, str(dump)])
            )
            losses[name] = _losses(dump / "metrics.jsonl")
        identical = _print_losses(losses)

    _banner("summary")
    print(f"legacy_configs/: exit {clean} (0 = clean)")
    print(f"planted mistakes: exit {caught} (1 = findings reported)")
    print(f"registry config: exit {registry_clean}; with a bad override: exit {registry_caught}")
    print(f"titan-diff: exit {differs} (1 = the configs differ)")
    print(f"titan-migrate: exit {migrated}; generated config: exit {migrated_clean}; ", end="")
    print(f"TOML vs generated: exit {twins} (0 = the same config)")
    print(f"titan-train: exits {trained}; losses bitwise identical: {identical}")
    results = (clean, caught, exported, registry_clean, registry_caught, differs)
    ok = results == (0, 1, 0, 0, 1, 1) and (migrated, migrated_clean, twins) == (0, 0, 0)
    ok = ok and trained == [0, 0] and identical
    print("demo OK" if ok else "demo FAILED")
    return 0 if ok else 1


def _losses(metrics: Path) -> list[float]:
    if not metrics.exists():
        return []
    lines = metrics.read_text(encoding="utf-8").splitlines()
    return [record["loss"] for record in map(json.loads, lines) if "loss" in record]


def _print_losses(losses: dict[str, list[float]]) -> bool:
    """The two loss columns side by side with their bits; whether every pair is identical."""
    toml, registry = losses["TOML"], losses["registry"]
    print(f"\n{'step':>4}  {'TOML form':>20}  {'generated registry':>20}  same bits")
    for step, (a, b) in enumerate(zip(toml, registry, strict=False), start=1):
        same = struct.pack(">d", a) == struct.pack(">d", b)
        print(f"{step:>4}  {a:>20.17g}  {b:>20.17g}  {'yes' if same else 'NO'}")
    identical = len(toml) == len(registry) > 0 and all(
        struct.pack(">d", a) == struct.pack(">d", b) for a, b in zip(toml, registry, strict=True)
    )
    verdict = "bitwise identical" if identical else "DIFFERENT"
    print(f"the two forms' losses are {verdict} over {len(toml)} steps")
    return identical


if __name__ == "__main__":
    sys.exit(main())

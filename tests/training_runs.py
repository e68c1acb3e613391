"""Run ``titan-train`` for real, in fresh processes (one, or several under torchrun), and read
back what it wrote: the exit code, the output, and ``metrics.jsonl``.

Every run here uses the llama3 debug model on the shipped ``c4_test`` set with a short sequence
and a small batch, so that ten steps take seconds on two CPU cores.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tests import warm_start

REPO = Path(__file__).resolve().parents[1]
DEBUG_TOML = REPO / "legacy_configs" / "llama3" / "debug_model.toml"

# Float32 forward passes. The files and configs default to bfloat16 mixed precision, which a CPU
# without AVX512-BF16/AMX (CI's, most of them) emulates 6-14x slower than float32 (measured on the
# deepseek_v3 debug model: 13 against 178 tokens/s). Runs that are not about bfloat16 take these
# flags; the tests of mixed precision itself name bfloat16 after them.
FLOAT32 = ["--training.mixed_precision_param", "float32"]
# The same small shape for both forms: the flag names are the legacy ones where they differ.
SMALL = ["--training.seq_len", "64", "--training.local_batch_size", "2", *FLOAT32]
# Without a seed torch seeds itself randomly and no two runs agree (as in torchtitan).
SEED = ["--debug.seed", "7"]
HANG_SECONDS = 600.0
"""How long a test waits for a run before calling it hung: a guard against a hang only, far
beyond any run's time on a loaded 2-core machine (tests synchronise on what runs report)."""


@dataclasses.dataclass
class Run:
    """One finished ``titan-train`` run."""

    returncode: int
    stdout: str
    stderr: str
    dump_folder: Path

    @property
    def metrics(self) -> list[dict]:
        path = self.dump_folder / "metrics.jsonl"
        lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
        return [json.loads(line) for line in lines]

    @property
    def losses(self) -> list[float]:
        return [m["loss"] for m in self.metrics if "loss" in m]

    def check(self) -> Run:
        assert self.returncode == 0, f"exit {self.returncode}\n{self.stdout}\n{self.stderr[-6000:]}"
        return self


def loss_bits(losses: list[float]) -> list[str]:
    """The exact bit patterns of the losses (float64 as written by json)."""
    return [struct.pack(">d", loss).hex() for loss in losses]


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", PYTHONHASHSEED="0", **extra)
    env.pop("WORLD_SIZE", None)
    env.pop("RANK", None)
    return env


@dataclasses.dataclass
class Launch:
    """One ``titan-train`` run to start: its flags, where it writes, and how it is launched."""

    args: list[str]
    """The ``titan-train`` flags, without the dump folder's."""
    dump_folder: Path
    """Where the run writes (``metrics.jsonl``, checkpoints)."""
    legacy: bool = False
    """Whether ``args`` are the TOML form's (its dump folder flag is ``--job.dump_folder``)."""
    nproc: int = 1
    """Processes: one is ``python -m titan.train``, more are launched by torchrun."""
    cwd: Path = REPO
    """The working folder of the launch."""

    def titan_args(self) -> list[str]:
        """``titan-train``'s flags: ``args`` and the dump folder flag of its form."""
        dump_flag = "--job.dump_folder" if self.legacy else "--dump_folder"
        return [*self.args, dump_flag, str(self.dump_folder)]

    def torchrun_args(self) -> list[str]:
        """torchrun's arguments for ``nproc`` processes of ``titan-train`` (``titan_args``)."""
        return ["--standalone", f"--nproc-per-node={self.nproc}", "-m", "titan.train"] + (
            self.titan_args()
        )

    def command(self) -> list[str]:
        """The command line: ``titan-train ARGS`` with the dump folder flag of its form, on
        ``nproc`` processes (torchrun when more than one)."""
        if self.nproc == 1:
            return [sys.executable, "-m", "titan.train", *self.titan_args()]
        return [sys.executable, "-m", "torch.distributed.run", *self.torchrun_args()]


def titan_trains(launches: list[Launch], *, timeout: int = 600) -> list[Run]:
    """Every launch started at once, then each waited for: independent runs of one test share the
    machine's cores instead of queueing (every titan-train process computes on one thread). The
    output goes to files, so no run stalls on a full pipe while another is read. A run still going
    after ``timeout`` seconds is killed, with the others, and the test fails."""
    deadline = time.monotonic() + timeout
    started = []
    try:
        for launch in launches:
            stdout, stderr = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
            if launch.nproc == 1:
                process = start(launch.titan_args(), cwd=launch.cwd, stdout=stdout, stderr=stderr)
            else:  # torchrun, started warm as its workers are when it can be
                args, env = torchrun(launch.torchrun_args(), child_env())
                process = start(
                    args,
                    module="torch.distributed.run",
                    cwd=launch.cwd,
                    env=env,
                    stdout=stdout,
                    stderr=stderr,
                )
            started.append((launch, process, stdout, stderr))
        runs = []
        for launch, process, stdout, stderr in started:
            process.wait(timeout=max(deadline - time.monotonic(), 0))
            stdout.seek(0)
            stderr.seek(0)
            runs.append(Run(process.returncode, stdout.read(), stderr.read(), launch.dump_folder))
        return runs
    finally:
        for _, process, stdout, stderr in started:
            if process.poll() is None:
                process.kill()
                process.wait()
            stdout.close()
            stderr.close()


def start(
    args: list[str],
    *,
    module: str = "titan.train",
    cwd: Path = REPO,
    env: dict[str, str] | None = None,
    stdout,
    stderr,
):
    """``python -m MODULE ARGS`` (``titan-train ARGS`` by default) as one process, its output to
    ``stdout`` and ``stderr`` (files): forked by the warm-start server of ``tests.warm_start``
    when it can serve ``env`` (default ``child_env()``), else a fresh interpreter. Returns a
    ``subprocess.Popen`` or what the tests use of one (``pid``, ``poll``, ``wait``,
    ``send_signal``, ``kill``, ``returncode``)."""
    env = child_env() if env is None else env
    server = warm_start.server()
    if server is not None:
        run = server.start(args, module=module, cwd=cwd, env=env, stdout=stdout, stderr=stderr)
        if run is not None:
            return run
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=stdout,
        stderr=stderr,
        text=True,
        env=env,
        cwd=cwd,
    )


def torchrun(args: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """torchrun's ARGS (its options, then ``-m MODULE ARGS`` or ``SCRIPT ARGS``) and its
    environment, with each worker warm-started by this process's server through
    ``tests.warm_worker`` when there is one, else as given."""
    server = warm_start.server()
    if server is None:
        return args, env
    split = next(index for index, arg in enumerate(args) if not arg.startswith("--"))
    options, rest = args[:split], args[split:]
    worker = ["-m", "tests.warm_worker"]
    if rest[0] == "-m":
        worker += rest[1:]
    else:
        worker += ["--script", *rest]
    return [*options, *worker], {**env, warm_start.ADDRESS_VARIABLE: server.address}


def run_module(
    args: list[str],
    *,
    module: str = "titan.train",
    cwd: Path = REPO,
    env: dict[str, str] | None = None,
    timeout: int = 600,
) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` exactly as given (see ``start``), waited for: what
    ``subprocess.run(..., capture_output=True, text=True)`` returns. A run still going after
    ``timeout`` seconds is killed and the test fails."""
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        process = start(args, module=module, cwd=cwd, env=env, stdout=stdout, stderr=stderr)
        try:
            code = process.wait(timeout=timeout)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        stdout.seek(0)
        stderr.seek(0)
        return subprocess.CompletedProcess(args, code, stdout.read(), stderr.read())


def run_train(
    args: list[str], *, cwd: Path = REPO, env: dict[str, str] | None = None, timeout: int = 600
) -> subprocess.CompletedProcess:
    """``titan-train ARGS`` exactly as given, as one process, waited for (see ``run_module``)."""
    return run_module(args, cwd=cwd, env=env, timeout=timeout)


def titan_train(
    args: list[str],
    *,
    dump_folder: Path,
    legacy: bool,
    nproc: int = 1,
    timeout: int = 600,
    cwd: Path = REPO,
) -> Run:
    """``titan-train ARGS`` with the dump folder flag of its form, on ``nproc`` processes."""
    launch = Launch(args, dump_folder=dump_folder, legacy=legacy, nproc=nproc, cwd=cwd)
    return titan_trains([launch], timeout=timeout)[0]


def ranks_alone(args: list[str], *, nproc: int, timeout: int = 600) -> tuple[list[int], str]:
    """``titan-train ARGS`` on ``nproc`` processes started as torchrun's agent starts its workers
    (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT, and a store the launcher serves: here this
    process's), each left to end on its own: (every rank's exit code, every rank's output in rank
    order). torchrun itself stops the other ranks as soon as one exits, which could cut a slower
    rank's own message short: tests that read every rank's message launch this way."""
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, None, True, wait_for_workers=False, multi_tenant=True)
    started = []
    try:
        for rank in range(nproc):
            output = tempfile.TemporaryFile("w+")
            env = child_env(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(store.port))
            env.update(WORLD_SIZE=str(nproc), RANK=str(rank), LOCAL_RANK=str(rank))
            env.update(LOCAL_WORLD_SIZE=str(nproc), TORCHELASTIC_USE_AGENT_STORE="True")
            process = subprocess.Popen(
                [sys.executable, "-m", "titan.train", *args],
                cwd=REPO,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
            )
            started.append((process, output))
        codes = [process.wait(timeout=timeout) for process, _ in started]
        texts = []
        for _, output in started:
            output.seek(0)
            texts.append(output.read())
        return codes, "".join(texts)
    finally:
        for process, output in started:
            if process.poll() is None:
                process.kill()
                process.wait()
            output.close()


def migrated(toml: Path, folder: Path, *, function: str) -> Path:
    """``titan-migrate TOML -o FOLDER/config_registry.py``; the registry defines ``function``."""
    target = folder / "config_registry.py"
    done = subprocess.run(
        [sys.executable, "-m", "titan.cli.migrate", str(toml), "-o", str(target), "-q"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert f"def {function}() -> Trainer.Config:" in target.read_text(encoding="utf-8")
    return target


def both_forms(
    registry: Path,
    tmp_path: Path,
    extra: list[str],
    *,
    nproc: int = 1,
    toml: Path = DEBUG_TOML,
    config: str = "llama3_debugmodel",
    timeout: int = 600,
) -> tuple[Run, Run]:
    """The TOML form and the generated-registry form (``registry``'s function ``config``) of the
    same run, with ``extra`` flags; both must succeed. The two forms run side by side (measured
    on the 2-core machine: two 2-process debug runs 25 s one after the other, 19-20 s at once)."""
    launches = [
        Launch(
            ["--job.config_file", str(toml), *SMALL, *SEED, *extra],
            dump_folder=tmp_path / "toml",
            legacy=True,
            nproc=nproc,
        ),
        Launch(
            ["--registry", str(registry), "--config", config, *SMALL, *SEED, *extra],
            dump_folder=tmp_path / "registry",
            legacy=False,
            nproc=nproc,
        ),
    ]
    toml_run, code = titan_trains(launches, timeout=timeout)
    return toml_run.check(), code.check()


def wide_registry(tmp_path: Path) -> Path:
    """A debug model wide enough that a save takes long enough to be interrupted."""
    registry = tmp_path / "config_registry.py"
    registry.write_text(
        "from titan.models.llama3.config_registry import llama3_debugmodel\n\n\n"
        "def wide_debugmodel():\n"
        "    config = llama3_debugmodel()\n"
        "    config.model_spec.model.dim = 1024\n"
        "    config.model_spec.model.n_layers = 4\n"
        "    # bfloat16 is emulated, and slow, on most CPUs; the saves are what these runs time\n"
        "    config.training.mixed_precision_param = 'float32'\n"
        "    return config\n",
        encoding="utf-8",
    )
    return registry


def launch(args: list[str], *, stderr: int = subprocess.DEVNULL) -> subprocess.Popen:
    """``titan-train ARGS`` started in the background as one process (text stderr if piped)."""
    return subprocess.Popen(
        [sys.executable, "-m", "titan.train", *args],
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        text=True,
    )


def signal_when(
    process: subprocess.Popen,
    ready: Callable[[], bool],
    sig: int,
    *,
    poll: float = 0.002,
    timeout: float = 300.0,
) -> None:
    """Send ``sig`` to ``process`` as soon as ``ready()`` holds (or once it has exited)."""
    wait_until(lambda: process.poll() is not None or ready(), poll=poll, timeout=timeout)
    process.send_signal(sig)


def wait_until(ready: Callable[[], bool], *, poll: float = 0.002, timeout: float = 300.0) -> None:
    """Return as soon as ``ready()`` holds, looking every ``poll`` seconds; fail the test when it
    still does not after ``timeout`` seconds (a guard against a hang, far beyond any wait)."""
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, "never reached the awaited state"
        time.sleep(poll)


# A registry built on ``base()`` (defined by the source it is appended to): the model with the
# experts' exact loop, and the model compiled block by block (aot_eager: traced as inductor
# traces, without C++ code generation) with grouped GEMMs asked for.
COMPILE_REGISTRY = """

def eager_loop():
    config = base()
    config.model_spec.model.layer.moe.use_grouped_mm = False
    return config


def compiled():
    config = base()
    config.compile.enable = True
    config.compile.backend = "aot_eager"
    return config
"""


def compiled_and_eager_loop(base_source: str, tmp_path: Path, *, steps: int = 3) -> tuple[Run, Run]:
    """``steps`` steps of the MoE model of ``base_source``'s ``base()``, compiled and eager (the
    experts' loop, which a compiled float32 MoE on CPU runs too); both must succeed."""
    registry = tmp_path / "config_registry.py"
    registry.write_text(base_source + COMPILE_REGISTRY, encoding="utf-8")
    runs = titan_trains(
        [
            Launch(
                ["--registry", str(registry), "--config", name, *SMALL, *SEED]
                + ["--training.steps", str(steps)],
                dump_folder=tmp_path / name,
                legacy=False,
            )
            for name in ("compiled", "eager_loop")
        ]
    )
    return runs[0].check(), runs[1].check()


def parallel_check(script: Path, scenarios: list[str], *, nproc: int, timeout: int = 300) -> str:
    """``torchrun --nproc-per-node NPROC SCRIPT SCENARIO...``: a ``tests/dist_scripts`` check of
    sharded models against one process on gloo ranks. It must succeed and print ``OK
    <scenario>:`` for every scenario; returns its output."""
    args, env = torchrun(
        ["--standalone", f"--nproc-per-node={nproc}", str(script), *scenarios],
        dict(child_env(), PYTHONPATH=str(REPO)),
    )
    done = run_module(args, module="torch.distributed.run", env=env, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    missing = [name for name in scenarios if f"OK {name}:" not in done.stdout]
    assert missing == [], done.stdout[-3000:]
    return done.stdout


@dataclasses.dataclass
class HfRoundTrip:
    """A model trained, exported in Hugging Face's format by its run's last save, and imported
    by a new run."""

    folder: Path
    """The exported step folder (``model.safetensors`` and ``config.json``)."""
    trained: dict
    """The trained model's state dict, as the exporting run ended."""
    loaded: dict
    """The importing run's model state dict after it loaded the export."""
    observed: object
    """What ``observe`` returned on the trained model before its run closed (None without)."""


def hf_round_trip(
    make_config: Callable[[], object],
    tmp_path: Path,
    *,
    observe: Callable[[object], object] | None = None,
) -> HfRoundTrip:
    """Train ``make_config()``'s run (checkpointing on, its last save model-only in HF format
    under ``tmp_path/export``), then build a second run that loads that export as its initial
    weights. Both run in this process, in float32 (see ``FLOAT32``)."""
    exporting = make_config()
    exporting.training.mixed_precision_param = "float32"
    exporting.dump_folder = str(tmp_path / "export")
    exporting.checkpoint.enable = True
    exporting.checkpoint.last_save_model_only = True
    exporting.checkpoint.last_save_in_hf = True
    trainer = exporting.build()
    try:
        trainer.train()
        model = trainer.parts.model
        trained = {key: value.clone() for key, value in model.state_dict().items()}
        observed = observe(model) if observe is not None else None
    finally:
        trainer.close()
    folder = tmp_path / "export" / "checkpoint" / f"step-{exporting.training.steps}"

    importing = make_config()
    importing.training.mixed_precision_param = "float32"
    importing.dump_folder = str(tmp_path / "import")
    importing.checkpoint.enable = True
    importing.checkpoint.initial_load_path = str(folder)
    importing.checkpoint.initial_load_in_hf = True
    trainer = importing.build()
    try:
        assert trainer.parts.checkpointer.load()
        loaded = trainer.parts.model.state_dict()
    finally:
        trainer.close()
    return HfRoundTrip(folder=folder, trained=trained, loaded=loaded, observed=observed)

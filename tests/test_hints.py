"""Every finding titan emits says what to do: one real input per diagnostic code.

For each code of ``titan.schemas.diagnostics.CODES`` there is at least one input (a TOML, a custom
config module, a registry module or a command line) that produces it through the command that
reports it: ``titan-validate FILE``, ``titan-validate --config``, ``titan-migrate``, ``titan-diff``
or titan-train's config check (``titan.cli.train_config.load``: everything titan-train does
before a process group exists). The test asserts the finding appears and that every finding of
the run has a non-empty hint. A code without a case fails :func:`test_every_code_has_a_case`, so
a new code needs an input here.

Also here: the hints for TOML that does not parse (the statement to write instead, checked to
parse), and the duplicate keys and tables of a file, all reported in one run, each at its own
line with the place of the first definition (compared with ``tomllib`` on generated files).
"""

from __future__ import annotations

import io
import json
import textwrap
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from titan.schemas.diagnostics import CODES
from titan.schemas.spans import duplicate_keys

from tests.helpers import validate, write

LEGACY = Path(__file__).resolve().parents[1] / "legacy_configs"
DEBUG = LEGACY / "llama3" / "debug_model.toml"

Finding = dict


# --------------------------------------------------------------------------- the commands


def titan_validate(*args: object) -> list[Finding]:
    """``titan-validate --format json ARGS``: its findings."""
    result = validate("--format", "json", *args)
    assert result.code in (0, 1), result.err
    return result.json()["diagnostics"]


def titan_migrate(*args: object) -> list[Finding]:
    """``titan-migrate --format json ARGS``: the findings of every file."""
    from titan.cli import migrate

    out, err = io.StringIO(), io.StringIO()
    migrate.run([str(a) for a in ("--format", "json", *args)], stdout=out, stderr=err)
    # The report goes to stderr when the module goes to stdout, else to stdout.
    report = json.loads(err.getvalue() if "-o" not in args else out.getvalue())
    return [d for file in report["files"] for d in file["diagnostics"]]


def titan_diff(*args: object) -> list[Finding]:
    """``titan-diff ARGS``: a finding that stops it is one message with its hint."""
    from titan.cli import diff

    out, err = io.StringIO(), io.StringIO()
    code = diff.run([str(a) for a in args], stdout=out, stderr=err)
    assert code == 2, (out.getvalue(), err.getvalue())
    message, _, hint = err.getvalue().partition("\n  hint: ")
    return [{"code": "(titan-diff)", "message": message, "hint": hint.strip()}]


def titan_train_check(*argv: object, world_size: int = 1) -> list[Finding]:
    """What titan-train reports before it starts: ``train_config.load`` with the findings it
    renders captured on their way to the terminal."""
    from titan.cli import train_config

    seen: list = []
    original = train_config._report

    def capture(diagnostics, sources, *, stderr):
        seen.extend(diagnostics)
        return original(diagnostics, sources, stderr=stderr)

    train_config._report = capture
    try:
        train_config.load(
            [str(a) for a in argv],
            world_size=world_size,
            stdout=io.StringIO(),
            stderr=io.StringIO(),
        )
    finally:
        train_config._report = original
    return [{"code": d.code, "message": d.message, "hint": d.hint} for d in seen]


# --------------------------------------------------------------------------- inputs


def _toml(tmp: Path, text: str, name: str = "job.toml") -> Path:
    return write(tmp, name, textwrap.dedent(text))


def _module(tmp: Path, name: str, text: str) -> Path:
    return write(tmp, f"{name}.py", textwrap.dedent(text))


_EXT = """
    from dataclasses import dataclass, field


    def compute():
        return 3


    @dataclass
    class Infra:
        nodes: int = compute()
        __doc__: str = "x"


    @dataclass
    class Any:
        size: int = 1


    @dataclass
    class JobConfig:
        infra: Infra = field(default_factory=Infra)
        any: Any = field(default_factory=Any)
"""


def _v(text: str, *args: str) -> Callable[[Path], list[Finding]]:
    """``titan-validate ARGS job.toml`` with ``text`` in job.toml."""
    return lambda tmp: titan_validate(*args, _toml(tmp, text))


def _y(text: str) -> Callable[[Path], list[Finding]]:
    """``titan-validate app.yaml`` with ``text`` in app.yaml (a Forge app config)."""
    return lambda tmp: titan_validate(write(tmp, "app.yaml", text))


def _m(text: str, *args: str) -> Callable[[Path], list[Finding]]:
    """``titan-migrate ARGS job.toml`` with ``text`` in job.toml."""
    return lambda tmp: titan_migrate(*args, _toml(tmp, text))


def _my(text: str, *args: str) -> Callable[[Path], list[Finding]]:
    """``titan-migrate ARGS app.yaml`` with ``text`` in app.yaml (a Forge app config)."""
    return lambda tmp: titan_migrate(*args, write(tmp, "app.yaml", text))


def _fifo(tmp: Path) -> Path:
    import os

    path = tmp / "pipe.toml"
    os.mkfifo(path)
    return path


def _registry(tmp: Path, training: str) -> Path:
    return _module(
        tmp,
        "reg",
        f"""
        from titan.config import TrainingConfig
        from titan.models.llama3 import model_registry
        from titan.trainer import Trainer


        def mine() -> Trainer.Config:
            return Trainer.Config(model_spec=model_registry("debugmodel"), training={training})
        """,
    )


def _moe_registry(tmp: Path, change: str) -> Path:
    """A registry function ``mine``: deepseek_v3's debug model with ``moe.<change>``."""
    return _module(
        tmp,
        "reg",
        f"""
        from titan.models.deepseek_v3 import model_registry
        from titan.trainer import Trainer


        def mine() -> Trainer.Config:
            spec = model_registry("debugmodel")
            spec.model.layer.moe.{change}
            return Trainer.Config(model_spec=spec)
        """,
    )


def _custom(tmp: Path) -> Path:
    _module(tmp, "fork_ext", _EXT)
    return _toml(
        tmp,
        """
        [job]
        custom_config_module = "fork_ext"
        [infra]
        nodes = 2
        [any]
        size = 3
        """,
    )


def _upstream(body: str) -> Callable[[Path], list[Finding]]:
    """A registry module for upstream torchtitan 0.3.0 whose function runs ``body``."""
    head = "from torchtitan.config import TrainingConfig\nfrom torchtitan.trainer import Trainer\n"
    lines = "".join(f"    {line}\n" for line in body.splitlines())
    text = f"{head}\n\ndef f() -> Trainer.Config:\n{lines}    return Trainer.Config()\n"
    return lambda t: titan_validate(_module(t, "config_registry", text))


def _upstream_build(tmp: Path) -> list[Finding]:
    """--python naming something that is not an interpreter with torchtitan."""
    module = _module(
        tmp,
        "config_registry",
        "from torchtitan.trainer import Trainer\n\n\ndef f() -> Trainer.Config:\n"
        "    return Trainer.Config()\n",
    )
    return titan_validate(module, "--python", tmp / "no-such-python")


def _declared_model(tmp: Path, *args: str) -> list[Finding]:
    """A TOML whose model family its project declares, checked with ``args``."""
    (tmp / ".git").mkdir()
    write(tmp, "pyproject.toml", '[tool.titan]\nmodel-registries = { mine = "minepkg.models" }\n')
    return titan_validate(_toml(tmp, '[model]\nname = "mine"\nflavor = "debugmodel"\n'), *args)


CASES: dict[str, list[tuple[str, Callable[[Path], list[Finding]]]]] = {
    "toml-syntax": [
        ("colon", _v("[training]\nsteps: 10\n")),
        ("True", _v("[checkpoint]\nenable = True\n")),
        ("None", _v("[training]\nseed = None\n")),
        ("unquoted", _v("[model]\nname = llama3\n")),
        ("bracket", _v("[training\nsteps = 1\n")),
        ("quote", _v('[model]\nname = "llama3\n')),
        ("array", _v('[model]\nconverters = ["a"\n[job]\n')),
        ("twice", _v("[training]\nsteps = 1\nsteps = 2\n")),
        ("[[t]]", _v("[[training]]\nsteps=1\n[training]\n")),
        ("utf-8", lambda t: titan_validate(write(t, "x.toml", "a = 'é'", encoding="latin-1"))),
        ("digits", _v("[training]\nsteps = " + "9" * 5000)),
        ("junk", _v("[training]\nsteps = 1 2\n")),
        ("diff", lambda t: titan_diff(_toml(t, "[training]\nsteps: 1\n"), DEBUG)),
    ],
    "unreadable-file": [
        ("missing", lambda t: titan_validate(t / "nope.toml")),
        ("fifo", lambda t: titan_validate(_fifo(t))),
        ("diff", lambda t: titan_diff(_fifo(t), DEBUG)),
    ],
    "too-deep": [("arrays", _v("x = " + "[" * 200 + "]" * 200 + "\n"))],
    "yaml-syntax": [
        ("indent", _y("trainer:\n  training:\n    steps: 1\n   seed: 2\n")),
        ("twice", _y("trainer:\n  training:\n    steps: 1\n    steps: 2\n")),
        ("cycle", _y("a: &a [*a]\ntrainer:\n  training: {}\n")),
    ],
    "no-trainer": [
        ("absent", _y("policy:\n  n: 1\n")),
        ("a list", _y("trainer: [1, 2]\n")),
        ("empty", _y("")),
    ],
    "yaml-type": [
        ("python tag", _y("trainer:\n  job: !!python/object/apply:os.system [ls]\n")),
        ("date", _y("trainer:\n  job:\n    description: !!timestamp 2024-01-01\n")),
        ("bool key", _y("trainer:\n  training:\n    yes: 1\n")),
    ],
    "interpolation": [("env", _y("trainer:\n  job:\n    dump_folder: ${oc.env:HOME}\n"))],
    "broken-interpolation": [
        ("missing", _y("trainer:\n  job:\n    dump_folder: ${out}\n")),
        ("cycle", _y("a: ${b}\nb: ${a}\ntrainer:\n  training:\n    steps: ${a}\n")),
    ],
    "forge-app": [
        ("actor argument", _y("trainer:\n  learning_rate: 1e-5\n  model: {name: llama3}\n")),
        ("spawner block", _y("trainer:\n  service: {procs_per_replica: 1}\n")),
        ("recipe's section", _y("model: {name: llama3}\nvalidation: {freq: -1}\n")),
        ("checkpoint folder", _my("trainer:\n  checkpoint: {enable: true}\n")),
    ],
    "hub-path": [
        ("app", _y("trainer:\n  model:\n    hf_assets_path: hf://Qwen/Qwen3-0.6B\n")),
        ("toml", _v('[checkpoint]\ninitial_load_path = "hf://Qwen/Qwen3-0.6B"\n')),
        ("migrate", _my("model:\n  tokenizer_path: hf://Qwen/Qwen3-0.6B\n")),
    ],
    "unknown-key": [
        ("typo", _v("[training]\nstepz = 1\n")),
        ("section", _v("[infra]\nnodes = 1\n")),
        ("one letter", _v("[training]\nx = 1\n")),
        ("flag", lambda t: titan_migrate(DEBUG, "--", "--training.stepz", "3")),
        ("flag section", lambda t: titan_migrate(DEBUG, "--", "--training", "3")),
        ("flag dashes", lambda t: titan_migrate(DEBUG, "--", "-training.steps", "3")),
        (
            "registry",
            lambda t: titan_validate(
                "--registry", _registry(t, "TrainingConfig(stepz=3)"), "--config", "mine"
            ),
        ),
    ],
    "moved-key": [
        ("old key", _v("[training]\nbatch_size = 8\n")),
        ("old table", _v("[float8]\n")),
        ("flag", lambda t: titan_migrate(DEBUG, "--", "--training.batch_size", "3")),
    ],
    "upgraded-key": [("old key", _m("[training]\nbatch_size = 8\n"))],
    "wrong-type": [
        ("string", _v('[training]\nsteps = "ten"\n')),
        ("quoted number", _v('[training]\nsteps = "10"\n')),
        ("table", _v("training = 3\n")),
        ("[[t]]", _v("[[training]]\nsteps = 1\n")),
        ("list", _v('[model]\nconverters = "float8"\n')),
        ("element", _v("[model]\nconverters = [1]\n")),
        ("bool", _v("[checkpoint]\nenable = 1\n")),
        ("float", _v("[training]\nsteps = 1.5\n")),
        ("flag", lambda t: titan_migrate(DEBUG, "--", "--training.steps", "many")),
        ("flag float", lambda t: titan_migrate(DEBUG, "--", "--training.steps", "1.5")),
        (
            "registry",
            lambda t: titan_validate(
                "--registry", _registry(t, 'TrainingConfig(steps="3")'), "--config", "mine"
            ),
        ),
    ],
    "invalid-choice": [
        ("close", _v('[activation_checkpoint]\nmode = "ful"\n')),
        ("far", _v('[activation_checkpoint]\nmode = "zzz"\n')),
        ("flag", lambda t: titan_migrate(DEBUG, "--", "--activation_checkpoint.mode", "zzz")),
    ],
    "invalid-value": [
        ("balancer", _v('[parallelism]\ncontext_parallel_load_balancer = ""\n')),
        ("steps", _v("[validation]\nsteps = 0\n")),
    ],
    "out-of-range": [
        ("steps", _v("[training]\nsteps = -5\n")),
        ("lr", _v("[optimizer]\nlr = nan\n")),
    ],
    "deprecated-key": [
        ("tokenizer", _v('[model]\ntokenizer_path = "t"\n')),
        ("args module", _v('[experimental]\ncustom_args_module = "m"\n')),
    ],
    "ignored-key": [("config_file", _v('[job]\nconfig_file = "x.toml"\n'))],
    "extension-error": [
        ("missing", _v('[job]\ncustom_config_module = "no_such_mod"\n')),
        ("close", _v('[job]\ncustom_config_module = "flx"\n')),
        ("flag", lambda t: titan_validate("--extension", "no_such_mod", DEBUG)),
    ],
    "extension-unreadable": [("literal", lambda t: titan_validate(_custom(t)))],
    "extension-imported": [("import", lambda t: titan_validate("--allow-import", _custom(t)))],
    "parallel-degree": [("zero", _v("[parallelism]\ndata_parallel_shard_degree = 0\n"))],
    "world-size": [
        ("product", _v("[parallelism]\ndata_parallel_shard_degree = 2\n", "--ngpu", "8")),
        ("divide", _v("[parallelism]\ntensor_parallel_degree = 3\n", "--ngpu", "8")),
    ],
    "expert-parallel": [
        (
            "no experts",
            _v(
                '[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\nexpert_parallel_degree = 2\n'
            ),
        ),
        (
            "etp",
            _v(
                "[parallelism]\nexpert_parallel_degree = 2\ntensor_parallel_degree = 2\nexpert_tensor_parallel_degree = 3\n"
            ),
        ),
        (
            "experts",
            _v(
                '[model]\nname = "llama4"\nflavor = "debugmodel"\n[parallelism]\nexpert_parallel_degree = 3\n'
            ),
        ),
    ],
    "moe-routing": [
        (
            "top_k",
            lambda t: titan_validate(
                "--registry", _moe_registry(t, "top_k = 9"), "--config", "mine"
            ),
        ),
        (
            "groups",
            lambda t: titan_validate(
                "--registry", _moe_registry(t, "num_expert_groups = 3"), "--config", "mine"
            ),
        ),
    ],
    "batch-size": [
        ("multiple", _v("[training]\nlocal_batch_size = 4\nglobal_batch_size = 6\n")),
        ("zero", _v("[training]\nglobal_batch_size = 0\n")),
    ],
    "seq-len": [
        ("tp", _v("[training]\nseq_len = 1001\n[parallelism]\ntensor_parallel_degree = 2\n"))
    ],
    "tp-heads": [
        (
            "heads",
            _v(
                '[model]\nname = "llama3"\nflavor = "8B"\n[parallelism]\ntensor_parallel_degree = 3\n[training]\nseq_len = 6144\n'
            ),
        )
    ],
    "pipeline-layout": [
        (
            "schedule",
            _v(
                '[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "1F2B"\n'
            ),
        ),
        (
            "fqns",
            _v(
                '[parallelism]\npipeline_parallel_degree = 2\nmodule_fqns_per_model_part = [["norm"]]\n'
            ),
        ),
    ],
    "keep-latest-k": [("one", _v("[checkpoint]\nkeep_latest_k = 1\n"))],
    "hf-model-only": [
        ("load", _v("[checkpoint]\ninitial_load_in_hf = true\ninitial_load_model_only = false\n")),
        ("save", _v("[checkpoint]\nlast_save_in_hf = true\nlast_save_model_only = false\n")),
        ("quantized", _v("[checkpoint]\ninitial_load_in_hf_quantized = true\n")),
    ],
    "initial-load-disabled": [
        ("dcp", _v('[checkpoint]\ninitial_load_path = "/weights"\n')),
        ("hf", _v("[checkpoint]\nenable = false\ninitial_load_in_hf = true\n")),
    ],
    "unknown-converter": [
        ("stale", _v('[model]\nconverters = ["float8"]\n')),
        ("typo", _v('[model]\nconverters = ["quantize.linear.flaot8"]\n')),
        ("far", _v('[model]\nconverters = ["zzz"]\n')),
    ],
    "converter-families": [
        ("mixed", _v('[model]\nconverters = ["quantize.linear.float8", "quantize.linear.mx"]\n'))
    ],
    "inert-section": [
        ("table", _v("[quantize.linear.float8]\nemulate = true\n")),
        (
            "stale",
            _v('[model]\nconverters = ["float8"]\n[quantize.linear.float8]\nemulate = true\n'),
        ),
    ],
    "float8-options": [
        (
            "recipe",
            _v(
                '[model]\nconverters = ["quantize.linear.float8"]\n[quantize.linear.float8]\nrecipe_name = "rowwise"\nenable_fsdp_float8_all_gather = true\n'
            ),
        ),
        (
            "precompute",
            _v(
                '[model]\nconverters = ["quantize.linear.float8"]\n[quantize.linear.float8]\nprecompute_float8_dynamic_scale_for_fsdp = true\n'
            ),
        ),
    ],
    "unknown-optimizer": [
        ("another optimizer", _v('[optimizer]\nname = "Muon"\n')),
        ("letter case", _v('[optimizer]\nname = "adamw"\n')),
    ],
    "optimizer-in-backward": [
        (
            "pp",
            _v(
                "[optimizer]\nearly_step_in_backward = true\n[parallelism]\npipeline_parallel_degree = 2\n"
            ),
        )
    ],
    "activation-checkpoint": [
        ("option", _v('[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "x"\n')),
        ("budget", _v('[activation_checkpoint]\nmode = "memory_budget"\n')),
    ],
    "async-tp": [
        (
            "compile",
            _v("[parallelism]\ntensor_parallel_degree = 2\nenable_async_tensor_parallel = true\n"),
        ),
        (
            "loss only",
            _v(
                "[parallelism]\ntensor_parallel_degree = 2\nenable_async_tensor_parallel = true\n"
                '[compile]\nenable = true\ncomponents = ["loss"]\n'
            ),
        ),
        ("no tp", _v("[parallelism]\nenable_async_tensor_parallel = true\n")),
    ],
    "ddp-layout": [
        (
            "tp",
            _v(
                "[parallelism]\ndata_parallel_replicate_degree = 2\n"
                "data_parallel_shard_degree = 1\ntensor_parallel_degree = 2\n"
            ),
        ),
        (
            "pp on 4 GPUs",
            _v(
                "[parallelism]\ndata_parallel_replicate_degree = 2\n"
                "data_parallel_shard_degree = -1\npipeline_parallel_degree = 2\n",
                "--ngpu",
                "4",
            ),
        ),
    ],
    "no-effect": [
        (
            "rotate",
            _v('[parallelism]\ncontext_parallel_rotate_method = "alltoall"\n'),
        ),
        (
            "balancer",
            _v(
                '[parallelism]\ncontext_parallel_degree = 2\ncontext_parallel_load_balancer = "ptrr"\n'
            ),
        ),
    ],
    "cpu-offload": [
        (
            "one gpu",
            _v(
                "[training]\nenable_cpu_offload = true\n[parallelism]\ndata_parallel_shard_degree = 1\n"
            ),
        )
    ],
    "unknown-model": [
        ("old family", _v('[model]\nname = "llama2"\nflavor = "7B"\n')),
        ("typo", _v('[model]\nname = "lama3"\n')),
        ("unrelated", _v('[model]\nname = "zzzz"\n')),
    ],
    "unknown-flavor": [("flavor", _v('[model]\nname = "llama3"\nflavor = "9B"\n'))],
    "unknown-config": [
        ("name", lambda t: titan_validate("--config", "no_such_config_at_all")),
        ("close", lambda t: titan_validate("--config", "llama3_8")),
        ("module", lambda t: titan_validate("--module", "no_such_module_x", "--config", "a")),
        ("diff", lambda t: titan_diff("no_such_config_at_all", "llama3_debugmodel")),
    ],
    "registry-error": [
        (
            "raises",
            lambda t: titan_validate(
                "--registry",
                _module(t, "reg", "def boom():\n    return 1 / 0\n"),
                "--config",
                "boom",
            ),
        ),
        (
            "syntax",
            lambda t: titan_validate(
                "--registry", _module(t, "reg", "def broken(:\n    pass\n"), "--config", "broken"
            ),
        ),
        (
            "not a config",
            lambda t: titan_validate(
                "--registry", _module(t, "reg", "def one():\n    return 1\n"), "--config", "one"
            ),
        ),
        (
            "file",
            lambda t: titan_validate(
                _module(
                    t,
                    "config_registry",
                    "import no_such_package_x\nfrom titan.trainer import Trainer\n\n\ndef f() -> Trainer.Config:\n    return Trainer.Config()\n",
                )
            ),
        ),
    ],
    "cli-syntax": [
        ("no value", lambda t: titan_migrate(DEBUG, "--", "--training.steps")),
        ("stray", lambda t: titan_migrate(DEBUG, "--", "stray")),
        ("switch", lambda t: titan_migrate(DEBUG, "--", "--checkpoint.enable", "false")),
    ],
    "era-default": [
        (
            "full last save",
            _m("[training]\nbatch_size = 4\n[checkpoint]\nenable_checkpoint = true\n"),
        ),
    ],
    "era-default-lost": [("tokenizer file", _m("[training]\nbatch_size = 4\n"))],
    "era-flavor": [
        ("2024 8B", _m('[model]\nflavor = "8B"\n[training]\nbatch_size = 4\n')),
        (
            "validate",
            lambda t: titan_validate(_toml(t, '[model]\nflavor = "8B"\n'), "--era", "2025-09"),
        ),
    ],
    "era-flavor-lost": [
        ("eos mask", _m('[model]\nflavor = "debugmodel_flex_attn"\n', "--era", "2025-04-20")),
        (
            "validate",
            lambda t: titan_validate(
                _toml(t, '[model]\nname = "llama4"\nflavor = "debugmodel_irope"\n'),
                "--era",
                "2025-06",
            ),
        ),
    ],
    "era-flavor-tokenizer": [("debug vocabulary", _m("[training]\nbatch_size = 4\n"))],
    "era-flavor-init": [
        ("gpt_oss bf16", _m('[model]\nname = "gpt_oss"\n', "--era", "2025-12")),
    ],
    "era-flavor-changed": [
        (
            "0.3.0 target",
            _m("[training]\nbatch_size = 4\n", "--target", "torchtitan==0.3.0", "--era", "2025-03"),
        )
    ],
    "era-undated": [("v0.2.2 keys only", _m("[training]\nsteps = 5\n"))],
    "value-changed": [
        (
            "flux defaults",
            _m(
                '[job]\ncustom_config_module = "torchtitan.models.flux.job_config"\n'
                '[model]\nname = "flux"\nflavor = "flux-debug"\n[validation]\nenable = true\n'
            ),
        )
    ],
    "dropped-key": [
        ("no home", _m("[memory_estimation]\nenable = true\n")),
        ("default", _m("[memory_estimation]\nenable = false\n")),
    ],
    "stale-name": [
        ("not carried", _m('[model]\nconverters = ["float8"]\n')),
        ("fixed", _m('[model]\nconverters = ["float8"]\n', "--fix-stale-names")),
        (
            "era",
            _m(
                '[model]\nconverters = ["float8"]\n[float8]\nenable_fsdp_float8_all_gather = true\n',
                "--fix-stale-names",
            ),
        ),
    ],
    "behaviour-change": [
        (
            "float8 tp",
            _m(
                '[model]\nconverters = ["quantize.linear.float8"]\n[parallelism]\ntensor_parallel_degree = 2\n'
            ),
        ),
        ("tokenizer", _m('[model]\ntokenizer_path = "a"\nhf_assets_path = "b"\n')),
    ],
    "unsupported-model": [("family", _m('[model]\nname = "llama2"\nflavor = "7B"\n'))],
    "upstream-gone": [
        (
            "selective ac",
            _m("[activation_checkpoint]\nmode = 'selective'\n", "--target", "torchtitan"),
        ),
        (
            "llama4",
            _m("[model]\nname = 'llama4'\nflavor = 'debugmodel'\n", "--target", "torchtitan"),
        ),
    ],
    **{
        code: [(label, _upstream(body))]
        for code, label, body in (
            ("upstream-import", "name", "from torchtitan.config import TrainingConfg\n"),
            ("upstream-field", "keyword", "x = TrainingConfig(stpes=1)\n"),
            ("upstream-positional", "positional", "x = TrainingConfig(1)\n"),
            (
                "upstream-required",
                "required",
                "from torchtitan.components.optimizer import ParamGroupConfig\n"
                "x = ParamGroupConfig()\n",
            ),
            ("upstream-type", "type", "x = TrainingConfig(steps='1')\n"),
            ("upstream-choice", "literal", "x = TrainingConfig(dtype='bf16')\n"),
            (
                "upstream-value",
                "guard",
                "from torchtitan.components.checkpoint import CheckpointManager\n"
                "x = CheckpointManager.Config(keep_latest_k=1)\n",
            ),
            (
                "upstream-flavor",
                "flavor",
                "from torchtitan.models.llama3 import model_registry\nx = model_registry('8b')\n",
            ),
            (
                "upstream-argument",
                "parameter",
                "from torchtitan.models.llama3 import model_registry\n"
                "x = model_registry('8B', backend='flex')\n",
            ),
            ("upstream-name", "name", "x = undefined_name\n"),
            ("upstream-raises", "raise", "raise ValueError('no')\n"),
            ("upstream-return", "return", "return 1\n"),
            ("upstream-unread", "unread", "from my_project import helper\nx = helper()\n"),
        )
    },
    "upstream-build": [("interpreter", _upstream_build)],
    "upstream-changed": [
        ("sdpa", _m("[model]\nflavor = 'debugmodel'\n", "--target", "torchtitan==0.3.0")),
    ],
    "custom-model": [
        (
            "declared",
            _m(
                '[model]\nname = "llama2"\nflavor = "7B"\n',
                "--model-registry",
                "llama2=my_models.llama2",
            ),
        )
    ],
    "user-code": [("not allowed", lambda t: _declared_model(t, "--as-registry"))],
    "trainer-conflict": [
        (
            "flux and ft",
            _m(
                '[model]\nname = "flux"\nflavor = "flux-debug"\n[job]\ncustom_config_module = "torchtitan.components.ft.config"\n[fault_tolerance]\nenable = true\n'
            ),
        )
    ],
    "extension-class": [("dunder", lambda t: titan_migrate(_custom(t)))],
    "renamed-class": [("builtin", lambda t: titan_migrate(_custom(t)))],
    "renamed-function": [
        (
            "builtin",
            lambda t: titan_migrate(_toml(t, '[model]\nname = "list"\n', name="list.toml")),
        ),
        (
            "taken",
            lambda t: titan_migrate(
                _toml(t, "[training]\nsteps = 1\n", name="a/job.toml"),
                _toml(t, "[training]\nsteps = 2\n", name="b/job.toml"),
                "-o",
                t / "reg.py",
            ),
        ),
    ],
    "unsupported-parallelism": [
        (
            "gpt_oss expert tensor parallel",
            lambda t: titan_train_check(
                "--job.config_file",
                _toml(
                    t,
                    '[model]\nname = "gpt_oss"\nflavor = "debugmodel"\n[parallelism]\n'
                    "tensor_parallel_degree = 2\nexpert_parallel_degree = 2\n"
                    "expert_tensor_parallel_degree = 2\n",
                ),
                world_size=4,
            ),
        )
    ],
    "dump-folder": [
        (
            "a file",
            lambda t: titan_train_check(
                "--job.config_file",
                _toml(t, f'[job]\ndump_folder = "{_toml(t, "x = 1", name="file.txt")}"\n'),
            ),
        )
    ],
}


def test_every_code_has_a_case():
    assert sorted(set(CODES) - set(CASES)) == []
    assert sorted(set(CASES) - set(CODES)) == []


@pytest.mark.parametrize(
    ("code", "produce"),
    [
        pytest.param(code, produce, id=f"{code}:{name}")
        for code, cases in CASES.items()
        for name, produce in cases
    ],
)
def test_each_finding_has_a_hint(code, produce, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    found = produce(tmp_path)
    if code != "(titan-diff)" and found and found[0]["code"] == "(titan-diff)":
        assert found[0]["hint"], found
        return
    assert code in {d["code"] for d in found}, found
    missing = [d for d in found if not (d.get("hint") or "").strip()]
    assert not missing, missing


def test_no_finding_is_built_without_a_hint():
    """Every ``Diagnostic(...)`` written in schemas, migrate and titan passes a hint, and none
    passes ``hint=None`` (helpers that build findings take the hint as an argument)."""
    import ast

    root = Path(__file__).resolve().parents[1]
    missing = []
    for package in ("schemas", "migrate", "titan"):
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (
                    isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Diagnostic"
                ):
                    continue
                hint = next((k.value for k in node.keywords if k.arg == "hint"), None)
                unpacked = any(k.arg is None for k in node.keywords)  # Diagnostic(**data)
                if not unpacked and (
                    hint is None or (isinstance(hint, ast.Constant) and hint.value is None)
                ):
                    missing.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not missing


# --------------------------------------------------------------------------- TOML syntax


def _syntax(tmp: Path, text: str) -> list[Finding]:
    return [d for d in titan_validate(_toml(tmp, text)) if d["code"] == "toml-syntax"]


@pytest.mark.parametrize(
    ("text", "line", "hint"),
    [
        ("[training]\nsteps: 10\n", 2, "use `steps = 10`"),
        ("[training]\nsteps 10\n", 2, "use `steps = 10`"),
        ("[compile]\ncomponents: [\n  'model',\n]\n", 2, "use `components = [`"),
        ("[checkpoint]\nenable = True\n", 2, "use `enable = true`: TOML's booleans are lowercase"),
        ("[x]\ny = [True, False]\n", 2, "use `y = [true, false]`"),
        ("[training]\nseed = None\n", 2, "TOML has no None or null: delete the `seed` line"),
        ("[training]\nseed = null\n", 2, "delete the `seed` line"),
        ("[model]\nname = llama3\n", 2, 'use `name = "llama3"`: a string needs quotes'),
        ("[job]\ndump_folder = ./outputs\n", 2, 'use `dump_folder = "./outputs"`'),
        ("[model]\nflavor = 405B\n", 2, 'use `flavor = "405B"`'),
        ("[model]\nconverters = [float8]\n", 2, 'use `converters = ["float8"]`'),
        ("[optimizer]\nlr = .5\n", 2, "use `lr = 0.5`"),
        ("[optimizer]\nlr = 5.\n", 2, "use `lr = 5.0`"),
        ("[training]\nsteps = 1,000\n", 2, "use `steps = 1_000`"),
        ('[job]\ndump_folder = "C:\\out"\n', 2, "use `dump_folder = 'C:\\out'`"),
        ("[training\nsteps = 1\n", 1, "use `[training]`"),
        ("[[training]\n", 1, "use `[[training]]`"),
        ('[model]\nname = "llama3\n', 2, 'use `name = "llama3"`'),
        ("[model]\nname = 'llama3\n", 3, "use `name = 'llama3'`"),
        (
            '[model]\nconverters = ["a"\n[job]\n',
            3,
            "close the array of `converters` (opened at line 2)",
        ),
        ("[training]\nx = {a = 1,\nb = 2}\n", 2, "an inline table is one line"),
        ("\ufeff[training]\nsteps = 1\n", 1, "remove the byte order mark"),
    ],
)
def test_toml_that_does_not_parse_gets_what_to_write(tmp_path, text, line, hint):
    found = _syntax(tmp_path, text)
    assert any(d["line"] == line and hint in d["hint"] for d in found), found


def test_a_statement_offered_for_a_syntax_error_parses():
    from titan.schemas.toml_source import parse

    for text in ("a: 1", "a = True", "a = x.y", "a = [x, True]", "a = .5", "a = 'x", "a = 1,000"):
        hint = parse(text, file="f.toml").problem.hint
        statement = hint.split("`")[1]
        assert tomllib.loads(statement), (text, hint)


def test_every_key_and_table_defined_twice_is_reported_in_one_run(tmp_path):
    text = "a = 1\nb = 2\na = 3\n[t]\nx = 1\ny = 2\nx = 3\n[t]\nz = 1\n[[u]]\n[u]\n"
    path = _toml(tmp_path, text)
    found = [(d["line"], d["col"], d["message"], d["hint"]) for d in titan_validate(path)]
    assert found == [
        (
            3,
            1,
            "invalid TOML: `a` is set twice",
            f"`a` is first set at {path}:1:1: delete the line you do not mean",
        ),
        (
            7,
            1,
            "invalid TOML: `t.x` is set twice",
            f"`t.x` is first set at {path}:5:1: delete the line you do not mean",
        ),
        (
            8,
            2,
            "invalid TOML: table [t] is declared twice",
            f"move its keys under the first [t] at {path}:4:2 and delete this header",
        ),
        (
            11,
            2,
            "invalid TOML: [u] is declared both as a table and as an array of tables [[u]]",
            f"write `[u]` once, with one pair of brackets, and put the keys of both under it (the other declaration is at {path}:10:3): `[[...]]` starts an array of tables",
        ),
    ]


def test_duplicates_are_reported_with_an_error_elsewhere(tmp_path):
    found = _syntax(tmp_path, "[training]\nsteps: 1\nseed = 1\nseed = 2\n")
    assert [(d["line"], d["message"]) for d in found] == [
        (2, "invalid TOML: expected '=' after a key in a key/value pair"),
        (4, "invalid TOML: `training.seed` is set twice"),
    ]


_NAMES = st.sampled_from(["a", "b", "c", '"a"', "b.c", "a.b", "c.a.b"])
_LINE = st.one_of(
    _NAMES.map(lambda k: f"[{k}]"),
    _NAMES.map(lambda k: f"[[{k}]]"),
    st.tuples(_NAMES, _NAMES).map(lambda kv: f"{kv[0]} = {{ {kv[1]} = 1 }}"),
    _NAMES.map(lambda k: f"{k} = 1"),
)
_TWICE = (
    "Cannot overwrite",
    "Cannot declare",
    "Cannot redefine",
    "Duplicate inline",
    "Cannot mutate",
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_LINE, min_size=1, max_size=7))
def test_duplicates_agree_with_tomllib(lines):
    """A file of tables, arrays of tables, dotted keys and inline tables: the scan finds a key
    defined twice exactly when tomllib refuses the file for one, the first at tomllib's line."""
    text = "\n".join(lines) + "\n"
    found = duplicate_keys(text)
    try:
        tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        assert str(error).startswith(_TWICE), error
        assert found and found[0].at.line == int(str(error).split("line ")[1].split(",")[0])
    else:
        assert not found


# --------------------------------------------------------------------------- suggestions


@pytest.mark.parametrize(
    ("text", "code", "wanted", "unwanted"),
    [
        (
            '[model]\nname = "llama2"\nflavor = "7B"\n',
            "unknown-model",
            "titan has no `llama2` family",
            "did you mean",
        ),
        ('[model]\nname = "llama2"\n', "unknown-model", "model-registries", "did you mean"),
        (
            '[model]\nname = "mixtral"\n',
            "unknown-model",
            "titan has no `mixtral` family",
            "did you mean",
        ),
        ('[model]\nname = "qwen2.5"\n', "unknown-model", "titan ships `qwen3`", "did you mean"),
        (
            '[model]\nname = "llama3.1"\nflavor = "8B"\n',
            "unknown-model",
            "did you mean `llama3`?",
            "family",
        ),
        (
            '[model]\nname = "lama3"\nflavor = "7B"\n',
            "unknown-model",
            "no flavor `7B`",
            "did you mean",
        ),
        ('[model]\nname = "llama3"\nflavor = "7B"\n', "unknown-flavor", "llama3 flavors:", "8B`?"),
        (
            '[model]\nname = "llama3"\nflavor = "8b"\n',
            "unknown-flavor",
            "did you mean `8B`?",
            "flavors:",
        ),
        (
            '[model]\nconverters = "float8"\n',
            "wrong-type",
            'use `converters = ["quantize.linear.float8"]`',
            '["float8"]',
        ),
        ('[model]\nconverters = "float8,mx"\n', "wrong-type", "registered converters", "use `"),
        (
            '[model]\nconverters = ["float8", "mx"]\n',
            "unknown-converter",
            '"float8" was registered by torchtitan from 2025-02',
            "use `",
        ),
        (
            '[model]\nconverters = ["quantize.dense.mx"]\n',
            "unknown-converter",
            'use `converters = ["quantize.linear.mx"]`',
            "float8",
        ),
        ("[training]\nx = 1\n", "unknown-key", "declare it", "did you mean"),
        ("[training]\nep = 2\n", "unknown-key", "declare it", "eps"),
        ("[optimizer]\nlr2 = 0.1\n", "unknown-key", "declare it", "did you mean"),
        (
            "[optimizer]\nbeta = 0.9\n",
            "unknown-key",
            "did you mean `optimizer.beta1` or `optimizer.beta2`?",
            "declare",
        ),
        (
            "[training]\neps = 1e-8\n",
            "unknown-key",
            "did you mean `optimizer.eps`?",
            "training.steps",
        ),
        ("[job]\ntype = 1\n", "unknown-key", "declare it", "dtype"),
        ("[data]\nbucket = 's3://x'\n", "unknown-key", "declare it", "vlm"),
        ("[data]\npatch_size = 16\n", "unknown-key", "vlm extension", "declare"),
        ("[training]\nsteps = 10.0\n", "wrong-type", "use `steps = 10`", "takes"),
        ("[checkpoint]\nenable = 1\n", "wrong-type", "use `enable = true`", "takes"),
        ('[training]\nsteps = "-5"\n', "wrong-type", "takes an integer", "use `"),
        (
            '[activation_checkpoint]\nmode = "Full"\n',
            "invalid-choice",
            'did you mean "full"?',
            "one of",
        ),
        (
            "[[training]]\nsteps = 1\n",
            "wrong-type",
            "write `[training]` with one pair of brackets",
            "defaults",
        ),
    ],
)
def test_suggestions_are_made_only_when_they_help(tmp_path, text, code, wanted, unwanted):
    found = [d for d in titan_validate(_toml(tmp_path, text)) if d["code"] == code]
    assert found and wanted in found[0]["hint"] and unwanted not in found[0]["hint"], found


def test_stale_converter_names_say_the_era_that_registered_them(tmp_path):
    old = '[model]\nconverters = ["float8"]\n[float8]\nenable_fsdp_float8_all_gather = true\n'
    late = '[model]\nconverters = ["float8"]\n[quantize.linear.float8]\nemulate = true\n'
    for fix in ((), ("--fix-stale-names",)):
        dated = [d for d in titan_migrate(*fix, _toml(tmp_path, old)) if d["code"] == "stale-name"]
        undated = [
            d
            for d in titan_migrate(*fix, _toml(tmp_path, late, "late.toml"))
            if d["code"] == "stale-name"
        ]
        assert "`float8.enable_fsdp_float8_all_gather` dates this file there" in dated[0]["message"]
        assert "never had" not in dated[0]["message"] and "failed on" not in dated[0]["message"]
        assert "dates this file" not in undated[0]["message"]
        if fix:
            assert "keeps the converter its run had" in dated[0]["message"]
            assert "enables a converter the legacy run never had" in undated[0]["message"]


def test_an_old_float8_switch_and_a_stale_name_build_one_converter(tmp_path):
    """[float8] enable_float8_linear lists quantize.linear.float8 (schemas.eras) and "float8"
    is its old name: --fix-stale-names keeps one float8 converter, and the key is carried."""
    from titan.migrate.codegen.render_code import render_module
    from titan.migrate.plan.build import build_plan

    path = _toml(
        tmp_path,
        '[model]\nconverters = ["float8"]\n[float8]\nenable_float8_linear = true\n'
        "enable_fsdp_float8_all_gather = true\n",
    )
    plan = build_plan(path, fix_stale_names=True)
    assert render_module([plan]).count("Float8LinearConverter.Config(") == 1
    assert plan.outcomes["model.converters"].status == "renamed"

"""``titan-validate --python``: upstream registry modules built in the real torchtitan 0.3.0.

Every registry module of the installed release builds with no finding but the import of the
modules this environment cannot import (they need torchvision, vLLM or Monarch, which 0.3.0
does not depend on); a value only the build knows (read from the environment) is checked;
``--config NAME --module llama3 --python`` finds upstream's own functions as upstream's
``--module/--config`` does; and where torchtitan is importable beside titan, ``--config`` never
judges an upstream config against titan's classes. What ``titan-migrate --target
torchtitan==0.3.0`` writes passes the static check and the build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers import legacy_tomls, validate

REPO = Path(__file__).resolve().parents[2]


def _site(upstream_python: Path) -> Path:
    done = subprocess.run(
        [
            str(upstream_python),
            "-c",
            "import torchtitan, os; print(os.path.dirname(os.path.dirname(torchtitan.__file__)))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(done.stdout.strip())


def _errors(result) -> list[dict]:
    assert "Traceback" not in result.err, result.err
    return [d for d in result.json()["diagnostics"] if d["severity"] == "error"]


def test_every_release_module_builds(upstream_python):
    from titan.migrate.targets.upstream_api_030 import UNIMPORTABLE

    modules = sorted((_site(upstream_python) / "torchtitan").glob("**/config_registry.py"))
    assert len(modules) >= 15
    result = validate(*modules, "--python", upstream_python, "--format", "json", "--timeout", "300")
    unimportable = [m.replace(".", "/") for m in UNIMPORTABLE]
    unexpected = [
        e
        for e in _errors(result)
        if not (e["code"] == "upstream-build" and _needs_another_package(e, unimportable))
    ]
    assert unexpected == [], json.dumps(unexpected, indent=1)


def _needs_another_package(finding: dict, unimportable: list[str]) -> bool:
    """A build that failed because this environment lacks a package torchtitan 0.3.0 does not
    depend on (torchvision for the multimodal loaders, vLLM, Monarch)."""
    message = finding["message"]
    if "No module named" in message:
        return "No module named 'torchtitan" not in message
    return "ImportError" in message or any(u in finding["file"] for u in unimportable)


def test_a_value_only_the_build_knows_is_checked(upstream_python, tmp_path):
    module = tmp_path / "config_registry.py"
    module.write_text(
        "import os\n\n"
        "from torchtitan.config import ParallelismConfig, TrainingConfig\n"
        "from torchtitan.models.llama3 import model_registry\n"
        "from torchtitan.trainer import Trainer\n\n\n"
        "def dynamic() -> Trainer.Config:\n"
        "    return Trainer.Config(\n"
        "        model_spec=model_registry('debugmodel'),\n"
        "        parallelism=ParallelismConfig(tensor_parallel_degree=int(os.environ.get('TP', '3'))),\n"
        "    )\n\n\n"
        "def keywords() -> Trainer.Config:\n"
        "    extra = {os.environ.get('KEY', 'stpes'): 3}\n"
        "    return Trainer.Config(training=TrainingConfig(**extra))\n",
        encoding="utf-8",
    )
    static = validate(module, "--format", "json", "--no-cache")
    assert static.code == 0 and _errors(static) == []
    built = validate(module, "--python", upstream_python, "--format", "json", "--ngpu", "8")
    found = {(e["code"], e["line"]) for e in _errors(built)}
    assert ("tp-heads", 11) in found and ("upstream-build", 17) in found, found


def test_config_and_module_find_upstream_functions(upstream_python):
    argv = ["--config", "llama3_debugmodel", "--module", "llama3", "--python", upstream_python]
    result = validate(*argv)
    assert result.code == 0, result.out + result.err
    argv[1] = "llama3_debugmodl"
    result = validate(*argv, "--format", "json")
    assert result.code == 1
    assert [
        (d["code"], "llama3_debugmodel" in d["hint"]) for d in result.json()["diagnostics"]
    ] == [("unknown-config", True)]


def test_config_never_judges_an_upstream_config_by_titan_s_classes(upstream_python, tmp_path):
    """With torchtitan importable beside titan, ``--config`` of upstream's function reports
    nothing about titan's classes (it used to print a false error per field)."""
    env = {**os.environ, "PYTHONPATH": str(_site(upstream_python))}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "titan.cli.validate",
            "--config",
            "llama3_debugmodel",
            "--module",
            "torchtitan.models.llama3",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert "has no field" not in done.stdout


def test_migrated_modules_pass_the_static_check_and_the_build(upstream_python, tmp_path):
    from titan.migrate.codegen.render_code import render_module
    from titan.migrate.plan.build import build_plan
    from titan.migrate.targets.upstream import retarget

    tomls = list(legacy_tomls())
    corpus = REPO.parent / "shared" / "corpus"
    if corpus.is_dir():
        tomls += sorted(corpus.rglob("*.toml"))
    modules = []
    for index, toml in enumerate(tomls):
        plan = retarget(build_plan(toml))
        if not plan.ok or any(d.severity.value == "error" for d in plan.diagnostics):
            continue  # the migration itself says this one will not build
        module = tmp_path / f"m{index}" / "config_registry.py"
        module.parent.mkdir()
        module.write_text(render_module([plan]), encoding="utf-8")
        modules.append(module)
    assert len(modules) >= 20
    result = validate(*modules, "--python", upstream_python, "--format", "json", "--timeout", "300")
    assert _errors(result) == [], json.dumps(_errors(result), indent=1)

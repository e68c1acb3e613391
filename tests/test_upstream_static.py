"""The static check of registry modules written for upstream torchtitan 0.3.0, without torchtitan.

Every ``config_registry.py`` of the real 0.3.0 release is read from its wheel (downloaded by
``make test`` into ``.venv/upstream-wheel``, never installed: ``TITAN_UPSTREAM_WHEEL`` names
it) and must pass with no error; then mistakes are planted into each, in the shapes a user
makes them, and each is found at its line and column. Hand-written modules cover the ways
such modules name things (aliases, ``from`` imports, local imports, helpers, subclasses) and
hostile ones that must not hang or crash the reader.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
import zipfile
from pathlib import Path

import pytest

from tests.helpers import validate

REPO = Path(__file__).resolve().parents[1]
DEFAULT_WHEEL = REPO / ".venv" / "upstream-wheel" / "torchtitan-0.3.0-py3-none-any.whl"
FAMILIES = (
    "deepseek_v3",
    "flux",
    "gpt_oss",
    "kimi_k2_7",
    "llama3",
    "muse_glimmer",
    "qwen3",
    "qwen3_5",
)
"""Every model family of torchtitan 0.3.0 (titan trains some of them; the check reads all)."""


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    """A folder holding the wheel's ``torchtitan/**/config_registry.py`` files (and nothing
    else of the package), laid out as in the package so relative imports resolve."""
    wheel = Path(os.environ.get("TITAN_UPSTREAM_WHEEL") or DEFAULT_WHEEL)
    if not wheel.is_file():
        why = f"torchtitan's wheel is not at {wheel}: `make test` downloads it"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    root = tmp_path_factory.mktemp("release")
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith("torchtitan/") and name.endswith("/config_registry.py"):
                target = root / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.read(name))
    return root


def _modules(release: Path) -> list[Path]:
    return sorted(release.glob("torchtitan/**/config_registry.py"))


def _report(*args: object) -> tuple[int, list[dict]]:
    result = validate(*args, "--format", "json", "--no-cache")
    assert "Traceback" not in result.err, result.err
    return result.code, result.json()["diagnostics"]


def test_every_registry_module_of_the_release_passes(release):
    modules = _modules(release)
    assert {m.parent.name for m in modules if m.parent.parent.name == "models"} == set(FAMILIES)
    assert len(modules) >= 15
    code, found = _report(*modules)
    errors = [f for f in found if f["severity"] == "error"]
    assert errors == [] and code == 0, json.dumps(errors, indent=1)
    assert "torch" not in sys.modules or "torchtitan" not in sys.modules


def _plant(text: str, pattern: str, replacement: str) -> tuple[str, int, int]:
    """``text`` with the first match of ``pattern`` replaced, and the (line, col) where the
    replacement starts."""
    match = re.search(pattern, text, flags=re.M)
    assert match is not None, pattern
    start = match.start(1) if match.groups() else match.start()
    line = text.count("\n", 0, start) + 1
    col = start - (text.rfind("\n", 0, start) + 1) + 1
    group = 1 if match.groups() else 0
    planted = text[: match.start(group)] + replacement + text[match.end(group) :]
    return planted, line, col


PLANTS = {
    # a misspelt keyword of TrainingConfig(...)
    "upstream-field": (r"TrainingConfig\((?:\s|\w+=[^,]*,)*?\s*(steps)=", "stpes"),
    # a string where a number belongs
    "upstream-type": (r"TrainingConfig\([^)]*?(seq_len=)", "seq_len='2048' or "),
    # a choice misspelt
    "upstream-flavor": (r"model_registry\(\s*(\"[^\"]+\")", '"tiny-flavor-x"'),
}


def _write(release: Path, family: str, text: str) -> Path:
    path = release / "planted" / "torchtitan" / "models" / family / "config_registry.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("family", FAMILIES)
def test_planted_mistakes_are_found_where_they_are(release, family):
    original = (release / "torchtitan" / "models" / family / "config_registry.py").read_text(
        encoding="utf-8"
    )
    cases = []
    if re.search(r"TrainingConfig\((?:\s|\w+=[^,]*,)*?\s*steps=", original):
        cases.append(("upstream-field", *_plant(original, *PLANTS["upstream-field"])))
    if re.search(r"TrainingConfig\([^)]*?seq_len=", original):
        planted, line, col = _plant(original, r"TrainingConfig\([^)]*?seq_len=(\d+)", '"2048"')
        cases.append(("upstream-type", planted, line, col - len("seq_len=")))  # at the keyword
    planted, line, col = _plant(original, *PLANTS["upstream-flavor"])
    cases.append(("upstream-flavor", planted, line, col))
    # A keyword of another class: warmup_steps is the LR scheduler's.
    if "TrainingConfig(" in original:
        planted, line, col = _plant(
            original, r"TrainingConfig\((\s*)", "\n            warmup_steps=3,"
        )
        cases.append(("upstream-field", planted, line + 1, 13))
    from titan.migrate.targets.upstream_spec_030 import FAMILIES as SPEC_FAMILIES

    if "attn_backend" in SPEC_FAMILIES[family].params:  # a choice misspelt
        first = re.search(r"model_registry\([^)]*\)", original).group(0)
        if "attn_backend=" in first:
            planted, line, col = _plant(
                original, r"model_registry\([^)]*?(attn_backend=\S+?)[,)]", 'attn_backend="flexx"'
            )
        else:
            planted, line, col = _plant(
                original, r"model_registry\(\s*\"[^\"]+\"(\s*)", ', attn_backend="flexx"'
            )
            col += 2
        cases.append(("upstream-choice", planted, line, col))
    assert len(cases) >= 3, family
    for expected, text, line, col in cases:
        path = _write(release, family, text)
        code, found = _report(path)
        errors = [f for f in found if f["severity"] == "error"]
        assert code == 1, (expected, found)
        assert (expected, line, col) in {(f["code"], f["line"], f["col"]) for f in errors}, (
            expected,
            line,
            col,
            errors,
        )


def _first_function(text: str) -> str:
    tree = ast.parse(text)
    return next(
        n.name
        for n in tree.body
        if isinstance(n, ast.FunctionDef)
        and not n.name.startswith("_")
        and not n.args.args
        and n.returns is not None
        and "Config" in ast.unparse(n.returns)
    )


@pytest.mark.parametrize("family", ["llama3", "qwen3", "deepseek_v3", "gpt_oss"])
def test_a_tp_degree_that_does_not_divide_the_flavor_s_heads(release, family):
    from titan.migrate.targets.upstream_api_030 import FLAVOR_FACTS

    original = (release / "torchtitan" / "models" / family / "config_registry.py").read_text(
        encoding="utf-8"
    )
    first = _first_function(original)
    flavor = re.search(rf"def {first}\(\)[\s\S]*?model_registry\(\s*\"([^\"]+)\"", original).group(
        1
    )
    heads = FLAVOR_FACTS[family][flavor]["n_heads"]
    degree = next(d for d in range(3, 64) if heads % d)
    text = (
        original
        + f"\n\ndef planted_tp() -> Trainer.Config:\n    config = {first}()\n"
        + f"    config.parallelism.tensor_parallel_degree = {degree}\n    return config\n"
    )
    path = _write(release, family, text)
    line, col = _position(text, "tensor_parallel_degree = ", last=True)
    code, found = _report(path, "--ngpu", degree * 2)
    at = {(f["code"], f["line"], f["col"]) for f in found}
    assert code == 1
    assert ("tp-heads", line, col) in at, found


def _module(tmp_path: Path, text: str, name: str = "config_registry.py") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


HEAD = "from torchtitan.trainer import Trainer\n"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (  # an aliased module
            "import torchtitan.config as tc\n\n\ndef f() -> Trainer.Config:\n"
            "    return Trainer.Config(training=tc.TrainingConfig(stpes=1))\n",
            ("upstream-field", "stpes"),
        ),
        (  # an aliased class
            "from torchtitan.config import TrainingConfig as TC\n\n\ndef f() -> Trainer.Config:\n"
            "    return Trainer.Config(training=TC(steps='10'))\n",
            ("upstream-type", "steps="),
        ),
        (  # a local import, a helper with **kwargs
            "\n\ndef _training(**kwargs):\n    from torchtitan.config import TrainingConfig\n\n"
            "    return TrainingConfig(**kwargs)\n\n\ndef f() -> Trainer.Config:\n"
            "    return Trainer.Config(training=_training(steps=1, seqlen=2))\n",
            ("upstream-field", "seqlen"),
        ),
        (  # keyword-only fields
            "from torchtitan.config import ParallelismConfig\n\n\ndef f() -> Trainer.Config:\n"
            "    return Trainer.Config(parallelism=ParallelismConfig(2))\n",
            ("upstream-positional", "2)"),
        ),
        (  # a name the module does not have
            "from torchtitan.config import TrainingConfg\n\n\ndef f() -> Trainer.Config:\n"
            "    return Trainer.Config()\n",
            ("upstream-import", "TrainingConfg"),
        ),
        (  # a module torchtitan does not have
            "from torchtitan.componets.loss import CrossEntropyLoss\n\n\n"
            "def f() -> Trainer.Config:\n    return Trainer.Config()\n",
            ("upstream-import", "from torchtitan.componets"),
        ),
        (  # an attribute set on a config with slots
            "\n\ndef f() -> Trainer.Config:\n    config = Trainer.Config()\n"
            "    config.checkpoint.intervall = 5\n    return config\n",
            ("upstream-field", "intervall"),
        ),
        (  # a derived function changes its base's value to one the class refuses
            "from torchtitan.components.checkpoint import CheckpointManager\n\n\n"
            "def f() -> Trainer.Config:\n"
            "    return Trainer.Config(checkpoint=CheckpointManager.Config(interval=0))\n",
            ("upstream-value", "interval=0"),
        ),
        (  # a Literal field
            "from torchtitan.config import TrainingConfig\n\n\ndef f() -> Trainer.Config:\n"
            "    return Trainer.Config(training=TrainingConfig(dtype='bf16'))\n",
            ("upstream-choice", "dtype="),
        ),
        (  # a refused attention backend
            "from torchtitan.models.llama3 import model_registry\n\n\ndef f() -> Trainer.Config:\n"
            "    return Trainer.Config(model_spec=model_registry('8B', attn_backend='sdpa'))\n",
            ("upstream-choice", "attn_backend="),
        ),
        (  # a parameter model_registry does not take
            "from torchtitan.models import qwen3\n\n\ndef f() -> Trainer.Config:\n"
            "    return Trainer.Config(model_spec=qwen3.model_registry('0.6B', atn_backend='flex'))\n",
            ("upstream-argument", "atn_backend"),
        ),
        (  # a dataclass subclass of Trainer.Config
            "from dataclasses import dataclass\n\n\n@dataclass(kw_only=True, slots=True)\n"
            "class MyConfig(Trainer.Config):\n    probe: int = 1\n\n\ndef f() -> Trainer.Config:\n"
            "    return MyConfig(probe=2, prob=3)\n",
            ("upstream-field", "prob="),
        ),
        (  # a name nothing defines
            "\n\ndef f() -> Trainer.Config:\n    return Trainer.Config(training=training_config)\n",
            ("upstream-name", "training_config"),
        ),
        (  # dataclasses.replace on a known config
            "import dataclasses\nfrom torchtitan.config import TrainingConfig\n\n\n"
            "def f() -> Trainer.Config:\n"
            "    base = TrainingConfig()\n"
            "    return Trainer.Config(training=dataclasses.replace(base, step=3))\n",
            ("upstream-field", "step="),
        ),
        (  # a function that returns something else
            "\n\ndef f() -> Trainer.Config:\n    return {'training': 1}\n",
            ("upstream-return", "def f"),
        ),
    ],
)
def test_mistakes_in_the_ways_modules_name_things(tmp_path, body, expected):
    text = HEAD + body
    code_name, marker = expected
    line, col = _position(text, marker)
    code, found = _report(_module(tmp_path, text))
    assert code == 1, found
    assert (code_name, line, col) in {(f["code"], f["line"], f["col"]) for f in found}, found


def _position(text: str, marker: str, *, last: bool = False) -> tuple[int, int]:
    """1-based line and column of ``marker``'s first (or last) place in ``text``."""
    start = text.rindex(marker) if last else text.index(marker)
    return text.count("\n", 0, start) + 1, start - (text.rfind("\n", 0, start) + 1) + 1


def test_a_good_module_in_those_shapes_passes_with_a_note_for_what_is_unread(tmp_path):
    text = HEAD + (
        "import dataclasses\n"
        "import torchtitan.config as tc\n"
        "from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss\n"
        "from torchtitan.components.optimizer import default_adamw\n"
        "from torchtitan.models.common.config_utils import decoder_vocab_size\n"
        "from torchtitan.models.llama3 import model_registry\n\n"
        "from my_project.helpers import schedule\n\n"
        "STEPS = 10 * 10\n\n\n"
        "def _training(**kwargs) -> tc.TrainingConfig:\n"
        "    return tc.TrainingConfig(seq_len=2048, **kwargs)\n\n\n"
        "def base() -> Trainer.Config:\n"
        "    spec = model_registry('8B', attn_backend='varlen')\n"
        "    return Trainer.Config(\n"
        "        model_spec=spec,\n"
        "        optimizer=default_adamw(lr=3e-4),\n"
        "        lr_scheduler=schedule(),\n"
        "        training=_training(steps=STEPS, local_batch_size=2),\n"
        "        loss=ChunkedLossWrapper.Config(\n"
        "            loss_fn=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(spec))\n"
        "        ),\n"
        "    )\n\n\n"
        "def derived() -> Trainer.Config:\n"
        "    config = base()\n"
        "    config.training = dataclasses.replace(config.training, steps=5)\n"
        "    config.parallelism.tensor_parallel_degree = 8\n"
        "    return config\n"
    )
    path = _module(tmp_path, text)
    code, found = _report(path, "--ngpu", 64)
    assert code == 0, found
    notes = [f for f in found if f["code"] == "upstream-unread"]
    assert [n["line"] for n in notes] == [
        _position(text, "def base")[0],
        _position(text, "def derived")[0],
    ], found
    assert "schedule(...)" in notes[0]["message"]
    # the derived function's TP degree is checked against the 8B flavor's 32 heads and 8 kv heads
    text = text.replace("tensor_parallel_degree = 8", "tensor_parallel_degree = 16")
    code, found = _report(_module(tmp_path, text), "--ngpu", 64)
    line, _ = _position(text, "tensor_parallel_degree = 16")
    assert ("tp-heads", line) in {(f["code"], f["line"]) for f in found}, found


HOSTILE = {
    "deep arithmetic": "    x = " + "1+" * 50_000 + "1\n    return Trainer.Config()\n",
    "a huge power": "    return Trainer.Config(hf_assets_path='a' * 10 ** 10 ** 10)\n",
    "exponential calls": "".join(
        f"    def g{i}():\n        return [g{i - 1}(), g{i - 1}()]\n" for i in range(1, 40)
    ).replace(
        "    def g1():\n        return [g0(), g0()]\n",
        "    def g0():\n        return 1\n\n    def g1():\n        return [g0(), g0()]\n",
    )
    + "    g39()\n    return Trainer.Config()\n",
    "endless recursion": "    return f()\n",
    "an endless loop": "    while True:\n        pass\n",
    "deep nesting": "    return " + "[" * 150 + "]" * 150 + "\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_modules_neither_hang_nor_crash_the_reader(tmp_path, name):
    path = _module(tmp_path, HEAD + "\n\ndef f() -> Trainer.Config:\n" + HOSTILE[name])
    result = validate(path, "--format", "json", "--no-cache")
    assert result.code in (0, 1), result.err
    assert "Traceback" not in result.err and "internal error" not in result.err
    codes = {d["code"] for d in result.json()["diagnostics"]}
    assert codes & {"upstream-unread", "registry-error", "upstream-return"}, codes


def test_the_check_imports_neither_torch_nor_torchtitan(release, tmp_path):
    import subprocess

    script = (
        "import sys\nfrom titan.cli.validate import run\n"
        f"code = run([{str(_modules(release)[0])!r}, '--no-cache', '--format', 'json'])\n"
        "assert 'torch' not in sys.modules and 'torchtitan' not in sys.modules, "
        "sorted(m for m in sys.modules if m.startswith('torch'))\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_migrated_modules_pass_the_check(tmp_path):
    """What ``titan-migrate --target torchtitan==0.3.0`` writes for the project's legacy
    configs passes the static check with no error (migrate runs the same check itself)."""
    from titan.migrate.codegen.render_code import render_module
    from titan.migrate.plan.build import build_plan
    from titan.migrate.registry_check import check_text
    from titan.migrate.targets.upstream import retarget

    from tests.helpers import legacy_tomls

    checked = 0
    corpus = REPO.parent / "shared" / "corpus"
    tomls = [*legacy_tomls(), *(sorted(corpus.rglob("*.toml")) if corpus.is_dir() else [])]
    for toml in tomls:
        plan = retarget(build_plan(toml))
        if not plan.ok:
            continue
        text = render_module([plan])
        errors = [d for d in check_text(text, shown=toml.name) if d.severity.value == "error"]
        assert errors == [], (toml, [str(e) for e in errors])
        checked += 1
    assert checked >= 15


def test_titan_diff_compares_two_upstream_functions(release, capsys):
    from titan.cli import diff

    module = release / "torchtitan" / "models" / "llama3" / "config_registry.py"
    code = diff.main([f"{module}:llama3_8b", f"{module}:llama3_70b"])
    out = capsys.readouterr().out
    assert code == 1
    assert (
        "model_spec:" in out
        and "llama3.model_registry('8B') -> llama3.model_registry('70B')" in out
    )
    assert "parallelism.tensor_parallel_degree: 1 -> 8" in out
    assert diff.main([f"{module}:llama3_8b", f"{module}:llama3_8b"]) == 0
    assert (
        diff.main([f"{module}:llama3_8b", str(REPO / "legacy_configs/llama3/llama3_8b.toml")]) == 2
    )
    assert "compared with another such function" in capsys.readouterr().err


def test_a_project_names_its_upstream_interpreter(tmp_path):
    """``[tool.titan] upstream-python`` is read (relative to pyproject.toml) and checked."""
    from titan.schemas import project

    (tmp_path / "pyproject.toml").write_text(
        '[tool.titan]\nupstream-python = ".venv-upstream/bin/python"\n', encoding="utf-8"
    )
    project.forget()
    found = project.for_file(tmp_path / "config_registry.py")
    assert found.upstream_python == str(tmp_path / ".venv-upstream" / "bin" / "python")
    (tmp_path / "pyproject.toml").write_text(
        "[tool.titan]\nupstream-python = 3\n", encoding="utf-8"
    )
    project.forget()
    found = project.for_file(tmp_path / "config_registry.py")
    assert found.upstream_python is None
    assert [p.path for p in found.problems] == ["tool.titan.upstream-python"] or found.problems


def test_a_missing_upstream_interpreter_is_one_finding(tmp_path):
    path = _module(tmp_path, HEAD + "\n\ndef f() -> Trainer.Config:\n    return Trainer.Config()\n")
    code, found = _report(path, "--python", tmp_path / "nowhere" / "python")
    assert code == 1
    assert [f["code"] for f in found] == ["upstream-build"], found
    assert "nowhere" in found[0]["message"] and found[0]["hint"]

"""``titan-migrate --scaffold-extension``: a fork's own sections, declared from its TOMLs.

A fork's folder of TOMLs (new sections, a nested table, keys added to known sections, mixed int
and float values, a typo and a key of an older torchtitan) is scaffolded into a module; the module
is ruff-clean and imports; declared in ``pyproject.toml`` it makes every file validate (but the
typo and the old key, which are not declared) and migrate with every fork key carried.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from titan.migrate.codegen.scaffold import scaffold
from titan.schemas import project

from tests.test_migrate import RUFF, load_module

REPO = Path(__file__).resolve().parents[1]

FORK = {
    "a.toml": """\
        [model]
        name = "llama3"
        flavor = "debugmodel"

        [optimizer]
        swap_optimizer = true

        [infra]
        nodes = 4
        ratio = 1
        env = { NCCL_DEBUG = "INFO" }

        [infra.cluster]
        name = "a100"
        size = 8
        tags = []

        [dataset]
        path = "/data/a"
        mode = "auto"

        [deepep]
        enable = true
        """,
    "b.toml": """\
        [model]
        name = "llama3"
        flavor = "debugmodel"

        [optimizer]
        swap_optimizer = false

        [infra]
        nodes = 8
        ratio = 0.5

        [infra.cluster]
        name = "h100"
        size = 8
        tags = ["fast", "eu"]

        [dataset]
        path = "/data/b"
        mode = 4

        [deepep]
        enable = true
        buffer_mb = 256
        """,
    "c.toml": """\
        [model]
        name = "llama3"
        flavor = "debugmodel"

        [training]
        steps = 20
        stpes = 30

        [optimizer]
        swap_optimizer = true

        [infra]
        nodes = 4
        """,
    "d.toml": """\
        [model]
        name = "llama3"
        flavor = "debugmodel"

        [training]
        tensor_parallel_degree = 2

        [infra.cluster]
        size = 16
        """,
}

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def command(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=ENV,
        timeout=300,
    )


def write(root: Path, files: dict[str, str]) -> list[str]:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return sorted(files)


@pytest.fixture
def fork(tmp_path: Path) -> Path:
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "fork"\n')
    write(tmp_path / "configs", FORK)
    return tmp_path


@pytest.fixture
def scaffolded(fork: Path) -> tuple[Path, subprocess.CompletedProcess]:
    tomls = [f"configs/{name}" for name in sorted(FORK)]
    done = command("titan.cli.migrate", "--scaffold-extension", *tomls, cwd=fork)
    assert done.returncode == 0, done.stderr
    (fork / "tools").mkdir()
    (fork / "tools" / "fork_ext.py").write_text(done.stdout, encoding="utf-8")
    (fork / "pyproject.toml").write_text(
        '[project]\nname = "fork"\n\n[tool.titan]\nextensions = ["tools/fork_ext.py"]\n'
        'era = "v0.2.2"\n'
    )
    project.forget()
    return fork, done


def fields(source: str) -> dict[str, dict[str, tuple[str, str | None]]]:
    """Class -> field -> (annotation, default) as written in the module."""
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef):
            found[node.name] = {
                s.target.id: (ast.unparse(s.annotation), s.value and ast.unparse(s.value))
                for s in node.body
                if isinstance(s, ast.AnnAssign)
            }
    return found


# ----------------------------------------------------------------------- the module


def test_the_module_declares_every_fork_key_with_inferred_types(scaffolded):
    fork, done = scaffolded
    classes = fields(done.stdout)
    assert list(classes) == [
        "Dataset",
        "Deepep",
        "InfraCluster",
        "InfraEnv",
        "Infra",
        "Optimizer",
        "JobConfig",
    ]
    assert classes["JobConfig"] == {
        "dataset": ("Dataset", "field(default_factory=Dataset)"),
        "deepep": ("Deepep", "field(default_factory=Deepep)"),
        "infra": ("Infra", "field(default_factory=Infra)"),
        "optimizer": ("Optimizer", "field(default_factory=Optimizer)"),
    }
    assert classes["Infra"] == {
        "cluster": ("InfraCluster", "field(default_factory=InfraCluster)"),
        "env": ("InfraEnv", "field(default_factory=InfraEnv)"),  # inline, still a section
        "nodes": ("int", "4"),  # 4 twice, 8 once
        "ratio": ("float", "1.0"),  # 1 and 0.5: int and float make float; a tie keeps the first
    }
    assert classes["InfraCluster"] == {
        "name": ("str", "'a100'"),
        "size": ("int", "8"),
        "tags": ("list[str]", "field(default_factory=list)"),
    }
    assert classes["InfraEnv"] == {"NCCL_DEBUG": ("str", "'INFO'")}
    assert classes["Dataset"]["mode"] == ("str | int", "'auto'")
    assert classes["Deepep"] == {"buffer_mb": ("int", "256"), "enable": ("bool", "True")}
    # Only the new key of a known section: merged into [optimizer], not replacing it.
    assert classes["Optimizer"] == {"swap_optimizer": ("bool", "True")}


def test_each_field_says_where_its_values_come_from(scaffolded):
    _, done = scaffolded
    text = done.stdout
    assert (
        "    # 4 in configs/a.toml, configs/c.toml; 8 in configs/b.toml\n    nodes: int = 4" in text
    )
    assert "    # 1 in configs/a.toml; 0.5 in configs/b.toml\n    ratio: float = 1.0" in text
    assert "# mixed types, so str | int: check which the fork reads\n    mode: str | int" in text
    assert "from __future__ import annotations" in text and "@dataclass\nclass Infra:" in text
    assert '"""The fork\'s ``[infra.cluster]`` table."""' in text
    assert "Keys the fork adds to ``[optimizer]``; titan merges them into that section." in text


def test_typos_and_old_keys_are_reported_not_declared(scaffolded):
    _, done = scaffolded
    assert done.stderr.splitlines() == [
        "not declared: `training.stpes` looks like a typo of `training.steps` (configs/c.toml:7:1)",
        "not declared: `training.tensor_parallel_degree` is a key of an older torchtitan: now "
        + done.stderr.split("is a key of an older torchtitan: now ", 1)[1].splitlines()[0],
    ]
    assert "now `parallelism.tensor_parallel_degree = " in done.stderr  # with its value
    assert "configs/d.toml:6:1" in done.stderr
    assert "stpes" not in done.stdout and "tensor_parallel_degree" not in done.stdout


def test_the_module_is_ruff_clean_and_imports(scaffolded, fresh_module_name):
    fork, _ = scaffolded
    path = fork / "tools" / "fork_ext.py"
    for check in (
        [str(RUFF), "format", "--check", "--diff", str(path)],
        [str(RUFF), "check", "--no-cache", "--select", "E,F,I,B,UP", str(path)],  # E501 too
    ):
        done = subprocess.run(check, capture_output=True, text=True, cwd=REPO)
        assert done.returncode == 0, done.stdout + done.stderr
    module = load_module(path, fresh_module_name)
    config = module.JobConfig()
    assert (config.infra.cluster.size, config.dataset.mode, config.infra.env.NCCL_DEBUG) == (
        8,
        "auto",
        "INFO",
    )


# ----------------------------------------------------------------------- declared, every command passes


def test_declared_every_file_validates_but_the_typo_and_the_old_key(scaffolded):
    fork, _ = scaffolded
    done = command("titan.cli.validate", "configs", "--format", "json", cwd=fork)
    assert done.returncode == 1, done.stderr
    found = json.loads(done.stdout)["diagnostics"]
    assert sorted((d["code"], d["path"], d["file"]) for d in found) == [
        # the old key dates d.toml to its era, whose run read a .model tokenizer file, and
        # whose debugmodel was another model than v0.2.2's (a note)
        ("era-default-lost", "model.tokenizer_path", "configs/d.toml"),
        ("era-flavor", "model.flavor", "configs/d.toml"),
        ("moved-key", "training.tensor_parallel_degree", "configs/d.toml"),
        ("unknown-key", "training.stpes", "configs/c.toml"),
    ]
    for name in ("a.toml", "b.toml"):
        assert command("titan.cli.validate", f"configs/{name}", cwd=fork).returncode == 0


def test_declared_every_fork_key_migrates_and_the_module_validates(scaffolded):
    fork, _ = scaffolded
    tomls = [f"configs/{name}" for name in ("a.toml", "b.toml")]
    done = command(
        "titan.cli.migrate", *tomls, "-o", "config_registry.py", "--format", "json", cwd=fork
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["lossless"], report
    fork_keys = [
        (key, outcome["status"])
        for file in report["files"]
        for key, outcome in file["keys"].items()
        if key.split(".")[0] in ("infra", "dataset", "deepep") or key == "optimizer.swap_optimizer"
    ]
    assert len(fork_keys) == 20  # ten in each file
    assert {status for _, status in fork_keys} == {"carried", "default"}
    assert ("infra.env.NCCL_DEBUG", "default") in fork_keys  # the inline table too
    registry = (fork / "config_registry.py").read_text()
    assert "Merged ``fork_ext``: ``pyproject.toml`` declares it" in registry
    checked = command("titan.cli.validate", "config_registry.py", "--no-cache", cwd=fork)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_old_key_is_still_carried_and_the_typo_still_rejected(scaffolded):
    fork, _ = scaffolded
    done = command("titan.cli.migrate", "configs/c.toml", "--format", "json", cwd=fork)
    [report] = json.loads(done.stderr)["files"]
    assert report["keys"]["training.stpes"]["status"] == "rejected"
    assert report["keys"]["infra.nodes"]["status"] == "default"  # 4 is the scaffolded default


# ----------------------------------------------------------------------- names and shapes


def test_reserved_names_still_work_and_impossible_ones_are_reported(tmp_path, fresh_module_name):
    (tmp_path / ".git").mkdir()
    toml = """\
        [infra]
        list = [1, 2]
        dict = { a = 1 }
        field = 3
        type = "x"
        float = 1.5
        later = [3]
        class = 1
        "my-key" = 2
        __init__ = 3
        gpus = { "0" = "a100", "1" = "h100" }

        [field]
        value = 1
        """
    write(tmp_path, {"names.toml": toml})
    result = scaffold([str(tmp_path / "names.toml")])
    source = result.source
    # A field named `field`: the defaults call `dataclasses.field`, which the static reader knows.
    assert "import dataclasses\nfrom dataclasses import dataclass\n" in source
    classes = fields(source)
    assert classes["Infra"]["list"] == (
        "list[int]",
        "dataclasses.field(default_factory=lambda: [1, 2])",
    )
    assert classes["Infra"]["later"] == (
        "list[int]",
        "dataclasses.field(default_factory=lambda: [3])",
    )
    assert classes["Infra"]["type"] == ("str", "'x'")
    assert set(classes["Infra"]) == {"list", "dict", "field", "type", "float", "later", "gpus"}
    assert classes["Infra"]["dict"] == ("InfraDict", "dataclasses.field(default_factory=InfraDict)")
    # Keys that are data, not names: a map.
    assert classes["Infra"]["gpus"][0] == "dict[str, str]"
    assert [re.search("`([^`]+)`", line)[1] for line in result.not_declared] == [
        "infra.__init__",
        "infra.class",
        "infra.my-key",
    ]
    path = tmp_path / "names_ext.py"
    path.write_text(source)
    module = load_module(path, fresh_module_name)
    infra = module.JobConfig().infra
    assert (infra.list, infra.later, infra.field, module.JobConfig().field.value) == (
        [1, 2],
        [3],
        3,
        1,
    )
    (tmp_path / "pyproject.toml").write_text('[tool.titan]\nextensions = ["names_ext.py"]\n')
    project.forget()
    done = command("titan.cli.validate", "names.toml", "--format", "json", cwd=tmp_path)
    found = json.loads(done.stdout)["diagnostics"]
    assert sorted(d["path"] for d in found) == ["infra.__init__", "infra.class", "infra.my-key"]


def test_a_key_that_is_a_table_in_one_file_and_a_value_in_another_is_not_guessed(tmp_path):
    write(tmp_path, {"a.toml": "[infra.pool]\nsize = 1\n", "b.toml": "[infra]\npool = 3\n"})
    result = scaffold([str(tmp_path / "a.toml"), str(tmp_path / "b.toml")])
    assert result.source is None
    assert result.not_declared == [
        f"not declared: `infra.pool` is a table in {tmp_path / 'a.toml'} but 3 in "
        f"{tmp_path / 'b.toml'}; make the files agree"
    ]


def test_a_project_that_declares_some_keys_gets_only_the_rest(scaffolded):
    fork, _ = scaffolded
    write(fork / "configs", {"e.toml": "[infra]\nnodes = 2\nzone = 'eu'\n[probe]\nevery = 5\n"})
    result = scaffold([str(fork / "configs" / "e.toml")])
    assert set(fields(result.source)) == {"Infra", "Probe", "JobConfig"}
    assert fields(result.source)["Infra"] == {"zone": ("str", "'eu'")}


# ----------------------------------------------------------------------- the command's edges


def test_scaffolding_again_into_the_declared_file_works(scaffolded):
    # `> tools/fork_ext.py` empties the declared module before titan runs: its keys come back.
    fork, first = scaffolded
    (fork / "tools" / "fork_ext.py").write_text("")
    project.forget()
    tomls = [f"configs/{name}" for name in sorted(FORK)]
    done = command("titan.cli.migrate", "--scaffold-extension", *tomls, cwd=fork)
    assert done.returncode == 0, done.stderr
    assert done.stdout == first.stdout
    assert done.stderr.startswith(
        "note: pyproject.toml:5:15: extension `tools/fork_ext.py` declared in pyproject.toml "
        "cannot be read"
    )


def test_nothing_to_declare_and_unreadable_files_exit_1(tmp_path):
    write(tmp_path, {"plain.toml": "[training]\nsteps = 3\n", "broken.toml": "[training\n"})
    done = command("titan.cli.migrate_scaffold", "plain.toml", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (1, "")
    assert "nothing to declare: every key of plain.toml is known to titan" in done.stderr
    done = command("titan.cli.migrate_scaffold", "broken.toml", "missing.toml", cwd=tmp_path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "broken.toml:1:10: error[toml-syntax]" in done.stderr
    assert "missing.toml:1:1: error[unreadable-file]" in done.stderr
    assert command("titan.cli.migrate_scaffold", cwd=tmp_path).returncode == 2


def test_the_cli_function_writes_the_module_and_the_report(fork):
    import io

    from titan.cli.migrate_scaffold import run

    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(fork)
    try:
        assert run(["configs/a.toml"], out, err) == 0
    finally:
        os.chdir(cwd)
    assert out.getvalue().startswith('"""Fork sections and keys') and err.getvalue() == ""


def test_a_file_whose_custom_module_cannot_be_read_is_left_out(tmp_path):
    # Its module's sections would all look unknown: declaring them would duplicate the module.
    write(tmp_path, {"job.toml": '[job]\ncustom_config_module = "nowhere_ext"\n[probe]\nx = 1\n'})
    result = scaffold([str(tmp_path / "job.toml")])
    assert result.source is None and [d.code for d in result.problems] == ["extension-error"]


def test_a_key_of_a_built_in_extension_is_not_declared(tmp_path):
    write(tmp_path, {"flux.toml": "[encoder]\nmax_t5_encoding_len = 256\n"})
    result = scaffold([str(tmp_path / "flux.toml")])
    assert result.source is None
    [line] = result.not_declared
    assert line.startswith("not declared: `encoder`: `encoder` is added by the flux extension")


def test_the_scaffold_takes_a_folder_and_writes_with_o_never_over_an_input(fork):
    tomls = [f"configs/{name}" for name in sorted(FORK)]
    to_stdout = command("titan.cli.migrate", "--scaffold-extension", *tomls, cwd=fork)
    folder = command(
        "titan.cli.migrate", "--scaffold-extension", "configs", "-o", "fork_ext.py", cwd=fork
    )
    assert folder.returncode == 0, folder.stderr
    assert (fork / "fork_ext.py").read_text(encoding="utf-8") == to_stdout.stdout
    before = (fork / "configs" / sorted(FORK)[0]).read_bytes()
    over = command("titan.cli.migrate", "--scaffold-extension", *tomls, "-o", tomls[0], cwd=fork)
    assert over.returncode == 2
    assert (fork / "configs" / sorted(FORK)[0]).read_bytes() == before
    other = command("titan.cli.migrate", "--scaffold-extension", "configs", "--strict", cwd=fork)
    assert other.returncode == 2 and "does not take --strict" in other.stderr

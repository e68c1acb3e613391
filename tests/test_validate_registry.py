"""``titan-validate PATH.py``: registry modules checked function by function, as CI and pre-commit
run it: every finding at its file:line:col with a hint, one summary, the right exit code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.helpers import legacy_tomls
from tests.reference import REPO, corpus_files

HEADER = """\
import sys

from titan.components.checkpoint import CheckpointManager
from titan.config import ActivationCheckpointConfig, ParallelismConfig, TrainingConfig
from titan.models.llama3 import model_registry
from titan.trainer import Trainer

"""

CLEAN_BODIES = [
    'return Trainer.Config(model_spec=model_registry("debugmodel"), '
    "training=TrainingConfig(steps={n}, local_batch_size=2))",
    'return Trainer.Config(model_spec=model_registry("8B"), '
    "parallelism=ParallelismConfig(tensor_parallel_degree=2, data_parallel_shard_degree=-1))",
    'return Trainer.Config(model_spec=model_registry("debugmodel"), '
    "checkpoint=CheckpointManager.Config(enable=True, interval={n}))",
    'config = Trainer.Config(model_spec=model_registry("debugmodel"))\n'
    "    config.training.steps = {n}\n"
    "    return config",
    'return Trainer.Config(model_spec=model_registry("70B"), '
    'activation_checkpoint=ActivationCheckpointConfig(mode="full"))',
]

# (function name, body, code, the text the finding's column points at)
BROKEN = [
    (
        "typo_keyword",
        'return Trainer.Config(model_spec=model_registry("debugmodel"), '
        "training=TrainingConfig(stpes=3))",
        "unknown-key",
        "stpes=3",
    ),
    (
        "wrong_type",
        'return Trainer.Config(model_spec=model_registry("debugmodel"), '
        'training=TrainingConfig(steps="10"))',
        "wrong-type",
        'steps="10"',
    ),
    (
        "impossible_layout",
        'return Trainer.Config(model_spec=model_registry("debugmodel"), '
        "parallelism=ParallelismConfig(data_parallel_shard_degree=3))",
        "world-size",
        "data_parallel_shard_degree=3",
    ),
    (
        "raises",
        'raise RuntimeError("the cluster is not ready")',
        "registry-error",
        "raise RuntimeError",
    ),
    ("needs_arguments", None, "registry-signature", "needs_arguments"),
    (
        "imports_a_missing_family",
        "from titan.models.llama5 import model_registry as llama5\n"
        '    return Trainer.Config(model_spec=llama5("debugmodel"))',
        "registry-error",
        "from titan.models.llama5",
    ),
    ("returns_a_dict", 'return {"steps": 10}', "registry-error", "returns_a_dict"),
    ("exits", "sys.exit(3)", "registry-error", "sys.exit(3)"),
    (
        "attribute_typo",
        "config = clean_0()\n    config.training.stpes = 3\n    return config",
        "unknown-key",
        "config.training.stpes",
    ),
    (
        "negative_steps",
        'return Trainer.Config(model_spec=model_registry("debugmodel"), '
        "training=TrainingConfig(steps=-5))",
        "out-of-range",
        "steps=-5",
    ),
]


def _registry_with_broken_functions() -> tuple[str, dict[str, tuple[str, int, int]]]:
    """50 registry functions, 10 of them broken; and where each broken one must be reported."""
    text = HEADER
    expected = {}
    broken = iter(BROKEN)
    for index in range(50):
        if index % 5 == 2:  # every fifth function, spread through the file
            name, body, code, marker = next(broken)
            signature = f"def {name}(cluster) -> Trainer.Config:" if body is None else None
            body = body or "return clean_0()"
        else:
            name, body = f"clean_{index}", CLEAN_BODIES[index % len(CLEAN_BODIES)]
            body, code, marker = body.replace("{n}", str(10 + index)), None, None
            signature = None
        block = f"{signature or f'def {name}() -> Trainer.Config:'}\n    {body}\n\n\n"
        if marker is not None:
            offset = block.index(marker)
            before = text + block[:offset]
            line = before.count("\n") + 1
            col = offset - block.rfind("\n", 0, offset)
            expected[name] = (code, line, col)
        text += block
    return text.rstrip() + "\n", expected


def run(*args: str | os.PathLike, cwd: Path | None = None, env: dict | None = None):
    return subprocess.run(
        [sys.executable, "-m", "titan.cli.validate", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or REPO,
        env={**os.environ, **(env or {})},
        timeout=600,
    )


def findings(done: subprocess.CompletedProcess) -> list[dict]:
    return json.loads(done.stdout)["diagnostics"]


@pytest.fixture(scope="module")
def team_folder(tmp_path_factory) -> tuple[Path, dict]:
    """A project with a 50-function registry, a registry that does not import, and a TOML."""
    root = tmp_path_factory.mktemp("team")
    (root / "team").mkdir()
    text, expected = _registry_with_broken_functions()
    (root / "team" / "config_registry.py").write_text(text, encoding="utf-8")
    (root / "other").mkdir()
    (root / "other" / "config_registry.py").write_text(
        "from titan.models.nope import model_registry\n"
        "from titan.trainer import Trainer\n\n\n"
        "def first() -> Trainer.Config:\n"
        '    return Trainer.Config(model_spec=model_registry("x"))\n\n\n'
        "def second() -> Trainer.Config:\n"
        "    return first()\n",
        encoding="utf-8",
    )
    (root / "jobs").mkdir()
    (root / "jobs" / "debug.toml").write_text(
        '[model]\nname = "llama3"\nflavor = "debugmodel"\n\n[training]\nsteps = 10\n',
        encoding="utf-8",
    )
    return root, expected


def test_one_run_reports_every_broken_function_at_its_place_and_no_clean_one(team_folder):
    root, expected = team_folder
    done = run(".", "--ngpu", "8", "--format", "json", cwd=root)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["summary"]["files"] == 3
    team = [d for d in report["diagnostics"] if d["file"] == "team/config_registry.py"]
    got = {(d["code"], d["line"], d["col"]) for d in team}
    assert got == set(expected.values()), done.stdout
    assert len(team) == len(BROKEN)  # one finding per broken function, none for the 40 clean ones
    for d in team:
        assert d["hint"], d
    by_code = {(d["line"]): d for d in team}
    typo = by_code[expected["typo_keyword"][1]]
    assert "did you mean `steps`?" in typo["hint"]
    assert "stpes" in by_code[expected["attribute_typo"][1]]["message"]
    assert "llama5" in by_code[expected["imports_a_missing_family"][1]]["message"]
    assert "SystemExit(3)" in by_code[expected["exits"][1]]["message"]
    assert "(cluster)" in by_code[expected["needs_arguments"][1]]["message"]
    assert "returned dict" in by_code[expected["returns_a_dict"][1]]["message"]
    assert "--ngpu is 8" in by_code[expected["impossible_layout"][1]]["message"]
    other = [d for d in report["diagnostics"] if d["file"] == "other/config_registry.py"]
    assert [(d["code"], d["line"], d["col"]) for d in other] == [("registry-error", 1, 1)]
    assert "none of its 2 registry functions were checked" in other[0]["message"]
    assert other[0]["hint"]
    assert not [d for d in report["diagnostics"] if d["file"].endswith(".toml")]


def test_text_output_names_file_line_col_and_quotes_the_line(team_folder):
    root, expected = team_folder
    done = run("team/config_registry.py", "--ngpu", "8", cwd=root)
    assert done.returncode == 1
    code, line, col = expected["typo_keyword"]
    assert f"team/config_registry.py:{line}:{col}: error[unknown-key]" in done.stdout
    assert "TrainingConfig(stpes=3)" in done.stdout
    assert "did you mean `steps`?" in done.stdout
    assert "Found 10 errors" in done.stdout


def test_github_format_annotates_each_finding(team_folder):
    root, expected = team_folder
    done = run("team/config_registry.py", "--ngpu", "8", "--format", "github", cwd=root)
    assert done.returncode == 1
    code, line, col = expected["raises"]
    assert f"::error file=team/config_registry.py,line={line},col={col}" in done.stdout


def test_without_ngpu_the_layout_is_not_judged(team_folder):
    root, expected = team_folder
    done = run("team/config_registry.py", "--format", "json", cwd=root)
    lines = {d["line"] for d in findings(done)}
    assert expected["impossible_layout"][1] not in lines
    assert len(lines) == len(BROKEN) - 1


def test_select_narrows_to_named_functions_and_patterns(team_folder):
    root, _ = team_folder
    clean = run("team/config_registry.py", "--select", "clean_*", "--ngpu", "8", cwd=root)
    assert clean.returncode == 0, clean.stdout
    one = run("team", "--select", "raises,clean_0", "--format", "json", cwd=root)
    assert one.returncode == 1
    assert {d["code"] for d in findings(one)} == {"registry-error"}
    assert len(findings(one)) == 1


def test_select_that_matches_nothing_is_a_usage_error_with_a_suggestion(team_folder):
    root, _ = team_folder
    done = run("team/config_registry.py", "--select", "typo_keywrd", cwd=root)
    assert done.returncode == 2
    assert "--select typo_keywrd matches no registry function" in done.stderr
    assert "did you mean `typo_keyword`?" in done.stderr
    toml_only = run("jobs/debug.toml", "--select", "x", cwd=root)
    assert toml_only.returncode == 2
    assert "no registry module" in toml_only.stderr


def test_every_shipped_registry_passes_in_one_run_with_the_legacy_tomls():
    shipped = sorted(REPO.glob("titan/models/*/config_registry.py"))
    assert len(shipped) == 6
    done = run(*shipped, "legacy_configs", "--no-cache")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"All checks passed: {len(shipped) + 24} files" in done.stdout


def test_a_folder_walk_finds_the_registry_module():
    done = run("titan/models/llama3/", "--no-cache")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All checks passed: 1 file," in done.stdout
    assert "warning" not in done.stderr


def _migrate(toml: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [sys.executable, "-m", "titan.cli.migrate", str(toml), "-o", str(target), "-q"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr


def test_every_migrated_legacy_config_passes(tmp_path):
    tomls = legacy_tomls()
    assert len(tomls) == 23
    for toml in tomls:
        folder = "_".join(toml.relative_to(REPO / "legacy_configs").with_suffix("").parts)
        _migrate(toml, tmp_path / folder / "config_registry.py")
    done = run(tmp_path, "--no-cache", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All checks passed: 23 files" in done.stdout


def test_every_migrated_upstream_config_passes(tmp_path):
    """Every module titan-migrate writes for the upstream corpus imports, builds and passes; the
    values it could not carry are TODO notes, which only --strict fails."""
    tomls = corpus_files()
    common = Path(os.path.commonpath(tomls))
    for toml in tomls:
        folder = "_".join(toml.relative_to(common).with_suffix("").parts).replace(".", "_")
        target = tmp_path / folder / "config_registry.py"
        target.parent.mkdir()
        subprocess.run(
            [sys.executable, "-m", "titan.cli.migrate", str(toml), "-o", str(target), "-q"],
            capture_output=True,
            cwd=REPO,
        )
        assert target.exists(), toml
    done = run(tmp_path, "--no-cache", "--format", "json", cwd=tmp_path)
    report = json.loads(done.stdout)
    assert report["summary"]["files"] == len(tomls)
    # Upstream's llama4_17bx128e feeds its 4-stage 1F1B pipeline one microbatch, which torch's
    # Schedule1F1B refuses: the migrated function is refused for that, and only that.
    errors = [d for d in report["diagnostics"] if d["severity"] == "error"]
    assert [
        (d["code"], Path(d["file"]).parent.name.endswith("llama4_17bx128e")) for d in errors
    ] == [("pipeline-layout", True)], errors
    assert done.returncode == 1, done.stdout + done.stderr
    others = [d for d in report["diagnostics"] if d not in errors]
    assert {d["code"] for d in others} <= {"migration-todo"}


def test_checking_a_registry_imports_no_torch():
    code = textwrap.dedent(
        """
        import io, sys
        from titan.cli import validate
        out, err = io.StringIO(), io.StringIO()
        code = validate.run(["titan/models", "legacy_configs", "--no-cache"], stdout=out, stderr=err)
        print(code, "torch" in sys.modules)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert done.stdout.split() == ["0", "False"], done.stdout + done.stderr


# ----------------------------------------------------------------------- what runs, and when


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return tmp_path


MARKING = """\
from pathlib import Path

from titan.config import TrainingConfig
from titan.models.llama3 import model_registry
from titan.trainer import Trainer

MARKS = Path(__file__).with_name("marks.txt")
with MARKS.open("a") as handle:
    handle.write("import\\n")


def _mark(what):
    with MARKS.open("a") as handle:
        handle.write(what + "\\n")


def debug() -> Trainer.Config:
    _mark("debug")
    return Trainer.Config(model_spec=model_registry("debugmodel"), training=TrainingConfig(steps=4))


def helper() -> dict:
    _mark("helper")
    return {}


def unannotated_helper():
    _mark("unannotated_helper")
    return 3


if __name__ == "__main__":
    _mark("main")
"""


def test_only_registry_functions_are_called_and_each_once(tmp_path):
    root = _project(tmp_path, {"config_registry.py": MARKING})
    done = run("config_registry.py", "--no-cache", cwd=root)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (root / "marks.txt").read_text().split() == ["import", "debug"]


def test_an_unchanged_module_is_answered_from_the_cache_without_running_it(tmp_path):
    root = _project(
        tmp_path,
        {
            "config_registry.py": MARKING.replace("steps=4", "stpes=4"),
            "cache/.keep": "",
        },
    )
    env = {"TITAN_CACHE_DIR": str(root / "cache")}
    cold = run("config_registry.py", cwd=root, env=env)
    warm = run("config_registry.py", cwd=root, env=env)
    assert cold.returncode == warm.returncode == 1
    assert cold.stdout == warm.stdout
    assert "stpes" in cold.stdout
    assert (root / "marks.txt").read_text().split() == ["import", "debug"]  # ran once
    assert list((root / "cache" / "validate-registry").glob("*.json"))
    again = run("config_registry.py", "--no-cache", cwd=root, env=env)
    assert again.stdout == cold.stdout
    assert (root / "marks.txt").read_text().split().count("import") == 2
    fixed = (root / "config_registry.py").read_text().replace("stpes=4", "steps=4")
    (root / "config_registry.py").write_text(fixed)
    after_edit = run("config_registry.py", cwd=root, env=env)
    assert after_edit.returncode == 0, after_edit.stdout


def test_the_cache_is_invalidated_by_an_edited_neighbour_module(tmp_path):
    root = _project(
        tmp_path,
        {
            "common.py": "STEPS = 10\n",
            "config_registry.py": """\
                from common import STEPS
                from titan.config import TrainingConfig
                from titan.models.llama3 import model_registry
                from titan.trainer import Trainer


                def debug() -> Trainer.Config:
                    return Trainer.Config(
                        model_spec=model_registry("debugmodel"), training=TrainingConfig(steps=STEPS)
                    )
                """,
        },
    )
    env = {"TITAN_CACHE_DIR": str(root / "cache")}
    assert run("config_registry.py", cwd=root, env=env).returncode == 0
    (root / "common.py").write_text('STEPS = "ten"\n')
    done = run("config_registry.py", cwd=root, env=env)
    assert done.returncode == 1, done.stdout
    assert "wrong-type" in done.stdout


def test_no_cache_is_written_anywhere_but_the_cache_folder(tmp_path):
    root = _project(tmp_path, {"project/config_registry.py": MARKING})
    env = {"TITAN_CACHE_DIR": str(root / "cache")}
    assert run("project", cwd=root, env=env).returncode == 0
    assert run("project", cwd=root, env=env).returncode == 0
    # the module's own marks, and nothing of titan's
    assert sorted(p.name for p in (root / "project").iterdir()) == [
        "config_registry.py",
        "marks.txt",
    ]
    assert list((root / "cache").rglob("*.json"))
    nocache = root / "nocache"
    assert (
        run("project", "--no-cache", cwd=root, env={"TITAN_CACHE_DIR": str(nocache)}).returncode
        == 0
    )
    assert not nocache.exists()


def test_two_folders_with_neighbours_of_one_name_each_get_their_own(tmp_path):
    registry = """\
        from common import FLAVOR
        from titan.models.llama3 import model_registry
        from titan.trainer import Trainer


        def job() -> Trainer.Config:
            return Trainer.Config(model_spec=model_registry(FLAVOR))
        """
    root = _project(
        tmp_path,
        {
            "a/common.py": 'FLAVOR = "debugmodel"\n',
            "a/config_registry.py": registry,
            "b/common.py": 'FLAVOR = "debugmodel_typo"\n',
            "b/config_registry.py": registry,
        },
    )
    done = run("a", "b", "--no-cache", "--format", "json", cwd=root)
    assert done.returncode == 1
    assert {d["file"] for d in findings(done)} == {"b/config_registry.py"}


def test_a_module_without_registry_functions_is_not_imported(tmp_path):
    root = _project(
        tmp_path,
        {
            "tool.py": """\
                from pathlib import Path

                Path(__file__).with_name("ran.txt").write_text("ran")


                def helper():
                    return 1
                """
        },
    )
    done = run("tool.py", cwd=root)
    assert done.returncode == 0
    assert "tool.py defines no registry functions" in done.stderr
    assert not (root / "ran.txt").exists()


def test_a_project_declares_more_registry_files(tmp_path):
    root = _project(
        tmp_path,
        {
            "pyproject.toml": '[project]\nname = "x"\n\n[tool.titan]\nregistry-files = ["configs/*.py"]\n',
            "configs/team.py": MARKING.replace("steps=4", "stpes=4"),
            "configs/notes.txt": "not python",
            "scripts/tool.py": "raise SystemExit('never imported')\n",
        },
    )
    done = run(".", "--no-cache", "--format", "json", cwd=root)
    assert done.returncode == 1, done.stderr
    assert {d["file"] for d in findings(done)} == {"configs/team.py"}
    assert json.loads(done.stdout)["summary"]["files"] == 1


def test_a_declaration_titan_cannot_use_is_a_usage_error(tmp_path):
    root = _project(tmp_path, {"pyproject.toml": '[tool.titan]\nregistry-file = ["*.py"]\n'})
    done = run(".", cwd=root)
    assert done.returncode == 2
    assert "[tool.titan] has no setting `registry-file`; did you mean `registry-files`?" in (
        done.stderr
    )
    (root / "pyproject.toml").write_text('[tool.titan]\nregistry-files = "configs/*.py"\n')
    done = run(".", cwd=root)
    assert done.returncode == 2
    assert "must be a list of file patterns" in done.stderr


# ----------------------------------------------------------------------- hostile modules


@pytest.mark.parametrize(
    ("source", "code", "line", "needle"),
    [
        ("def broken(:\n    pass\n", "registry-error", 1, "invalid Python"),
        (
            "import sys\nsys.exit(4)\n\ndef f() -> Trainer.Config:\n    pass\n",
            "registry-error",
            2,
            "SystemExit(4)",
        ),
        (
            "raise KeyError('boom')\n\ndef f() -> Trainer.Config:\n    pass\n",
            "registry-error",
            1,
            "was not checked",
        ),
        (
            "from titan.trainer import Trainer\n\ndef f() -> Trainer.Config:\n"
            "    from titan.config import TrainingConfig\n    return TrainingConfig()\n",
            "registry-error",
            3,
            "returned TrainingConfig, not a Trainer.Config",
        ),
        (
            "from titan.trainer import Trainer\n\nasync def f() -> Trainer.Config:\n    pass\n",
            "registry-signature",
            3,
            "async def",
        ),
        (
            "from titan.trainer import Trainer\n\ndef f() -> Trainer.Config:\n    return 1\n\n"
            "def f() -> Trainer.Config:\n    return 2\n",
            "duplicate-config",
            6,
            "defined twice (also at line 3)",
        ),
        (
            "from titan.trainer import Trainer\n\ndef f(*, steps) -> Trainer.Config:\n    pass\n",
            "registry-signature",
            3,
            "needs arguments (steps)",
        ),
    ],
    ids=["syntax", "exit-at-import", "raise-at-import", "wrong-config", "async", "twice", "kwonly"],
)
def test_hostile_modules_are_findings_not_tracebacks(tmp_path, source, code, line, needle):
    (tmp_path / "config_registry.py").write_text(source, encoding="utf-8")
    done = run("config_registry.py", "--format", "json", "--no-cache", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    found = findings(done)
    assert any(d["code"] == code and d["line"] == line and needle in d["message"] for d in found), (
        found
    )
    assert all(d["hint"] for d in found)


def test_a_function_that_never_returns_is_stopped_at_the_time_limit(tmp_path):
    (tmp_path / "config_registry.py").write_text(
        "import time\nfrom titan.trainer import Trainer\n\n\n"
        "def spins() -> Trainer.Config:\n    while True:\n        time.sleep(0.01)\n",
        encoding="utf-8",
    )
    done = run("config_registry.py", "--timeout", "1", "--format", "json", cwd=tmp_path)
    assert done.returncode == 1
    (finding,) = findings(done)
    assert finding["line"] in (6, 7)
    assert "no answer after 1 s while running spins()" in finding["message"]


def test_what_a_module_prints_stays_out_of_the_report(tmp_path):
    (tmp_path / "config_registry.py").write_text(
        MARKING.replace(
            '    _mark("debug")\n', '    _mark("debug")\n    print("hello from debug")\n'
        ),
        encoding="utf-8",
    )
    done = run("config_registry.py", "--format", "json", "--no-cache", cwd=tmp_path)
    assert done.returncode == 0
    assert json.loads(done.stdout)["diagnostics"] == []
    assert "hello from debug" in done.stderr


def test_a_migration_todo_is_a_warning_that_strict_fails(tmp_path):
    (tmp_path / "config_registry.py").write_text(
        MARKING.replace(
            '    _mark("debug")\n',
            '    _mark("debug")\n    # TODO(titan-migrate): `profiling.foo` has no home\n',
        ),
        encoding="utf-8",
    )
    lenient = run("config_registry.py", "--format", "json", cwd=tmp_path)
    assert lenient.returncode == 0
    (todo,) = findings(lenient)
    assert (todo["code"], todo["severity"], todo["line"]) == ("migration-todo", "warning", 19)
    assert "`profiling.foo` has no home" in todo["message"]
    assert run("config_registry.py", "--strict", cwd=tmp_path).returncode == 1


def test_a_registry_inside_a_package_may_import_relatively(tmp_path):
    root = _project(
        tmp_path,
        {
            "configs/__init__.py": "",
            "configs/common.py": """\
                from titan.config import TrainingConfig
                from titan.models.llama3 import model_registry
                from titan.trainer import Trainer


                def base() -> Trainer.Config:
                    return Trainer.Config(
                        model_spec=model_registry("debugmodel"), training=TrainingConfig(steps=3)
                    )
                """,
            "configs/llama/__init__.py": "",
            "configs/llama/config_registry.py": """\
                from titan.trainer import Trainer

                from ..common import base


                def llama_job() -> Trainer.Config:
                    config = base()
                    config.training.stpes = 4
                    return config
                """,
        },
    )
    done = run(".", "--no-cache", "--format", "json", cwd=root)
    assert done.returncode == 1, done.stderr
    (finding,) = findings(done)
    assert (finding["file"], finding["line"], finding["code"]) == (
        "configs/llama/config_registry.py",
        8,
        "unknown-key",
    )


def test_a_module_that_prompts_moves_or_leaves_threads_cannot_hang_or_misplace_the_run(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "config_registry.py").write_text(
        textwrap.dedent(
            """\
            import os
            import threading
            import time

            from titan.models.llama3 import model_registry
            from titan.trainer import Trainer

            threading.Thread(target=lambda: time.sleep(600), name="poller").start()
            os.chdir("/")


            def asks() -> Trainer.Config:
                return Trainer.Config(model_spec=model_registry(input("flavor? ")))
            """
        ),
        encoding="utf-8",
    )
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "config_registry.py").write_text(MARKING, encoding="utf-8")
    done = run("a", "b", "--no-cache", "--format", "json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    (finding,) = findings(done)
    assert (finding["file"], finding["line"]) == ("a/config_registry.py", 13)
    assert "EOFError" in finding["message"]
    assert (tmp_path / "b" / "marks.txt").read_text().split() == ["import", "debug"]
    assert "not waiting for 1 thread(s) the checked code started (poller)" in done.stderr


def test_the_config_mode_warns_of_migration_todos_too(tmp_path):
    (tmp_path / "config_registry.py").write_text(
        MARKING.replace(
            '    _mark("debug")\n',
            '    _mark("debug")\n    # TODO(titan-migrate): `profiling.foo` has no home\n',
        ),
        encoding="utf-8",
    )
    args = ("--registry", "config_registry.py", "--config", "debug")
    lenient = run(*args, "--format", "json", cwd=tmp_path)
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr
    (todo,) = findings(lenient)
    assert (todo["code"], todo["file"], todo["line"], todo["col"]) == (
        "migration-todo",
        "config_registry.py",
        19,
        7,
    )
    assert run(*args, "--strict", cwd=tmp_path).returncode == 1

"""``titan-migrate --scaffold-extension ... -o EXISTING.py`` adds only what the module lacks and
keeps every other byte of it, or refuses with exit 2 and leaves it as it was
(``titan.migrate.codegen.scaffold_merge``)."""

from __future__ import annotations

import difflib
import io
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from titan.schemas import project

from tests.test_migrate import RUFF
from titan.cli import migrate as cli

REPO = Path(__file__).resolve().parents[1]

FIRST = """\
[model]
name = "llama3"
flavor = "debugmodel"

[infra]
nodes = 4

[optimizer]
swap_optimizer = true
"""

SECOND = """\
[model]
name = "llama3"
flavor = "debugmodel"

[infra]
nodes = 8
zone = "eu"

[infra.cluster]
size = 8

[probe]
every = 5
tags = ["a"]

[optimizer]
swap_optimizer = false
foo_bar = 2
"""


def run(*argv: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    project.forget()
    status = cli.run([str(a) for a in argv], stdout=out, stderr=err)
    return status, out.getvalue(), err.getvalue()


@pytest.fixture
def fork(tmp_path: Path, monkeypatch) -> Path:
    """A project with two TOMLs and no declaration yet, as the working folder."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "fork"\n')
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs/a.toml").write_text(FIRST)
    (tmp_path / "configs/b.toml").write_text(SECOND)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def declare(fork: Path) -> None:
    (fork / "pyproject.toml").write_text(
        '[project]\nname = "fork"\n\n[tool.titan]\nextensions = ["fork_ext.py"]\n'
    )


def only_added(before: str, after: str) -> list[str]:
    """The lines ``after`` adds to ``before``; fails if any line of ``before`` changed."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    added = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new).get_opcodes():
        assert tag in ("equal", "insert"), (tag, old[i1:i2], new[j1:j2])
        added += new[j1:j2] if tag == "insert" else []
    return added


def load(path: Path) -> dict:
    """Import the module, as v0.2.2's loader and ``--allow-import`` would."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fork_ext_probe", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses looks its module up while the class is made
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return vars(module)


# ----------------------------------------------------------------------- what is added


def test_the_declared_extension_keeps_its_hand_edits_and_gains_the_new_keys(fork):
    declare(fork)
    status, _, err = run("--scaffold-extension", "configs/a.toml", "-o", "fork_ext.py")
    assert status == 0, err
    module = fork / "fork_ext.py"
    edited = module.read_text().replace(
        "    nodes: int = 4\n", '    nodes: int = 4\n    """How many nodes the job spans."""\n'
    )
    edited = edited.replace("class Infra:", "class Infra:  # our cluster layout")
    module.write_text(edited)
    status, _, err = run(
        "--scaffold-extension", "configs/a.toml", "configs/b.toml", "-o", "fork_ext.py"
    )
    assert status == 0, err
    after = module.read_text()
    added = "".join(only_added(edited, after))
    for declared in ("zone: str", "foo_bar: int", "class Probe", "class InfraCluster"):
        assert declared in added
    assert "swap_optimizer" not in added and "nodes" not in added  # declared already
    assert (
        "added to fork_ext.py: [infra.cluster] (new class InfraCluster), `infra.zone`, "
        "`optimizer.foo_bar`, [probe] (new class Probe); every other line of it is unchanged"
    ) in err
    namespace = load(module)  # a new class comes before the class that uses it
    config = namespace["JobConfig"]()
    assert (config.probe.tags, config.infra.cluster.size, config.infra.zone) == (["a"], 8, "eu")
    checked = subprocess.run(
        [sys.executable, "-m", "titan.cli.validate", "configs"],
        capture_output=True,
        text=True,
        cwd=fork,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    formatted = subprocess.run([str(RUFF), "format", "--check", "--diff", str(module)])
    assert formatted.returncode == 0


def test_an_undeclared_module_of_another_style_keeps_its_style(fork):
    # No __future__ import, `import dataclasses as dc`, CRLF line endings, no final newline.
    text = (
        '"""Our fork\'s settings."""\n'
        "import dataclasses as dc\n"
        "\n"
        "\n"
        "@dc.dataclass\n"
        "class Infra:\n"
        "\tnodes: int = 1\n"
        "\n"
        "\n"
        "@dc.dataclass\n"
        "class JobConfig:\n"
        "\tinfra: Infra = dc.field(default_factory=Infra)"
    ).replace("\n", "\r\n")
    module = fork / "ours.py"
    module.write_bytes(text.encode())
    status, _, err = run("--scaffold-extension", "configs", "-o", module)
    assert status == 0, err
    after = module.read_bytes().decode()
    added = only_added(text + "\r\n", after)  # the last line only gained its line ending
    assert all(line.endswith("\r\n") for line in added)
    assert '\tzone: str = "eu"\r\n' in added
    assert "dc.field(default_factory=Probe)" in "".join(added)
    assert "@dc.dataclass\r\n" in added and not any("import" in line for line in added)
    assert load(module)["JobConfig"]().infra.zone == "eu"


def test_a_missing_dataclasses_name_is_imported_after_the_imports(fork):
    text = textwrap.dedent(
        """\
        from __future__ import annotations

        from dataclasses import dataclass


        @dataclass
        class JobConfig:
            pass
        """
    )
    module = fork / "ours.py"
    module.write_text(text)
    status, _, err = run("--scaffold-extension", "configs", "-o", module)
    assert status == 0, err
    added = only_added(text, module.read_text())
    assert added[0] == "from dataclasses import field\n"
    assert module.read_text().index("from dataclasses import field") < module.read_text().index(
        "class Infra"
    )
    assert load(module)["JobConfig"]().probe.every == 5


# ----------------------------------------------------------------------- what is refused


REFUSED = {
    "a declared type the TOMLs do not fit": (
        "from dataclasses import dataclass, field\n\n@dataclass\nclass Infra:\n"
        '    nodes: str = "four"\n\n@dataclass\nclass JobConfig:\n'
        "    infra: Infra = field(default_factory=Infra)\n",
        "`infra.nodes` is declared as a string (line 5), but configs/a.toml sets it to integer 4",
    ),
    "a value where the TOMLs have a table": (
        "from dataclasses import dataclass, field\n\n@dataclass\nclass Infra:\n"
        '    cluster: str = "a100"\n\n@dataclass\nclass JobConfig:\n'
        "    infra: Infra = field(default_factory=Infra)\n",
        "`infra.cluster` is declared as a string",
    ),
    "a JobConfig built at run time": (
        "import dataclasses\n\nJobConfig = dataclasses.make_dataclass('JobConfig', [])\n",
        "titan cannot read it as an extension module",
    ),
    "not Python": ("# Notes\n\nThe fork's settings: see below.\n", "it is not Python titan"),
    "a section class of another module": (
        "from dataclasses import dataclass, field\nfrom forkpkg.sections import Infra\n\n"
        "@dataclass\nclass JobConfig:\n    infra: Infra = field(default_factory=Infra)\n",
        "cannot add `infra.cluster`: [infra] is declared by `Infra`, which is not a class of this file",
    ),
    "a class two sections share": (
        "from dataclasses import dataclass, field\n\n@dataclass\nclass Common:\n"
        "    nodes: int = 4\n\n@dataclass\nclass JobConfig:\n"
        "    infra: Common = field(default_factory=Common)\n"
        "    spare: Common = field(default_factory=Common)\n",
        "class `Common` declares [infra] and another section",
    ),
    "a class on one line": (
        "from dataclasses import dataclass, field\n\n@dataclass\nclass Infra: nodes: int = 4\n\n"
        "@dataclass\nclass JobConfig:\n    infra: Infra = field(default_factory=Infra)\n",
        "class `Infra` is written on one line",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_module_that_cannot_take_the_keys_safely_is_left_as_it_was(fork, case):
    text, reason = REFUSED[case]
    (fork / "forkpkg").mkdir()
    (fork / "forkpkg/__init__.py").write_text("")
    (fork / "forkpkg/sections.py").write_text(
        "from dataclasses import dataclass\n\n@dataclass\nclass Infra:\n    nodes: int = 1\n"
    )
    module = fork / "ours.py"
    module.write_text(text)
    status, out, err = run("--scaffold-extension", "configs", "-o", module)
    assert status == 2 and out == "", err
    assert module.read_text() == text
    assert f"error: not changing {module}: " in err and reason in err, err
    assert "nothing was written" in err and "Traceback" not in err


def test_nothing_to_add_leaves_the_module_untouched_and_says_so(fork):
    declare(fork)
    assert run("--scaffold-extension", "configs", "-o", "fork_ext.py")[0] == 0
    before = (fork / "fork_ext.py").read_bytes()
    status, _, err = run("--scaffold-extension", "configs", "-o", "fork_ext.py")
    assert status == 1 and (fork / "fork_ext.py").read_bytes() == before
    assert "nothing to add to fork_ext.py" in err and "it was not changed" in err


def test_a_read_only_module_is_changed_only_with_force(fork):
    module = fork / "ours.py"
    text = "from dataclasses import dataclass, field\n\n@dataclass\nclass JobConfig:\n    pass\n"
    module.write_text(text)
    module.chmod(0o444)
    status, _, err = run("--scaffold-extension", "configs", "-o", module)
    assert status == 2 and module.read_text() == text and "it is read-only" in err
    status, _, err = run("--scaffold-extension", "configs", "-o", module, "--force")
    assert status == 0, err
    assert "    probe: Probe = field(default_factory=Probe)\n" in only_added(
        text, module.read_text()
    )
    assert stat.S_IMODE(module.stat().st_mode) == 0o444
    assert "although it is read-only" in err
    empty = fork / "empty.py"
    empty.write_text("")
    empty.chmod(0o444)
    status, _, err = run("--scaffold-extension", "configs", "-o", empty)
    assert status == 2 and empty.read_text() == "" and "it is read-only" in err


def test_a_new_or_empty_file_gets_the_whole_module_and_the_report_says_so(fork):
    (fork / "empty.py").write_text("")
    for name in ("new.py", "empty.py"):
        status, _, err = run("--scaffold-extension", "configs", "-o", name)
        assert status == 0, err
        assert (fork / name).read_text().startswith('"""Fork sections and keys')
        assert f"wrote {name}, a new extension module" in err


def test_no_import_is_added_that_the_new_lines_do_not_use(fork):
    text = (
        "from dataclasses import dataclass\n\n\n@dataclass\nclass Infra:\n    nodes: int = 1\n"
        "\n\n@dataclass\nclass JobConfig:\n    infra: Infra"  # no line end: none is added
    )
    module = fork / "ours.py"
    module.write_text(text)
    (fork / "configs/c.toml").write_text('[infra]\nnodes = 2\nzone = "eu"\n')
    status, _, err = run("--scaffold-extension", "configs/c.toml", "-o", module)
    assert status == 0, err
    assert module.read_text().endswith("\n    infra: Infra")
    assert only_added(text, module.read_text()) == [
        '    # "eu" in configs/c.toml\n',
        '    zone: str = "eu"\n',
    ]


def test_a_link_to_the_module_adds_to_the_module_and_stays_a_link(fork):
    declare(fork)
    (fork / "tools").mkdir()
    assert run("--scaffold-extension", "configs/a.toml", "-o", "tools/real_ext.py")[0] == 0
    (fork / "fork_ext.py").symlink_to("tools/real_ext.py")
    before = (fork / "tools/real_ext.py").read_text()
    status, _, err = run("--scaffold-extension", "configs", "-o", "fork_ext.py")
    assert status == 0, err
    assert (fork / "fork_ext.py").is_symlink()
    assert '    zone: str = "eu"\n' in only_added(before, (fork / "tools/real_ext.py").read_text())


@pytest.mark.parametrize("link", ["symlink", "hard link"])
def test_dash_o_that_is_a_link_to_a_toml_is_refused(fork, link):
    toml = fork / "configs/b.toml"
    if link == "symlink":
        (fork / "ext.py").symlink_to(toml)
    else:
        os.link(toml, fork / "ext.py")
    status, _, err = run("--scaffold-extension", "configs", "-o", "ext.py")
    assert status == 2 and "refusing to write over it" in err
    assert toml.read_text() == SECOND

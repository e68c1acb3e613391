"""The registry-result cache of ``titan-validate`` is never wrong and never an error: the user's
own package installed with ``pip install -e`` is keyed wherever its checkout lies, an entry titan
did not write whole (another shape, another module's, a FIFO, a device, a folder, a link) is a
miss replaced by the fresh result, and a cache folder that cannot be used leaves the run working,
with nothing written anywhere else."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

HANG_GUARD_S = 600
"""Only a hang reaches this: every run here takes about a second."""
MEMORY_GUARD = 2 * 1024**3
"""Address space for a run that reads a cache entry: reading a device without end fails here."""

REGISTRY = """\
from pathlib import Path

from titan.config import TrainingConfig
from titan.models.llama3 import model_registry
from titan.trainer import Trainer

with open(Path(__file__).with_name("marks.txt"), "a") as marks:
    marks.write("import\\n")


def debug() -> Trainer.Config:
    return Trainer.Config(model_spec=model_registry("debugmodel"), training=TrainingConfig(stpes=4))
"""


def _limit_memory() -> None:
    """Run with at most ``MEMORY_GUARD`` bytes of address space."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_GUARD, MEMORY_GUARD))


def run(*args, cwd: Path, cache: Path, python: str = sys.executable, preexec=_limit_memory):
    """``titan-validate ARGS`` in a fresh process with its cache in ``cache``."""
    return subprocess.run(
        [python, "-m", "titan.cli.validate", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, "TITAN_CACHE_DIR": str(cache)},
        timeout=HANG_GUARD_S,
        preexec_fn=preexec,
    )


def imports(folder: Path) -> int:
    """How many times the registry module in ``folder`` has been imported (run, not cached)."""
    marks = folder / "marks.txt"
    return marks.read_text().split().count("import") if marks.exists() else 0


def quiet(done: subprocess.CompletedProcess) -> bool:
    """Nothing alarming on stderr."""
    return all(word not in done.stderr for word in ("error", "Traceback", "cache"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A registry module with one finding (a typo), checked once: its entry is in the cache."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "config_registry.py").write_text(REGISTRY)
    cold = run("config_registry.py", cwd=root, cache=tmp_path / "cache")
    assert cold.returncode == 1 and "stpes" in cold.stdout, cold.stdout + cold.stderr
    assert imports(root) == 1
    return root


def entry_of(project: Path) -> Path:
    """The one entry in the cache beside ``project``."""
    (entry,) = (project.parent / "cache" / "validate-registry").glob("*.json")
    return entry


def check_again(project: Path) -> subprocess.CompletedProcess:
    """``titan-validate config_registry.py`` in ``project`` with the cache beside it."""
    return run("config_registry.py", cwd=project, cache=project.parent / "cache")


def expect_fresh_answer(project: Path, *, imported: int) -> subprocess.CompletedProcess:
    """The module is checked afresh (``imported`` imports in all), with the right findings."""
    done = check_again(project)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "stpes" in done.stdout and quiet(done), done.stdout + done.stderr
    assert imports(project) == imported
    return done


def stray_temporaries(project: Path) -> list[str]:
    """Temporary files left in the cache folder (a write that failed half-way)."""
    folder = project.parent / "cache" / "validate-registry"
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


# -- entries of the wrong shape ------------------------------------------------------------------


def _diagnostic(change):
    """A mutation of the entry's first finding."""

    def mutate(entry: dict) -> dict:
        """The entry, mutated."""
        change(entry["diagnostics"][0])
        return entry

    return mutate


def _set(key: str, value):
    """A mutation setting one field of the entry."""

    def mutate(entry: dict) -> dict:
        """The entry, mutated."""
        entry[key] = value
        return entry

    return mutate


def _first_dependency(value):
    """A mutation replacing the dependencies by one of another shape."""

    def mutate(entry: dict) -> dict:
        """The entry, mutated."""
        entry["deps"] = [value]
        return entry

    return mutate


WRONG_SHAPES = {
    "diagnostic without fields": _set("diagnostics", [{"x": 1}]),
    "diagnostic without span": _diagnostic(lambda d: d.pop("span")),
    "unknown severity": _diagnostic(lambda d: d.update(severity="fatal")),
    "span of three items": _diagnostic(lambda d: d.update(span=d["span"][:3])),
    "line as text": _diagnostic(lambda d: d["span"].__setitem__(1, "1")),
    "line as a bool": _diagnostic(lambda d: d["span"].__setitem__(1, True)),
    "message as a number": _diagnostic(lambda d: d.update(message=7)),
    "diagnostics as a dict": _set("diagnostics", {}),
    "declared as a string": _set("declared", "debug"),
    "declared as numbers": _set("declared", [1]),
    "deps as a string": _set("deps", "ab"),
    "deps of numbers": _set("deps", [3]),
    "dependency without hash": _first_dependency(["/etc/hostname"]),
    "dependency as a descriptor": _first_dependency([1, "0" * 64]),
    "dependency as a descriptor pair": _first_dependency([1, 0, "0" * 64]),
}


@pytest.mark.parametrize("mutate", WRONG_SHAPES.values(), ids=WRONG_SHAPES.keys())
def test_an_entry_of_the_wrong_shape_is_a_miss_and_is_replaced(project, mutate):
    entry = entry_of(project)
    cold = json.loads(entry.read_text())
    entry.write_text(json.dumps(mutate(cold)))
    expect_fresh_answer(project, imported=2)
    expect_fresh_answer(project, imported=2)  # the fresh result replaced it: a hit
    assert not stray_temporaries(project)


BAD_BYTES = {
    # nested deeper than the JSON reader recurses
    "deeply nested": lambda good: b"[" * 100_000,
    # the right entry, padded past any entry titan writes
    "huge": lambda good: good + b" " * (5 * 1024 * 1024),
}


@pytest.mark.parametrize("bad", BAD_BYTES.values(), ids=BAD_BYTES.keys())
def test_an_entry_titan_did_not_write_whole_is_a_miss(project, bad):
    entry = entry_of(project)
    entry.write_bytes(bad(entry.read_bytes()))
    expect_fresh_answer(project, imported=2)
    expect_fresh_answer(project, imported=2)


def test_another_modules_entry_under_this_name_is_a_miss(project, tmp_path):
    """An entry copied or linked under another name says nothing about this module."""
    entry = entry_of(project)
    other = tmp_path / "other"
    other.mkdir()
    (other / "config_registry.py").write_text(REGISTRY.replace("stpes=4", "steps=4"))
    assert run("config_registry.py", cwd=other, cache=tmp_path / "cache").returncode == 0
    (clean,) = set(entry.parent.glob("*.json")) - {entry}
    entry.write_bytes(clean.read_bytes())
    expect_fresh_answer(project, imported=2)
    expect_fresh_answer(project, imported=2)


# -- entries that are not regular files ----------------------------------------------------------


def _fifo(path: Path, tmp_path: Path, kept: bytes) -> None:
    """A FIFO nobody writes to."""
    os.mkfifo(path)


def _link_to_zeros(path: Path, tmp_path: Path, kept: bytes) -> None:
    """A link to a device that never ends."""
    path.symlink_to("/dev/zero")


def _link_to_fifo(path: Path, tmp_path: Path, kept: bytes) -> None:
    """A link to a FIFO elsewhere."""
    os.mkfifo(tmp_path / "pipe")
    path.symlink_to(tmp_path / "pipe")


def _link_to_copy(path: Path, tmp_path: Path, kept: bytes) -> None:
    """A link to the very entry titan wrote, kept elsewhere: titan follows no link in its folder,
    and never writes through one."""
    (tmp_path / "kept.json").write_bytes(kept)
    path.symlink_to(tmp_path / "kept.json")


def _empty_folder(path: Path, tmp_path: Path, kept: bytes) -> None:
    """An empty folder of the entry's name."""
    path.mkdir()


SPECIAL = {
    "FIFO": _fifo,
    "link to /dev/zero": _link_to_zeros,
    "link to a FIFO": _link_to_fifo,
    "link to a copy elsewhere": _link_to_copy,
    "empty folder": _empty_folder,
}


@pytest.mark.parametrize("make", SPECIAL.values(), ids=SPECIAL.keys())
def test_an_entry_that_is_not_a_regular_file_is_a_miss_and_is_replaced(project, tmp_path, make):
    entry = entry_of(project)
    kept = entry.read_bytes()
    entry.unlink()
    make(entry, tmp_path, kept)
    expect_fresh_answer(project, imported=2)
    assert entry.is_file() and not entry.is_symlink()
    expect_fresh_answer(project, imported=2)  # replaced by the fresh result: a hit
    assert not stray_temporaries(project)
    if (tmp_path / "kept.json").exists():
        assert (tmp_path / "kept.json").read_bytes() == kept  # not written through the link


def test_a_folder_of_the_users_under_an_entry_name_is_left_alone(project):
    entry = entry_of(project)
    entry.unlink()
    entry.mkdir()
    (entry / "notes.txt").write_text("mine")
    expect_fresh_answer(project, imported=2)
    expect_fresh_answer(project, imported=3)  # no cache for this module, and no error
    assert (entry / "notes.txt").read_text() == "mine"
    assert not stray_temporaries(project)


# -- a cache folder that cannot be used ----------------------------------------------------------


def expect_no_cache(tmp_path: Path, cache: Path) -> None:
    """A registry module checked twice with ``cache``: the right findings, quietly, and its code
    run each time (nothing was kept)."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "config_registry.py").write_text(REGISTRY)
    for count in (1, 2):
        done = run("config_registry.py", cwd=root, cache=cache)
        assert done.returncode == 1 and "stpes" in done.stdout and quiet(done), done.stderr
        assert imports(root) == count


def test_a_cache_folder_that_is_a_link_is_not_written_through(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "data.txt").write_text("mine")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "validate-registry").symlink_to(elsewhere, target_is_directory=True)
    expect_no_cache(tmp_path, cache)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["data.txt"]


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="needs chown")
def test_a_cache_folder_of_another_user_is_not_used(tmp_path):
    """Entries in a folder another user can write could say anything."""
    cache = tmp_path / "cache"
    (cache / "validate-registry").mkdir(parents=True)
    os.chown(cache / "validate-registry", 65534, 65534)
    expect_no_cache(tmp_path, cache)
    assert list((cache / "validate-registry").iterdir()) == []


@pytest.mark.parametrize("room", [8, 100], ids=["room for the module's marks", "for a part"])
def test_a_full_disk_leaves_no_partial_entry(tmp_path, room):
    """Writes past ``room`` bytes fail as on a full disk (the file-size limit; Python ignores
    SIGXFSZ, so the write reports the error)."""

    def full_disk() -> None:
        """Little room for files, as on a full disk."""
        _limit_memory()
        resource.setrlimit(resource.RLIMIT_FSIZE, (room, room))

    root = tmp_path / "project"
    root.mkdir()
    (root / "config_registry.py").write_text(REGISTRY)
    cache = tmp_path / "cache"
    done = run("config_registry.py", cwd=root, cache=cache, preexec=full_disk)
    assert done.returncode == 1 and "stpes" in done.stdout and quiet(done), done.stderr
    assert [p.name for p in (cache / "validate-registry").iterdir()] == []
    # with room again, the next run writes its entry, and the one after is answered from it
    assert run("config_registry.py", cwd=root, cache=cache).returncode == 1
    assert run("config_registry.py", cwd=root, cache=cache).returncode == 1
    assert imports(root) == 2


# -- a neighbour saved while the module is checked -----------------------------------------------

SAVING_REGISTRY = """\
import os
from pathlib import Path

from common import STEPS
from titan.config import TrainingConfig
from titan.models.llama3 import model_registry
from titan.trainer import Trainer

# the neighbour is saved anew while titan checks this module (as an editor would, in place or
# by renaming a new file over it)
common = Path(__file__).with_name("common.py")
if "{how}" == "in place":
    common.write_text('STEPS = "ten"\\n')
else:
    common.with_name("common.py.new").write_text('STEPS = "ten"\\n')
    os.replace(common.with_name("common.py.new"), common)


def debug() -> Trainer.Config:
    return Trainer.Config(model_spec=model_registry("debugmodel"), training=TrainingConfig(steps=STEPS))
"""


@pytest.mark.parametrize("how", ["in place", "by rename"])
def test_a_neighbour_saved_during_the_check_is_not_trusted_to_its_new_hash(tmp_path, how):
    """The check ran with the old neighbour; an entry keyed by the new one's hash would answer
    for code that never ran."""
    root = tmp_path / "project"
    root.mkdir()
    (root / "common.py").write_text("STEPS = 10\n")
    (root / "config_registry.py").write_text(SAVING_REGISTRY.replace("{how}", how))
    _backdate(root)
    first = run("config_registry.py", cwd=root, cache=tmp_path / "cache")
    assert first.returncode == 0, first.stdout + first.stderr  # it ran with STEPS = 10
    second = run("config_registry.py", cwd=root, cache=tmp_path / "cache")
    assert second.returncode == 1 and "wrong-type" in second.stdout, second.stdout


def _backdate(folder: Path) -> None:
    """Every file below ``folder`` as if saved an hour ago (not while a check runs)."""
    an_hour_ago = os.stat(folder).st_mtime - 3600
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            os.utime(path, (an_hour_ago, an_hour_ago))


# -- the user's package installed with pip install -e ---------------------------------------------

NEIGHBOUR_REGISTRY = """\
from pathlib import Path

from mypkg.common import STEPS
from titan.config import TrainingConfig
from titan.models.llama3 import model_registry
from titan.trainer import Trainer

with open(Path(__file__).with_name("marks.txt"), "a") as marks:
    marks.write("import\\n")


def debug() -> Trainer.Config:
    return Trainer.Config(model_spec=model_registry("debugmodel"), training=TrainingConfig(steps=STEPS))
"""

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "mypkg"
version = "0.1"
"""


def _virtualenv(folder: Path) -> Path:
    """A virtual environment in ``folder`` that sees what this one has installed (titan, pip,
    setuptools), as ``--system-site-packages`` would; its python."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(folder)],
        check=True,
        timeout=HANG_GUARD_S,
    )
    python = folder / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=HANG_GUARD_S,
    ).stdout.strip()
    ours = [p for p in sys.path if p.endswith("site-packages") and os.path.isdir(p)]
    (Path(site) / "_test_environment.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({p!r})" for p in ours) + "\n"
    )
    return python


def _install_editable(python: Path, checkout: Path, *, layout: str, mode: str | None) -> Path:
    """``pip install -e checkout`` with the package in the folder ``layout`` names (``.`` for a
    flat layout, ``src``, ``lib``); the file ``common.py`` of the package."""
    package = checkout / layout / "mypkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "common.py").write_text("STEPS = 10\n")
    table = '\n[tool.setuptools]\npackages = ["mypkg"]\n'
    if layout != ".":
        table += f'package-dir = {{"" = "{layout}"}}\n'
    (checkout / "pyproject.toml").write_text(PYPROJECT + table)
    command = [python, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps"]
    command += ["--no-index", "--no-cache-dir", "--disable-pip-version-check", "-e", checkout]
    if mode is not None:
        command += ["--config-settings", f"editable_mode={mode}"]
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=checkout, timeout=HANG_GUARD_S
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return package / "common.py"


def _site_packages(venv: Path) -> Path:
    """The site-packages folder of a virtual environment (POSIX layout)."""
    version = sysconfig.get_python_version()
    return venv / "lib" / f"python{version}" / "site-packages"


LAYOUTS = {
    # (virtual environment, checkout, package folder in it, setuptools' editable mode)
    # pip's folder for an editable VCS checkout: <venv>/src/<name>
    "checkout in venv/src": ("venv", "venv/src/mypkg", ".", None),
    # python -m venv . in the checkout; the package folder is put on sys.path by a .pth
    "venv in the checkout itself": ("checkout", "checkout", "src", None),
    # ... with its package in lib/, where the environment's own lib/ is
    "venv in the checkout, package in lib": ("checkout", "checkout", "lib", None),
    # setuptools' strict mode: a tree of links in build/ pointing at the sources
    "strict link tree": ("checkout", "checkout", ".", "strict"),
    # a checkout inside site-packages: the editable record wins over the folder it lies in
    "checkout inside site-packages": ("venv", "SITE/checkout", ".", None),
    "checkout inside site-packages, src layout": ("venv", "SITE/checkout", "src", None),
}


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_an_edited_module_of_an_editable_install_invalidates_the_entry(tmp_path, layout):
    venv_name, checkout_name, package_layout, mode = layout
    venv = tmp_path / venv_name
    python = _virtualenv(venv)
    checkout = tmp_path / checkout_name.replace("SITE", str(_site_packages(venv)))
    checkout.mkdir(parents=True, exist_ok=True)
    common = _install_editable(python, checkout, layout=package_layout, mode=mode)
    configs = checkout / "configs"
    configs.mkdir()
    (configs / "config_registry.py").write_text(NEIGHBOUR_REGISTRY)
    _backdate(checkout / package_layout / "mypkg")
    cache = tmp_path / "cache"

    def check() -> subprocess.CompletedProcess:
        """The registry module checked with the environment's python."""
        return run("config_registry.py", cwd=configs, cache=cache, python=str(python))

    first, second = check(), check()
    assert first.returncode == second.returncode == 0, first.stdout + first.stderr
    assert imports(configs) == 1  # the second run was answered from the cache
    common.write_text('STEPS = "ten"\n')
    edited = check()
    assert edited.returncode == 1 and "wrong-type" in edited.stdout, edited.stdout
    assert imports(configs) == 2
    common.write_text("STEPS = 10\n")
    assert check().returncode == 0

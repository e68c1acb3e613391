"""``titan-validate config_registry.py`` runs registry modules in a worker process of its own:
whatever a module does (loops that swallow every exception, exits, signals, closed streams,
forks, running out of memory, garbage on titan's pipes) is a finding at the line where it
happened, and the run goes on with the other modules and reports their findings too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import titan
from tests.helpers import PROCESS_SAFETY_S as SAFETY_S
from tests.helpers import validate_process

TITAN_HOME = Path(titan.__file__).resolve().parents[1]
"""The folder holding titan's package (a checkout), where a team may keep its own configs too."""

"""A safety net only: titan's own --timeout (2 s here) is what stops the modules."""

OTHER = """\
from titan.config import TrainingConfig
from titan.models.llama3 import model_registry
from titan.trainer import Trainer


def other_job() -> Trainer.Config:
    return Trainer.Config(
        model_spec=model_registry("debugmodel"), training=TrainingConfig(stpes=4)
    )
"""
"""A clean module but for one typo (line 8): its finding must be in every run's report."""

HEAD = "from titan.models.llama3 import model_registry\nfrom titan.trainer import Trainer\n"

FINE = """

def fine() -> Trainer.Config:
    return Trainer.Config(model_spec=model_registry("debugmodel"))
"""


def run(*args: str, cwd: Path, cache: Path | None = None) -> subprocess.CompletedProcess:
    return validate_process(*args, cwd=cwd, cache=cache)


def marked(source: str) -> set[int]:
    """The lines marked ``# <-`` (where a finding may point)."""
    return {n for n, line in enumerate(source.splitlines(), 1) if line.endswith("# <-")}


def check(tmp_path: Path, source: str, *extra: str) -> tuple[subprocess.CompletedProcess, list]:
    """Validate ``hostile/`` (holding ``source``) and ``other/`` in one run; the JSON report's
    findings for the hostile module, after the checks every run must pass."""
    (tmp_path / "hostile").mkdir()
    (tmp_path / "hostile" / "config_registry.py").write_text(source, encoding="utf-8")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config_registry.py").write_text(OTHER, encoding="utf-8")
    args = ("hostile", "other", "--no-cache", "--format", "json", "--timeout", "2", *extra)
    done = run(*args, cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    found = json.loads(done.stdout)["diagnostics"]
    (other,) = [d for d in found if d["file"] == "other/config_registry.py"]
    assert (other["code"], other["line"]) == ("unknown-key", 8)
    assert all(d["hint"] for d in found)
    return done, [d for d in found if d["file"] == "hostile/config_registry.py"]


def one_finding(found: list, source: str, needle: str) -> dict:
    (finding,) = found
    assert needle in finding["message"], finding
    assert finding["line"] in marked(source), (finding, marked(source))
    assert finding["code"] == "registry-error"
    return finding


# (id, source, what the message says, what the hint says)
HOSTILE = [
    (
        "bare-except-retry-loop",
        "import time\n" + HEAD + "\n\ndef spins() -> Trainer.Config:\n"
        "    while True:  # <-\n        try:  # <-\n            time.sleep(0.01)  # <-\n"
        "        except:  # noqa: E722  # <-\n            pass  # <-\n" + FINE,
        "no answer after 2 s while running spins()",
        "look for a loop or a wait at this line",
    ),
    (
        "busy-loop-with-sigalrm-ignored",
        "import signal\n" + HEAD + "\n\ndef spins() -> Trainer.Config:\n"
        "    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "    while True:  # <-\n        pass  # <-\n" + FINE,
        "no answer after 2 s while running spins()",
        "look for a loop or a wait",
    ),
    (
        "retry-loop-at-import-with-sigalrm-ignored",
        "import signal\n" + HEAD + "signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
        "while True:  # <-\n    try:  # <-\n        sum(range(1000))  # <-\n"
        "    except:  # noqa: E722  # <-\n        continue  # <-\n" + FINE,
        "no answer after 2 s while importing hostile/config_registry.py; its registry function "
        "`fine` was not checked",
        "look for a loop or a wait",
    ),
    (
        "os-exit-at-import",
        "import os\n" + HEAD + "os._exit(0)  # <-\n" + FINE,
        "the registry code ended its process (os._exit(0)) while importing "
        "hostile/config_registry.py",
        "process of its own",
    ),
    (
        "os-exit-in-atexit",
        "import atexit\nimport os\n" + HEAD + "atexit.register(lambda: os._exit(0))  # <-\n" + FINE,
        "the registry code ended its process (os._exit(0)) while running the atexit handler "
        "<lambda>() of hostile/config_registry.py",
        "process of its own",
    ),
    (
        "sys-exit-in-atexit",
        "import atexit\nimport sys\n" + HEAD + "\n\n@atexit.register\ndef bye():\n"
        "    sys.exit(3)  # <-\n" + FINE,
        "the registry code exited (SystemExit(3)) while running the atexit handler bye() of "
        "hostile/config_registry.py",
        "raise an exception to report a problem",
    ),
    (
        "base-exception",
        HEAD
        + "\n\ndef f() -> Trainer.Config:\n    raise BaseException('at the end')  # <-\n"
        + FINE,
        "BaseException while running f(): at the end",
        "raise an Exception subclass",
    ),
    (
        "generator-exit",
        HEAD + "\n\ndef f() -> Trainer.Config:\n    raise GeneratorExit  # <-\n" + FINE,
        "GeneratorExit while running f()",
        "raise an Exception subclass",
    ),
    (
        "exception-group-holding-keyboard-interrupt",
        HEAD + "\n\ndef f() -> Trainer.Config:\n"
        "    raise BaseExceptionGroup('stop', [KeyboardInterrupt(), ValueError('v')])  # <-\n"
        + FINE,
        "BaseExceptionGroup while running f(): stop (2 sub-exceptions)",
        "raise an Exception subclass",
    ),
    (
        "exception-group-of-exits-at-import",
        HEAD + "raise BaseExceptionGroup('exits', [SystemExit(2)])  # <-\n" + FINE,
        "BaseExceptionGroup while importing hostile/config_registry.py: exits (1 sub-exception)",
        "raise an Exception subclass",
    ),
    (
        "keyboard-interrupt-at-import",
        HEAD + "raise KeyboardInterrupt  # <-\n" + FINE,
        "KeyboardInterrupt while importing hostile/config_registry.py",
        "nobody pressed Ctrl-C",
    ),
    (
        "sigint-to-itself",
        "import os\nimport signal\n" + HEAD + "\n\ndef f() -> Trainer.Config:\n"
        "    os.kill(os.getpid(), signal.SIGINT)  # <-\n" + FINE,
        "KeyboardInterrupt while running f()",
        "nobody pressed Ctrl-C",
    ),
    (
        "sigkill-to-itself",
        "import os\nimport signal\n" + HEAD + "\n\ndef f() -> Trainer.Config:\n"
        "    os.kill(os.getpid(), signal.SIGKILL)  # <-\n" + FINE,
        "the registry code ended its process (os.kill(os.getpid(), SIGKILL)) while running f()",
        "process of its own",
    ),
    (
        "abort",
        "import os\n" + HEAD + "\n\ndef f() -> Trainer.Config:\n    os.abort()  # <-\n" + FINE,
        "the registry code ended its process (os.abort()) while running f()",
        "process of its own",
    ),
    (
        "closed-stdout-and-stderr",
        "import sys\n" + HEAD + "sys.stdout.close()\nsys.stderr.close()\n\n\n"
        "def f() -> Trainer.Config:\n    print('after closing')  # <-\n" + FINE,
        "ValueError while running f(): I/O operation on closed file",
        "fix the code at this line",
    ),
    (
        "closed-file-descriptors-1-and-2",
        "import os\n" + HEAD + "os.close(1)\nos.close(2)\n\n\n"
        "def f() -> Trainer.Config:\n    print('after closing')  # <-\n" + FINE,
        "OSError while running f(): [Errno 9] Bad file descriptor",
        "fix the code at this line",
    ),
    (
        "garbage-on-titans-pipe",
        "import os  # <-\n" + HEAD + "for fd in range(3, 1024):\n    try:\n"
        "        os.write(fd, b'}not json{\\n')\n    except OSError:\n        pass\n" + FINE,
        "the registry code wrote to titan's private pipe while importing "
        "hostile/config_registry.py; its process was stopped",
        "do not write to file descriptors the module did not open",
    ),
    (
        "closes-every-file-descriptor",
        "import os  # <-\n" + HEAD + "os.closerange(3, 4096)\n" + FINE,
        "titan's private pipe",
        "do not close file descriptors the module did not open",
    ),
]


@pytest.mark.parametrize(
    ("source", "needle", "hint"), [c[1:] for c in HOSTILE], ids=[c[0] for c in HOSTILE]
)
def test_a_hostile_module_is_one_finding_where_it_ended_and_the_run_goes_on(
    tmp_path, source, needle, hint
):
    done, found = check(tmp_path, source)
    finding = one_finding(found, source, needle)
    assert hint in finding["hint"]
    assert "titan-validate: interrupted" not in done.stderr


def test_a_process_ended_by_a_function_goes_on_with_the_functions_after_it(tmp_path):
    source = (
        "import os\nfrom titan.config import TrainingConfig\n" + HEAD + "\n\n"
        "def first() -> Trainer.Config:\n    os._exit(7)  # <-\n\n\n"
        "def second() -> Trainer.Config:\n    while True:  # <-\n        pass  # <-\n\n\n"
        "def third() -> Trainer.Config:\n    return Trainer.Config(\n"
        '        model_spec=model_registry("debugmodel"), training=TrainingConfig(stpes=1)\n'
        "    )\n"
    )
    _, found = check(tmp_path, source)
    by_path = {d["path"]: d for d in found}
    assert "(os._exit(7)) while running first()" in by_path["first"]["message"]
    assert "no answer after 2 s while running second()" in by_path["second"]["message"]
    assert {by_path["first"]["line"], by_path["second"]["line"]} <= marked(source)
    assert by_path["third"]["code"] == "unknown-key"
    assert (
        by_path["third"]["line"]
        == source.splitlines().index(
            '        model_spec=model_registry("debugmodel"), training=TrainingConfig(stpes=1)'
        )
        + 1
    )


@pytest.mark.parametrize(
    "allocation",
    [
        "data = bytearray(64 * 2**30)  # <-",
        "chunks = []\n    while True:\n        chunks.append(bytearray(32 * 2**20))  # <-",
        "text = 'x' * (64 * 2**30)  # <-",
    ],
    ids=["one-block", "growing", "string"],
)
def test_memory_past_the_limit_is_a_finding_naming_the_limit(tmp_path, allocation):
    source = HEAD + f"\n\ndef f() -> Trainer.Config:\n    {allocation}\n" + FINE
    # a generous --timeout: filling memory takes time on a busy machine, and it is not timed
    _, found = check(tmp_path, source, "--memory-limit", "512MiB", "--timeout", "100")
    finding = one_finding(
        found, source, "out of memory under --memory-limit 512 MiB while running f()"
    )
    assert "raise --memory-limit" in finding["hint"]


def test_a_memory_limit_that_is_no_size_is_a_usage_error(tmp_path):
    (tmp_path / "config_registry.py").write_text(OTHER, encoding="utf-8")
    for bad in ("lots", "-1GiB", "4 parsecs", "0", "1.5XB"):
        done = run("config_registry.py", f"--memory-limit={bad}", cwd=tmp_path)
        assert done.returncode == 2, done.stderr
        assert "--memory-limit" in done.stderr and "expected a size such as 4GiB" in done.stderr


@pytest.mark.parametrize(
    "fork",
    [
        "if os.fork() == 0:\n    time.sleep(3600)\n    os._exit(0)\n",  # outlives the run
        "os.fork()\n",  # both copies go on importing and return into titan's loop
        "if os.fork() == 0:\n    os.closerange(3, 4096)\n    time.sleep(3600)\n",
    ],
    ids=["sleeps", "returns-into-titan", "closes-and-sleeps"],
)
def test_a_module_that_forks_is_checked_once_and_the_run_ends(tmp_path, fork):
    source = "import os\nimport time\n\n" + OTHER.replace("stpes=4", "stpes=5") + "\n\n" + fork
    done, found = check(tmp_path, source)
    typo = [f for f in found if f["code"] == "unknown-key"]
    assert [f["line"] for f in typo] == [11]
    left = [f for f in found if f["code"] != "unknown-key"]
    if "sleep" in fork:  # the sleeping copy is named, and killed
        (finding,) = left
        assert (finding["code"], finding["line"]) == ("registry-error", 1)
        assert "left 1 process(es) running" in finding["message"]
    else:  # the copy ends when it reaches titan's loop: named only if it had not got there yet
        assert all("left 1 process(es) running" in f["message"] for f in left)
    assert done.stdout.count('"tool": "titan-validate"') == 1  # one report, by titan alone


def test_garbage_written_to_standard_output_goes_to_stderr_not_the_report(tmp_path):
    source = (
        "import os\nimport sys\n"
        + HEAD
        + (
            "os.write(1, b'\\xff\\xfe{\"diagnostics\": [}\\n')\nsys.stdout.write('plain words\\n')\n"
        )
        + FINE
    )
    done, found = check(tmp_path, source)
    assert found == []
    assert '{"diagnostics": [}' in done.stderr and "plain words" in done.stderr


def test_two_folders_inside_titans_own_checkout_each_get_their_own_neighbour():
    registry = (
        HEAD
        + "from common import FLAVOR\n\n\ndef job() -> Trainer.Config:\n"
        + ("    return Trainer.Config(model_spec=model_registry(FLAVOR))\n")
    )
    # A project beside titan's package (a monorepo, a checkout with the team's configs in it)
    with tempfile.TemporaryDirectory(dir=TITAN_HOME, prefix=".titan-test-") as tmp:
        root = Path(tmp)
        for folder, flavor in (("a", "debugmodel"), ("b", "debugmodel_typo"), ("c", "8B")):
            (root / folder).mkdir()
            (root / folder / "common.py").write_text(f"FLAVOR = {flavor!r}\n", encoding="utf-8")
            (root / folder / "config_registry.py").write_text(registry, encoding="utf-8")
        done = run("a", "b", "c", "--no-cache", "--format", "json", cwd=root)
        assert done.returncode == 1, done.stdout + done.stderr
        found = json.loads(done.stdout)["diagnostics"]
        assert [d["file"] for d in found] == ["b/config_registry.py"]
        assert "debugmodel_typo" in found[0]["message"]


def test_a_package_and_a_module_of_one_name_in_two_folders_are_each_their_own():
    registry = (
        HEAD
        + "from shared.common import FLAVOR\n\n\ndef job() -> Trainer.Config:\n"
        + ("    return Trainer.Config(model_spec=model_registry(FLAVOR))\n")
    )
    with tempfile.TemporaryDirectory(dir=TITAN_HOME, prefix=".titan-test-") as tmp:
        root = Path(tmp)
        for folder, flavor, package in (("a", "debugmodel_typo", True), ("b", "debugmodel", False)):
            (root / folder / "shared").mkdir(parents=True)
            if package:
                (root / folder / "shared" / "__init__.py").write_text("", encoding="utf-8")
            (root / folder / "shared" / "common.py").write_text(
                f"FLAVOR = {flavor!r}\n", encoding="utf-8"
            )
            (root / folder / "config_registry.py").write_text(registry, encoding="utf-8")
        done = run("b", "a", "--format", "json", cwd=root, cache=root / "cache")
        assert done.returncode == 1, done.stdout + done.stderr
        assert [d["file"] for d in json.loads(done.stdout)["diagnostics"]] == [
            "a/config_registry.py"
        ]


def test_what_titan_prints_is_unharmed_by_every_module_in_one_run(tmp_path):
    """Every hostile module above in one run: each still one finding at its place."""
    for index, (_, source, _, _) in enumerate(HOSTILE):
        (tmp_path / f"m{index:02d}").mkdir()
        (tmp_path / f"m{index:02d}" / "config_registry.py").write_text(source, encoding="utf-8")
    (tmp_path / "zz").mkdir()
    (tmp_path / "zz" / "config_registry.py").write_text(OTHER, encoding="utf-8")
    done = run(".", "--no-cache", "--format", "json", "--timeout", "2", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    found = json.loads(done.stdout)["diagnostics"]
    for index, (name, source, needle, _) in enumerate(HOSTILE):
        (finding,) = [d for d in found if d["file"] == f"m{index:02d}/config_registry.py"]
        assert needle.replace("hostile/", f"m{index:02d}/") in finding["message"], name
        assert finding["line"] in marked(source), name
    assert [(d["code"], d["line"]) for d in found if d["file"] == "zz/config_registry.py"] == [
        ("unknown-key", 8)
    ]


@pytest.mark.parametrize(
    ("signum", "code", "said"), [(2, 130, "interrupted"), (15, 143, "terminated")]
)
def test_stopping_titan_stops_the_worker_too(tmp_path, signum, code, said):
    (tmp_path / "config_registry.py").write_text(
        "import os\nimport sys\n" + HEAD + "\n\ndef waits() -> Trainer.Config:\n"
        "    print('worker', os.getpid(), file=sys.stderr, flush=True)\n"
        "    while True:\n        try:\n            os.read(0, 1) or os.pause()\n"
        "        except BaseException:  # noqa: BLE001\n            pass\n",
        encoding="utf-8",
    )
    titan_run = subprocess.Popen(
        [sys.executable, "-m", "titan.cli.validate", "config_registry.py", "--no-cache"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = titan_run.stderr.readline()  # the module is running: its worker says so
        assert line.startswith("worker "), line
        worker = int(line.split()[1])
        titan_run.send_signal(signum)
        _, rest = titan_run.communicate(timeout=SAFETY_S)
    finally:
        titan_run.kill()
    assert titan_run.returncode == code
    assert f"titan-validate: {said}" in rest
    with pytest.raises(ProcessLookupError):  # titan killed and reaped it before exiting
        os.kill(worker, 0)

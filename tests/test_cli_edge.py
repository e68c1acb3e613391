"""The edge every titan command shares: inputs never overwritten, safe output files, readers that
never hang, deep TOML, full or closed streams, signals, registry code that exits, one lookup.

Each case runs the real command: a subprocess where streams, signals or the console entry point
matter, ``run(...)`` in this process otherwise (same code, faster).
"""

from __future__ import annotations

import io
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from titan.cli import diff, migrate, validate

MODULES = {
    "validate": "titan.cli.validate",
    "migrate": "titan.cli.migrate",
    "diff": "titan.cli.diff",
    "train": "titan.train",
}
RUNS = {"validate": validate.run, "migrate": migrate.run, "diff": diff.run}
JOB = "[training]\nsteps = 10\n"
DEEP = "a = " + "{b=" * 500 + "1" + "}" * 500 + "\n"  # the repro: tomllib recursed to death


def cli(command: str, *args: object, cwd: Path, timeout: float = 120, **popen) -> tuple:
    """``titan-COMMAND ARGS`` as a process: (exit code, stdout, stderr)."""
    argv = [sys.executable, "-m", MODULES[command], *map(str, args)]
    popen.setdefault("stdout", subprocess.PIPE)
    done = subprocess.run(argv, cwd=cwd, stderr=subprocess.PIPE, timeout=timeout, **popen)
    out = done.stdout.decode() if done.stdout is not None else ""
    return done.returncode, out, done.stderr.decode()


def inproc(command: str, *args: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = RUNS[command]([str(a) for a in args], stdout=out, stderr=err)
    assert "Traceback" not in out.getvalue() + err.getvalue()
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def job(tmp_path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "job.toml"
    path.write_text(JOB)
    return path


def only_these(folder: Path, *names: str) -> None:
    """Nothing but ``names`` in ``folder``: no temporary file was left behind."""
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)


# ----------------------------------------------------------------------------- inputs are kept


@pytest.mark.parametrize(
    "spelling", ["job.toml", "./job.toml", "../{dir}/job.toml", "link.toml", "hard.toml"]
)
def test_titan_migrate_never_writes_over_its_input(job, tmp_path, spelling):
    (tmp_path / "link.toml").symlink_to("job.toml")
    os.link(job, tmp_path / "hard.toml")
    code, out, err = inproc("migrate", "job.toml", "-o", spelling.format(dir=tmp_path.name))
    assert code == 2 and out == "" and "refusing to write over it" in err, err
    assert job.read_text() == JOB and (tmp_path / "link.toml").is_symlink()
    only_these(tmp_path, "job.toml", "link.toml", "hard.toml")


@pytest.mark.parametrize("fmt", ["text", "json", "github", "sarif"])
def test_titan_validate_never_writes_its_report_over_an_input(job, tmp_path, fmt):
    (tmp_path / "sub").mkdir()
    found = tmp_path / "sub" / "found.toml"
    found.write_text("[training]\nstpes = 1\n")
    for target, inputs in [("job.toml", ["job.toml"]), ("sub/found.toml", ["."])]:
        code, out, err = inproc("validate", *inputs, "--format", fmt, "-o", target)
        assert code == 2 and "is the input" in err and out == "", err
    assert job.read_text() == JOB and found.read_text() == "[training]\nstpes = 1\n"


def test_export_json_schema_never_writes_over_an_input_or_the_report(job):
    code, _, err = inproc("validate", "--export-json-schema", "job.toml", "job.toml")
    assert code == 2 and "--export-json-schema job.toml is the input job.toml" in err
    code, _, err = inproc("validate", "job.toml", "-o", "r.json", "--export-json-schema", "r.json")
    assert code == 2 and "name the same file" in err
    assert job.read_text() == JOB and not Path("r.json").exists()


def test_the_custom_config_module_and_the_registry_are_inputs_too(job, tmp_path):
    module = "from dataclasses import dataclass\n\n@dataclass\nclass JobConfig:\n    pass\n"
    (tmp_path / "mymod.py").write_text(module)
    job.write_text('[job]\ncustom_config_module = "mymod"\n')
    code, _, err = inproc("validate", "job.toml", "-o", "mymod.py")
    assert code == 2 and "mymod.py" in err and (tmp_path / "mymod.py").read_text() == module
    code, out, err = inproc("migrate", "job.toml", "-o", "./mymod.py")
    assert code == 2 and "is the input" in err and "mymod.py; refusing" in err, out + err
    assert (tmp_path / "mymod.py").read_text() == module
    registry = "from titan.trainer import Trainer\n\n\ndef mine():\n    return Trainer.Config()\n"
    (tmp_path / "reg.py").write_text(registry)
    code, _, err = inproc("validate", "--registry", "reg.py", "--config", "mine", "-o", "reg.py")
    assert (
        code == 2 and "is the input reg.py" in err and (tmp_path / "reg.py").read_text() == registry
    )


@pytest.mark.parametrize(
    "flags",
    [
        ["--job.dump_folder", ".", "--job.save_config_file", "job.toml"],
        ["--job.save_config_file", "../job.toml"],  # ./outputs/../job.toml, before outputs exists
    ],
)
def test_titan_train_refuses_to_save_its_config_over_the_toml(job, tmp_path, flags):
    code, _, err = cli("train", "--job.config_file", "job.toml", *flags, cwd=tmp_path)
    assert code == 2 and "refusing to write over it" in err and "Traceback" not in err, err
    assert job.read_text() == JOB
    only_these(tmp_path, "job.toml")  # nothing was built: no dump folder either


# ----------------------------------------------------------------------------- the writer


def test_output_through_a_symlink_writes_its_target_and_keeps_the_link(job, tmp_path):
    (tmp_path / "reports").mkdir()
    (tmp_path / "report.json").symlink_to("reports/real.json")
    assert inproc("validate", "job.toml", "--format", "json", "-o", "report.json")[0] == 0
    assert (tmp_path / "report.json").is_symlink()
    assert '"errors": 0' in (tmp_path / "reports" / "real.json").read_text()


def test_an_existing_files_permissions_are_kept(job, tmp_path):
    report = tmp_path / "private.txt"
    report.write_text("old")
    report.chmod(0o600)
    assert inproc("validate", "job.toml", "-o", report)[0] == 0
    assert (
        stat.S_IMODE(report.stat().st_mode) == 0o600 and "All checks passed" in report.read_text()
    )


def test_dev_null_is_written_in_place_not_replaced(job, tmp_path):
    before = os.stat("/dev/null")
    assert inproc("validate", "job.toml", "-o", "/dev/null")[0] == 0
    assert inproc("migrate", "job.toml", "-o", "/dev/null")[0] == 0
    after = os.stat("/dev/null")
    assert (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert stat.S_ISCHR(after.st_mode)


def test_a_fifo_as_output_is_written_directly(job, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    code, out, _ = inproc("migrate", "job.toml", "-o", fifo, "-q")
    reader.join(timeout=60)
    assert code == 0 and b"def " in received[0] and stat.S_ISFIFO(fifo.lstat().st_mode)


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(job, tmp_path, monkeypatch):
    target = tmp_path / "config_registry.py"
    assert inproc("migrate", "job.toml", "-o", target)[0] == 0
    previous = target.read_text()  # titan-migrate's own module: -o may replace it

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    code, _, err = inproc("migrate", "job.toml", "-o", target)
    assert code == 74 and "cannot write" in err and "No space left on device" in err
    assert target.read_text() == previous
    only_these(tmp_path, "job.toml", "config_registry.py")


@pytest.mark.parametrize(
    ("target", "message"),
    [(".", "it is a folder"), ("missing/report.txt", "does not exist"), ("/dev/full", "No space")],
)
def test_unusable_outputs_are_one_line_errors(job, target, message):
    code, out, err = inproc("validate", "job.toml", "-o", target)
    assert code == (74 if target == "/dev/full" else 2) and message in err and out == "", err


# ----------------------------------------------------------------------------- readers


def test_a_fifo_or_device_named_as_input_is_a_finding_not_a_hang(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    os.mkfifo("pipe.toml")
    code, out, _ = cli("validate", "pipe.toml", "/dev/zero", cwd=tmp_path, timeout=60)
    assert code == 1 and "pipe.toml:1:1: error[unreadable-file]" in out
    assert "it is a FIFO (named pipe)" in out and "it is a character device" in out
    for command in ("migrate", "diff"):
        code, _, err = cli(command, "pipe.toml", "pipe.toml", cwd=tmp_path, timeout=60)
        assert code in (1, 2) and "FIFO" in err and "Traceback" not in err, err


def test_a_fifo_met_while_walking_a_folder_is_skipped_with_a_note(tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "job.toml").write_text(JOB)
    os.mkfifo(tmp_path / "jobs" / "pipe.toml")
    code, out, err = cli("validate", "jobs", cwd=tmp_path, timeout=60)
    assert code == 0 and "All checks passed: 1 file" in out
    assert "note: skipped jobs/pipe.toml: it is a FIFO (named pipe)" in err


def test_a_file_over_the_size_cap_is_not_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with open("huge.toml", "wb") as handle:
        handle.truncate(17 * 2**20)  # sparse: nothing is really written
    code, out, _ = inproc("validate", "huge.toml")
    assert code == 1 and "larger than 16 MiB" in out


def test_a_folder_that_cannot_be_listed_is_reported(tmp_path, monkeypatch):
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "job.toml").write_text(JOB)
    (tmp_path / "locked").mkdir()
    real = os.scandir

    def scandir(path="."):  # as chmod 000 would for a user who is not root
        if os.path.basename(os.fspath(path)) == "locked":
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    code, out, _ = inproc("validate", tmp_path)
    assert code == 1 and "All checks passed" not in out
    assert f"cannot list the folder {tmp_path}/locked: Permission denied" in out


@pytest.mark.parametrize(
    "text",
    [
        DEEP,
        "a = " + "[" * 400 + "]" * 400 + "\n",
        "[training]\nsteps = 1\nx = " + "[{a = " * 300 + "1" + "}]" * 300 + "\n",
        "a" + ".b" * 3000 + " = 1\n",  # dotted keys nest without any bracket
    ],
    ids=["tables", "arrays", "mixed", "dotted"],
)
def test_deep_nesting_is_a_located_finding_in_every_command(tmp_path, monkeypatch, text):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep.toml").write_text(text)
    line = text.count("\n", 0, text.find("x = ") if "x = " in text else 0) + 1
    code, out, _ = inproc("validate", "deep.toml")
    assert code == 1 and f"deep.toml:{line}:" in out and "error[too-deep]" in out
    assert "nested more than 100 levels deep" in out
    code, out, err = inproc("migrate", "deep.toml")
    assert code == 1 and out == "" and f"deep.toml:{line}:" in err and "too-deep" in err
    code, out, err = inproc("diff", "deep.toml", "deep.toml")
    assert code == 2 and f"deep.toml:{line}:" in err and "100 levels" in err  # not 1, "different"


def test_a_hundred_levels_is_still_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep.toml").write_text("[x]\na = " + "[" * 99 + "]" * 99 + "\n")
    code, out, _ = inproc("validate", "deep.toml", "--format", "json")
    assert code == 1 and '"too-deep"' not in out and '"unknown-key"' in out


# ----------------------------------------------------------------------------- streams

REGISTRY = """\
import os, sys, time
from pathlib import Path

from titan.trainer import Trainer


def base():
    return Trainer.Config()


def exits_zero():
    sys.exit(0)


def exits_three():
    sys.exit(3)


def raises_system_exit():
    raise SystemExit


def slow():
    Path("ready").touch()
    time.sleep(120)
"""
EXIT_LINES = {
    name: REGISTRY.splitlines().index(line) + 1
    for name, line in [
        ("exits_zero", "    sys.exit(0)"),
        ("exits_three", "    sys.exit(3)"),
        ("raises_system_exit", "    raise SystemExit"),
    ]
}
# One command line per command that runs long enough to be signalled once "ready" exists: a
# registry function that sleeps, or (for the commands that only read TOML) a custom config
# module that sleeps while it is imported.
SLOW = {
    "validate": ["slow.toml", "--allow-import"],
    "migrate": ["slow.toml", "--allow-import"],
    "diff": ["reg.py:slow", "reg.py:base"],
    "train": ["--registry", "reg.py", "--config", "slow"],
    "validate --config": ["--registry", "reg.py", "--config", "slow"],
}
# One command line per command that writes to standard output and succeeds.
WRITES = {
    "validate": ["job.toml"],
    "migrate": ["job.toml", "-q"],
    "diff": ["reg.py:base", "reg.py:base"],
    "train": ["--help"],
}


@pytest.fixture
def workdir(tmp_path) -> Path:
    (tmp_path / "job.toml").write_text(JOB)
    (tmp_path / "reg.py").write_text(REGISTRY)
    (tmp_path / "slow.toml").write_text('[job]\ncustom_config_module = "slowmod"\n')
    slow = "from pathlib import Path\nimport time\nPath('ready').touch()\ntime.sleep(120)\n"
    (tmp_path / "slowmod.py").write_text(slow)
    return tmp_path


@pytest.mark.parametrize("command", WRITES)
def test_a_full_disk_on_stdout_is_one_line_and_exit_74(workdir, command):
    with open("/dev/full", "w") as full:
        code, _, err = cli(command, *WRITES[command], cwd=workdir, stdout=full)
    assert code == 74, err
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith("error: cannot write to standard output: No space left on device")
    )
    assert "Traceback" not in err and "Exception ignored" not in err


@pytest.mark.parametrize("command", WRITES)
def test_a_closed_stdout_is_one_line_and_exit_74(workdir, command):
    argv = [sys.executable, "-m", MODULES[command], *WRITES[command]]
    done = subprocess.run(
        ["sh", "-c", 'exec "$@" >&-', "sh", *argv], cwd=workdir, capture_output=True, timeout=120
    )
    err = done.stderr.decode()
    assert done.returncode == 74 and "standard output is closed" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", WRITES)
def test_a_reader_that_goes_away_is_not_an_error(workdir, command):
    argv = [sys.executable, "-m", MODULES[command], *WRITES[command]]
    process = subprocess.Popen(argv, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # `| head -0`: gone before the command writes
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) in (0, 1)
    # nothing but the notes naming the user code that ran: no error, no traceback
    assert all(": note: executed " in line for line in err.splitlines()), err


@pytest.mark.parametrize("command", SLOW)
@pytest.mark.parametrize(
    ("signum", "code", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
    ids=["SIGINT", "SIGTERM"],
)
def test_a_signal_ends_every_command_with_one_line(workdir, command, signum, code, word):
    argv = [sys.executable, "-m", MODULES[command.split()[0]], *SLOW[command]]
    process = subprocess.Popen(argv, cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (workdir / "ready").exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    process.send_signal(signum)
    out, err = process.communicate(timeout=60)
    assert process.returncode == code, err.decode()
    assert err.decode().strip().splitlines()[-1].endswith(f": {word}")
    assert "Traceback" not in err.decode()


# ----------------------------------------------------------------------------- registry code


@pytest.mark.parametrize("function", EXIT_LINES)
def test_a_registry_function_that_exits_is_a_finding_in_every_command(workdir, function):
    where = f"reg.py:{EXIT_LINES[function]}:5"
    code, out, err = cli("validate", "--registry", "reg.py", "--config", function, cwd=workdir)
    assert code == 1 and f"{where}: error[registry-error]" in out, out + err
    assert f"while running {function}()" in out
    code, out, err = cli("diff", f"reg.py:{function}", "reg.py:base", cwd=workdir)
    assert code == 2 and out == "" and where in err and f"running {function}()" in err
    code, out, err = cli("train", "--registry", "reg.py", "--config", function, cwd=workdir)
    assert code == 1 and where in err and "registry-error" in err, err


def test_registry_lookup_is_one_way_for_train_validate_and_diff(workdir):
    """A ./config_registry.py function shadows the built-in one of the same name everywhere."""
    (workdir / "config_registry.py").write_text(
        "from titan.models.llama3.config_registry import llama3_debugmodel as builtin\n\n\n"
        "def llama3_debugmodel():\n"
        "    config = builtin()\n"
        "    config.checkpoint.keep_latest_k = 1\n"
        "    return config\n"
    )
    code, out, _ = cli("validate", "--config", "llama3_debugmodel", cwd=workdir)
    assert code == 1 and "keep-latest-k" in out
    builtin = "titan.models.llama3.config_registry:llama3_debugmodel"
    code, out, _ = cli("diff", "llama3_debugmodel", builtin, cwd=workdir)
    assert code == 1 and "checkpoint.keep_latest_k: 1 -> " in out
    code, _, err = cli("train", "--config", "llama3_debugmodel", cwd=workdir)
    assert code == 1 and "keep-latest-k" in err


@pytest.mark.parametrize("key", ["name", "flavor"])
@pytest.mark.parametrize("value", ["{ a = 1 }", "[1, 2]", "[[1]]", "1.5"])
def test_a_model_name_or_flavor_of_the_wrong_type_is_a_finding_in_every_command(
    tmp_path, key, value
):
    other = 'flavor = "debugmodel"' if key == "name" else 'name = "llama3"'
    path = tmp_path / "job.toml"
    path.write_text(f"[model]\n{key} = {value}\n{other}\n", encoding="utf-8")
    for run, args in (
        (validate.run, [str(path)]),
        (validate.run, ["--as-registry", str(path)]),
        (migrate.run, [str(path), "-o", str(tmp_path / "out.py")]),
    ):
        out, err = io.StringIO(), io.StringIO()
        code = run(args, stdout=out, stderr=err)
        assert code == 1 and "internal error" not in err.getvalue(), (args, err.getvalue())

"""No rank hangs without a message: ranks whose configs differ, a rank that never joins, a rank
whose config is rejected, a rank that stalls or crashes mid-run. Each case runs titan-train for
real (2 processes, gloo), and checks the exit code, the ranks and fields named in the output,
and that no titan traceback is printed. Short timeouts are set only where a timeout is what the
case checks; elsewhere they are long enough that only a hang reaches them.

Where every rank's own message is checked, the ranks are started as torchrun starts them but
without torchrun's monitor (``ranks``): torchrun stops the other ranks as soon as one exits, which
could cut a slower rank's message short on a loaded machine.

The rank-dependent configs are registry functions in ``dist_scripts/rank_dependent_registry.py``.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training_runs import REPO, child_env, ranks_alone

REGISTRY = Path(__file__).parent / "dist_scripts" / "rank_dependent_registry.py"
# Short timeouts, for the cases that check what a timeout reports.
TIMEOUTS = ["--comm.init_timeout_seconds", "6", "--comm.train_timeout_seconds", "5"]
# The others': a rank waits for a slower one (a loaded machine) rather than time out.
PATIENT = ["--comm.init_timeout_seconds", "300", "--comm.train_timeout_seconds", "300"]
# A collective that never completes, mid-run: ranks that reach it together, however loaded the
# machine, do not wait this long for each other.
MID_RUN = ["--comm.init_timeout_seconds", "300", "--comm.train_timeout_seconds", "15"]
# A hang fails the test instead of the suite.
HANG_LIMIT = 600


def torchrun(
    config: str, tmp_path: Path, *flags: str, nproc: int = 2, timeouts: list[str] = TIMEOUTS
) -> tuple[int, str]:
    """``torchrun --nproc-per-node NPROC -m titan.train`` on a registry function: (exit code,
    output)."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    launcher += ["--nproc-per-node", str(nproc)]
    command = [*launcher, "-m", "titan.train", "--registry", str(REGISTRY), "--config", config]
    command += [*timeouts, "--dump_folder", str(tmp_path / "run"), *flags]
    done = subprocess.run(
        command,
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=HANG_LIMIT,
    )
    return done.returncode, done.stdout + done.stderr


def ranks(
    config: str, tmp_path: Path, *, nproc: int = 2, timeouts: list[str] = PATIENT
) -> tuple[list[int], str]:
    """``titan-train`` on a registry function in ``nproc`` processes launched as torchrun's
    agent launches them, each left to end on its own (``ranks_alone``): (every rank's exit code,
    every rank's output in rank order)."""
    args = ["--registry", str(REGISTRY), "--config", config, *timeouts]
    return ranks_alone([*args, "--dump_folder", str(tmp_path / "run")], nproc=nproc)


def assert_titan_explained_itself(output: str) -> None:
    """torchrun prints its own ChildFailedError traceback; titan's frames must not appear, and
    no failure may be blamed on titan."""
    assert f'File "{REPO / "titan"}' not in output, output[-4000:]
    assert "a bug in titan" not in output, output[-4000:]


def message_of(output: str, rank: int) -> str:
    """The error message rank ``rank`` printed: its first line and the indented ones after."""
    found = re.search(rf"^titan-train rank {rank}: error: .*(?:\n  .*)*", output, re.MULTILINE)
    assert found, output[-4000:]
    return found[0]


def no_step_ran(tmp_path: Path) -> bool:
    metrics = tmp_path / "run" / "metrics.jsonl"
    return not metrics.exists() or not metrics.read_text(encoding="utf-8").strip()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("config", "details"),
    [
        ("steps_by_rank", "  rank 1: training.steps = 5 (rank 0: 4)"),
        (
            "width_and_lr_by_rank",
            "  rank 1: model_spec.model.dim = 512 (rank 0: 256); "
            "optimizer.lr = 0.001 (rank 0: 0.0008)",
        ),
    ],
)
def test_ranks_whose_configs_differ_stop_at_once_naming_the_ranks_and_fields(
    tmp_path, config, details
):
    codes, output = ranks(config, tmp_path)
    assert codes == [1, 1], output[-4000:]
    for rank in (0, 1):
        assert message_of(output, rank) == (
            f"titan-train rank {rank}: error: the ranks' configs differ: rank 1 (of 2) does not "
            f"match rank 0's config\n{details}\n  hint: every rank must build the same config; a "
            "registry function must not depend on RANK, LOCAL_RANK, the host, the clock or a "
            "random number"
        )
    assert no_step_ran(tmp_path)
    assert "timed out" not in output and "did not join" not in output  # no timeout waited out
    assert_titan_explained_itself(output)


@pytest.mark.slow
def test_ranks_that_differ_alike_are_named_together(tmp_path):
    codes, output = ranks("wider_on_odd_ranks", tmp_path, nproc=4)
    assert codes == [1, 1, 1, 1], output[-4000:]
    header = "the ranks' configs differ: ranks 1 and 3 (of 4) do not match rank 0's config"
    details = "\n  ranks 1 and 3: model_spec.model.dim = 512 (rank 0: 256)\n"
    for rank in (0, 1, 3):
        assert message_of(output, rank).startswith(f"titan-train rank {rank}: error: {header}")
        assert details in message_of(output, rank)
    # Rank 2 matches rank 0: one line that points at rank 0's details.
    assert message_of(output, 2) == (
        "titan-train rank 2: error: the ranks' configs differ: ranks 1 and 3 do not match rank "
        "0's (rank 0 printed the fields that differ)"
    )
    assert_titan_explained_itself(output)


@pytest.mark.slow
def test_ranks_with_the_same_config_pass_the_check_and_train(tmp_path):
    code, output = torchrun("same_on_every_rank", tmp_path, timeouts=PATIENT)
    assert code == 0, output[-4000:]
    assert "configs differ" not in output
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert steps == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
@pytest.mark.parametrize(("stuck", "waiting"), [(1, 0), (0, 1)])
def test_a_rank_that_never_joins_is_named_while_waiting_and_when_the_wait_ends(
    tmp_path, stuck, waiting
):
    code, output = torchrun(f"rank{stuck}_never_joins", tmp_path)
    assert code == 1, output[-4000:]
    progress = (
        rf"\[titan rank{waiting}\] .* WARNING waiting for rank {stuck} to join \(5 s of 6 s\)"
    )
    assert re.search(progress, output), output[-4000:]
    assert message_of(output, waiting).startswith(
        f"titan-train rank {waiting}: error: rank {stuck} did not join within 6 s "
        "(comm.init_timeout_seconds); 1 of 2 ranks did\n  hint: every rank must start titan-train"
    )
    # The configured 6 s ended the wait (not torch's default 300 s): the messages above say so.
    assert_titan_explained_itself(output)


@pytest.mark.slow
def test_without_torchrun_rank0_serves_the_store_and_names_the_rank_that_never_came(tmp_path):
    """A launch through the environment alone (a cluster script setting MASTER_ADDR, RANK and
    WORLD_SIZE): only rank 0 is started, and it says rank 1 is missing."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = child_env()  # (which drops any WORLD_SIZE and RANK of the test's own environment)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK="0")
    command = [sys.executable, "-m", "titan.train", "--registry", str(REGISTRY)]
    command += ["--config", "same_on_every_rank", *TIMEOUTS, "--dump_folder", str(tmp_path)]
    done = subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_LIMIT
    )
    assert done.returncode == 1, done.stderr[-4000:]
    assert done.stderr.endswith(
        "titan-train rank 0: error: rank 1 did not join within 6 s (comm.init_timeout_seconds); "
        "1 of 2 ranks did\n  hint: every rank must start titan-train: look for a node that was "
        "not launched or a rank stuck before training starts (its own output says where); raise "
        "comm.init_timeout_seconds if it is only slow\n"
    ), done.stderr[-4000:]
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_rank_whose_registry_function_fails_prints_its_own_finding(tmp_path):
    codes, output = ranks("rank1_registry_raises", tmp_path)
    assert codes == [1, 1], output[-4000:]
    assert (
        "titan-train rank 1: error: the config on this rank has errors, and rank 0's config has "
        "none: the ranks' configs differ:" in output
    ), output[-4000:]
    assert "error[registry-error] RuntimeError while running rank1_registry_raises()" in output
    assert "rank 1 cannot read its cluster settings" in output
    assert "rank 0 printed" not in output  # rank 0 had nothing to print
    # Rank 0's config loaded: it names the rank that stopped instead of waiting for it.
    assert (
        "titan-train rank 0: error: rank 1 stopped before training started, so this rank stops "
        "too:\n  rank 1 stopped: its config has errors (rank 1 printed them)" in output
    ), output[-4000:]
    assert no_step_ran(tmp_path)
    assert_titan_explained_itself(output)


@pytest.mark.slow
def test_a_rule_broken_on_one_rank_is_reported_by_that_rank(tmp_path):
    code, output = torchrun("rank1_invalid_batch", tmp_path, timeouts=PATIENT)
    assert code == 1, output[-4000:]
    assert "titan-train rank 1: error: the config on this rank has errors" in output
    assert output.count("error[batch-size] global batch size 3") == 1, output[-4000:]
    assert "rank 0 printed" not in output
    # torchrun's summary carries rank 1's own words.
    assert "titan-train rank 1: error: the config has errors; rank 1 printed them" in output
    assert_titan_explained_itself(output)


@pytest.mark.slow
def test_findings_shared_by_every_rank_are_printed_once(tmp_path):
    code, output = torchrun("invalid_everywhere", tmp_path, timeouts=PATIENT)
    assert code == 1, output[-4000:]
    assert output.count("error[batch-size] global batch size 3") == 1, output[-4000:]
    assert "the config on this rank has" not in output  # rank 1's findings are rank 0's
    # torchrun's summary lists the ranks it found exited when it looked, then ends the others:
    # one rank or both, each in its own words (every rank has written them before any exits).
    summary = [
        rank
        for rank in (0, 1)
        if f"titan-train rank {rank}: error: the config has errors; rank 0 printed them" in output
    ]
    assert summary, output[-4000:]
    assert_titan_explained_itself(output)


@pytest.mark.slow
def test_a_rank_that_stalls_mid_run_is_named_after_the_training_timeout(tmp_path):
    code, output = torchrun("rank1_stalls_mid_training", tmp_path, timeouts=MID_RUN)
    assert code == 1, output[-4000:]
    assert "titan-train rank 0: error: a collective operation timed out: " in output
    assert (
        "rank 1 reported no error within 5 s of this failure: stalled (a hung data read, "
        "filesystem or debugger) or killed" in output
    ), output[-4000:]
    assert "comm.train_timeout_seconds" in output
    # No time bound beyond HANG_LIMIT: torchrun gives the stalled rank 30 s to honour SIGTERM
    # before it kills it, whatever titan does.
    assert_titan_explained_itself(output)
    steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").open()]
    assert steps == [1, 2]  # the third batch never came on rank 1


@pytest.mark.slow
@pytest.mark.parametrize(("stopped", "waiting"), [(1, 0), (0, 1)])
def test_a_stopped_pipeline_stage_is_named_by_the_stage_left_waiting(tmp_path, stopped, waiting):
    """Two pipeline stages; one stage's process is frozen by SIGSTOP at its third batch. The
    other stage's receive fails after comm.train_timeout_seconds, as a stalled collective does,
    and names the stopped rank; torchrun then ends the stopped one."""
    code, output = torchrun(f"rank{stopped}_stops_mid_pipeline", tmp_path, timeouts=MID_RUN)
    assert code == 1, output[-4000:]
    assert f"titan-train rank {waiting}: error: a collective operation timed out: " in output, (
        output[-4000:]
    )
    assert (
        f"rank {stopped} reported no error within 5 s of this failure: stalled (a hung data read, "
        "filesystem or debugger) or killed" in output
    ), output[-4000:]
    assert "comm.train_timeout_seconds" in output
    assert_titan_explained_itself(output)
    if stopped == 1:  # rank 0 logs the steps: the third never ended
        steps = [json.loads(line)["step"] for line in (tmp_path / "run" / "metrics.jsonl").open()]
        assert steps == [1, 2]


@pytest.mark.slow
def test_a_rank_that_crashes_mid_run_is_named_by_the_rank_left_waiting(tmp_path):
    codes, output = ranks("rank1_crashes_mid_training", tmp_path, timeouts=MID_RUN)
    assert codes == [1, 1], output[-4000:]
    # The crash itself is unexpected (a planted RuntimeError): rank 1 reports it as such.
    assert (
        "titan-train rank 1: error: the run stopped on an unexpected RuntimeError: shard of rank "
        "1 is corrupt at batch 3" in output
    )
    # Rank 0 only saw its collective fail: a distributed failure naming rank 1, not a bug.
    rank0 = message_of(output, 0)
    assert re.match(
        r"titan-train rank 0: error: a (peer rank's connection closed during a collective|"
        r"collective operation timed out): ",
        rank0,
    ), rank0
    assert (
        "rank 1 stopped: the run stopped on an unexpected RuntimeError: shard of rank 1 is "
        "corrupt at batch 3" in rank0
    )
    assert "a bug in titan" not in rank0
    assert f'File "{REPO / "titan"}' not in output  # the planted error's traceback is in a file


def test_collective_failures_are_told_apart_from_other_errors():
    from titan.distributed.failures import backend_message, collective_symptom

    class DistBackendError(RuntimeError):  # torch's class, matched by name
        pass

    gloo = "[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting"
    closed = "[/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer"
    cases = [
        (RuntimeError(f"{gloo} 5000ms for recv operation to complete"), "timed out"),
        (RuntimeError(f"{closed} [::1]:7"), "connection closed"),
        (DistBackendError("NCCL communicator was aborted on rank 3"), "operation failed"),
        (RuntimeError("mat1 and mat2 shapes cannot be multiplied"), None),
        (ValueError("gloo timed out"), None),  # a user error stays a user error
        (
            NotImplementedError(
                "Operator c10d.allreduce_.default does not have a sharding strategy registered."
            ),
            None,  # a DTensor handed to a plain collective: a bug in the caller
        ),
    ]
    for error, wanted in cases:
        symptom = collective_symptom(error)
        if wanted is None:
            assert symptom is None, error
        else:
            assert symptom is not None and wanted in symptom.what, (error, symptom)
    assert backend_message(RuntimeError(f"{gloo} 5000ms")) == "Timed out waiting 5000ms"


def test_differing_ranks_are_grouped_by_what_differs():
    from titan.distributed.config_agreement import _message, config_sections
    from titan.models.llama3.config_registry import llama3_debugmodel

    def leaves(config):
        return {path: text for _, found in config_sections(config) for path, text in found}

    base = llama3_debugmodel()
    longer = llama3_debugmodel()
    longer.training.steps = 99
    wider = llama3_debugmodel()
    wider.model_spec.model.dim = 512
    wider.optimizer.lr = 0.5
    wider.training.seq_len = 7
    wider.dump_folder = "elsewhere"
    everyone = [leaves(c) for c in (base, longer, base, longer, wider)]
    message = _message(everyone, differing_ranks=[1, 3, 4])
    assert message.startswith(
        "the ranks' configs differ: ranks 1, 3 and 4 (of 5) do not match rank 0's config\n"
    )
    assert "\n  ranks 1 and 3: training.steps = 99 (rank 0: 10)\n" in message
    wider_line = next(line for line in message.splitlines() if line.startswith("  rank 4: "))
    # Field order, three fields, then a count of the rest.
    assert wider_line == (
        '  rank 4: model_spec.model.dim = 512 (rank 0: 256); dump_folder = "elsewhere" '
        '(rank 0: "./outputs"); optimizer.lr = 0.5 (rank 0: 0.0008); and 1 more field'
    )


def test_the_same_registry_at_another_path_gives_the_same_config(tmp_path, monkeypatch):
    """Nodes may hold the registry file at different paths; its classes still compare equal
    (titan imports each file under a name made from its path), while their values do not."""
    from titan.config.manager import load_file
    from titan.distributed.config_agreement import _section_hashes, config_sections

    monkeypatch.setenv("RANK", "0")
    copies = []
    for node in ("node_a", "node_b"):
        (tmp_path / node).mkdir()
        copy = tmp_path / node / "config_registry.py"
        copy.write_text(REGISTRY.read_text(encoding="utf-8"), encoding="utf-8")
        copies.append(load_file(str(copy)).rank1_stalls_mid_training())
    assert type(copies[0].dataloader) is not type(copies[1].dataloader)
    assert config_sections(copies[0]) == config_sections(copies[1])
    copies[1].dataloader.bad_rank = 0
    sections = [dict(config_sections(config)) for config in copies]
    assert sections[0]["dataloader"] != sections[1]["dataloader"]
    assert _section_hashes(config_sections(copies[0])) != _section_hashes(
        config_sections(copies[1])
    )

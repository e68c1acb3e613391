"""Which ranks of a job are present, and which stopped, through the job's key-value store.

torchrun serves a TCPStore to every job at ``MASTER_ADDR:MASTER_PORT`` (its agent hosts it; a
launch without torchrun's agent has rank 0 host it, as ``init_process_group`` would). The process
group itself is started on that store, but only once every rank has checked in here: a missing
rank is then named while the others wait, instead of every rank sitting silent inside gloo's or
NCCL's connection setup until the timeout. A rank that stops says so here too, so the others can
name it and its reason rather than wait for it.

Keys, under ``titan/<torchrun restart count>`` (a restarted job starts a fresh roll call)::

    joined          "0,2,1,"              ranks that checked in (appended)
    failed          "1,"                  ranks that stopped on an error (appended after their
                                          reason)
    collective      "0,"                  ranks that stopped because a collective failed, which
                                          another rank's failure or stall may have caused
    reason/<rank>   text                  the first line of a failed rank's message
    findings        "<verdict> <digest>"  rank 0's config findings: "accepted" or "rejected", and
                                          a digest of the findings text
    left            "1,0,"                ranks whose last collective has returned, so that it
                                          may close its connections
    exited          "0,1,"                ranks that have said how the run ended, so that none
                                          ends its process while another is still saying it

Every rank only appends to and reads whole lists, so a poll costs a few requests whatever the
number of ranks.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from datetime import timedelta

import torch.distributed as dist

from titan.distributed.failures import DistributedFailure, first_line, rank_list

logger = logging.getLogger(__name__)

# Polls start fast (ranks usually arrive together) and slow down, to spare a large job's store.
FIRST_POLL_SECONDS = 0.05
LONGEST_POLL_SECONDS = 1.0
FIRST_PROGRESS_SECONDS = 5.0
PROGRESS_EVERY_SECONDS = 30.0
# A rank whose collective failed waits this long for the other ranks' reports before it names
# the ranks that stopped first, or those that reported nothing (stalled or killed).
PEER_REPORT_GRACE_SECONDS = 5.0
REASONS_SHOWN = 4

_connection: RollCall | None = None


class RollCall:
    """This process's place in the job's roll call (one per process: see ``roll_call``)."""

    def __init__(self, store: dist.Store, *, rank: int, world_size: int) -> None:
        self.store = store
        self.rank = rank
        self.world_size = world_size
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self.keys = dist.PrefixStore(f"titan/{restart}", store)

    def process_group_store(self, *, timeout_s: float) -> dist.Store:
        """The store ``init_process_group`` gets, keyed as it would key its own."""
        self.store.set_timeout(timedelta(seconds=timeout_s))
        return dist.PrefixStore("default_pg", self.store)

    def join(self, *, timeout_s: float) -> None:
        """Check in and wait until every rank has; ``DistributedFailure`` naming the ranks that
        stopped or did not join within ``timeout_s``. The lowest rank present reports progress."""
        self.keys.append("joined", f"{self.rank},")
        start = time.monotonic()
        next_progress = start + FIRST_PROGRESS_SECONDS
        for _ in _polls():
            stopped = self._ranks("failed") - {self.rank}
            if stopped:
                raise DistributedFailure(
                    f"{rank_list(stopped)} stopped before training started, so this rank stops "
                    f"too:\n{self._reasons(stopped)}"
                )
            joined = self._ranks("joined")
            missing = set(range(self.world_size)) - joined
            if not missing:
                return
            waited = time.monotonic() - start
            if waited >= timeout_s:
                raise DistributedFailure(
                    f"{rank_list(missing)} did not join within {timeout_s:g} s "
                    f"(comm.init_timeout_seconds); {len(joined)} of {self.world_size} ranks did\n"
                    "  hint: every rank must start titan-train: look for a node that was not "
                    "launched or a rank stuck before training starts (its own output says where); "
                    "raise comm.init_timeout_seconds if it is only slow"
                )
            if time.monotonic() >= next_progress and min(joined) == self.rank:
                logger.warning(
                    "waiting for %s to join (%d s of %g s)", rank_list(missing), waited, timeout_s
                )
                next_progress += PROGRESS_EVERY_SECONDS

    def stopped(self, message: str) -> None:
        """Tell the other ranks that this one stopped on an error, and why (never raises: this
        runs while the run is already failing, and the store may be gone)."""
        try:
            self.keys.set(f"reason/{self.rank}", first_line(message))
            self.keys.append("failed", f"{self.rank},")
        except Exception as error:  # noqa: BLE001 - the store's errors have no common class
            logger.debug("could not tell the other ranks that this one stopped: %s", error)

    def after_collective_failure(self, *, grace_s: float = PEER_REPORT_GRACE_SECONDS) -> str:
        """Which ranks stopped first or reported nothing, once this rank's collective failed.

        This rank reports itself first; then it waits up to ``grace_s`` for every other rank to
        report, since their collectives fail at about the same moment. Never raises.
        """
        others = set(range(self.world_size)) - {self.rank}
        try:
            self.keys.append("collective", f"{self.rank},")
            deadline = time.monotonic() + grace_s
            for _ in _polls():
                failed = self._ranks("failed") & others
                silent = others - failed - self._ranks("collective")
                if not silent or time.monotonic() >= deadline:
                    break
            said = [self._reasons(failed)] if failed else []
        except Exception as error:  # noqa: BLE001 - the store may have gone with the job
            logger.debug("could not ask the other ranks what happened: %s", error)
            return ""
        if silent:
            said.append(
                f"  {rank_list(silent)} reported no error within {grace_s:g} s of this failure: "
                "stalled (a hung data read, filesystem or debugger) or killed"
            )
        if not said:
            said.append(
                "  every rank's collective failed and none stopped first: the ranks may be "
                "running different collectives (a config or code path that differs by rank)"
            )
        return "\n".join(said)

    def leave(self, *, timeout_s: float, key: str = "left") -> None:
        """Say that this rank's last collective has returned, and wait (up to ``timeout_s``)
        until every rank has said so. Never raises.

        A collective can return on one rank while a peer is still reading that rank's last
        message; a rank that closed its connections then would abort the peer at its exit
        (gloo's SIGABRT). Once every rank is here, nothing is in flight anywhere.
        """
        deadline = time.monotonic() + timeout_s
        try:
            self.keys.append(key, f"{self.rank},")
            for _ in _polls():
                if len(self._ranks(key)) >= self.world_size or time.monotonic() >= deadline:
                    return
        except Exception as error:  # noqa: BLE001 - a store served by a rank that already left
            logger.debug("could not wait for the other ranks to leave: %s", error)

    def arrived(self, key: str) -> None:
        """Say that this rank has reached ``key`` (what :meth:`leave` waits for) without waiting
        for the others. Never raises."""
        try:
            self.keys.append(key, f"{self.rank},")
        except Exception as error:  # noqa: BLE001 - a store served by a rank that already left
            logger.debug("could not say that this rank reached %s: %s", key, error)

    def share_findings(self, digest: str, *, rejected: bool) -> None:
        """Rank 0 publishes what its config check found, so other ranks can tell whether their
        own findings are the ones rank 0 printed."""
        try:
            self.keys.set("findings", f"{'rejected' if rejected else 'accepted'} {digest}")
        except Exception as error:  # noqa: BLE001 - the others then print their own findings
            logger.debug("could not share the config findings: %s", error)

    def rank0_findings(self, *, wait_s: float) -> tuple[bool, str] | None:
        """(rejected, digest) of rank 0's config check; None if rank 0 stopped without one or
        did not publish it within ``wait_s``."""
        deadline = time.monotonic() + wait_s
        try:
            for _ in _polls():
                if self.keys.check(["findings"]):
                    verdict, _, digest = self._get("findings").partition(" ")
                    return verdict == "rejected", digest
                if 0 in self._ranks("failed") or time.monotonic() >= deadline:
                    return None
        except Exception as error:  # noqa: BLE001 - unknown: this rank prints its own findings
            logger.debug("could not read rank 0's config findings: %s", error)
        return None

    def _ranks(self, key: str) -> set[int]:
        return {int(r) for r in self._get(key).split(",") if r}

    def _reasons(self, ranks: set[int]) -> str:
        """``  rank R stopped: why`` for the first few ``ranks``."""
        lines = [
            f"  rank {rank} stopped: {self._get(f'reason/{rank}') or 'no reason given'}"
            for rank in sorted(ranks)[:REASONS_SHOWN]
        ]
        if len(ranks) > REASONS_SHOWN:
            lines.append(f"  and {len(ranks) - REASONS_SHOWN} more ranks")
        return "\n".join(lines)

    def _get(self, key: str) -> str:
        # get() would block until the key exists: ask first.
        return self.keys.get(key).decode() if self.keys.check([key]) else ""


def _polls() -> Iterator[None]:
    """Sleeps between polls, from ``FIRST_POLL_SECONDS`` up to ``LONGEST_POLL_SECONDS``."""
    pause = FIRST_POLL_SECONDS
    while True:
        yield
        time.sleep(pause)
        pause = min(pause * 1.5, LONGEST_POLL_SECONDS)


def joined() -> RollCall | None:
    """This process's ``RollCall`` if it has connected to one (never connects)."""
    return _connection


def roll_call(*, timeout_s: float) -> RollCall | None:
    """This process's ``RollCall``, connected on first use within ``timeout_s``; None when the
    process is not one of several launched through the environment (torchrun's variables).

    ``DistributedFailure`` if the store cannot be reached or the variables are malformed.
    """
    global _connection
    if _connection is not None:
        return _connection
    env = {name: os.environ.get(name, "") for name in ("WORLD_SIZE", "RANK", "MASTER_PORT")}
    address = os.environ.get("MASTER_ADDR", "")
    if env["WORLD_SIZE"] in ("", "1") or not address or not env["MASTER_PORT"]:
        return None
    if not all(value.isdigit() for value in env.values()):
        raise DistributedFailure(
            "WORLD_SIZE, RANK and MASTER_PORT must be whole numbers, not "
            + ", ".join(f"{name}={value!r}" for name, value in env.items())
        )
    world_size, rank, port = (int(value) for value in env.values())
    # torchrun's agent serves the store to every worker; a launch without it has rank 0 serve
    # it, as init_process_group's env:// would. Rank 0 does not wait for the others to connect
    # here: the roll call is what waits for them, naming the missing ones.
    serve = rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    try:
        store = dist.TCPStore(
            address,
            port,
            world_size,
            serve,
            timedelta(seconds=timeout_s),
            wait_for_workers=False,
            multi_tenant=True,
        )
    except (RuntimeError, ValueError) as error:  # torch's DistNetworkError is a RuntimeError
        raise DistributedFailure(
            f"could not reach the job's store at {address}:{port} within {timeout_s:g} s: "
            f"{first_line(str(error))}\n  hint: torchrun sets MASTER_ADDR and MASTER_PORT; every "
            "node must reach that address (a firewall, a wrong --rdzv-endpoint or --master-addr)"
        ) from None
    _connection = RollCall(store, rank=rank, world_size=world_size)
    return _connection

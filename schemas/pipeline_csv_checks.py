"""Whether the actions of a pipeline schedule CSV can run on a layout, and run to the end.

The reader (:mod:`titan.schemas.pipeline_csv`) turns each cell into an :class:`Action`; these
checks say, with the ``file:line:col`` of the first action at fault, what torch would raise on
or leave its ranks waiting over: a stage the layout does not have or that another rank holds, a
microbatch out of range, a stage whose microbatches do not each run forward and backward exactly
once, a transfer between ranks without its send or receive, or an order in which every rank
waits for another (the schedule is played out, each action waiting for what it needs).
Nothing here imports torch.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class _Type:
    """What one action type does, as the checks need to know it."""

    comms: bool
    """A communication action (its presence makes the file the compute+comms format)."""
    microbatch: bool
    """Whether the action names a microbatch."""


ACTION_TYPES: dict[str, _Type] = {
    "F": _Type(comms=False, microbatch=True),
    "B": _Type(comms=False, microbatch=True),
    "I": _Type(comms=False, microbatch=True),
    "W": _Type(comms=False, microbatch=True),
    "SEND_F": _Type(comms=True, microbatch=True),
    "RECV_F": _Type(comms=True, microbatch=True),
    "SEND_B": _Type(comms=True, microbatch=True),
    "RECV_B": _Type(comms=True, microbatch=True),
    "UNSHARD": _Type(comms=True, microbatch=False),
    "RESHARD": _Type(comms=True, microbatch=False),
    "REDUCE_GRAD": _Type(comms=True, microbatch=False),
}
"""Every action type torch's CSV grammar has (``_action_regex``), by its spelling."""


class ScheduleCsvError(ValueError):
    """A schedule CSV titan will not run: ``str(error)`` names the file, line and column."""

    def __init__(self, message: str, *, hint: str) -> None:
        super().__init__(f"{message}; hint: {hint}")
        self.message = message
        self.hint = hint


@dataclass(frozen=True, slots=True)
class Action:
    """One cell of the schedule: ``stage``'s action ``kind`` on ``microbatch`` (or None)."""

    stage: int
    """The stage index, 0 first."""
    kind: str
    """The action type as the file spells it (a key of :data:`ACTION_TYPES`)."""
    microbatch: int | None
    """The microbatch index; None for an action on the whole stage (``UNSHARD``...)."""
    where: str
    """``file:line:col`` of the cell, for messages."""


def check_action(
    action: Action, *, rank: int, owner: dict[int, int], stages: int, microbatches: int
) -> None:
    """One action names a stage this rank holds and a microbatch it may."""
    name = f"{action.stage}{action.kind}{'' if action.microbatch is None else action.microbatch}"
    if action.stage >= stages:
        raise ScheduleCsvError(
            f"{action.where}: {name} names stage {action.stage}, but this layout has {stages} "
            f"stages (0 to {stages - 1})",
            hint="name only the stages the pipeline is cut into, or change the layout "
            "(pipeline_parallel_layers_per_stage) to the schedule's stage count",
        )
    if owner[action.stage] != rank:
        held = sorted(s for s, r in owner.items() if r == rank)
        raise ScheduleCsvError(
            f"{action.where}: {name} is in the row of pipeline rank {rank}, which holds stages "
            f"{held}; stage {action.stage} is pipeline rank {owner[action.stage]}'s",
            hint=f"put stage {action.stage}'s actions in row {owner[action.stage] + 1}",
        )
    needs = ACTION_TYPES[action.kind].microbatch
    if needs and action.microbatch is None:
        raise ScheduleCsvError(
            f"{action.where}: {name} names no microbatch",
            hint=f"add the microbatch (0 to {microbatches - 1}), as in {name}0",
        )
    if not needs and action.microbatch is not None:
        raise ScheduleCsvError(
            f"{action.where}: {name}: {action.kind} acts on the whole stage, not a microbatch",
            hint=f"write {action.stage}{action.kind}",
        )
    if action.microbatch is not None and action.microbatch >= microbatches:
        raise ScheduleCsvError(
            f"{action.where}: {name} names microbatch {action.microbatch}, but each batch is "
            f"cut into {microbatches} microbatches (0 to {microbatches - 1})",
            hint="name microbatches below the count, or change training.local_batch_size or "
            "parallelism.pipeline_parallel_microbatch_size",
        )


def check_complete(path: str, rows: list[list[Action]], *, stages: int, microbatches: int) -> None:
    """Every stage runs each microbatch forward once and backward once (``B``, or ``I`` then
    ``W``), as torch's schedule validation demands."""
    seen = Counter((a.stage, a.kind, a.microbatch) for row in rows for a in row)
    for action in (a for row in rows for a in row if ACTION_TYPES[a.kind].microbatch):
        if seen[action.stage, action.kind, action.microbatch] > 1:
            raise ScheduleCsvError(
                f"{action.where}: {action.stage}{action.kind}{action.microbatch} appears "
                f"{seen[action.stage, action.kind, action.microbatch]} times",
                hint="run each microbatch through each stage once",
            )
    for stage in range(stages):
        for microbatch in range(microbatches):
            key = (stage, microbatch)
            forward = seen[(stage, "F", microbatch)]
            full, inputs, weights = (seen[(stage, k, microbatch)] for k in "BIW")
            if forward and full + min(inputs, weights) == 1 and inputs == weights:
                continue
            missing = "forward (F)" if not forward else "backward (B, or I then W)"
            if full and inputs:
                missing = "one backward: it has both B and I"
            raise ScheduleCsvError(
                f"{path}: stage {key[0]} microbatch {key[1]} lacks {missing}",
                hint=f"run every microbatch (0 to {microbatches - 1}) of every stage forward "
                "once and backward once",
            )


_TRANSFERS: dict[str, tuple[tuple[int, str], ...]] = {
    "F": ((-1, "RECV_F"), (1, "SEND_F")),
    "B": ((1, "RECV_B"), (-1, "SEND_B")),
    "I": ((1, "RECV_B"), (-1, "SEND_B")),
}
"""The communication a compute action needs when a neighbour stage is on another rank: the
neighbour (relative stage) and the action of this stage that moves the data."""


def check_transfers(rows: list[list[Action]], *, owner: dict[int, int], stages: int) -> None:
    """In the compute+comms format torch sends nothing itself: every activation and gradient
    that crosses ranks has its send and receive written."""
    present = {(a.stage, a.kind, a.microbatch) for row in rows for a in row}
    first = next(a for row in rows for a in row if ACTION_TYPES[a.kind].comms)
    for action in (a for row in rows for a in row if a.kind in _TRANSFERS):
        for offset, needed in _TRANSFERS[action.kind]:
            peer = action.stage + offset
            if not 0 <= peer < stages or owner[peer] == owner[action.stage]:
                continue
            if (action.stage, needed, action.microbatch) in present:
                continue
            name = f"{action.stage}{action.kind}{action.microbatch}"
            raise ScheduleCsvError(
                f"{action.where}: {name} has no {action.stage}{needed}{action.microbatch}: the "
                f"file has communication actions ({first.stage}{first.kind} at {first.where}), "
                "so torch runs it as written and moves no activation or gradient itself",
                hint="write every SEND_F/RECV_F/SEND_B/RECV_B between ranks, or only compute "
                "actions (F, B, I, W) and let torch add the communication",
            )


_PEER = {"SEND_F": ("RECV_F", 1), "SEND_B": ("RECV_B", -1)}
"""A send's matching receive, and the stage it goes to (relative to the sender's)."""


def check_pairs(path: str, rows: list[list[Action]], *, owner: dict[int, int], stages: int) -> None:
    """In the compute+comms format every send between ranks has its receive and the other way
    round (a lone one waits for ever), and nothing is sent past either end of the pipeline."""
    present = {(a.stage, a.kind, a.microbatch): a for row in rows for a in row}
    for send, (recv, step) in _PEER.items():
        for (stage, kind, microbatch), action in present.items():
            if kind not in (send, recv):
                continue
            peer = stage + step if kind == send else stage - step
            other = recv if kind == send else send
            name = f"{stage}{kind}{microbatch}"
            if not 0 <= peer < stages:
                raise ScheduleCsvError(
                    f"{action.where}: {name}: stage {stage} has no neighbour to "
                    f"{'send to' if kind == send else 'receive from'}",
                    hint=f"remove {name}",
                )
            if owner[peer] == owner[stage]:
                raise ScheduleCsvError(
                    f"{action.where}: {name}: stages {stage} and {peer} are both on pipeline "
                    f"rank {owner[stage]}, which passes activations between them itself",
                    hint=f"remove {name}",
                )
            if (peer, other, microbatch) not in present:
                raise ScheduleCsvError(
                    f"{action.where}: {name} has no matching {peer}{other}{microbatch} in row "
                    f"{owner[peer] + 1}; pipeline ranks {owner[stage]} and {owner[peer]} would "
                    "wait for each other for ever",
                    hint=f"add {peer}{other}{microbatch} to row {owner[peer] + 1}, or remove "
                    + name,
                )


def check_progress(
    rows: list[list[Action]], *, owner: dict[int, int], stages: int, comms: bool
) -> None:
    """Play the schedule: each rank runs its actions in order, an action waiting for what it
    needs (a forward for the previous stage's output, a backward for the next stage's gradient,
    a send for its own computation). Refuses an order in which every rank that has actions left
    waits."""
    done: set[tuple[int, str, int | None]] = set()
    position = [0] * len(rows)
    while any(position[r] < len(row) for r, row in enumerate(rows)):
        moved = False
        for rank, row in enumerate(rows):
            while position[rank] < len(row) and _ready(
                row[position[rank]], done=done, owner=owner, stages=stages, comms=comms
            ):
                action = row[position[rank]]
                done.add((action.stage, action.kind, action.microbatch))
                position[rank] += 1
                moved = True
        if not moved:
            stuck = [row[position[r]] for r, row in enumerate(rows) if position[r] < len(row)]
            first = stuck[0]
            waits = ", ".join(f"{a.stage}{a.kind}{a.microbatch}" for a in stuck)
            raise ScheduleCsvError(
                f"{first.where}: the schedule cannot go on: every pipeline rank with actions "
                f"left waits for another ({waits})",
                hint="order each rank's actions so that a stage's forward follows the previous "
                "stage's and its backward follows the next stage's",
            )


def _ready(
    action: Action,
    *,
    done: set[tuple[int, str, int | None]],
    owner: dict[int, int],
    stages: int,
    comms: bool,
) -> bool:
    """Whether ``action`` can run once ``done`` has."""
    s, kind, m = action.stage, action.kind, action.microbatch
    if kind == "F":
        if s == 0:
            return True
        if not comms or owner[s - 1] == owner[s]:
            return (s - 1, "F", m) in done
        return (s, "RECV_F", m) in done and (s - 1, "SEND_F", m) in done
    if kind in ("B", "I"):
        if (s, "F", m) not in done:
            return False
        if s == stages - 1:
            return True
        if not comms or owner[s + 1] == owner[s]:
            return (s + 1, "B", m) in done or (s + 1, "I", m) in done
        return (s, "RECV_B", m) in done and (s + 1, "SEND_B", m) in done
    if kind == "W":
        return (s, "I", m) in done
    if kind == "SEND_F":
        return (s, "F", m) in done
    if kind == "SEND_B":
        return (s, "B", m) in done or (s, "I", m) in done
    return True  # receives are posted at once; unshard, reshard and reduce act on the stage


__all__ = [
    "ACTION_TYPES",
    "Action",
    "ScheduleCsvError",
    "check_action",
    "check_complete",
    "check_pairs",
    "check_progress",
    "check_transfers",
]

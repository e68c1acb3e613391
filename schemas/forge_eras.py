"""When a TorchForge app config was written, from its shape, and which torchtitan Forge pinned then.

A Forge app is not an undated v0.2.2 file: it ran on the torchtitan that Forge installed on the
day it was written. Its shape dates it: the layout (the SFT recipe's top-level sections from
2025-07-23, the RL apps' ``trainer:`` from 2025-08-27), the blocks around the sections (a
``trainer.service`` block until 2025-09-16, top-level ``services`` after it, ``actors`` from
2025-09-29, ``provisioner`` from 2025-10-06) and the keys of the sections and of Forge's spawner
options (``procs_per_replica`` until 2025-09-19, ``procs`` after). Each :data:`CLUES` row is the
window of Forge days a shape lived on meta-pytorch/torchforge's main branch (first-parent
history, bf099cfc 2025-07-23 to 6e77f0b3 2025-11-15, the newest read); an app's window is where
the windows of the shapes it has meet, and, as ``titan.schemas.era_defaults`` does for a TOML,
the app is taken to be from the window's last day. :data:`PINS` then say which torchtitan Forge
installed on that day (``scripts/build_wheels.sh``, ``assets/versions.sh``, ``pyproject.toml``),
and :func:`forge_era` answers with that torchtitan's day on its main branch.

Pure data and one walk over plain values: no YAML, no torch.
"""

from __future__ import annotations

from typing import Any

from titan.schemas._frozen import Frozen, _set
from titan.schemas.forge_app import layout
from titan.schemas.yaml_interpolation import holds_string

NEWEST = "2025-11-15"
"""The last Forge day read (6e77f0b3): a shape still alive then lives on to this day."""


class Clue(Frozen):
    """A shape of a Forge app and the Forge days it lived."""

    __slots__ = ("at", "where", "since", "until", "commit")
    __match_args__ = ()

    at: str
    """The dotted place the shape holds a key at (``*`` for any one key), relative to the
    sections (``where="sections"``) or to the whole app."""
    where: str
    """Where ``at`` starts and which apps have it: ``sections`` (the sections, either layout),
    ``app`` (the whole app, either layout), ``top`` (the whole app, an SFT app), ``trainer``
    (the whole app, an RL app) or ``actor`` (an RL app's ``trainer:`` block)."""
    since: str
    """The first Forge day an app had it."""
    until: str | None
    """The last Forge day an app had it (the day of the commit that removed it); ``None`` for a
    shape still alive on :data:`NEWEST`."""
    commit: str
    """The Forge commit that brought it (and, after ``..``, the one that ended it)."""

    def __init__(self, at: str, where: str, since: str, until: str | None, commit: str) -> None:
        _set(self, "at", at)
        _set(self, "where", where)
        _set(self, "since", since)
        _set(self, "until", until)
        _set(self, "commit", commit)


CLUES: tuple[Clue, ...] = (
    # --- the layouts
    Clue("", "top", "2025-07-23", None, "bf099cfc"),  # apps/sft: the SFT recipe
    Clue("", "trainer", "2025-08-27", None, "13fd9f1e"),  # apps/rl: RLTrainer
    # --- keys of the sections, in either layout
    Clue("checkpoint.enable_checkpoint", "sections", "2025-07-23", "2025-08-27", "bf099cfc..21e95a4f"),
    Clue("checkpoint.enable", "sections", "2025-08-27", None, "21e95a4f"),
    Clue("model.tokenizer_path", "sections", "2025-07-23", "2025-10-03", "bf099cfc..16495b6d"),
    Clue("model.hf_assets_path", "sections", "2025-08-13", None, "6db9d25b"),
    Clue("compile.enable", "sections", "2025-08-29", None, "a13ccbf8"),
    Clue("training.dtype", "sections", "2025-09-19", None, "605f85f7"),
    Clue("training.gc_freq", "sections", "2025-09-22", None, "d1902789"),
    # --- the RL apps' trainer block: Forge's spawner and trainer actor
    Clue("processes", "actor", "2025-08-27", "2025-09-08", "13fd9f1e..69c6b1d7"),
    Clue("service", "actor", "2025-09-09", "2025-09-16", "2bcf56c4..13002155"),
    Clue("service.hosts_per_replica", "actor", "2025-09-15", "2025-09-16", "d7ecfc62..13002155"),
    Clue("learning_rate", "actor", "2025-09-05", None, "98856ab8"),  # toy_rl keeps it
    Clue("state_dict_key", "actor", "2025-09-12", None, "a6ca5917"),
    Clue("use_dcp", "actor", "2025-09-22", None, "ea3075b3"),
    Clue("dcp_path", "actor", "2025-09-26", None, "5f19d68c"),
    Clue("use_vllm_builtin_load", "actor", "2025-09-26", "2025-10-10", "5f19d68c..41215d39"),
    Clue("vllm_tp_DEPRECATED", "actor", "2025-09-26", "2025-10-10", "5f19d68c..41215d39"),
    Clue("job", "actor", "2025-10-02", None, "769e3e86"),
    Clue("quantize", "actor", "2025-10-02", None, "769e3e86"),
    Clue("memory_estimation", "actor", "2025-10-02", None, "769e3e86"),
    # --- the RL apps' own blocks
    Clue("policy.service", "trainer", "2025-09-09", "2025-09-16", "2bcf56c4..13002155"),
    Clue("policy.engine_config", "trainer", "2025-09-09", "2025-10-10", "2bcf56c4..b9c3d346"),
    Clue("policy.sampling_config", "trainer", "2025-09-09", "2025-10-10", "2bcf56c4..136a5d61"),
    Clue("policy.engine_args", "trainer", "2025-10-10", None, "b9c3d346"),
    Clue("policy.sampling_params", "trainer", "2025-10-10", None, "136a5d61"),
    Clue("services", "app", "2025-09-16", None, "13002155"),
    Clue("services.*.procs_per_replica", "app", "2025-09-16", "2025-09-19", "13002155..fbe9ca5f"),
    Clue("services.*.hosts_per_replica", "app", "2025-09-16", "2025-09-19", "13002155..fbe9ca5f"),
    Clue("services.*.procs", "app", "2025-09-19", None, "fbe9ca5f"),
    Clue("services.*.mesh_name", "app", "2025-10-03", None, "08404cbc"),
    Clue("actors", "app", "2025-09-29", None, "510a523b"),
    Clue("actors.*.mesh_name", "app", "2025-10-03", None, "08404cbc"),
    Clue("rollout_threads", "trainer", "2025-09-29", None, "377d77bd"),
    Clue("metric_logging", "trainer", "2025-09-29", None, "76dcc62e"),
    Clue("launcher", "app", "2025-10-03", None, "08404cbc"),
    Clue("provisioner", "app", "2025-10-06", None, "2dc7707b"),
    Clue("local_batch_size", "trainer", "2025-10-10", None, "06b972af"),
    # --- the SFT recipe's own blocks
    Clue("processes", "top", "2025-08-14", None, "d44bb20c"),
    Clue("processes.scheduler", "top", "2025-08-14", "2025-10-03", "d44bb20c..16495b6d"),
    Clue("processes.num_gpus", "top", "2025-08-14", "2025-09-01", "d44bb20c..9ce97bfd"),
    Clue("processes.num_hosts", "top", "2025-08-14", "2025-09-23", "d44bb20c..88fcd6b5"),
    Clue("processes.num_procs", "top", "2025-08-27", "2025-09-23", "13fd9f1e..88fcd6b5"),
    Clue("processes.with_gpus", "top", "2025-09-01", None, "9ce97bfd"),
    Clue("processes.procs", "top", "2025-09-23", None, "88fcd6b5"),
    Clue("processes.hosts", "top", "2025-09-23", "2025-10-03", "88fcd6b5..16495b6d"),
    Clue("dataset", "top", "2025-08-21", "2025-10-13", "5a3807eb..93cb0db0"),
    Clue("dataset_val", "top", "2025-08-21", "2025-10-13", "5a3807eb..93cb0db0"),
    Clue("validation", "top", "2025-08-21", "2025-10-13", "5a3807eb..93cb0db0"),
    Clue("metrics.logger", "top", "2025-08-26", "2025-10-13", "f8d04466..93cb0db0"),
    Clue("model_name", "top", "2025-10-13", None, "1b1909e6"),
    Clue("metric_logging", "top", "2025-10-22", None, "0c67e40f"),
)  # fmt: skip
"""Shapes of Forge apps with the Forge days they lived (first-parent history of main)."""

HUB_PATHS = Clue("hf://", "app", "2025-09-18", None, "d55de5b8")
"""An ``hf://`` value anywhere: Forge's config parser resolves them from d55de5b8 on."""


class Pin(Frozen):
    """The torchtitan Forge installed from one Forge day on."""

    __slots__ = ("since", "torchtitan", "day", "commit", "where")
    __match_args__ = ()

    since: str
    """The Forge day the pin took effect."""
    torchtitan: str
    """The torchtitan pinned: a version, a commit of its main branch, or ``nightly``."""
    day: str | None
    """That torchtitan's day on its main branch (``None`` for a nightly: the app's own day)."""
    commit: str
    """The Forge commit that set the pin."""
    where: str
    """The Forge file that holds the pin."""

    def __init__(self, since: str, torchtitan: str, day: str | None, commit: str, where: str):
        _set(self, "since", since)
        _set(self, "torchtitan", torchtitan)
        _set(self, "day", day)
        _set(self, "commit", commit)
        _set(self, "where", where)


PINS: tuple[Pin, ...] = (
    Pin("2025-07-23", "nightly", None, "b981cd68", "pyproject.toml, from the pytorch-nightly index"),
    Pin("2025-09-01", "298bf482", "2025-08-30", "9ce97bfd", "scripts/build_wheels.sh"),
    Pin("2025-09-22", "60645bc7", "2025-09-18", "674e174c", "scripts/build_wheels.sh"),
    Pin("2025-09-29", "a3104201", "2025-09-29", "8bed8f38", "scripts/build_wheels.sh"),
    Pin("2025-10-01", "9f3fe086", "2025-09-30", "31867977", "scripts/build_wheels.sh"),
    Pin("2025-10-02", "0cfbd0b3", "2025-10-02", "4c3c7e1b", "scripts/build_wheels.sh"),
    Pin("2025-10-16", "d0e25450", "2025-10-14", "cf554076", "assets/versions.sh"),
    Pin("2025-10-22", "0.2.0", "2025-10-17", "b922ec72", "assets/versions.sh; pyproject.toml from 993c057e"),
)  # fmt: skip
"""What Forge pinned, from which Forge day (torchtitan's days are its commits' on main; 0.2.0 is
29624e37, tagged 2025-10-17)."""

MAST_PIN = Pin("2025-10-22", "d0e25450", "2025-10-14", "b922ec72", "assets/versions.sh, for MAST")
"""From 0.2.0 on, a MAST launch (``launcher: mast``) kept the older commit
(``TORCHTITAN_COMMIT_MAST``)."""


def forge_era(document: Any) -> tuple[str, str] | None:
    """The day of the torchtitan a Forge app ran on, ``YYYY-MM-DD``, and the evidence in words;
    ``None`` for a document that is not a Forge app (no ``trainer:``, no top-level sections).

    ``document`` is the whole app as Forge reads it (``titan.schemas.yaml_source.YamlSource.app``).
    """
    where = layout(document)
    if where is None:
        return None
    sections = document.get("trainer") if where == "trainer" else document
    found = [c for c in CLUES if _has(c, document, sections if isinstance(sections, dict) else {})]
    if holds_string(document, lambda text: text.startswith("hf://")):  # hf://${model} too
        found.append(HUB_PATHS)
    start = max(c.since for c in found)
    end = min(c.until or NEWEST for c in found)
    apart = start > end
    if apart:  # shapes of eras that never met: the newest shape dates it
        end = start
    mast = document.get("launcher") == "mast"
    pin = _pin(end, mast=mast)
    day = pin.day or end
    shapes = ", ".join(_shown(c) for c in sorted(found, key=lambda c: (c.since, c.at)) if c.at)
    window = f"Forge {start} to {end}" if start != end else f"Forge {end}"
    earlier = [
        p.torchtitan
        for p in _pins_between(start, end)
        if p.since < pin.since and p.torchtitan != pin.torchtitan
    ]
    evidence = (
        f"{'an SFT' if where == 'top' else 'an RL'} app of {window}"
        + (f" ({shapes})" if shapes else "")
        + (": its shapes come from Forge eras that never met, the newest dates it" if apart else "")
        + f"; on {end} Forge pinned torchtitan {_pinned(pin, day)}, in {pin.where} ({pin.commit})"
        + (f"; earlier in the window: {', '.join(earlier)}" if start != end and earlier else "")
    )
    return day, evidence


def _has(clue: Clue, app: dict, sections: dict) -> bool:
    """Whether the app has the clue's shape."""
    needs = {"top": "top", "trainer": "trainer", "actor": "trainer"}.get(clue.where)
    if needs is not None and layout(app) != needs:
        return False
    if not clue.at:
        return True
    inside = sections if clue.where in ("sections", "actor") else app
    return _at(inside, clue.at.split("."))


def _at(node: Any, parts: list[str]) -> bool:
    """Whether ``node`` holds a key at ``parts`` (``*``: any one mapping value)."""
    if not parts:
        return True
    if not isinstance(node, dict):
        return False
    head, rest = parts[0], parts[1:]
    if head == "*":
        return any(_at(child, rest) for child in node.values())
    return head in node and _at(node[head], rest)


def _pin(day: str, *, mast: bool) -> Pin:
    """The pin in effect at the end of a Forge day."""
    if mast and day >= MAST_PIN.since:
        return MAST_PIN
    return [p for p in PINS if p.since <= day][-1]


def _pins_between(start: str, end: str) -> list[Pin]:
    """The pins in effect on some day from ``start`` to ``end``, oldest first."""
    return [
        pin
        for pin, after in zip(PINS, (*PINS[1:], None), strict=True)
        if pin.since <= end and (after is None or after.since > start)
    ]


def _shown(clue: Clue) -> str:
    """A clue in the evidence: where, and its days."""
    until = f" to {clue.until}" if clue.until else " on"
    return f"`{clue.at}` {clue.since}{until}"


def _pinned(pin: Pin, day: str) -> str:
    """The pinned torchtitan in words."""
    if pin.torchtitan == "nightly":
        return f"nightly (unpinned; the build of {day} at the latest)"
    if pin.torchtitan[0].isdigit():
        return f"{pin.torchtitan} ({day})"
    return f"main at {pin.torchtitan} ({day})"

"""The migration plan as data: what a legacy TOML became, and what became of each of its keys.

A :class:`Plan` is what :func:`titan.migrate.plan.build.build_plan` returns and what both renderers read:
code (``migrate/codegen/render_code.py``, a ``config_registry.py`` module) and live
(``migrate/targets/live.py``, the same config objects in memory). Every key of the input has a
:class:`KeyOutcome`.
"""

from __future__ import annotations

from typing import Any

from titan.migrate.plan.extension_classes import GeneratedClass
from titan.migrate.targets.config_objects import Obj
from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.spec import ExtensionSpec


class KeyOutcome:
    """What became of one input key."""

    __slots__ = ("key", "status", "paths", "note", "era")

    STATUSES = (
        "carried",
        "default",
        "structural",
        "upgraded",
        "era-default",
        "renamed",
        "dropped",
        "inert",
        "rejected",
        "changed",
        "ignored",
    )
    """``carried``: written at ``paths``; ``default``: the value equals the target default, so
    nothing needs writing; ``structural``: it chose a class or object; ``upgraded``: a key of an
    older torchtitan carried through its v0.2.2 form (``titan.schemas.eras``; the note names the era and
    the v0.2.2 keys); ``renamed``: carried under a new name (stale converter names with
    ``--fix-stale-names``); ``dropped``: titan has no place for it (or, from an older torchtitan,
    v0.2.2 had none); ``inert``: it had no effect in v0.2.2 either; ``rejected``: invalid, not
    carried; ``era-default``: a key the file omits, written with the default of the file's era
    (``titan.schemas.era_defaults``) where that differs from v0.2.2's; ``changed``: the built config
    holds another value than the legacy run used (``titan.migrate.plan.measured``); ``ignored``:
    a key of an older torchtitan that the loader of the file's own era no longer read, so the
    run did without it (it is not carried)."""

    KEPT = ("carried", "default", "structural", "upgraded", "era-default")
    """The statuses of a key whose legacy value the built config holds."""

    def __init__(
        self, key: str, status: str, paths: tuple[str, ...] = (), note: str = "", era: str = ""
    ) -> None:
        assert status in self.STATUSES, status
        self.key = key
        self.status = status
        self.paths = paths
        self.note = note
        self.era = era
        """For a key of an older torchtitan: where and when it lived (``titan.schemas.eras``)."""

    def __repr__(self) -> str:
        era = f", era={self.era!r}" if self.era else ""
        return f"KeyOutcome({self.key!r}, {self.status!r}, {self.paths!r}, {self.note!r}{era})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KeyOutcome):
            return NotImplemented
        return (self.key, self.status, self.paths, self.note, self.era) == (
            other.key,
            other.status,
            other.paths,
            other.note,
            other.era,
        )

    __hash__ = None  # type: ignore[assignment]


class Plan:
    """One legacy TOML as titan config objects, plus everything the report must say."""

    __slots__ = (
        "source",
        "function",
        "description",
        "root",
        "classes",
        "diagnostics",
        "outcomes",
        "comments",
        "preamble",
        "todos",
        "extension",
        "module_files",
        "declared_extensions",
        "text",
        "effective",
        "target",
        "locals",
        "user_extension",
        "spans",
        "defaults",
        "era",
        "behaviour_changes",
    )

    def __init__(self, source: str, function: str) -> None:
        self.source = source
        """The file as the user named it."""
        self.function = function
        """Name of the registry function."""
        self.description: str | None = None
        """``job.description``: the docstring."""
        self.root: Obj | None = None
        """The config, ``None`` when the file could not be read or parsed."""
        self.classes: list[GeneratedClass] = []
        """Classes generated for a custom config module, in dependency order."""
        self.diagnostics: list[Diagnostic] = []
        """The validator's findings on the file, then the migration's own."""
        self.outcomes: dict[str, KeyOutcome] = {}
        """Every input key (dotted) -> what became of it, in file order."""
        self.comments: dict[str, tuple[tuple[str, ...], str | None]] = {}
        """Config path -> (leading comment lines, trailing comment) carried from the TOML."""
        self.preamble: tuple[str, ...] = ()
        """The file's leading comment block."""
        self.todos: dict[str, list[str]] = {}
        """Config path (``""`` for the whole function) -> things a human must decide."""
        self.extension: str | None = None
        """The custom config module (its short name when it is a built-in one)."""
        self.module_files: tuple[str, ...] = ()
        """The custom config module files read for this TOML (inputs, never to be written)."""
        self.declared_extensions: tuple[str, ...] = ()
        """The modules merged because the project declares them (``[tool.titan] extensions``)."""
        self.text: str | None = None
        """The TOML source, for reports that show the line of a finding."""
        self.effective: dict[str, Any] = {}
        """Every v0.2.2 base-schema key -> the value a v0.2.2 run of the file used (written or
        default, after the era chain and overrides); an invalid key (rejected, reported) has its
        default, as in the titan config. Other targets (``migrate/targets/upstream.py``) are built
        from it."""
        self.target = "titan"
        """The trainer the config is written for (``titan.migrate.targets.choice``)."""
        self.user_extension: ExtensionSpec | None = None
        """The user's custom config modules merged into one (built-in ones excluded)."""
        self.spans: dict[str, Span] = {}
        """Dotted key -> where the file writes it."""
        self.locals: dict[str, Any] = {}
        """Names the function assigns before building the config (``model_spec``), referred to
        by :class:`~titan.migrate.targets.config_objects.Local` values in the tree."""
        self.defaults: dict[str, Any] = {}
        """Every v0.2.2 base-schema key -> its v0.2.2 default (a custom module may change one)."""
        self.era: dict[str, Any] = {"assumed": None, "source": "evidence", "evidence": []}
        """When the file was written: ``assumed`` (the day whose defaults were applied, ``None``
        for v0.2.2), ``source`` (``evidence``, ``--era`` or ``[tool.titan] era``), the
        ``evidence`` and ``stale`` keys; for a file nothing dates whose era would change its run,
        ``undated`` (true), ``floor`` (the earliest day its keys allow) and ``at_stake`` (what its
        era would decide); ``flavor``: the flavor as the file's era defined it, where that is
        not v0.2.2's (``titan.migrate.plan.flavor_era``)."""
        self.behaviour_changes: list[tuple[str, str]] = []
        """``(titan setting, what differs)``: titan settings with no legacy key whose value
        behaves differently from the legacy run (``titan.migrate.plan.measured``)."""

    @property
    def ok(self) -> bool:
        """Whether a config was produced."""
        return self.root is not None

    def errors(self) -> list[Diagnostic]:
        """The error findings."""
        return [d for d in self.diagnostics if d.severity is Severity.ERROR]

    def lossless(self) -> bool:
        """Every key carried (or already the default, upgraded from an older torchtitan, or its
        era's default written out), nothing dropped, inert, rejected or changed, no error,
        nothing left for a human to decide, and a known era (an undated file whose era would
        change the run is not lossless until its era is given)."""
        return (
            self.ok
            and not self.errors()
            and not self.todos
            and not self.era.get("undated")
            and all(o.status in KeyOutcome.KEPT for o in self.outcomes.values())
        )

    def todo(self, path: str, text: str) -> None:
        """Note something a human must decide at config ``path`` (``""``: the whole function)."""
        self.todos.setdefault(path, []).append(text)

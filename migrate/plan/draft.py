"""A plan being filled: the state the plan's steps share and the primitives they use.

:func:`titan.migrate.plan.build.build_plan` makes one :class:`PlanDraft` per file and runs the steps over
it in a fixed order (``titan.migrate.plan.build.fill``); each step is a function of the draft in its own
module (carrying keys, the model, the converters, custom config modules, comments).
"""

from __future__ import annotations

from typing import Any

from titan.migrate.plan.homes import TRAINER
from titan.migrate.plan.legacy_values import copy_value, flatten
from titan.migrate.plan.migration_plan import KeyOutcome, Plan
from titan.migrate.targets.config_objects import Obj
from titan.schemas.builtin_extensions import KNOWN_EXTENSIONS
from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.fork_names import NO_FORK, ForkNames
from titan.schemas.spec import ExtensionSpec, SectionSpec
from titan.schemas.toml_check import FileCheck

BLOCKING_CODES = frozenset(
    {
        "unknown-key",
        "wrong-type",
        "invalid-choice",
        "invalid-value",
        "out-of-range",
        "moved-key",
        "ignored-key",
        "unknown-optimizer",  # the trainer would refuse it: reported, not written
    }
)
"""Findings on a key that make its value impossible to carry (it is reported instead)."""


class PlanDraft:
    """One :class:`Plan` being filled from a checked document: the file's leaves, the config tree
    so far, and the primitives every step uses to place a value or report a key."""

    def __init__(
        self,
        plan: Plan,
        check: FileCheck,
        overrides: dict[str, Any],
        fix_stale_names: bool,
        model_registries: dict[str, tuple[str, str]] | None = None,
        user_extension: ExtensionSpec | None = None,
        fork: ForkNames = NO_FORK,
    ) -> None:
        self.plan = plan
        self.model_registries = model_registries or {}
        """Legacy model name -> (package with ``model_registry``, where it was declared)."""
        self.fork = fork
        """The flavors, converters and model registries the file's project declares."""
        self.model_class: str | None = None
        """The generated subclass of the model config holding a custom module's new ``[model]``
        fields (``titan.migrate.plan.custom_modules``), if it adds any."""
        self.check = check
        self.schema: SectionSpec = check.schema  # type: ignore[assignment]
        self.document: dict[str, Any] = check.document  # type: ignore[assignment]
        self.leaves = flatten(self.document)
        self.overrides = overrides
        self.fix_stale_names = fix_stale_names
        self.blocked = self._blocked_keys()
        module = self.leaves.get("job.custom_config_module")
        extension_modules = [e.module for e in check.extensions]
        if not isinstance(module, str) and extension_modules:
            module = extension_modules[0]  # given on the command line
        self.extension = KNOWN_EXTENSIONS.get(module, module) if isinstance(module, str) else None
        plan.extension = self.extension
        plan.module_files = tuple(e.file for e in check.extensions if e.file)
        plan.declared_extensions = check.declared
        self.user_extension = user_extension
        """The user's custom config modules merged into one (built-in ones excluded)."""
        self.uncarried: dict[str, str] = {}
        """Keys of the custom module's classes that cannot be carried, with why."""
        self.redeclared: frozenset[str] = frozenset()
        """Those of them the legacy run used as another kind than titan's config has."""
        self.base_trainer = TRAINER
        """The trainer class the keys need, before a custom module's generated subclass."""
        self.root: Obj = None  # type: ignore[assignment]
        """The config tree being filled (the default object of the trainer class, once chosen)."""

    def span(self, key: str) -> Span:
        """Where the file writes ``key`` (or its nearest written table; else line 1)."""
        parts = tuple(key.split("."))
        found = None
        while parts and found is None:
            key_span = self.check.spans.get(parts)
            if key_span is not None:
                found = Span(file=self.plan.source, line=key_span.line, col=key_span.col)
            parts = parts[:-1]
        return found or Span(file=self.plan.source, line=1, col=1)

    def report(
        self,
        code: str,
        key: str,
        message: str,
        hint: str | None = None,
        severity: Severity = Severity.WARNING,
    ) -> None:
        """Add the migration's own finding on ``key``."""
        self.plan.diagnostics.append(
            Diagnostic(
                code=code,
                severity=severity,
                path=key,
                message=message,
                hint=hint,
                span=self.span(key),
            )
        )

    def outcome(self, key: str, status: str, paths: tuple[str, ...] = (), note: str = "") -> None:
        """Record what became of ``key`` (only for keys the file has)."""
        if key in self.leaves:
            self.plan.outcomes[key] = KeyOutcome(key, status, paths, note)

    def _blocked_keys(self) -> set[str]:
        """Keys with a finding that makes their value impossible to carry."""
        blocked = set()
        for finding in self.check.diagnostics:
            if finding.code in BLOCKING_CODES and finding.severity is Severity.ERROR:
                blocked.add(finding.path)
        return blocked

    def is_blocked(self, key: str) -> bool:
        """Whether ``key`` or a table above it has a finding that blocks carrying it."""
        parts = key.split(".")
        return any(".".join(parts[:end]) in self.blocked for end in range(1, len(parts) + 1))

    def set(self, path: str, value: Any) -> None:
        """Put ``value`` at a config path of the tree."""
        *parents, name = path.split(".")
        node: Any = self.root
        for part in parents:
            node = node.fields[part]
            if not isinstance(node, Obj):
                raise KeyError(path)
        if name not in node.fields:
            raise KeyError(path)
        node.fields[name] = copy_value(value)

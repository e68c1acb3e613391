"""titan's cross-field rules and ranges on a statically read torchtitan 0.3.0 ``Trainer.Config``.

The rules (``titan.schemas.rules``) read :class:`~titan.schemas.rule_facts.ConfigFacts`; here they
are built from the reader's config tree at 0.3.0's paths (the same dotted paths as a legacy TOML
for the parallel degrees, batch and sequence sizes and the checkpoint's switches). A value that
is not read statically is an :class:`Unknown`, which no rule computes with. Only the rules whose
meaning 0.3.0 kept are run: the layout (degrees against ``--ngpu``, TP against the flavor's
heads, EP against its experts), the batch sizes, the MoE routing and the checkpoint rules. The
flavor's heads, experts and depth are 0.3.0's own, from the generated table.

Ranges are the legacy schema's (``titan.schemas.ranges``) at each key's 0.3.0 home
(``titan.migrate.targets.upstream_homes``), on the values the function writes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

from titan.migrate.registry_check import api
from titan.migrate.registry_check.values import At, Obj, Spec, Unknown
from titan.schemas import rule_facts
from titan.schemas.diagnostics import Diagnostic, Span
from titan.schemas.expert_rules import expert_parallel, moe_routing
from titan.schemas.layout_rules import (
    global_batch,
    parallel_degrees,
    tensor_parallel_heads,
    world_size,
)
from titan.schemas.ranges import Range, out_of_range

RULES: tuple[Callable[[rule_facts.ConfigFacts], Iterator[Diagnostic]], ...] = (
    parallel_degrees,
    world_size,
    expert_parallel,
    moe_routing,
    global_batch,
    tensor_parallel_heads,
)
"""The rules that hold in torchtitan 0.3.0 as they did in v0.2.2 (``keep_latest_k = 1`` and the
HF load switches are 0.3.0's own construction errors, checked where the config is built)."""

_NOT_READ = Unknown("not read by the rules")


class Tree:
    """Reads dotted paths of a statically built config: the value, and where it is written."""

    def __init__(self, root: Obj, shown: str, reader: Any) -> None:
        self.root, self.shown, self.reader = root, shown, reader

    def get(self, path: str) -> tuple[Any, At | None]:
        node: Any = self.root
        at: At | None = None
        for part in path.split("."):
            if not isinstance(node, Obj):
                return Unknown(path), None
            written = node.spans.get(part)
            node = self.reader._get_field(node, part)
            at = written
        return node, at

    def setting(self, path: str) -> rule_facts.Setting:
        value, at = self.get(path)
        return rule_facts.Setting(value, path, self.span(at), written=at is not None)

    def span(self, at: At | None) -> Span | None:
        if at is None:
            return None
        return Span(file=self.shown, line=at.line, col=at.col, end_col=at.end_col)


def config_facts(tree: Tree, *, ngpu: int | None) -> rule_facts.ConfigFacts:
    spec, spec_at = tree.get("model_spec")
    family = spec.family if isinstance(spec, Spec) else None
    flavor = spec.flavor if isinstance(spec, Spec) and isinstance(spec.flavor, str) else None
    facts = api.flavor_facts(family, flavor) if family and flavor else {}
    if isinstance(spec, Spec) and any(
        k in spec.kwargs for k in ("n_heads", "n_layers", "num_experts")
    ):
        facts = {}  # a flavor edited through model_registry's arguments: not the table's
    at = tree.span(spec.at if isinstance(spec, Spec) else spec_at)
    shared = {fact: tree.setting(path) for fact, path in rule_facts.SHARED_FACT_PATHS.items()}
    unread = rule_facts.Setting(_NOT_READ, "")
    flavor_at = rule_facts.Setting(flavor, "model_spec", at)
    experts: tuple[rule_facts.ExpertRouting, ...] = ()
    if facts.get("num_experts"):
        experts = (
            rule_facts.ExpertRouting.of_flavor(
                {"num_experts": facts["num_experts"], "top_k": facts.get("top_k")}, at=flavor_at
            ),
        )
    return rule_facts.ConfigFacts(
        ngpu=ngpu,
        **shared,
        converters=unread,
        early_step_in_backward=unread,
        fault_tolerance=unread,
        validation_steps=unread,
        validation_enable=unread,
        validation_seq_len=unread,
        validation_batch_size=unread,
        float8_recipe=unread,
        float8_all_gather=unread,
        float8_precompute=unread,
        model_name=rule_facts.Setting(family, "model_spec", at),
        flavor=flavor_at,
        n_heads=facts.get("n_heads"),
        n_kv_heads=facts.get("n_kv_heads"),
        moe=(bool(facts.get("moe")) if facts else None),
        experts=experts,
        n_layers=facts.get("n_layers"),
    )


def rule_findings(
    root: Obj, *, shown: str, reader: Any, ngpu: int | None, at: At
) -> list[Diagnostic]:
    """The rules' and the ranges' findings on a function's returned config; a finding about a
    value the function does not write stands at the function's ``def``."""
    tree = Tree(root, shown, reader)
    found = []
    facts = config_facts(tree, ngpu=ngpu)
    for rule in RULES:
        found += list(rule(facts))
    for path, bounds in ranges().items():
        value, written = tree.get(path)
        if written is None or isinstance(value, Unknown):
            continue
        finding = out_of_range(value, bounds, path=path, span=tree.span(written))
        if finding is not None:
            found.append(finding)
    fallback = Span(file=shown, line=at.line, col=at.col)
    return [d if d.span is not None else dataclasses.replace(d, span=fallback) for d in found]


@functools.cache
def ranges() -> dict[str, Range]:
    """0.3.0 path -> the legacy range of the key that lives there."""
    from titan.migrate.targets.upstream_homes import upstream_homes
    from titan.schemas.legacy_spec import LEGACY_RANGES

    homes = upstream_homes()
    found = {}
    for key, bounds in LEGACY_RANGES.items():
        home = homes.get(key)
        if home is None or home.status not in ("same", "moved") or not home.path:
            continue
        if ":" in home.path:
            continue
        found[home.path] = bounds
    return found

"""Every migrated TOML builds in a real torchtitan 0.3.0, and carries what the legacy run used.

Each TOML of ``legacy_configs/`` and of the upstream v0.2.2 corpus (when ``../shared`` is there) is
migrated with the 0.3.0 target, one module per folder as ``titan-migrate DIR`` writes them. The
modules are imported in the upstream environment and every function is called (``build_runner.py``);
the configs come back as JSON. Then each of the 149 legacy keys is looked up at its 0.3.0 home
(``migrate/targets/upstream_homes.py``) and compared with the value the legacy run used: equal, or
reported by the migration (an ``upstream-gone`` finding, or an outcome that says the key was not
carried). No module may fail to import and no function may fail to build.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from titan.migrate.codegen.render_code import function_names, render_module
from titan.migrate.plan.build import build_plan
from titan.migrate.plan.migration_plan import Plan
from titan.migrate.plan.model_keys import FAMILY_ALIASES
from titan.migrate.targets.upstream import retarget
from titan.migrate.targets.upstream_homes import split_flavor, upstream_homes

from tests.reference import corpus_files_if_present
from tests.upstream.building import build

ROOT = Path(__file__).resolve().parents[2]


def _legacy_files() -> list[Path]:
    """The project's legacy TOMLs, and the files of older torchtitan eras (their keys go
    through the era chain first)."""
    eras = sorted((ROOT / "tests" / "eras").glob("*.toml"))
    return sorted((ROOT / "legacy_configs").rglob("*.toml")) + eras


@pytest.fixture(scope="module")
def built(upstream_python: Path, tmp_path_factory) -> list[tuple[Plan, dict[str, Any]]]:
    """(0.3.0 plan, the built config as JSON) for every TOML."""
    out = tmp_path_factory.mktemp("upstream_modules")
    folders: dict[Path, list[Plan]] = defaultdict(list)
    for path in [*_legacy_files(), *corpus_files_if_present()]:
        folders[path.parent].append(retarget_one(path))
    modules: list[tuple[Path, list[Plan], list[str]]] = []
    for index, (folder, plans) in enumerate(sorted(folders.items())):
        usable = [p for p in plans if p.ok]
        assert len(usable) == len(plans), [p.source for p in plans if not p.ok]
        names = function_names(usable)
        module = out / f"m{index}_{folder.name}" / "config_registry.py"
        module.parent.mkdir()
        module.write_text(render_module(usable), encoding="utf-8")
        modules.append((module, usable, names))
    # Every file in one module as well: several families, derived functions, unique names.
    everything = [p for _, plans in sorted(folders.items()) for p in plans]
    together = out / "together" / "config_registry.py"
    together.parent.mkdir()
    together.write_text(render_module(everything), encoding="utf-8")
    result = out / "built.json"
    dumped = build(upstream_python, [*(m for m, _, _ in modules), together], result, timeout=900)
    found = []
    failures = []
    for module, plans, names in modules:
        entry = dumped[str(module)]
        if entry["error"]:
            failures.append(f"{module}: import failed\n{entry['error']}")
            continue
        for plan, name in zip(plans, names, strict=True):
            function = entry["functions"].get(name)
            if function is None or "error" in function:
                why = function["error"] if function else "function missing"
                failures.append(f"{plan.source} ({name}): {why}")
                continue
            found.append((plan, function["config"]))
    entry = dumped[str(together)]
    if entry["error"]:
        failures.append(f"the module of every file: import failed\n{entry['error']}")
    else:
        alone = {id(plan): config for plan, config in found}
        for plan, name in zip(everything, function_names(everything), strict=True):
            function = entry["functions"].get(name)
            if function is None or "error" in function:
                why = function["error"] if function else "function missing"
                failures.append(f"the module of every file, {name}: {why}")
            elif id(plan) in alone and _without_class_module(
                function["config"]
            ) != _without_class_module(alone[id(plan)]):
                failures.append(f"{plan.source}: {name} builds another config among all files")
    assert not failures, "\n\n".join(failures)
    return found


def _without_class_module(value: Any) -> Any:
    """A dumped config with generated classes named by class only (their module differs)."""
    if isinstance(value, dict):
        return {
            k: v.rpartition(":")[2]
            if k == "__class__" and v.startswith("_titan_migrated")
            else _without_class_module(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_without_class_module(v) for v in value]
    return value


def retarget_one(path: Path) -> Plan:
    return retarget(build_plan(path, shown=str(path.relative_to(path.parents[2]))))


def test_every_file_builds(built):
    """The fixture asserts it; here the count says every file was seen."""
    assert len(built) == len(_legacy_files()) + len(corpus_files_if_present())


def _at(config: dict[str, Any], path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(path)
        node = node[part]
    return node


def _json(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_json(v) for v in value]
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    return value


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b or (_json(a) == _json(b) and type(a) is type(b))


def _reported(plan: Plan, key: str) -> bool:
    if key == "model.flavor" and _reported(plan, "model.name"):
        return True  # no model family: its flavor cannot be carried either
    outcome = plan.outcomes.get(key)
    if outcome is not None and outcome.status in ("dropped", "inert", "rejected"):
        return True
    return any(d.path == key and d.code == "upstream-gone" for d in plan.diagnostics)


_POLICIES = {"full": "FullAC.Config", "selective": "SelectiveAC.Config"}
_POLICIES["memory_budget"] = "MemoryBudgetAC.Config"


def _expected(plan: Plan, key: str, config: dict[str, Any]) -> list[tuple[Any, Any]]:
    """(what 0.3.0 built, what the legacy run used) pairs for one key; [] when the key has no
    value of its own to compare (it is checked through another key)."""
    value = plan.effective[key]
    home = upstream_homes()[key]
    section, _, name = key.partition(".")
    if key.startswith("optimizer.") and name not in ("early_step_in_backward", "implementation"):
        groups = config["optimizer"]["param_groups"]
        assert len(groups) == 1 and groups[0]["pattern"] == ".*", groups
        kwargs = groups[0]["optimizer_kwargs"]
        return {
            "name": [(groups[0]["optimizer_name"], value)],
            "lr": [(kwargs["lr"], value)],
            "beta1": [(kwargs["betas"][0], value)],
            "beta2": [(kwargs["betas"][1], value)],
            "eps": [(kwargs["eps"], value)],
            "weight_decay": [(kwargs["weight_decay"], value)],
        }[name]
    if key == "activation_checkpoint.mode":
        ac = config["activation_checkpoint"]
        if value == "none":
            return [(ac, None)]
        return [(ac["__class__"].rpartition(":")[2], _POLICIES[value])]
    if section == "activation_checkpoint":
        ac = config["activation_checkpoint"]
        field = home.path.partition(".")[2] if home.path else None
        if ac is None or field is None or field not in ac:
            return []  # AC off, or a field of another policy: the mode says what happened
        return [(ac[field], value)]
    if key == "model.name":
        spec = config["model_spec"]
        return [(spec["name"] if spec else None, FAMILY_ALIASES.get(value, value))]
    if key == "model.flavor":
        spec = config["model_spec"]
        family = FAMILY_ALIASES.get(plan.effective["model.name"], plan.effective["model.name"])
        return [(spec["flavor"] if spec else None, split_flavor(family, value)[0])]
    if key == "model.converters":
        spec = config["model_spec"]
        linears = set(spec["linears"].values()) if spec else set()
        pairs = []
        for converter in value:
            word = {"quantize.linear.float8": "Float8", "quantize.linear.mx": "MXFP8"}.get(
                converter
            )
            if word:
                pairs.append((any(word in c for c in linears), True))
        return pairs
    if key == "checkpoint.initial_load_path" and isinstance(value, str):
        if value.strip() and not value.strip().startswith("/") and "://" not in value:
            value = os.path.normpath(os.path.join(ROOT, value))  # abspath in the runner
        return [(_at(config, home.path), value.strip() if value else value)]
    if key == "model.tokenizer_path":
        return []  # folded into hf_assets_path: compared there
    if key == "model.hf_assets_path":
        return []  # the tokenizer path may win over it; compared below through the titan plan
    if home.status == "gone" or home.path is None or home.path.startswith("model_spec:"):
        return []
    try:
        return [(_at(config, home.path), _json(value))]
    except KeyError:
        from titan.migrate.targets.upstream import _legacy_default

        return [("<no field>", "<no field>" if value == _legacy_default(key) else value)]


def test_every_key_is_carried_or_reported(built):
    """The field-by-field comparison of each built config with the legacy run's values."""
    problems = []
    compared = 0
    for plan, config in built:
        for key in upstream_homes():
            if key not in plan.effective or _reported(plan, key):
                continue
            for got, want in _expected(plan, key, config):
                compared += 1
                if not _equal(_json(got), _json(want)):
                    problems.append(f"{plan.source}: {key}: 0.3.0 has {got!r}, legacy {want!r}")
    assert not problems, "\n".join(problems)
    assert compared > 100 * len(built)


def test_upstream_needs_are_set(built):
    """``loss`` and ``dataloader`` are abstract by default in 0.3.0: every config sets them."""
    for plan, config in built:
        if config["model_spec"] is None:
            assert any(d.code == "upstream-gone" for d in plan.diagnostics), plan.source
            continue
        if config["model_spec"]["name"] == "flux":  # a diffusion model: upstream's Flux trainer
            assert config["loss"]["__class__"].endswith(":MSELoss.Config"), plan.source
            assert config["dataloader"]["__class__"].endswith(":FluxDataLoader.Config")
            continue
        assert config["loss"]["__class__"].endswith(":ChunkedLossWrapper.Config"), plan.source
        vocab = config["loss"]["loss_fn"]["global_vocab_size"]
        assert isinstance(vocab, int) and vocab > 0, plan.source
        assert config["dataloader"]["__class__"].endswith(":HuggingFaceTextDataLoader.Config"), (
            plan.source
        )
        assert config["dataloader"]["dataset"] == plan.effective["training.dataset"]


def test_profiler_folders_are_where_legacy_traces_went(built):
    for plan, config in built:
        profiler = config["profiler"]
        assert profiler["save_traces_folder"] == plan.effective["profiling.save_traces_folder"]
        assert (
            profiler["save_memory_snapshot_folder"]
            == plan.effective["profiling.save_memory_snapshot_folder"]
        )

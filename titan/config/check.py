"""Check a registry-made ``Trainer.Config``: every field's type, then the shared cross-field rules.

Dataclasses accept any value (``TrainingConfig(steps="10")`` constructs fine), so each field is
validated with pydantic in strict mode against its annotation, and a config object carrying an
attribute that is not a field (possible only on a class that forgot ``slots=True``) is reported.
Numbers are then checked against the legacy schema's ranges (``titan.schemas.ranges``, mapped to the
registry fields through ``titan.migrate.plan.homes``). The cross-field rules are the ones
``titan-validate FILE.toml`` runs (``titan.schemas.rules``), fed with a
:class:`~titan.schemas.rule_facts.ConfigFacts` built from the config object.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import typing
from collections.abc import Callable, Iterator
from typing import Any

from titan.config.configurable import Configurable, check_config_class, field_ranges
from titan.schemas import ranges, rule_facts, rules
from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.spec import SectionSpec

Locate = Callable[[str], Span | None]
"""Where a dotted config path is written (``None`` when it is a default)."""


def check_config(config: Any, *, ngpu: int | None, locate: Locate) -> list[Diagnostic]:
    """Every problem of ``config``: types, structure and ranges (a field's type error stands
    for its range), then, when every value is well typed, the cross-field rules."""
    found = list(_structure(config, "", locate))
    if getattr(config, "model_spec", None) is None:
        found.append(
            _diag(
                "unknown-model",
                "model_spec",
                "the config has no model: model_spec is not set",
                locate,
                "set model_spec=model_registry(flavor) from the model family's package",
            )
        )
    wrong = {d.path for d in found}
    well_typed = not any(d.severity is Severity.ERROR for d in found)
    found += (d for d in _out_of_range(config, locate) if d.path not in wrong)
    if not well_typed:
        return found  # the cross-field rules assume well-typed values
    found += rules.check(config_facts(config, ngpu=ngpu, locate=locate))
    # A config class with rules of its own (a policy trainer's) adds their findings.
    own_rules = getattr(config, "rule_findings", None)
    return found + (list(own_rules(locate)) if callable(own_rules) else [])


_ABSENT = object()


def _out_of_range(config: Any, locate: Locate) -> Iterator[Diagnostic]:
    """The legacy schema's ranges (``titan.schemas.ranges``), at the fields the keys migrate to, then
    the ranges titan's config classes declare (``_ranges``) at every other field."""
    checked = set()
    for path, bounds in _range_paths():
        node = config
        for part in path.split("."):
            node = getattr(node, part, _ABSENT)
        if node is _ABSENT:
            continue  # a field of a trainer subclass this config is not
        checked.add(path)
        finding = ranges.out_of_range(node, bounds, path=path, span=locate(path))
        if finding is not None:
            yield finding
    for node, prefix in _config_nodes(config, ""):
        for name, bounds in field_ranges(type(node)).items():
            path = _join(prefix, name)
            if path in checked:
                continue
            finding = ranges.out_of_range(getattr(node, name), bounds, path=path, span=locate(path))
            if finding is not None:
                yield finding


def _config_nodes(node: Any, path: str) -> Iterator[tuple[Any, str]]:
    """Every config object in the tree under ``node`` (list items too), with its path."""
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        yield node, path
        for field in dataclasses.fields(node):
            yield from _config_nodes(getattr(node, field.name), _join(path, field.name))
    elif isinstance(node, list | tuple):
        for index, item in enumerate(node):
            yield from _config_nodes(item, f"{path}[{index}]")


@functools.cache
def _range_paths() -> tuple[tuple[str, ranges.Range | None], ...]:
    """(registry path, range) for every numeric legacy key that has a field in Trainer.Config:
    the table is keyed by legacy key and mapped through the migration's homes."""
    from titan.migrate.plan import homes
    from titan.schemas.legacy_spec import LEGACY_RANGES

    found = {}
    for key in _numeric_leaves(LEGACY_SPEC, ""):
        home = homes.home(key)
        if home is None or home.kind not in ("same", "moved") or home.path is None:
            continue
        for path in (home.path, *home.also):
            found[path] = LEGACY_RANGES.get(key)
    return tuple(found.items())


def _numeric_leaves(section: SectionSpec, prefix: str) -> Iterator[str]:
    for item in section.fields:
        if isinstance(item.annotation, SectionSpec):
            yield from _numeric_leaves(item.annotation, f"{prefix}{item.name}.")
        elif {int, float} & {item.annotation, *typing.get_args(item.annotation)}:
            yield f"{prefix}{item.name}"


def _diag(code: str, path: str, message: str, locate: Locate, hint: str | None = None):
    return Diagnostic(
        code=code,
        severity=Severity.ERROR,
        path=path,
        message=message,
        hint=hint,
        span=locate(path),
    )


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@functools.cache
def _adapter(annotation: Any):
    from pydantic import ConfigDict, TypeAdapter

    return TypeAdapter(annotation, config=ConfigDict(strict=True))


def _dataclass_types(annotation: Any) -> tuple[type, ...]:
    """The dataclass classes an annotation admits (``X``, ``X | None``, ``list[X]`` elements)."""
    try:
        return _cached_dataclass_types(annotation)
    except TypeError:  # an unhashable annotation
        return _find_dataclass_types(annotation)


@functools.cache
def _cached_dataclass_types(annotation: Any) -> tuple[type, ...]:
    return _find_dataclass_types(annotation)


def _find_dataclass_types(annotation: Any) -> tuple[type, ...]:
    if dataclasses.is_dataclass(annotation) and isinstance(annotation, type):
        return (annotation,)
    return tuple(t for arg in typing.get_args(annotation) for t in _dataclass_types(arg))


def _structure(node: Any, path: str, locate: Locate) -> Iterator[Diagnostic]:
    cls = type(node)
    if issubclass(cls, Configurable.Config):
        try:
            check_config_class(cls)
        except TypeError as exc:
            yield _diag(
                "wrong-type",
                path,
                str(exc),
                locate,
                "config classes are dataclasses with kw_only=True and slots=True; fix the class",
            )
    extra = getattr(node, "__dict__", None)
    for name in extra or ():
        yield _diag(
            "unknown-key",
            _join(path, name),
            f"{cls.__qualname__} has no field `{name}`",
            locate,
            _suggest(name, [f.name for f in dataclasses.fields(node)])
            or "fields: " + ", ".join(f.name for f in dataclasses.fields(node)),
        )
    hints = _hints(cls)
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        annotation = hints[field.name]
        if typing.get_origin(annotation) is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        yield from _value(value, annotation, _join(path, field.name), locate)


def _value(value: Any, annotation: Any, path: str, locate: Locate) -> Iterator[Diagnostic]:
    classes = _dataclass_types(annotation)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if classes and not isinstance(value, classes):
            expected = " or ".join(c.__qualname__ for c in classes)
            yield _diag(
                "wrong-type",
                path,
                f"`{path}` must be a {expected}, not a {type(value).__qualname__}",
                locate,
                f"build it with {classes[0].__qualname__}(...)",
            )
            return
        yield from _structure(value, path, locate)
        return
    if classes and isinstance(value, list | tuple):
        element_classes = tuple(c for c in classes)
        for index, item in enumerate(value):
            item_path = f"{path}[{index}]"
            if not isinstance(item, element_classes):
                expected = " or ".join(c.__qualname__ for c in element_classes)
                yield _diag(
                    "wrong-type",
                    item_path,
                    f"`{item_path}` must be a {expected}, not {type(item).__qualname__}",
                    locate,
                    f"build each item with {element_classes[0].__qualname__}(...)",
                )
            else:
                yield from _structure(item, item_path, locate)
        return
    if classes:  # a config-typed field holding something else
        if value is None and type(None) in typing.get_args(annotation):
            return
        expected = " or ".join(c.__qualname__ for c in classes)
        yield _diag(
            "wrong-type",
            path,
            f"`{path}` must be a {expected}, not {ranges.shown_value(value)}",
            locate,
            f"build it with {classes[0].__qualname__}(...)",
        )
        return
    from pydantic import ValidationError

    try:
        _adapter(annotation).validate_python(value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "".join(f"[{p!r}]" for p in first["loc"] if not isinstance(p, str))
        yield _diag(
            "invalid-choice" if first["type"] == "literal_error" else "wrong-type",
            path + where,
            f"`{path}` is {ranges.shown_value(value)}: {first['msg'][0].lower()}{first['msg'][1:]}",
            locate,
            f"`{path.rpartition('.')[2]}` takes {_describe(annotation)} (no conversion is done)",
        )


def _describe(annotation: Any) -> str:
    """An annotation in words: ``int``, ``one of "op", "full"``, ``str or None``."""
    if typing.get_origin(annotation) is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    if isinstance(annotation, type) and not typing.get_args(annotation):
        return f"a value of type {annotation.__name__}"
    text = str(annotation).replace("typing.", "")
    return f"a value of type {text}"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _suggest(name: str, names: list[str]) -> str | None:
    import difflib

    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else None


def config_facts(config: Any, *, ngpu: int | None, locate: Locate) -> rule_facts.ConfigFacts:
    """The cross-field rules' view of a ``Trainer.Config`` (paths in registry spelling)."""
    from titan.components.optimizer import OptimizersInBackwardContainer
    from titan.components.quantization.float8 import Float8LinearConverter

    def get(path: str) -> rule_facts.Setting:
        node = config
        for part in path.split("."):
            node = getattr(node, part)
        written = getattr(locate, "written", None)
        return rule_facts.Setting(
            value=node,
            path=path,
            span=locate(path),
            written=None if written is None else written(path),
        )

    converters = list(config.model_converters.converters)
    # A converter config of a class outside titan is a fork's own converter: being a class, it
    # is registered, so only titan's converters are named to the rules (which check names).
    names = [
        type(c)._legacy_name or type(c).__qualname__
        for c in converters
        if type(c).__module__.partition(".")[0] == "titan"
    ]
    float8 = next((c for c in converters if isinstance(c, Float8LinearConverter.Config)), None)
    f8 = float8 if float8 is not None else Float8LinearConverter.Config()
    f8_path = "model_converters.converters"
    if float8 is not None:
        f8_path += f"[{converters.index(float8)}]"
    spec = config.model_spec
    family = spec.name if spec is not None else None
    flavor_name = spec.flavor if spec is not None else None
    from titan.schemas import flavors

    if family is not None and flavor_name not in (flavors.flavor_names(family) or (flavor_name,)):
        # titan's registries build only the flavors they ship, so this spec comes from the
        # project's own model registry (a fork's llama3 "1B"): the registry answers for it.
        flavor_name = None
    # The facts come from the config tree itself, so a flavor whose tree was edited (heads, MoE
    # layers) is checked as it will be built, not as the flavor's name says.
    heads = spec.model.attention_heads() if spec is not None else None
    fault_tolerance = getattr(config, "fault_tolerance", None)
    in_backward = isinstance(config.optimizer, OptimizersInBackwardContainer.Config)
    return rule_facts.ConfigFacts(
        ngpu=ngpu,
        **{fact: get(path) for fact, path in rule_facts.SHARED_FACT_PATHS.items()},
        converters=rule_facts.Setting(
            value=names, path="model_converters.converters", span=locate("model_converters")
        ),
        quantize_tables=(),  # a converter config exists only when it is enabled
        early_step_in_backward=rule_facts.Setting(
            value=in_backward, path="optimizer", span=locate("optimizer")
        ),
        fault_tolerance=rule_facts.Setting(
            value=fault_tolerance.enable if fault_tolerance is not None else False,
            path="fault_tolerance.enable",
            span=locate("fault_tolerance.enable"),
        ),
        validation_steps=get("validator.steps"),
        validation_enable=get("validator.enable"),
        validation_seq_len=get("validator.seq_len"),
        validation_batch_size=get("validator.local_batch_size"),
        float8_recipe=rule_facts.Setting(f8.recipe_name, f"{f8_path}.recipe_name", locate(f8_path)),
        float8_all_gather=rule_facts.Setting(
            f8.enable_fsdp_float8_all_gather,
            f"{f8_path}.enable_fsdp_float8_all_gather",
            locate(f8_path),
        ),
        float8_precompute=rule_facts.Setting(
            f8.precompute_float8_dynamic_scale_for_fsdp,
            f"{f8_path}.precompute_float8_dynamic_scale_for_fsdp",
            locate(f8_path),
        ),
        model_name=rule_facts.Setting(family, "model_spec.name", locate("model_spec")),
        flavor=rule_facts.Setting(flavor_name, "model_spec.flavor", locate("model_spec")),
        # A count below 1 is the range check's finding, not a head count to divide.
        n_heads=_positive(heads.n_heads) if heads is not None else None,
        n_kv_heads=_positive(heads.n_kv_heads) if heads is not None else None,
        # a family without blocks to count (or a project's own model) skips the pipeline rule
        n_layers=_positive(getattr(spec.model, "n_layers", None)) if spec is not None else None,
        max_seq_len=_max_seq_len(config),
        moe=spec.model.has_moe() if spec is not None else None,
        experts=_expert_routings(spec, locate),
        **_dataset_facts(config, get),
    )


def _max_seq_len(config: Any) -> int | None:
    """The model's max_seq_len once the run has updated its config from the trainer's (as
    ``titan.training.run_checks.model_config_of`` does), read from a copy; None for a model
    without one."""
    spec = config.model_spec
    if spec is None or not hasattr(spec.model, "max_seq_len"):
        return None
    model = copy.deepcopy(spec.model)
    try:
        model.update_from_config(trainer_config=config)
    except Exception:  # noqa: BLE001  (a project's model: the run reports it where it calls it)
        return None
    return _positive(getattr(model, "max_seq_len", None))


def _positive(count: Any) -> int | None:
    return count if isinstance(count, int) and count >= 1 else None


def _expert_routings(spec: Any, locate: Locate) -> tuple[rule_facts.ExpertRouting, ...]:
    """The routing of every mixture of experts in the model's tree, at its fields' paths, when
    some layer runs one (a deepseek_v3 whose layers are all dense builds none)."""
    from titan.models.common.moe import MoE

    if spec is None or spec.model.has_moe() is False:
        return ()
    return tuple(
        rule_facts.ExpertRouting(
            **{
                name: rule_facts.Setting(
                    getattr(node, name), f"{path}.{name}", locate(f"{path}.{name}")
                )
                for name in rule_facts.ExpertRouting.__slots__
            }
        )
        for node, path in _config_nodes(spec.model, "model_spec.model")
        if isinstance(node, MoE.Config)
    )


def _dataset_facts(config: Any, get: Callable[[str], rule_facts.Setting]) -> dict[str, Any]:
    """The datasets of titan's text loader, checked against its registry (the same rule as a
    TOML's ``training.dataset``); another loader brings its own names."""
    from titan.hf_datasets.text_datasets import DATASETS, HuggingFaceTextDataLoader
    from titan.schemas import flavors
    from titan.schemas.dataset_names import DatasetFacts

    text = HuggingFaceTextDataLoader.Config
    spec = getattr(config, "model_spec", None)
    if not isinstance(config.dataloader, text) or spec is None:
        return {}
    if flavors.flavor_names(spec.name) is None:
        return {}  # a model titan cannot train (unsupported_model): its run never loads data
    validator = getattr(config, "validator", None)
    checked = (
        validator is not None
        and getattr(validator, "enable", False) is True
        and isinstance(getattr(validator, "dataloader", None), text)
    )
    return {
        "dataset": get("dataloader.dataset"),
        "validation_dataset": get("validator.dataloader.dataset") if checked else None,
        "datasets": DatasetFacts(registered=tuple(DATASETS)),
    }

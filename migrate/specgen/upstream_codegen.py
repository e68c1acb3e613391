"""Write ``migrate/targets/upstream_spec_030.py``: torchtitan 0.3.0's config classes as data.

``titan-migrate --target torchtitan==0.3.0`` writes registry code for the real ``torchtitan``
package, which titan's own environment never has. Like ``migrate/specgen/target_codegen.py`` does
for titan, this module reads from the installed package, once, what a migration has to know: the
defaults of every config class a migrated run can name (generated code sets only what differs from
them), the flavors and keyword parameters of each model family's ``model_registry``, and the
attention backends a language model accepts.

It runs inside the environment that has torchtitan (``.venv-upstream``; ``make schema-upstream``
regenerates and formats the file; ``tests/upstream/test_upstream_spec.py`` fails while it is
stale)::

    PYTHONPATH=. .venv-upstream/bin/python -m titan.migrate.specgen.upstream_codegen [--out FILE]

so it imports only the standard library, torchtitan and ``titan.migrate.specgen.class_literals``, which
imports nothing of titan or of the rest of ``migrate``. torchtitan is imported inside the functions:
``migrate`` never imports it at import time.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import logging
import pkgutil
import re
import sys
import textwrap
from importlib.metadata import version
from pathlib import Path
from typing import Any

from titan.migrate.specgen.class_literals import (
    UnwritableDefault,
    class_path,
    defaults_of,
    import_module_of,
    literal,
)
from titan.migrate.targets.spec_types import load_class

VERSION = "0.3.0"
OUT = Path(__file__).parents[1] / "targets" / "upstream_spec_030.py"

ROOTS = (
    "torchtitan.trainer:Trainer.Config",
    # activation_checkpoint is one of these policies, or None.
    "torchtitan.distributed.activation_checkpoint:SelectiveAC.Config",
    "torchtitan.distributed.activation_checkpoint:FullAC.Config",
    "torchtitan.distributed.activation_checkpoint:MemoryBudgetAC.Config",
    # model_registry(flavor, converters=[...]) takes these.
    "torchtitan.components.quantization:Float8LinearConverter.Config",
    "torchtitan.components.quantization:MXFP8LinearConverter.Config",
    "torchtitan.components.quantization:Float8GroupedExpertsConverter.Config",
    "torchtitan.components.quantization:MXFP8GroupedExpertsConverter.Config",
    # Trainer.Config's loss and dataloader default to abstract bases: a registry sets these.
    "torchtitan.components.loss:ChunkedLossWrapper.Config",
    "torchtitan.components.loss:CrossEntropyLoss.Config",
    "torchtitan.hf_datasets.text_datasets:HuggingFaceTextDataLoader.Config",
    "torchtitan.components.optimizer:ParamGroupConfig",
    "torchtitan.experiments.torchft.trainer:FaultTolerantTrainer.Config",
    "torchtitan.experiments.torchft.checkpoint:TorchFTCheckpointManager.Config",
    # Flux: what upstream's own flux registry sets where Trainer.Config has a base class.
    "torchtitan.models.flux.trainer:FluxTrainer.Config",
    "torchtitan.models.flux.flux_datasets:FluxDataLoader.Config",
    "torchtitan.models.flux.validate:FluxValidator.Config",
    "torchtitan.components.loss:MSELoss.Config",
)
"""Every class a migration can name; the classes of their default values are added too. Keys
of the table are where each class is defined (``torchtitan.components.optimizer.optimizer:
ParamGroupConfig``), whatever package a root is named through here."""

ATTENTION_SELECTOR = "torchtitan.models.common.config_utils:get_attention_config"
"""The function every language model family's ``model_registry`` passes ``attn_backend`` to."""


def class_rows() -> dict[str, str]:
    """``path -> source of its ClassInfo``, for the roots and every class their defaults hold."""
    classes: dict[str, Any] = {class_path(load_class(root)): None for root in ROOTS}
    rows: dict[str, str] = {}
    while any(path not in rows for path in classes):
        path = next(path for path in classes if path not in rows)
        cls = load_class(path)
        defaults = defaults_of(cls)
        fields = ", ".join(
            f"{name!r}: {literal(value, classes, f'{path}.{name}')}"
            for name, value in defaults.items()
        )
        owner = cls.__qualname__.split(".")[0]
        rows[path] = (
            f"    {path!r}: ClassInfo({import_module_of(cls)!r}, {owner!r}, "
            f"{cls.__qualname__!r}, {{{fields}}}),\n"
        )
    return rows


def family_modules() -> list[str]:
    """Every package under ``torchtitan.models`` that exports a ``model_registry``."""
    import torchtitan.models

    found = []
    for module in pkgutil.iter_modules(torchtitan.models.__path__):
        if not module.ispkg:
            continue
        name = f"torchtitan.models.{module.name}"
        if callable(getattr(importlib.import_module(name), "model_registry", None)):
            found.append(name)
    return found


def flavors_of(module: Any) -> tuple[str, ...]:
    """The flavors ``model_registry`` accepts, in its table's order: the keys of the module-level
    dict that the function indexes with ``flavor`` (``llama3_configs[flavor]``)."""
    registry = module.model_registry
    tree = ast.parse(textwrap.dedent(inspect.getsource(registry)))
    tables = {
        node.value.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and isinstance(node.slice, ast.Name)
        and node.slice.id == "flavor"
    }
    if len(tables) != 1:
        raise LookupError(
            f"{module.__name__}.model_registry: expected one table indexed by flavor, "
            f"found {sorted(tables)}"
        )
    table = getattr(module, tables.pop())
    if not isinstance(table, dict) or not all(isinstance(k, str) for k in table):
        raise LookupError(f"{module.__name__}: its flavor table is not a dict of names")
    return tuple(table)


def family_rows(backends: tuple[str, ...]) -> dict[str, str]:
    """``family -> source of its FamilyInfo``; a default ``attn_backend`` must be one of
    ``backends`` (the selector's accepted names), or the two were read wrong."""
    rows = {}
    for name in family_modules():
        module = importlib.import_module(name)
        parameters = list(inspect.signature(module.model_registry).parameters.values())
        if not parameters or parameters[0].name != "flavor":
            raise LookupError(f"{name}.model_registry does not take flavor first")
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in parameters):
            raise LookupError(f"{name}.model_registry takes *args or **kwargs")
        backend = next((p.default for p in parameters if p.name == "attn_backend"), None)
        if backend is not None and backend not in backends:
            raise LookupError(f"{name}: default attn_backend {backend!r} is not {backends}")
        text = ", ".join(
            f"{p.name!r}: "
            + (
                "REQUIRED"
                if p.default is inspect.Parameter.empty
                else literal(p.default, {}, f"{name}.model_registry({p.name}=...)")
            )
            for p in parameters[1:]
        )
        family = name.rpartition(".")[2]
        rows[family] = (
            f"    {family!r}: FamilyInfo({name!r}, {flavors_of(module)!r}, {{{text}}}),\n"
        )
    return rows


LINEAR_FAMILIES = ("llama3", "qwen3", "deepseek_v3", "gpt_oss")
"""The families a legacy TOML can name, whose linears a migration must know: v0.2.2 listed
modules to skip for MX/float8 (``filter_fqns``) by name, and 0.3.0 lists the ones to convert."""


def linear_fqns() -> dict[str, dict[str, tuple[str, ...]]]:
    """family -> flavor -> the names of the model's linears, every layer index written ``*``
    (``layers.*.attention.wo``), sorted: the names 0.3.0's converters match against."""
    from torchtitan.models.common.linear import Linear

    found: dict[str, dict[str, tuple[str, ...]]] = {}
    for family in LINEAR_FAMILIES:
        module = importlib.import_module(f"torchtitan.models.{family}")
        found[family] = {}
        for flavor in flavors_of(module):
            model = module.model_registry(flavor).model
            names = {
                re.sub(r"\.\d+(?=\.|$)", ".*", fqn) for fqn, *_ in model.traverse(Linear.Config)
            }
            found[family][flavor] = tuple(sorted(names))
    return found


def attention_backends() -> tuple[tuple[str, ...], dict[str, str]]:
    """The ``attn_backend`` names the selector accepts, and those it refuses with its message.

    Read from the selector's ``if backend == "...":`` chain: a branch that ends by raising is a
    refusal (``sdpa``); any other returns a config, possibly after a check of the hardware it runs
    on (``flex_flash`` needs a Hopper or Blackwell GPU), which is the run's business, not the
    migration's. Each refusal is then confirmed by calling the selector with it."""
    selector = load_class(ATTENTION_SELECTOR)
    tree = ast.parse(textwrap.dedent(inspect.getsource(selector)))
    body = tree.body[0].body
    accepted: list[str] = []
    refused: dict[str, str] = {}
    branch = next((n for n in body if isinstance(n, ast.If)), None)
    while isinstance(branch, ast.If):
        test = branch.test
        if not (
            isinstance(test, ast.Compare)
            and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.comparators[0], ast.Constant)
            and isinstance(test.comparators[0].value, str)
        ):
            raise LookupError(f"{ATTENTION_SELECTOR}: a branch tests {ast.unparse(test)}")
        name = test.comparators[0].value
        last = branch.body[-1]
        if isinstance(last, ast.Raise):
            try:
                selector(name)
            except ValueError as error:
                refused[name] = str(error)
            else:
                raise LookupError(f"{ATTENTION_SELECTOR}({name!r}) was expected to raise")
        elif isinstance(last, ast.Return):
            accepted.append(name)
        else:
            raise LookupError(
                f"{ATTENTION_SELECTOR}: the {name!r} branch neither returns nor raises"
            )
        branch = branch.orelse[0] if len(branch.orelse) == 1 else None
    if not accepted:
        raise LookupError(f"{ATTENTION_SELECTOR}: no backend found")
    return tuple(accepted), refused


def generate() -> str:
    installed = version("torchtitan")
    if installed != VERSION:
        raise LookupError(f"this environment has torchtitan {installed}; the table is of {VERSION}")
    # Building some defaults logs advice (Trainer.Config warns about initial_load_model_only).
    logging.disable(logging.WARNING)
    classes = class_rows()
    accepted, refused = attention_backends()
    families = family_rows(accepted)
    linears = "".join(
        f"    {family!r}: {{\n"
        + "".join(f"        {flavor!r}: {names!r},\n" for flavor, names in flavors.items())
        + "    },\n"
        for family, flavors in linear_fqns().items()
    )
    body = "".join(classes[path] for path in sorted(classes))
    family_body = "".join(families[name] for name in sorted(families))
    code = body + family_body
    # In the order ruff's import sorting wants: constants, then classes.
    names = [
        n
        for n in ("REQUIRED", "ClassInfo", "Default", "FamilyInfo")
        if re.search(rf"\b{n}\b", code)
    ]
    return (
        f'"""Upstream torchtitan {VERSION}\'s config classes, model families and attention backends,\n'
        "generated by ``python -m titan.migrate.specgen.upstream_codegen`` in an environment with that release.\n"
        "\nDo not edit: ``make schema-upstream`` rewrites it and ``make test-upstream`` fails while "
        "it is stale.\n"
        '"""\n\n'
        f"from titan.migrate.targets.spec_types import {', '.join(names)}\n\n"
        f"VERSION = {VERSION!r}\n\n"
        "CLASSES: dict[str, ClassInfo] = {\n" + body + "}\n"
        '"""``module:Qual.Name`` -> the class; a field without a default is ``REQUIRED``."""\n\n'
        "FAMILIES: dict[str, FamilyInfo] = {\n" + family_body + "}\n"
        '"""Each package under ``torchtitan.models`` with a ``model_registry``."""\n\n'
        f"ATTENTION_BACKENDS: tuple[str, ...] = {accepted!r}\n"
        '"""The ``attn_backend`` values a language model family\'s ``model_registry`` accepts\n'
        "(some need particular hardware when the model is built: flex_flash a Hopper GPU or later)."
        '"""\n\n'
        f"REFUSED_ATTENTION_BACKENDS: dict[str, str] = {refused!r}\n"
        '"""Backend names it knows and refuses for language models -> its message."""\n\n'
        "LINEAR_FQNS: dict[str, dict[str, tuple[str, ...]]] = {\n" + linears + "}\n"
        '"""family -> flavor -> the names of its model\'s linears (layer indices as ``*``)."""\n'
    )


def main(argv: list[str] | None = None) -> int:
    return run_generator(generate, out=OUT, name="upstream_codegen", doc=__doc__, argv=argv)


def run_generator(
    generate, *, out: Path, name: str, doc: str | None, argv: list[str] | None
) -> int:
    """The command line of a generator of an upstream table: ``--out FILE``, and a clear message
    with status 1 (never a traceback) when this environment cannot read the release."""
    parser = argparse.ArgumentParser(
        prog=f"python -m titan.migrate.specgen.{name}", description=doc
    )
    parser.add_argument(
        "--out", type=Path, default=out, help="where to write (default: %(default)s)"
    )
    target = parser.parse_args(argv).out
    try:
        text = generate()
    except ImportError as error:
        print(
            f"{name}: {error}: this environment lacks a package of "
            "requirements-upstream.txt (`make schema-upstream` runs in .venv-upstream)",
            file=sys.stderr,
        )
        return 1
    except (UnwritableDefault, LookupError) as error:
        print(f"{name}: {error}", file=sys.stderr)
        return 1
    target.write_text(text, encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

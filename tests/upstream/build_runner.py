"""Import generated registry modules in the upstream torchtitan environment and dump every config.

Run by ``tests/upstream/test_upstream_build.py`` with the upstream venv's interpreter:

    python tests/upstream/build_runner.py OUT.json MODULE.py [MODULE.py ...]

Each module is imported from its file, every function it defines is called, and the returned
config is written out as plain JSON: a config object becomes ``{"__class__": "module:Qual.Name",
field: value, ...}``; a ``ModelSpec`` keeps its name, flavor and the class of its model config
(plus the classes of its linears, so converters can be checked). A module that fails to import,
or a function that raises or returns something else, is recorded with its error instead: the
test reports them all, never the first one only.

Only torchtitan and the standard library are imported here (this runs outside titan's venv).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import sys
import traceback
from pathlib import Path
from typing import Any


def class_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def dump(value: Any, depth: int = 0) -> Any:
    if depth > 60:
        return "<too deep>"
    if type(value).__name__ == "ModelSpec":
        return dump_model_spec(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {"__class__": class_path(type(value))}
        for field in dataclasses.fields(value):
            out[field.name] = dump(getattr(value, field.name), depth + 1)
        return out
    if isinstance(value, list | tuple):
        return [dump(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {str(k): dump(v, depth + 1) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return f"<{type(value).__name__}>"


def dump_model_spec(spec: Any) -> dict[str, Any]:
    import re

    from torchtitan.config.configurable import Configurable

    model = getattr(spec, "model", None)
    linears: dict[str, str] = {}
    if model is not None:
        for fqn, config, _parent, _attr in model.traverse(Configurable.Config, recurse=True):
            if "Linear" in type(config).__qualname__:
                linears[re.sub(r"\.\d+(?=\.|$)", ".*", fqn)] = class_path(type(config))
    return {
        "__class__": class_path(type(spec)),
        "name": spec.name,
        "flavor": spec.flavor,
        "model": class_path(type(model)) if model is not None else None,
        "linears": linears,
    }


def build_as_on_target_gpus() -> None:
    """Let the quantization converters build on this CPU-only machine: they check the GPU
    generation when the config is built (float8 needs SM89, MXFP8 SM100), but the check says
    nothing about the config, which is what is compared here. Nothing is run on a device."""
    import torchtitan.components.quantization.float8 as float8
    import torchtitan.components.quantization.mx as mx

    for module in (float8, mx):
        module.has_cuda_capability = lambda major, minor: True


def load(path: Path, index: int) -> Any:
    name = f"_titan_migrated_{index}"
    found = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module
    found.loader.exec_module(module)
    return module


def main() -> int:
    out, *files = sys.argv[1:]
    build_as_on_target_gpus()
    results: dict[str, Any] = {}
    for index, file in enumerate(files):
        entry: dict[str, Any] = {"functions": {}, "error": None}
        results[file] = entry
        try:
            module = load(Path(file), index)
        except BaseException:  # recorded, reported by the test
            entry["error"] = traceback.format_exc(limit=-3)
            continue
        for name, function in vars(module).items():
            if not inspect.isfunction(function) or function.__module__ != module.__name__:
                continue
            try:
                config = function()
            except BaseException:
                entry["functions"][name] = {"error": traceback.format_exc(limit=-3)}
                continue
            if not type(config).__name__ == "Config" and "Trainer" not in class_path(type(config)):
                entry["functions"][name] = {"error": f"returned {type(config).__name__}"}
                continue
            entry["functions"][name] = {"config": dump(config)}
    Path(out).write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

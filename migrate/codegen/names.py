"""Names the generated ``config_registry.py`` may not give its own classes and functions.

A generated name that equals a name the module imports (``field``, ``TrainingConfig``, the
``llama3`` package), a Python keyword, or a builtin the module (or code that reads its
annotations) relies on would make the module fail to import, fail when called, or silently build
the wrong class. Every name a migration invents goes through :func:`free_name`, which says why a
wanted name was refused so that the report can tell the user.

The imported names are a fixed superset (everything the renderer can ever import), not the names
one particular module happens to import: a TOML then gets the same names whichever files are
migrated with it.
"""

from __future__ import annotations

import builtins
import functools
import keyword

from titan.migrate.targets.config_objects import CLASSES

FAMILIES = ("deepseek_v3", "flux", "gpt_oss", "llama3", "llama4", "qwen3")
"""Model family packages a module may import from ``titan.models`` (``titan.migrate.plan.build`` checks
this against titan's list through its test)."""

MODEL_CONFIGS = {
    "deepseek_v3": "titan.models.deepseek_v3:DeepSeekV3Model.Config",
    "flux": "titan.models.flux:FluxModel.Config",
    "gpt_oss": "titan.models.gpt_oss:GptOssModel.Config",
    "llama3": "titan.models.llama3:Llama3Model.Config",
    "llama4": "titan.models.llama4:Llama4Model.Config",
    "qwen3": "titan.models.qwen3:Qwen3Model.Config",
}
"""Each family's model config class (what its ``model_registry(flavor).model`` is): a custom
module's new ``[model]`` fields extend it (``titan.migrate.plan.model_keys``; a test keeps it equal to
titan's registries)."""

FIXED_IMPORTS = (
    "annotations",  # from __future__ import annotations binds the name
    "dataclass",
    "field",
    "Any",
    "Literal",
    "model_registry",
    "unsupported_model",
    "extend_model",
)
"""Names the code renderer imports besides titan's config classes and the family packages."""

TYPING_MARKERS = ("ClassVar", "InitVar", "KW_ONLY")
"""Annotation names ``dataclasses`` recognises by their text; a class of that name would confuse
it."""

LOCALS = ("config",)
"""Local variable of a registry function that extends an earlier one (``config = earlier()``)."""


@functools.cache
def imported_names() -> frozenset[str]:
    """Every name the generated module can bind by an import."""
    owners = {info.owner for info in CLASSES.values()}
    models = {path.partition(":")[2].partition(".")[0] for path in MODEL_CONFIGS.values()}
    return frozenset({*FIXED_IMPORTS, *FAMILIES, *owners, *models})


def reserved_reason(name: str) -> str | None:
    """Why ``name`` cannot be a generated class or function name, or ``None`` when it can."""
    if keyword.iskeyword(name):
        return "a Python keyword"
    if keyword.issoftkeyword(name) or name == "type":
        return "a Python soft keyword"
    if name in imported_names():
        return "a name the generated module imports"
    if hasattr(builtins, name):
        return "a Python builtin"
    if name in TYPING_MARKERS:
        return "an annotation name dataclasses treats specially"
    if name in LOCALS:
        return "the local variable of derived registry functions"
    return None


def field_name_problem(name: str) -> str | None:
    """Why ``name`` (a key of a custom section) cannot be a field of a generated dataclass."""
    if keyword.iskeyword(name) or name == "__debug__":
        return "Python does not allow it as an attribute name"
    if name.startswith("__") and name.endswith("__"):
        return "Python reserves names of the form __x__ for itself"
    if name.startswith("__"):
        return "Python renames (mangles) a __name inside a class body"
    return None


def free_name(wanted: str, *, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """``wanted``, or the first of ``wanted_``, ``wanted_2``... (``Wanted2``... for a class name)
    that is neither reserved nor in ``taken``."""
    if reserved_reason(wanted) is None and wanted not in taken:
        return wanted
    snake = wanted[:1].islower() or wanted[:1] == "_"
    candidates = [f"{wanted}_"] if snake else []
    candidates += [f"{wanted}{'_' if snake else ''}{n}" for n in range(2, 10_000)]
    for candidate in candidates:
        if reserved_reason(candidate) is None and candidate not in taken:
            return candidate
    raise ValueError(f"no free name for {wanted!r}")  # ten thousand clashes: an internal bug


def rename_reason(wanted: str, *, taken: set[str] | frozenset[str] = frozenset()) -> str:
    """Why :func:`free_name` did not give ``wanted`` itself (for the report)."""
    reason = reserved_reason(wanted)
    if reason is not None:
        return f"`{wanted}` is {reason}"
    if wanted in taken:
        return f"`{wanted}` is already used in the module"
    return ""

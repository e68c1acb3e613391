"""Names the generated ``config_registry.py`` may not give its own classes and functions.

A generated name that equals a name the module imports (``field``, ``TrainingConfig``, the
``llama3`` package, torchtitan 0.3.0's ``default_adamw``), a Python keyword, or a builtin the
module (or code that reads its annotations) relies on would make the module fail to import, fail
when called, or silently build the wrong class. Every name a migration invents goes through
:func:`free_name`, which says why a wanted name was refused so that the report can tell the user.

The imported names are a fixed superset (everything the renderer can ever import, for every
target), not the names one particular module happens to import: a TOML then gets the same names
whichever files are migrated with it, and for either target. Names that come from the user (a
``--model-registry`` package, a fork's converter class) are imported under an alias wherever they
would take one of these (``titan.migrate.codegen.render_code``).

A registry function's name comes from its TOML's file name and ``model.name``, which can be
anything: :func:`public_identifier` makes it a public ASCII identifier (titan-validate and
titan-train skip names that start with ``_``), and :func:`rename_reason` says why it changed.
"""

from __future__ import annotations

import builtins
import functools
import keyword
import re
import unicodedata

from titan.migrate.targets.config_objects import CLASSES
from titan.schemas import flavors

FAMILIES = tuple(flavors.MODEL_CONFIGS)
"""Model family packages a module may import from ``titan.models`` (titan's families, from the
table generated from their records)."""

MODEL_CONFIGS = flavors.MODEL_CONFIGS
"""Each family's model config class (what its ``model_registry(flavor).model`` is): a custom
module's new ``[model]`` fields extend it (``titan.migrate.plan.model_keys``)."""

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

HELPERS = ("abspath", "decoder_vocab_size", "default_adamw")
"""Functions a plan calls (``titan.migrate.targets.config_objects.Call``): ``os.path.abspath``
and torchtitan 0.3.0's ``decoder_vocab_size`` and ``default_adamw``."""

TYPING_MARKERS = ("ClassVar", "InitVar", "KW_ONLY")
"""Annotation names ``dataclasses`` recognises by their text; a class of that name would confuse
it."""

LOCALS = ("config", "model_spec")
"""Local variables of registry functions: ``config = earlier()`` of a function that extends an
earlier one, and the ``model_spec`` the torchtitan 0.3.0 functions build first (their loss
reads it). A module name equal to one would be shadowed inside the function."""

NAME_LENGTH = 60
"""The longest registry function name: ``def <name>() -> X.Config:`` must fit the 100-column
line."""


@functools.cache
def imported_names() -> frozenset[str]:
    """Every name the generated module can bind by an import."""
    from titan.migrate.targets import upstream_spec_030

    classes = [*CLASSES.values(), *upstream_spec_030.CLASSES.values()]
    owners = {info.owner for info in classes}
    models = {path.partition(":")[2].partition(".")[0] for path in MODEL_CONFIGS.values()}
    upstream = {family.module.rpartition(".")[2] for family in upstream_spec_030.FAMILIES.values()}
    return frozenset({*FIXED_IMPORTS, *HELPERS, *FAMILIES, *upstream, *owners, *models})


def family_package(package: str) -> bool:
    """Whether ``package`` is a model family package of titan or of torchtitan 0.3.0 (the
    module may import it by its own last name, which :func:`imported_names` holds for it)."""
    parent, _, name = package.rpartition(".")
    return parent in ("titan.models", "torchtitan.models") and name in imported_names()


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


def public_identifier(text: str) -> str:
    """``text`` as a public ASCII identifier that stays readable: accents dropped (``ünïcode``
    -> ``unicode``), other letters spelled by their code point (``u4e2d``), every other
    character ``_`` with runs of ``_`` made one, no leading or trailing ``_`` (a leading one
    makes a name private), ``config_`` before a leading digit, at most :data:`NAME_LENGTH`
    characters."""
    plain = unicodedata.normalize("NFKD", text)
    plain = "".join(
        c
        if c.isascii()
        else f"_u{ord(c):04x}_"
        if c.isalnum()
        else ""
        if unicodedata.combining(c)
        else "_"
        for c in plain
    )
    name = re.sub(r"_+", "_", re.sub(r"\W", "_", plain, flags=re.ASCII)).strip("_")
    if not name or name[0].isdigit():
        name = f"config_{name}".rstrip("_")
    return name[:NAME_LENGTH].rstrip("_")


def identifier_problem(text: str) -> str | None:
    """Why ``text`` is not a registry function name as it is (:func:`public_identifier` is the
    one it becomes), or ``None``."""
    if text == public_identifier(text):
        return None
    for problem, applies in _IDENTIFIER_PROBLEMS:
        if applies(text):
            return problem
    return "spelled with doubled or trailing `_`"


_IDENTIFIER_PROBLEMS = (
    ("not ASCII", lambda text: not text.isascii()),
    ("not a Python identifier", lambda text: not text.isidentifier()),
    (
        "private (titan-validate and titan-train skip names that start with `_`)",
        lambda text: text.startswith("_"),
    ),
    (f"longer than {NAME_LENGTH} characters", lambda text: len(text) > NAME_LENGTH),
)
"""Why a name is not public as it is, the first that applies."""


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
    """Why ``free_name(public_identifier(wanted))`` is not ``wanted`` itself (for the report):
    each step that changed it, ``""`` when none did."""
    reasons = []
    public = public_identifier(wanted)
    problem = identifier_problem(wanted)
    if problem is not None:
        reasons.append(f"`{wanted}` is {problem}")
    reason = reserved_reason(public)
    if reason is not None:
        reasons.append(f"`{public}` is {reason}")
    elif public in taken:
        reasons.append(f"`{public}` is already used in the module")
    return "; ".join(reasons)

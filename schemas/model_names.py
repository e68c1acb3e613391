"""What to say about a model name or a flavor titan does not know.

A difflib ratio cannot tell a typo from another model: ``llama2`` is as close to ``llama4``
(0.83) as ``lama3`` is to ``llama3``. A name that keeps a titan family's letters and changes its
version is another generation (``llama2``, ``qwen2.5``), unless the version only adds to titan's
(``llama3.1`` is titan's ``llama3``, whose flavors are Llama 3.1's); a well-known family titan
does not ship (:data:`OTHER_FAMILIES`) is never a typo. For those the hint says how the model is
kept (``unsupported_model``) or declared (``[tool.titan] model-registries``). A suggested family
must have the file's flavor, and a flavor is never "corrected" to another size (``7B`` is not
``8B``). Beyond those, a family or flavor is named only for a misspelling of it
(``titan.schemas.misspelling``): a fork's ``llama3_qat``, ``mosaic_llama3`` or ``llama3gdn`` is a model
of its own, and its ``debugmodel_dense`` or ``opt-30B-A3B`` a flavor of its own.
"""

from __future__ import annotations

OTHER_FAMILIES = frozenset(
    {
        "llama",
        "llama2",
        "codellama",
        "gpt",
        "gpt2",
        "gptj",
        "gpt_neox",
        "gpt3",
        "bamba",
        "mamba",
        "mamba2",
        "mistral",
        "mixtral",
        "gemma",
        "gemma2",
        "gemma3",
        "phi",
        "phi3",
        "phi4",
        "qwen",
        "qwen2",
        "qwen2.5",
        "qwen2_moe",
        "deepseek",
        "deepseek_v2",
        "falcon",
        "olmo",
        "olmo2",
        "bert",
        "t5",
        "nemotron",
        "granite",
        "starcoder",
        "starcoder2",
        "bloom",
        "opt",
    }
)
"""Well-known model families titan does not ship: such a name is a family of its own, never
a typo of one of titan's (``llama2`` is not ``llama4``)."""


RENAMED: dict[str, tuple[str, str]] = {
    "transformers_backend": (
        "transformers_modeling_backend",
        "torchtitan main called the experiment `transformers_backend` from 58fa181 "
        "(2025-11-20) until ad9f188 (2025-11-23) renamed it, before v0.2.2",
    ),
}
"""Model names torchtitan itself renamed: the name it has now, and when it changed (no
misspelling of it, so the misspelling test cannot find it)."""


def _generation(name: str) -> tuple[str, str]:
    """A family name as (its letters, its version digits): ``llama3.1`` -> (``llama``, ``31``)."""
    lowered = name.lower()
    return (
        "".join(c for c in lowered if c.isalpha()),
        "".join(c for c in lowered if c.isdigit()),
    )


def model_hint(
    name: str,
    flavor: str | None,
    *,
    experiments: tuple[str, ...] = (),
    declared: str | None = None,
) -> str:
    """For a model name titan has no family for: the family meant, when it is a misspelling of
    one (or of an ``experiments`` train spec) whose flavors have the file's flavor; otherwise
    how to keep or declare the model (``declared``: the project's whole ``model-registries``
    line with the model added, so following the hint keeps the families it already declares)."""
    from titan.schemas import flavors
    from titan.schemas.misspelling import closest_one

    if name in RENAMED:
        new, why = RENAMED[name]
        return f"now `{new}`: {why}"
    families = [*flavors.FLAVORS, *flavors.FAMILY_ALIASES]
    letters, digits = _generation(name)
    same_line = [f for f in families if _generation(f)[0] == letters]
    # The same family's letters: a version of it (`llama3.1` is titan's llama3, whose flavors
    # are Llama 3.1's), or another generation titan does not ship (`llama2`, `qwen2.5`).
    versions = [f for f in same_line if digits and digits.startswith(_generation(f)[1])]
    # A misspelling only (`lama3`, `gpt-oss`): `llama3_qat` is a fork's model, not `llama3_ft`.
    meant = None if name.lower() in OTHER_FAMILIES else closest_one(name, [*families, *experiments])
    if meant is not None:
        close = [meant]
    elif versions:
        close = versions[:1]
    else:
        close = []
    if close and flavor is not None and close[0] in flavors.FLAVORS:
        names = flavors.flavor_names(close[0]) or ()
        if flavor not in names:
            return (
                f"`{close[0]}` is close, but it has no flavor `{flavor}` (its flavors: "
                + ", ".join(names)
                + f"); {_declare(name, declared)}"
            )
    if close:
        return f"did you mean `{close[0]}`?"
    shipped = f" (titan ships {', '.join(f'`{f}`' for f in same_line)})" if same_line else ""
    return f"titan has no `{name}` family{shipped}; {_declare(name, declared)}"


def _declare(name: str, declared: str | None = None) -> str:
    key = name if name.replace("_", "").replace("-", "").isalnum() else f'"{name}"'
    line = declared or f'model-registries = {{ {key} = "yourpkg.models" }}'
    return (
        "titan-migrate records it with unsupported_model(...), or declare your own model "
        f"family: [tool.titan] {line} in pyproject.toml"
    )


def flavor_hint(name: str, flavor: str, names: tuple[str, ...]) -> str:
    """For a flavor the model does not have: the one meant, when it is a misspelling (never
    another size: `7B` is not `8B`), otherwise the model's flavors."""
    from titan.schemas.misspelling import closest_one

    lowered = {n.lower().replace("_", ""): n for n in names}
    meant = lowered.get(flavor.lower().replace("_", "")) or closest_one(flavor, names)
    if meant is not None:
        return f"did you mean `{meant}`?"
    return f"{name} flavors: " + ", ".join(names)

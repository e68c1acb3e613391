"""What to say about a model name or a flavor titan does not know.

A difflib ratio cannot tell a typo from another model: ``llama2`` is as close to ``llama4``
(0.83) as ``lama3`` is to ``llama3``. A name that keeps a titan family's letters and changes its
version is another model (``llama2``, ``qwen2.5``, ``deepseek_v32``, ``flux2``), unless it is a
release the family is (:data:`POINT_RELEASES`: ``llama3.1`` is titan's ``llama3``, whose
flavors are Llama 3.1's); a well-known family titan does not ship (:data:`OTHER_FAMILIES`) is
never a typo. For those the hint says how the model is kept (``unsupported_model``) or declared
(``[tool.titan] model-registries``). A suggested family
must have the file's flavor, and a flavor is never "corrected" to another size (``7B`` is not
``8B``, ``70M`` not ``70B``). Beyond those, a family or flavor is named only for a misspelling of
it with few edits for its length (``titan.schemas.misspelling.is_name_misspelling``): a fork's
``llama3_qat``, ``llama3_sft``, ``mosaic_llama3`` or ``llama3gdn`` is a model of its own, and so
are ``llm`` and ``glm`` (one letter from ``vlm``, in three); its ``debugmodel_dense``,
``opt-30B-A3B`` or ``debugmodel_rope`` a flavor of its own.
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


POINT_RELEASES: dict[str, tuple[str, ...]] = {
    "llama3": ("3.1", "3.3"),
    "deepseek_v3": ("3.1",),
    "flux": ("1",),
}
"""Releases that are one of titan's families, so ``model.name = "llama3.1"`` means it: titan's
llama3 flavors are Llama 3.1's (3.3 is 3.1 70B's architecture), DeepSeek-V3.1 is V3's, and
titan's flux flavors are FLUX.1's. Any other release is a model of its own (DeepSeek-V3.2 adds
sparse attention, and a fork that trains it names it ``deepseek_v32``; FLUX.2 is ``flux2``)."""


def _release_digits(family: str) -> tuple[str, ...]:
    """The version digits ``model.name`` may have for ``family``: its own, and its point
    releases' (``llama3``: ``3``, ``31``, ``33``)."""
    own = _generation(family)[1]
    releases = POINT_RELEASES.get(family, ())
    return tuple(d for d in (own, *(r.replace(".", "") for r in releases)) if d)


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
    from titan.schemas.misspelling import closest_name

    if name in RENAMED:
        new, why = RENAMED[name]
        return f"now `{new}`: {why}"
    families = [*flavors.FLAVORS, *flavors.FAMILY_ALIASES]
    letters, digits = _generation(name)
    same_line = [f for f in families if _generation(f)[0] == letters]
    # The same family's letters: a release titan's family is (`llama3.1`), or another model
    # titan does not ship (`llama2`, `qwen2.5`, `deepseek_v32`, `flux2`).
    versions = [f for f in same_line if digits in _release_digits(f)]
    # A misspelling only (`lama3`, `gpt-oss`): `llama3_qat` is a fork's model, not `llama3_ft`,
    # and `llm` or `glm` no slip of `vlm`.
    meant = (
        None if name.lower() in OTHER_FAMILIES else closest_name(name, [*families, *experiments])
    )
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
    another size: `7B` is not `8B`, `70M` not `70B`), otherwise the model's flavors (``names``:
    the one family's, never another's)."""
    from titan.schemas.misspelling import closest_name

    lowered = {n.lower().replace("_", ""): n for n in names}
    meant = lowered.get(flavor.lower().replace("_", "")) or closest_name(flavor, names)
    if meant is not None:
        return f"did you mean `{meant}`?"
    return f"{name} flavors: " + ", ".join(names)

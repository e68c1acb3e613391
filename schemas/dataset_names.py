"""Which dataset names a run can load, and what to say about one it cannot.

torchtitan looks ``training.dataset`` (and ``validation.dataset``, when validation is on) up in a
registry when the run starts: a name it does not register fails the run after every check passed.
The registries differ by model: the text models read one, flux and vlm their own. A fork may
register names of its own, so the project declares them::

    [tool.titan]
    datasets = ["my_corpus"]

The cross-field rule (``titan.schemas.rules.dataset_names``) reads :class:`DatasetFacts`, built by the
TOML check from v0.2.2's registries below and by the registry check from titan's own; both see
the same rule and the same hints. Pure data and string work: nothing heavy is imported.
"""

from __future__ import annotations

from titan.schemas._frozen import Frozen, _set
from titan.schemas.era_values import OLD_DATASETS

TEXT = ("c4", "c4_test", "c4_validation")
"""``torchtitan/hf_datasets/text_datasets.py`` DATASETS at v0.2.2 (every text model)."""

V022_DATASETS: dict[str, tuple[str, ...]] = {
    "flux": ("cc12m-wds", "cc12m-test", "coco-validation"),
    "vlm": ("obelics", "cc12m", "cc12m-test"),
}
"""Models whose v0.2.2 loader has its own registry (``torchtitan/models/flux/flux_datasets.py``,
``torchtitan/experiments/vlm/datasets/mm_datasets.py``); every other model reads :data:`TEXT`."""

TITAN_ALSO = ("c4_test_validation",)
"""Text datasets titan-train registers beyond v0.2.2's (``titan.hf_datasets.text_datasets``; a
test keeps the two equal): a legacy TOML that names one runs under titan-train."""

LOWERCASED = ("text", "flux")
"""Registries whose v0.2.2 loader lowercases the name first (``dataset_name.lower()``); vlm's
does not."""


def v022_registry(model: object) -> tuple[tuple[str, ...], bool]:
    """The names a run of ``model`` (``model.name``) can load: v0.2.2's registry, and for the
    text models the ones titan-train adds; and whether the loader lowercases the name."""
    if isinstance(model, str) and model in V022_DATASETS:
        return V022_DATASETS[model], model in LOWERCASED
    return (*TEXT, *TITAN_ALSO), True


class DatasetFacts(Frozen):
    """What the dataset rule needs beyond the two settings."""

    __slots__ = ("registered", "lowercased", "declared", "project", "custom_import")
    __match_args__ = ()

    registered: tuple[str, ...]
    """The names the run's registry has."""
    lowercased: bool
    """Whether the loader lowercases the name before looking it up."""
    declared: tuple[str, ...]
    """``[tool.titan] datasets``: names the fork's own code registers."""
    project: str | None
    """``pyproject.toml`` as findings name it (where to declare one); ``None`` outside one."""
    custom_import: str | None
    """``experimental.custom_import``: a module the run imports first, which may register more."""

    def __init__(
        self,
        *,
        registered: tuple[str, ...],
        lowercased: bool = False,
        declared: tuple[str, ...] = (),
        project: str | None = None,
        custom_import: str | None = None,
    ) -> None:
        _set(self, "registered", registered)
        _set(self, "lowercased", lowercased)
        _set(self, "declared", declared)
        _set(self, "project", project)
        _set(self, "custom_import", custom_import)

    def knows(self, name: str) -> bool:
        """Whether the run can load ``name``: registered (as the loader spells it) or declared."""
        looked_up = name.lower() if self.lowercased else name
        return looked_up in self.registered or name in self.declared

    def hint(self, name: str) -> str:
        """What to write instead: an old name's fate, a misspelt registered or declared name, or
        how to declare it."""
        old = next((o for o in OLD_DATASETS if o.name == name.lower()), None)
        if old is not None and old.name not in self.registered:
            return f"{old.became}; {old.hint}; {old.era}"
        from titan.schemas.misspelling import closest_name

        # A misspelling only: a fork's `my_corpus_v2` or `c4_en` is a dataset of its own, which
        # no ratio tells from a slip of `my_corpus` or `c4_test`.
        meant = closest_name(name, [*self.registered, *self.declared])
        if meant is not None:
            return f'did you mean "{meant}"?'
        where = self.project or "pyproject.toml"
        listed = ", ".join(f'"{n}"' for n in self.registered)
        from titan.schemas.fork_names import _toml_line

        # the whole line, with the names already declared: following the hint keeps them
        line = _toml_line("datasets", list(dict.fromkeys([*self.declared, name])))
        return (
            f"registered datasets: {listed}; if your code registers `{name}`, declare it in "
            f"{where}: [tool.titan] {line}"
        )

"""Dataset names older torchtitan eras registered that v0.2.2 does not, and what became of them.

Built from the whole history of the dataset registries on pytorch/torchtitan main
(``torchtrain/datasets``, ``torchtitan/datasets/hf_datasets.py``,
``torchtitan/hf_datasets/text_datasets.py``, flux's ``flux_dataset.py``), each row with the commit
that removed or renamed the name. The dataset check (``titan.schemas.dataset_names``) reads it for its
hints; the values of other keys that eras read otherwise are rows of ``titan.schemas.moved_keys``
(``SPLITS``, ``REFUSALS``). Pure data.
"""

from __future__ import annotations

from titan.schemas._frozen import Frozen, _set


class OldDataset(Frozen):
    """A dataset name an older torchtitan registered that v0.2.2 does not."""

    __slots__ = ("name", "era", "became", "hint")
    __match_args__ = ("name",)

    name: str
    """The name as ``training.dataset`` spelt it."""
    era: str
    """When it was registered, and the commit that removed or renamed it."""
    became: str
    """What became of it upstream."""
    hint: str
    """What to write at v0.2.2, truthfully."""

    def __init__(self, name: str, era: str, became: str, hint: str) -> None:
        _set(self, "name", name)
        _set(self, "era", era)
        _set(self, "became", became)
        _set(self, "hint", hint)


_HUB_2024 = (
    "removed in bfe99987 (2024-04-17), when the registry kept c4 alone; the run read the Hub "
    'dataset {path} with load_dataset(path, split="train")'
)
_OWN_PATH = (
    'to read the same data, set dataset = "c4_test" and dataset_path = "{path}" (v0.2.2 reads '
    'c4_test\'s path with load_dataset(path, split="train") and each sample\'s "text", as this '
    "run did), or declare the name if your code registers it"
)

OLD_DATASETS: tuple[OldDataset, ...] = (
    *(
        OldDataset(
            name,
            "torchtitan 2024-02 to 2024-04 (torchtrain/datasets, then "
            "torchtitan/datasets/hf_datasets.py)",
            _HUB_2024.format(path=path),
            _OWN_PATH.format(path=path),
        )
        for name, path in (
            ("alpaca", "tatsu-lab/alpaca"),
            ("minipile", "JeanKaddour/minipile"),
            ("openwebtext", "Skylion007/openwebtext"),
        )
    ),
    OldDataset(
        "c4_mini",
        "torchtitan 2024-04 to 2024-08 (torchtitan/datasets/hf_datasets.py; added in #253, "
        "f80223b0)",
        "replaced in 34fa017b (2024-08-08) by c4_test, the first 2,000 of c4_mini's 45,000 "
        "documents",
        'dataset = "c4_test" reads the same documents for 2,000 documents and then repeats '
        'them; to read all of c4_mini, set dataset = "c4_test" and dataset_path to the '
        "torchtitan/datasets/c4_mini folder of a torchtitan checkout before 34fa017b",
    ),
    OldDataset(
        "cc12m",
        "torchtitan 2025-04 (torchtitan/experiments/flux/dataset/flux_dataset.py; #1024, d2b57cfa)",
        'renamed "cc12m-wds" in #1099 (738000f9, 2025-04-16): the same Hub dataset '
        "pixparse/cc12m-wds, and from then on images that are not RGB are converted instead of "
        "skipped",
        'set dataset = "cc12m-wds"',
    ),
)
"""Every dataset name upstream registered and later removed or renamed (the registry's whole
history; v0.2.2's own names are in ``titan.schemas.dataset_names``)."""

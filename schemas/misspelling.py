"""Whether a name is a misspelling of another: the test every did-you-mean passes first.

A did-you-mean is right only when the written name *is* the other one, misspelt: a letter
dropped, doubled, replaced or swapped with the next (``stpes``), another case (``Full``), ``-``
for ``_``, a plural or another ending (``activation_checkpointing``). A fork's own setting is
most often a known name plus a word of its own — ``muon_weight_decay`` (``weight_decay``),
``save_folder`` (``save_tb_folder``), ``enable_ibm_wandb`` (``enable_wandb``), ``s3_checkpoint``
(``checkpoint``) — or a known name with one word replaced (``dataset_split`` for
``dataset_path``, ``llama3_qat`` for ``llama3_ft``).
Those are close by any string ratio, and naming the known setting would change what the run
does (``optimizer.weight_decay`` is AdamW's decay, not Muon's). So a name is compared word by
word: each word may be misspelt, but no word may be added, dropped or swapped for another, and
no number may change (``llama2`` is not ``llama3``, ``float16`` not ``float8``, ``lr2`` not
``lr``).

``-``, ``_`` and ``.`` separate words. Measured on tests/data/fork_keys.toml (fork settings
read from public torchtitan forks, and typos) and on a random slip in every v0.2.2 name by
bench/suggestions.py.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_SEPARATORS = str.maketrans({"-": "_", ".": "_"})


def is_misspelling(written: str, meant: str) -> bool:
    """Whether ``written`` is ``meant`` misspelt (or written in another case, with ``-`` for
    ``_``, or as a plural), rather than a name of its own."""
    a, b = written.lower().translate(_SEPARATORS), meant.lower().translate(_SEPARATORS)
    if a == b:
        return True
    words = [w for w in a.split("_") if w]
    meant_words = [w for w in b.split("_") if w]
    if len(words) == len(meant_words) and all(
        w == m or _inflected(w, m) for w, m in zip(words, meant_words, strict=True)
    ):
        return True  # `checkpoints`, `activation_checkpointing`: the same words, inflected
    allowed = 1 if len(b) <= 5 else 2
    if abs(len(a) - len(b)) > allowed or _number_changed(a, b) or distance(a, b) > allowed:
        return False
    if len(words) == len(meant_words):
        return all(w == m or _word_misspelt(w, m) for w, m in zip(words, meant_words, strict=True))
    # An underscore dropped, doubled or typed for a letter (`warmupsteps`, `warm_p_steps`):
    # the letters are still the same name. A whole word more or less (`tb`, `s3`) is not.
    return distance(a.replace("_", ""), b.replace("_", "")) <= 1 and not _word_added(
        words, meant_words
    )


DIFFERENT_WORDS = frozenset(
    {
        frozenset({"float16", "bfloat16"}),
        frozenset({"sync", "async"}),
        frozenset({"sqrt", "rsqrt"}),
        frozenset({"rope", "irope"}),
    }
)
"""Words one edit apart that name different things: ``float16`` is IEEE half precision, not a
typo of ``bfloat16``, and following that did-you-mean would change the run's numbers; a
``17bx16e_rope`` flavor has plain RoPE where ``17bx16e_irope`` interleaves NoPE layers."""


def is_name_misspelling(written: str, meant: str) -> bool:
    """Whether ``written`` is the name ``meant`` (a model family, a flavor, a dataset)
    misspelt, by :func:`is_misspelling` and with few edits for the name's length.

    A name stands alone, with no section around it to tell a slip from another name, and a
    short one is one letter away from many (``llm``, ``glm`` and ``vla`` from ``vlm``). So
    another case, ``-`` for ``_`` or a separator left out is no edit; beyond those a name of
    four letters or fewer takes none, one of up to eight letters one, a longer one two. A word
    of three letters or fewer is not changed (``llama3_sft`` and ``llama3_pt`` are not
    ``llama3_ft``), nor a size's unit (``70M`` is not ``70B``)."""
    if not is_misspelling(written, meant):
        return False
    a, b = _letters(written), _letters(meant)
    if a == b:
        return True
    allowed = 0 if len(b) <= 4 else 1 if len(b) <= 8 else 2
    if distance(a, b) > allowed or _unit_changed(written, meant):
        return False
    words, meant_words = _words(written), _words(meant)
    if len(words) != len(meant_words):
        return True  # a separator typed or dropped inside a word: is_misspelling judged it
    # a word of three letters or fewer is a word of its own when changed, unless two of its
    # letters are swapped (`llama3_sft`, `llama3_pt`: not `llama3_ft`; `c4_tes`: `c4_test`)
    return all(
        w == m or len(m) > 3 or _swapped(w, m) for w, m in zip(words, meant_words, strict=True)
    )


def _letters(name: str) -> str:
    """``name`` lowercased without its separators: ``Llama-3`` -> ``llama3``."""
    return name.lower().translate(_SEPARATORS).replace("_", "")


def _words(name: str) -> list[str]:
    """The words of ``name``, lowercased: ``Llama-3_FT`` -> ``llama``, ``3``, ``ft``."""
    return [w for w in name.lower().translate(_SEPARATORS).split("_") if w]


def _unit_changed(written: str, meant: str) -> bool:
    """Whether a size the written name has changes its unit (``70M``/``70B``): the number of
    a different model, not a slip. A unit left out (``405``) is not a change."""
    sizes = re.findall(r"(\d+(?:\.\d+)?)([a-z]?)", written.lower())
    meant_sizes = re.findall(r"(\d+(?:\.\d+)?)([a-z]?)", meant.lower())
    return len(sizes) == len(meant_sizes) and any(
        unit and unit != meant_unit
        for (_, unit), (_, meant_unit) in zip(sizes, meant_sizes, strict=True)
    )


def _word_misspelt(word: str, meant: str) -> bool:
    """One word misspelt: one edit (two in a word of eight letters or more), never a short
    word replaced by another (``qat`` is not ``ft``) nor a word that names something else."""
    if not word or not meant or frozenset({word, meant}) in DIFFERENT_WORDS:
        return False
    edits = distance(word, meant)
    return edits <= (1 if len(meant) < 8 else 2) and edits < max(len(word), len(meant))


def _inflected(word: str, meant: str) -> bool:
    """Whether one word is the other with an ending (``steps``, ``checkpointing``)."""
    short, long = sorted((word, meant), key=len)
    return len(short) >= 3 and long[len(short) :] in _ENDINGS and long.startswith(short)


_ENDINGS = ("s", "es", "ing", "ed", "d")


def _word_added(words: list[str], meant: list[str]) -> bool:
    """Whether one list is the other with whole words inserted (``save_tb_folder`` holds
    ``save_folder``; ``fl_metrics`` holds ``metrics``)."""
    shorter, longer = sorted((words, meant), key=len)
    rest = iter(longer)
    return all(word in rest for word in shorter)


def _number_changed(written: str, meant: str) -> bool:
    """Whether the names differ in a number the written one has (``lr2``/``lr``,
    ``beta3``/``beta2``, ``llama2``/``llama3``, ``8B``/``7B``): a numbered setting of its own.
    A number left out (``beta`` for ``beta1``) is still a misspelling, and so are digits moved
    (``floa8t``)."""
    digits = "".join(c for c in written if c.isdigit())
    if not digits:
        return False
    meant_digits = "".join(c for c in meant if c.isdigit())
    if not written[-1].isdigit() and _one_doubled(digits, meant_digits):
        return False  # `float88_all_gather` is a slip; a number at the end (`beta11`) is not
    letters = [c for c in written if not c.isdigit()]
    return digits != meant_digits and letters == [c for c in meant if not c.isdigit()]


def _one_doubled(digits: str, meant: str) -> bool:
    """Whether ``digits`` is ``meant`` with one of its digits typed twice."""
    return any(digits == meant[:i] + meant[i - 1 :] for i in range(1, len(meant) + 1))


def distance(a: str, b: str) -> int:
    """Edits from ``a`` to ``b``: letters inserted, deleted, replaced, or two neighbours
    swapped (the optimal string alignment distance)."""
    if a == b:
        return 0
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], previous2[j - 2] + 1)
        previous2, previous = previous, row
    return previous[-1]


def closest(word: str, candidates: list[str], cutoff: float = 0.75) -> list[str]:
    """The candidates ``word`` is a misspelling of, the closest first: the closest by
    difflib's ratio (at least ``cutoff``), several only when they are equally close (``beta``
    is as near ``beta1`` as ``beta2``: naming one would be a guess).

    Never for a word of two characters or fewer (``ep``, ``x`` are a fork's own names far more
    often than a typo of ``eps``); for one of three only two swapped letters or a letter left
    out (``jbo``, ``mod``: ``ops`` is a word of its own, not a typo of ``eps``)."""
    if len(word) <= 2:
        return []
    if len(word) == 3:  # one letter in three changed is another word; two swapped is a typo
        swapped = [c for c in candidates if _swapped(word, c)]
        if swapped:
            return sorted(swapped)
        candidates = [c for c in candidates if len(c) != 3]
    import difflib  # only names that are not known get here

    scored = []
    for candidate in candidates:
        matcher = difflib.SequenceMatcher(None, word, candidate)
        if matcher.real_quick_ratio() >= cutoff and matcher.quick_ratio() >= cutoff:
            ratio = matcher.ratio()
            if ratio >= cutoff and is_misspelling(word, candidate):
                scored.append((ratio, candidate))
    if not scored:
        return []
    best = max(ratio for ratio, _ in scored)
    return sorted(candidate for ratio, candidate in scored if ratio == best)


def closest_one(word: str, candidates: list[str] | tuple[str, ...]) -> str | None:
    """The one value ``word`` misspells (another case first), or ``None`` when it misspells
    none, or two equally: for a choice or a converter name."""
    return _closest_by(word, candidates, is_misspelling)


def closest_name(word: str, candidates: list[str] | tuple[str, ...]) -> str | None:
    """The one name ``word`` misspells by :func:`is_name_misspelling` (another case first), or
    ``None``: for a model family, a flavor or a dataset."""
    return _closest_by(word, candidates, is_name_misspelling)


def _closest_by(
    word: str, candidates: list[str] | tuple[str, ...], misspells: Callable[[str, str], bool]
) -> str | None:
    """The one candidate ``word`` is in another case, else the one it ``misspells`` with the
    fewest edits (``None`` for none, or for two equally near)."""
    lowered = [c for c in candidates if c.lower() == word.lower()]
    if len(lowered) == 1:
        return lowered[0]
    if len(word) <= 2:
        return None
    found = [c for c in candidates if misspells(word, c)]
    edits = {c: distance(word.lower(), c.lower()) for c in found}
    best = [c for c in found if edits[c] == min(edits.values())]
    return best[0] if len(best) == 1 else None


def _swapped(word: str, candidate: str) -> bool:
    """Whether ``candidate`` is ``word`` with two neighbouring letters swapped (``jbo``)."""
    if len(word) != len(candidate) or word == candidate:
        return False
    apart = [i for i, (a, b) in enumerate(zip(word, candidate, strict=True)) if a != b]
    return (
        len(apart) == 2
        and apart[1] == apart[0] + 1
        and word[apart[0]] == candidate[apart[1]]
        and word[apart[1]] == candidate[apart[0]]
    )

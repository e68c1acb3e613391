"""``--era YYYY-MM[-DD]`` or ``--era v0.2.1``: the torchtitan era legacy TOMLs were written for, one
reading for titan-validate and titan-migrate (``titan.schemas.era_defaults`` says which days are
legacy eras and which releases they name)."""

from __future__ import annotations

HELP = (
    "the torchtitan era the TOMLs were written for (YYYY-MM, YYYY-MM-DD or a release such as "
    "v0.2.1): the defaults and flavors of that era are written for what a file omits; by "
    "default each file is dated from its own old keys and values (or a `# titan: era` "
    "comment, or [tool.titan] era), and a file with none is read as v0.2.2 and called undated"
)


def era(text: str) -> str:
    """The ``--era`` value, checked: an ``argparse`` type that says how to write a bad one."""
    import argparse  # only argparse's own parse gets here: hooks' plain lines never import it

    from titan.schemas.era_names import era_error

    problem = era_error(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem.removeprefix(f"--era {text!r} "))
    return text.strip()


def is_era(text: str) -> bool:
    """Whether ``text`` is a usable ``--era`` value (for parsers that fall back to argparse)."""
    from titan.schemas.era_names import era_error

    return era_error(text) is None

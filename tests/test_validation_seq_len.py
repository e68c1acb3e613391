"""A validation sequence longer than the model's max_seq_len (which titan's decoders, like
torchtitan's, take from training.seq_len) is one ``seq-len`` finding, in both config forms, from
``titan-validate``; ``titan-train --preflight`` and the run refuse it with the same message
before the first step (``test_preflight_parity``). Without the rule the run trained, then
stopped at its first validation with "sequence length 128 exceeds max_seq_len 64"."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.helpers import validate


def _job(
    tmp_path: Path, body: str, *, model: str = 'name = "llama3"\nflavor = "debugmodel"'
) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(f"[model]\n{model}\n\n" + textwrap.dedent(body), encoding="utf-8")
    return path


def _seq_findings(path: Path, form: str) -> list[dict]:
    args = ["--format", "json"] + (["--as-registry"] if form == "as-registry" else []) + [path]
    result = validate(*args)
    assert result.code in (0, 1), result.err
    return [d for d in result.json()["diagnostics"] if d["code"] == "seq-len"]


def _line_of(path: Path, text: str) -> int:
    """The 1-based line of the file that reads ``text``."""
    return path.read_text(encoding="utf-8").splitlines().index(text) + 1


# (case, [training]/[validation] tables, the line the finding stands at, validation length, max)
LONGER = [
    (
        "written-longer",
        "[training]\nseq_len = 256\n\n[validation]\nenable = true\nseq_len = 512\n",
        "seq_len = 512",
        512,
        256,
    ),
    (
        "one-token-longer",
        "[training]\nseq_len = 2048\n\n[validation]\nenable = true\nseq_len = 2049\n",
        "seq_len = 2049",
        2049,
        2048,
    ),
    # validation.seq_len unwritten: v0.2.2's default 2048 is longer than a shortened training
    (
        "default-longer",
        "[training]\nseq_len = 128\n\n[validation]\nenable = true\n",
        "seq_len = 128",
        2048,
        128,
    ),
]


@pytest.mark.parametrize("form", ["toml", "as-registry"])
@pytest.mark.parametrize(
    ("body", "anchor", "length", "limit"), [pytest.param(*c[1:], id=c[0]) for c in LONGER]
)
def test_a_longer_validation_sequence_is_one_finding(tmp_path, body, anchor, length, limit, form):
    path = _job(tmp_path, body)
    (finding,) = _seq_findings(path, form)
    assert finding["severity"] == "error"
    assert finding["line"] == _line_of(path, anchor)
    # --as-registry checks the registry config built from the file, located at its keys
    assert finding["message"].startswith(
        f"validation.seq_len {length} is longer than the model's max_seq_len {limit}"
    )
    assert f"at most {limit}" in finding["hint"]


@pytest.mark.parametrize("form", ["toml", "as-registry"])
@pytest.mark.parametrize(
    ("body", "model"),
    [
        # validation off: its length is never used
        ("[training]\nseq_len = 128\n\n[validation]\nseq_len = 4096\n", None),
        # equal and shorter sequences fit
        ("[training]\nseq_len = 512\n\n[validation]\nenable = true\nseq_len = 512\n", None),
        ("[training]\nseq_len = 512\n\n[validation]\nenable = true\nseq_len = 64\n", None),
        # flux has no rotary tables sized by training.seq_len
        (
            "[training]\nseq_len = 128\n\n[validation]\nenable = true\nseq_len = 4096\n",
            'name = "flux"\nflavor = "flux-debug"',
        ),
    ],
    ids=["validation-off", "equal", "shorter", "flux"],
)
def test_validation_sequences_that_fit_have_no_finding(tmp_path, body, model, form):
    path = _job(tmp_path, body, **({"model": model} if model else {}))
    assert _seq_findings(path, form) == []

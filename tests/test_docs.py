"""README.md and docs/: every example's output is what the commands print today, and every
relative link leads somewhere. The format is described in tests/doc_examples.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.doc_examples import REPO, check_page, matches, pages, parse, updated

PAGES = pages()


def _ids(paths: list[Path]) -> list[str]:
    """Test ids: the pages' paths in the repository."""
    return [str(p.relative_to(REPO)) for p in paths]


def _with_examples(*, slow: bool) -> list[Path]:
    """The pages with console examples of the given speed."""
    return [
        p
        for p in PAGES
        if any(b.commands and b.slow == slow for b in parse(p.read_text(encoding="utf-8")))
    ]


FAST_PAGES = _with_examples(slow=False)
SLOW_PAGES = _with_examples(slow=True)


def _report(mismatches) -> str:
    """The mismatches as the failure message, with the command that refreshes the pages."""
    body = "\n\n".join(str(m) for m in mismatches)
    return f"{body}\n\nrefresh with: .venv/bin/python -m tests.doc_examples --update"


@pytest.mark.parametrize("page", FAST_PAGES, ids=_ids(FAST_PAGES))
def test_examples_print_what_the_page_shows(page):
    """The examples not marked slow print exactly the output their page shows."""
    mismatches = check_page(page, slow=False)
    assert not mismatches, _report(mismatches)


@pytest.mark.slow
@pytest.mark.parametrize("page", SLOW_PAGES, ids=_ids(SLOW_PAGES))
def test_slow_examples_print_what_the_page_shows(page):
    """All examples of the page, the training runs and launches too, print what it shows."""
    mismatches = check_page(page, slow=True)
    assert not mismatches, _report(mismatches)


def test_training_and_launching_examples_are_marked_slow():
    """A console block that trains or launches processes carries ``slow``, so make test-fast
    stays fast."""
    unmarked = [
        f"{page.relative_to(REPO)}:{command.line}: {command.text}"
        for page in PAGES
        for block in parse(page.read_text(encoding="utf-8"))
        if not block.slow
        for command in block.commands
        if re.search(r"\b(titan-train|torchrun|titan\.train)\b", command.text)
    ]
    assert not unmarked, "mark these blocks ```console slow:\n" + "\n".join(unmarked)


def test_a_doctored_output_fails_and_update_restores_it(tmp_path):
    """The check catches an output that no longer matches, names the command, and --update
    writes the real output back without touching the rest of the page."""
    original = (REPO / "docs" / "diff.md").read_text(encoding="utf-8")
    assert "\nno differences\n" in original
    page = tmp_path / "diff.md"
    page.write_text(original.replace("\nno differences\n", "\n1 difference\n"), encoding="utf-8")

    mismatches = check_page(page, slow=False)
    assert [m.command.text for m in mismatches] == [
        "titan-diff legacy_configs/llama3/debug_model.toml llama3_debugmodel; echo $?"
    ]
    assert "-1 difference" in str(mismatches[0]) and "+no differences" in str(mismatches[0])

    check_page(page, slow=False, update=True)
    assert page.read_text(encoding="utf-8") == original
    assert check_page(page, slow=False) == []


def test_a_wrong_exit_status_or_a_missing_line_fails(tmp_path):
    """Other ways a page goes stale: an exit status, a dropped line, an extra line."""
    page = tmp_path / "page.md"
    for shown in ("1\n", "All checks passed: 1 file, no problems.\n", "extra\n0\n"):
        page.write_text(
            "```console\n$ titan-validate legacy_configs/llama3/debug_model.toml > /dev/null; "
            f"echo $?\n{shown}```\n",
            encoding="utf-8",
        )
        assert len(check_page(page, slow=False)) == 1, shown


def test_files_are_written_where_their_block_stands(tmp_path):
    """A ``# file:`` block is written before the commands after it, and a later block with the
    same name replaces the file for the commands after that one."""
    page = tmp_path / "page.md"
    page.write_text(
        "```toml\n# file: sub/a.toml\nx = 1\n```\n\n"
        "```console\n$ cat sub/a.toml\n# file: sub/a.toml\nx = 1\n$ pwd\n$PWD\n```\n\n"
        "```toml\n# file: sub/a.toml\nx = 2\n```\n\n"
        "```console\n$ cat sub/a.toml\n# file: sub/a.toml\nx = 2\n$ ls legacy_configs/llama3 | head -n 1\n"
        "debug_model.toml\n```\n",
        encoding="utf-8",
    )
    assert check_page(page, slow=False) == []


@pytest.mark.parametrize(
    ("shown", "printed", "same"),
    [
        (["a", "...", "z"], ["a", "b", "c", "z"], True),
        (["a", "...", "z"], ["a", "z"], True),
        (["a", "...", "z"], ["a", "b", "y"], False),
        (["...", "c"], ["a", "b", "c"], True),
        (["a", "  ..."], ["a", "b"], True),
        (["a", "...", "c", "...", "e"], ["a", "b", "c", "d", "e"], True),
        (["a", "...", "c", "...", "e"], ["a", "b", "d", "e"], False),
        (["x  "], ["x"], True),
        (
            ["[titan rank0] 08:00:36 INFO a", "step:  1  loss:   8.1461  tps: 1,405  tflops: 0.06"],
            ["[titan rank0] 11:12:13 INFO a", "step:  1  loss:   8.1461  tps: 98  tflops: 1.50"],
            True,
        ),
        (["step:  1  loss:   8.1461  tps: 1"], ["step:  1  loss:   8.1462  tps: 1"], False),
        (['{"loss": 8.1, "tps": 44.1}'], ['{"loss": 8.1, "tps": 12.5}'], True),
        (["checkpoint -> step-1 in 0.98 s"], ["checkpoint -> step-1 in 12.40 s"], True),
        (
            ["[titan rank1] 08:00:01 WARNING w", "[titan rank0] 08:00:01 WARNING w", "done"],
            ["[titan rank0] 08:00:02 WARNING w", "[titan rank1] 08:00:02 WARNING w", "done"],
            True,
        ),
        (["[titan rank1] 08:00:01 WARNING w", "done"], ["done"], False),
    ],
)
def test_what_counts_as_the_same_output(shown, printed, same):
    """``...`` elides lines, trailing blanks, clocks and throughput do not count, losses do,
    and other ranks' lines may come in any order."""
    assert matches(shown, printed) is same


def test_update_keeps_the_elisions():
    """A rewritten output keeps its ``...`` lines and the lines around them."""
    shown = ["head", "...", "middle old", "...", "tail"]
    printed = ["head", "x", "y", "middle new", "z", "tail"]
    assert updated(shown, printed) == ["head", "...", "middle new", "...", "tail"]
    assert updated(["a", "b"], ["c"]) == ["c"]


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for the headings of a page."""
    anchors, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_every_relative_link_resolves():
    """Each relative link of README.md and docs/ names an existing file, and a heading of it
    when it has an anchor."""
    broken = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_docs_page_is_listed_in_the_index():
    """docs/README.md links every page of docs/, so none is out of reach."""
    index = (REPO / "docs" / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in (REPO / "docs").glob("*.md") if p.name != "README.md"]
    assert [name for name in missing if f"({name})" not in index] == []

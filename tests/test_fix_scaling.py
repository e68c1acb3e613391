"""titan-validate --fix and --diff on a file of many tables: the work grows with the file, not
with the file times its fixes (counted in calls, never timed), and the diff is still exact."""

from __future__ import annotations

import difflib
import re

from titan.migrate.tomledit import statements as cutter

from tests.helpers import validate, write

AT_V022 = ("--era", "2026-02-20")
TABLES = 600


def many_tables() -> str:
    """A job with old keys, and ``TABLES`` tables: a fork's own ones and old-era ones that the
    fix renames (its work grows with the file)."""
    parts = [
        '[model]\nname = "llama3"\nflavor = "debugmodel"\n\n'
        "[training]\n# per device\nbatch_size = 8  # tokens\nsteps = 10\n"
        "data_parallel_degree = -1\nseed = 42\n\n[parallelism]\npipeline_parallel_degree = 1\n"
    ]
    for i in range(TABLES):
        if i % 2:
            parts.append(f'\n# layer {i}\n[quantize.dense.float8.layer_{i}]\nrecipe_name = "x"\n')
        else:
            parts.append(f'\n[infra.node_{i}]  # the fork\'s\nhost = "node-{i}"\nslots = 8\n')
    return "".join(parts)


def test_a_fix_cuts_the_file_into_statements_a_bounded_number_of_times(tmp_path, monkeypatch):
    text = many_tables()
    cut = []
    real = cutter._statement_end
    monkeypatch.setattr(cutter, "_statement_end", lambda *a: cut.append(1) or real(*a))
    path = write(tmp_path, "job.toml", text)
    result = validate("--fix", *AT_V022, path)
    fixed = path.read_text(encoding="utf-8")
    assert fixed.count("[quantize.linear.float8.layer_") == TABLES // 2, result.err
    assert "local_batch_size = 8  # tokens" in fixed and "[debug]\nseed = 42\n" in fixed
    code_lines = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
    # Each key and header is cut once, and once more where an edit replaces it: cutting the
    # whole file again for each of its ~300 fixes would be 300 times the file.
    assert len(cut) <= 3 * code_lines, (len(cut), code_lines)


def test_the_diff_of_a_large_file_is_exact_and_its_matching_grows_with_the_file(
    tmp_path, monkeypatch
):
    text = many_tables()
    scanned = []
    real = difflib.SequenceMatcher.find_longest_match

    def counted(self, alo=0, ahi=None, blo=0, bhi=None):
        scanned.append((len(self.a) if ahi is None else ahi) - alo)
        return real(self, alo, ahi, blo, bhi)

    monkeypatch.setattr(difflib.SequenceMatcher, "find_longest_match", counted)
    diff = validate("--diff", *AT_V022, write(tmp_path, "job.toml", text))
    assert diff.code == 1
    path = write(tmp_path, "fixed.toml", text)
    validate("--fix", *AT_V022, path)
    assert patched(text, diff.out) == path.read_text(encoding="utf-8")
    # difflib alone scans the rest of the file again after each of the ~300 changes
    assert sum(scanned) <= 4 * len(text.splitlines()), sum(scanned)


def patched(old: str, diff: str) -> str:
    """``old`` with a unified diff applied, each hunk checked against ``old``."""
    lines = old.splitlines(keepends=True)
    out: list[str] = []
    at = 0
    body = diff.splitlines(keepends=True)[2:]
    for line in body:
        hunk = re.match(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@", line)
        if hunk:
            start = int(hunk[1]) - (hunk[2] != "0")
            out += lines[at:start]
            at = start
        elif line[0] in " -":
            assert lines[at] == line[1:], (at, line)
            at += 1
            if line[0] == " ":
                out.append(line[1:])
        else:
            assert line[0] == "+", line
            out.append(line[1:])
    return "".join(out + lines[at:])

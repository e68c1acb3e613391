"""``titan.migrate.tomledit.comments``: each rule, the shipped configs, generated files, totality."""

from __future__ import annotations

import collections
import random
import sys
import tomllib

import pytest
from titan.migrate.tomledit.comments import KeyComments, orphans, preamble, toml_comments
from titan.schemas.spans import locate_keys

from tests.helpers import legacy_tomls
from tests.reference import REPO, require

LEGACY = legacy_tomls()
SHARED_CORPUS = REPO.parent / "shared" / "corpus"
CORPUS = sorted(SHARED_CORPUS.rglob("*.toml")) if SHARED_CORPUS.is_dir() else []


def kc(*leading: str, trailing: str | None = None) -> KeyComments:
    return KeyComments(tuple(leading), trailing)


def everything(text: str) -> tuple[dict, tuple, list]:
    return toml_comments(text), preamble(text), orphans(text)


def normalize(raw: str) -> str:
    """The comment-text rule, written out again: one leading space and trailing space dropped."""
    raw = raw.rstrip(" \t\r")
    return raw[1:] if raw.startswith(" ") else raw


def oracle_comments(text: str) -> list[tuple[int, str]]:
    """The comments of a valid document, found with ``tomllib`` alone.

    A ``#`` starts a comment exactly when cutting its line there leaves the document unchanged
    (cutting inside a string changes the value or breaks the file).
    """
    body = text.removeprefix("\ufeff")
    doc = tomllib.loads(body)
    lines = body.split("\n")
    found = []
    for number, line in enumerate(lines, 1):
        start = line.find("#")
        while start != -1:
            cut = "\n".join([*lines[: number - 1], line[:start], *lines[number:]])
            try:
                same = tomllib.loads(cut) == doc
            except tomllib.TOMLDecodeError:
                same = False
            if same:
                found.append((number, normalize(line[start + 1 :])))
                break
            start = line.find("#", start + 1)
    return found


def returned_texts(text: str) -> list[str]:
    comments, pre, orphan_list = everything(text)
    texts = [*pre, *(t for _, t in orphan_list)]
    for entry in comments.values():
        texts.extend(entry.leading)
        if entry.trailing is not None:
            texts.append(entry.trailing)
    return texts


# --------------------------------------------------------------------------- the class


def test_key_comments_equality_and_repr() -> None:
    assert kc("a", trailing="b") == KeyComments(("a",), "b")
    assert kc("a") != kc("a", trailing="a")
    assert kc() != ((), None)
    assert hash(kc("x")) == hash(kc("x"))
    assert repr(kc("a", trailing="b")) == "KeyComments(leading=('a',), trailing='b')"
    assert not hasattr(kc(), "__dict__")


# --------------------------------------------------------------------------- trailing and strings


def test_trailing_comment_of_a_key() -> None:
    assert toml_comments("[t]\nx = 1  # note\ny = 2\n") == {("t", "x"): kc(trailing="note")}


def test_hash_inside_strings_is_not_a_comment() -> None:
    text = (
        "[team.alerts]\n"
        'channel = "#pt-infra-alerts"\n'
        'x = "a # b"  # real\n'
        'y = "q \\" # still string"  # after escape\n'
        "z = 'c:\\path # lit'\n"
        "w = ['#', \"#\", '''#''']  # list\n"
    )
    assert everything(text) == (
        {
            ("team", "alerts", "x"): kc(trailing="real"),
            ("team", "alerts", "y"): kc(trailing="after escape"),
            ("team", "alerts", "w"): kc(trailing="list"),
        },
        (),
        [],
    )


def test_multi_line_strings_hold_hashes_and_quotes() -> None:
    text = (
        'a = """\n'
        "# not a comment\n"
        'one " and two "" quotes # still text\n'
        '"""  # after basic\n'
        "b = '''\n"
        "# nor this ' or ''\n"
        "'''\n"
        "# above c\n"
        'c = """x\\\n'
        '   # escaped newline, still text"""  # after continuation\n'
        'd = """ends in quotes"""""  # five quotes close\n'
    )
    assert everything(text) == (
        {
            ("a",): kc(trailing="after basic"),
            ("c",): kc("above c", trailing="after continuation"),
            ("d",): kc(trailing="five quotes close"),
        },
        (),
        [],
    )


def test_quoted_keys_may_hold_hash_and_equals() -> None:
    text = '["sec#1"]  # header\n"k#=v" = 1  # value\n\'lit#\'.x = 2  # dotted\n'
    assert toml_comments(text) == {
        ("sec#1",): kc(trailing="header"),
        ("sec#1", "k#=v"): kc(trailing="value"),
        ("sec#1", "lit#", "x"): kc(trailing="dotted"),
    }


# --------------------------------------------------------------------------- leading blocks


def test_leading_block_directly_above() -> None:
    text = "[t]\na = 1\n# one\n#two\n   #  three  \nb = 2\n"
    assert toml_comments(text) == {("t", "b"): kc("one", "two", " three")}


def test_blank_line_detaches_a_block() -> None:
    text = "[t]\na = 1\n# floating\n\nb = 2  # own\n# end of table\n\n[u]\n"
    assert everything(text) == (
        {("t", "b"): kc(trailing="own")},
        (),
        [(3, "floating"), (6, "end of table")],
    )


def test_commented_out_toml_is_a_comment() -> None:
    text = '[model]\n# test tokenizer\npath = "x"\n# converters = ["float8"]\n\n[optimizer]\n'
    assert everything(text) == (
        {("model", "path"): kc("test tokenizer")},
        (),
        [(4, 'converters = ["float8"]')],
    )


def test_comment_block_directly_after_a_key_leads_the_next() -> None:
    text = "[v]\nsteps = 48  # set size\n# image sampling\ncfg = true\n"
    assert toml_comments(text) == {
        ("v", "steps"): kc(trailing="set size"),
        ("v", "cfg"): kc("image sampling"),
    }


def test_comments_at_end_of_file_are_orphans() -> None:
    assert orphans("a = 1\n# last\n#  words") == [(2, "last"), (3, " words")]


# --------------------------------------------------------------------------- headers and paths


def test_table_header_comments() -> None:
    text = "[job]\nx = 1\n\n# quantization\n[quantize.linear.float8]  # tuned for 8 GPUs\ny = 2\n"
    assert toml_comments(text) == {
        ("quantize", "linear", "float8"): kc("quantization", trailing="tuned for 8 GPUs")
    }


def test_dotted_keys_give_the_full_path_only() -> None:
    text = "[t]\na.b = 1  # ab\na.c = 2  # ac\n\"q\" . 'r' = 3  # qr\n"
    assert toml_comments(text) == {
        ("t", "a", "b"): kc(trailing="ab"),
        ("t", "a", "c"): kc(trailing="ac"),
        ("t", "q", "r"): kc(trailing="qr"),
    }


def test_array_of_tables_paths_have_indexes() -> None:
    text = "# first\n[[srv]]  # one\nx = 1  # x0\n\n# second\n[[srv]]\n[srv.sub]  # sub\nx = 2\n"
    assert everything(text) == (
        {
            ("srv", 0): kc(trailing="one"),
            ("srv", 0, "x"): kc(trailing="x0"),
            ("srv", 1): kc("second"),
            ("srv", 1, "sub"): kc(trailing="sub"),
        },
        ("first",),
        [],
    )


def test_super_table_defined_after_its_sub_table() -> None:
    # locate_keys records ("a",) at [a.b]; the later [a] line still gets its comments.
    text = "[a.b]\nx = 1\n# about a\n[a]  # late\ny = 2\n"
    assert toml_comments(text) == {("a",): kc("about a", trailing="late")}
    text = "[[s]]\n[s.x.y]\n[[s]]\n[s.x.z]\n[s.x]  # second x\n[s.x.y]\n"
    assert toml_comments(text) == {("s", 1, "x"): kc(trailing="second x")}


def test_root_keys_before_any_table() -> None:
    text = "title = 'x'  # root\n# lead\n[t]\n"
    assert everything(text) == ({("title",): kc(trailing="root"), ("t",): kc("lead")}, (), [])


# --------------------------------------------------------------------------- preamble


def test_preamble_separated_by_a_blank_line() -> None:
    text = "# NOTE: this toml config is a preset for 128 H100 GPUs.\n\n[job]\nx = 1\n"
    assert everything(text) == ({}, ("NOTE: this toml config is a preset for 128 H100 GPUs.",), [])


def test_preamble_running_into_the_first_header_is_preamble_only() -> None:
    text = "\n# A\n\n# B\n# C\n[job]  # job\n"
    assert everything(text) == ({("job",): kc(trailing="job")}, ("A", "B", "C"), [])


def test_comment_only_file_is_all_preamble() -> None:
    assert everything("# a\n\n# b\n") == ({}, ("a", "b"), [])
    assert everything("") == ({}, (), [])


def test_no_preamble_when_the_file_starts_with_a_key() -> None:
    assert everything("a = 1\n\n# x\n\nb = 2\n") == ({}, (), [(3, "x")])


# --------------------------------------------------------------------------- multi-line values


def test_trailing_comment_is_on_the_last_line_of_the_value() -> None:
    text = "[t]\nx = [\n 1,\n 2,\n]  # note\ny = 3\n"
    assert toml_comments(text) == {("t", "x"): kc(trailing="note")}


def test_comments_inside_a_multi_line_array_are_orphans() -> None:
    text = '[t]\n# lead\nxs = [  # opening\n  1,  # one\n  # between\n  "#2",\n\n]  # closing\n'
    assert everything(text) == (
        {("t", "xs"): kc("lead", trailing="closing")},
        (),
        [(3, "opening"), (4, "one"), (5, "between")],
    )


def test_inline_tables_give_the_comment_to_the_outer_key() -> None:
    text = "[t]\npoint = { x = 1, y = '#' }  # inline\nnested = [\n  { a = 1 },\n]  # aot\n"
    assert toml_comments(text) == {
        ("t", "point"): kc(trailing="inline"),
        ("t", "nested"): kc(trailing="aot"),
    }


# --------------------------------------------------------------------------- text and encodings


def test_crlf_tabs_bom_and_unicode() -> None:
    text = (
        "\ufeff# préambule ✓\r\n\r\n"
        "[t]\t# tab\tinside\r\n"
        "\t# 日本語  two  spaces\r\n"
        "x\t=\t1\t#\t🙂 emoji \t\r\n"
        "y = 2 #\r\n"
        "z = 3 #  two\r\n"
    )
    assert everything(text) == (
        {
            ("t",): kc(trailing="tab\tinside"),
            ("t", "x"): kc("日本語  two  spaces", trailing="\t🙂 emoji"),
            ("t", "y"): kc(trailing=""),
            ("t", "z"): kc(trailing=" two"),
        },
        ("préambule ✓",),
        [],
    )


def test_bom_directly_before_a_key() -> None:
    assert toml_comments("\ufeffa = 1  # c") == {("a",): kc(trailing="c")}


# --------------------------------------------------------------------------- shipped configs


@pytest.mark.parametrize("path", LEGACY + CORPUS, ids=lambda p: str(p.relative_to(REPO.parent)))
def test_config_files_account_for_every_comment(path) -> None:
    text = path.read_text(encoding="utf-8")
    comments = toml_comments(text)
    spans = locate_keys(text)
    for key, entry in comments.items():
        assert key in spans
        assert entry.leading or entry.trailing is not None
    found = oracle_comments(text)
    assert collections.Counter(returned_texts(text)) == collections.Counter(t for _, t in found)
    found_lines = {line for line, _ in found}
    assert all(line in found_lines for line, _ in orphans(text))
    key_lines = collections.defaultdict(list)
    for key, span in spans.items():
        key_lines[span.line].append(key)
    for line, keys in key_lines.items():
        # These files hold one-line values only: a key line's comment trails its deepest key.
        if line in found_lines:
            assert comments[max(keys, key=len)].trailing is not None


def test_known_values_in_the_legacy_configs() -> None:
    debug = (REPO / "legacy_configs/llama3/debug_model.toml").read_text(encoding="utf-8")
    comments = toml_comments(debug)
    assert comments[("training", "dataset")] == kc(trailing="~2K documents, bundled for tests")
    assert comments[("parallelism", "data_parallel_replicate_degree")] == kc(
        "-1 lets FSDP take every rank, so the same file works for any world size"
    )
    assert ("training",) not in comments and ("training", "steps") not in comments
    assert preamble(debug) == (
        'Llama 3 "debugmodel" smoke run: 10 steps on the tiny c4_test set; fits on CPU or 1-8 GPUs.',
        "titan: era = v0.2.2",  # when the file was written (the migration reads it as its era)
    )
    assert orphans(debug) == []

    team = (REPO / "legacy_configs/custom/llama3_team.toml").read_text(encoding="utf-8")
    comments = toml_comments(team)
    assert ("team", "alerts", "channel") not in comments
    assert comments[("team", "alerts", "severity")] == kc(
        trailing="nightly job: wake someone up if it breaks"
    )

    float8 = (REPO / "legacy_configs/llama3/debug_model_float8.toml").read_text(encoding="utf-8")
    assert toml_comments(float8)[("model", "converters")] == kc(
        "The converter name is what turns the [quantize.linear.float8] table on;",
        'the old v0.1 spelling "float8" is not registered at v0.2.2.',
    )


def test_known_values_in_the_upstream_corpus() -> None:
    require(SHARED_CORPUS)  # skips locally without shared/, fails under CI
    models = SHARED_CORPUS / "torchtitan-v0.2.2/torchtitan/models"
    text = (models / "llama3/train_configs/llama3_405b.toml").read_text(encoding="utf-8")
    assert preamble(text) == ("NOTE: this toml config is a preset for 128 H100 GPUs.",)
    text = (models / "llama3/train_configs/debug_model.toml").read_text(encoding="utf-8")
    comments = toml_comments(text)
    assert comments[("model", "hf_assets_path")] == kc(
        "test folder with tokenizer.json, for debug purpose only"
    )
    assert [t for _, t in orphans(text)] == ['converters = ["float8"]']
    assert comments[("activation_checkpoint", "selective_ac_option")] == kc(
        trailing="'int' = ac every positive int layer or 'op', ac based on ops policy"
    )


# --------------------------------------------------------------------------- generated documents

COMMENT_WORDS = ["note", "#", "'", '"', '"""', "= [1]", "日本", "a  b", "\tx", "[t]", "✓", "\\"]


def comment_text(rnd: random.Random) -> str:
    words = rnd.choices(COMMENT_WORDS, k=rnd.randint(0, 4))
    return " ".join(words).rstrip(" \t")


def comment_line(rnd: random.Random, body: str) -> str:
    if body.startswith(" ") or rnd.random() < 0.7:
        return "# " + body
    return "#" + body


# Values as lists of lines; ``None`` marks a line that gets an inner comment (an orphan).
VALUES = [
    ["42"],
    ['"a # \\" b"'],
    ["'c:\\# x'"],
    ['["#", \'#\', """#"""]'],
    ["{ k = '#', m = [1, 2] }"],
    ['"""', "# inside", 'a "" b """"'],
    ["'''", "# inside ''", "'''"],
    ['"""x \\', "  # after continuation", '  y"""'],
    ["[", None, "  1,", "  # between", "  2,", "]"],
    ["[", "  { a = 1 },", "  { a = '#' },", "]"],
]


class Doc:
    """A generated document and the comments it must give."""

    def __init__(self, rnd: random.Random) -> None:
        self.rnd = rnd
        self.lines: list[str] = []
        self.comments: dict[tuple, KeyComments] = {}
        self.preamble: list[str] = []
        self.orphans: list[tuple[int, str]] = []

    def add(self, line: str) -> int:
        self.lines.append(line)
        return len(self.lines)

    def block(self) -> tuple[str, ...]:
        texts = tuple(comment_text(self.rnd) for _ in range(self.rnd.choice([0, 0, 1, 2])))
        for text in texts:
            self.add(self.rnd.choice(["", "  ", "\t"]) + comment_line(self.rnd, text))
        return texts

    def orphan_block(self) -> None:
        for _ in range(self.rnd.randint(1, 2)):
            text = comment_text(self.rnd)
            self.orphans.append((self.add(comment_line(self.rnd, text)), text))
        self.add("")

    def statement(self, path: tuple, first: str, rest: tuple = (), in_preamble=False) -> None:
        leading = self.block()
        if in_preamble:
            # A block running into the first statement is preamble, never also its leading.
            self.preamble.extend(leading)
            leading = ()
        trailing = comment_text(self.rnd) if self.rnd.random() < 0.5 else None
        lines = [first, *rest]
        for k, line in enumerate(lines):
            if k == len(lines) - 1 and trailing is not None:
                line = f"{line}  {comment_line(self.rnd, trailing)}"
            elif line is None:
                text = comment_text(self.rnd)
                self.orphans.append((len(self.lines) + 1, text))
                line = "  3,  " + comment_line(self.rnd, text)
            elif line.lstrip().startswith("#"):
                self.orphans.append((len(self.lines) + 1, line.lstrip()[2:]))
            self.add(line)
        if leading or trailing is not None:
            self.comments[path] = KeyComments(leading, trailing)

    def key(self, table: tuple, index: int) -> None:
        value = self.rnd.choice(VALUES)
        name, path = f"k{index}", (*table, f"k{index}")
        if self.rnd.random() < 0.2:
            name, path = f'"k#{index}".sub', (*table, f"k#{index}", "sub")
        if value[0] in ('"""', "'''") or value[0].endswith("\\"):
            # Lines inside multi-line strings are text, not comments: undo what statement adds.
            before = len(self.orphans)
            self.statement(path, f"{name} = {value[0]}", tuple(value[1:]))
            del self.orphans[before:]
        else:
            self.statement(path, f"{name} = {value[0]}", tuple(value[1:]))

    def gap(self) -> None:
        choice = self.rnd.random()
        if choice < 0.3:
            self.add("")
        elif choice < 0.45:
            self.orphan_block()

    def build(self) -> str:
        for _ in range(self.rnd.randint(0, 2)):
            self.preamble.append(comment_text(self.rnd))
            self.add(comment_line(self.rnd, self.preamble[-1]))
            if self.rnd.random() < 0.3:
                self.add("")
        tables = [("a",), ("b", "c"), ("srv", 0), ("srv", 1), ("d",)]
        for number, table in enumerate(tables):
            header = f"[[{table[0]}]]" if isinstance(table[-1], int) else f"[{'.'.join(table)}]"
            if number == 0:
                self.add("")
            else:
                self.gap()
            self.statement(table, header, in_preamble=number == 0)
            for index in range(self.rnd.randint(0, 4)):
                self.gap()
                self.key(table, index)
        newline = self.rnd.choice(["\n", "\r\n"])
        return self.rnd.choice(["", "\ufeff"]) + newline.join(self.lines) + newline


def test_generated_documents_give_exactly_the_expected_comments() -> None:
    for seed in range(250):
        doc = Doc(random.Random(seed))
        text = doc.build()
        tomllib.loads(text.removeprefix("\ufeff"))  # the generator writes valid TOML
        assert everything(text) == (doc.comments, tuple(doc.preamble), doc.orphans), seed


def test_generated_documents_agree_with_the_oracle() -> None:
    for seed in range(12):
        text = Doc(random.Random(1000 + seed)).build()
        expected = [t for _, t in oracle_comments(text)]
        assert collections.Counter(returned_texts(text)) == collections.Counter(expected), seed


# --------------------------------------------------------------------------- totality


FRAGMENTS = [
    "[", "]", "[[", "]]", "{", "}", "=", ".", ",", "#", "# c", '"', "'", '"""', "'''", "\\",
    '\\"', "\n", "\r\n", "\r", " ", "\t", "a", "key", "1", "[t]", "[[aot]]", "x = 1", "\ufeff",
    "ü", "🙂", '"#"', "'#'", "a.b", '"q"', "= [", "= {", "\x00", "\u2028",
]  # fmt: skip


def check_shape(text: str) -> None:
    comments, pre, orphan_list = everything(text)
    assert all(
        isinstance(v, KeyComments) and (v.leading or v.trailing is not None)
        for v in comments.values()
    )
    assert all(isinstance(t, str) for t in pre)
    assert all(isinstance(n, int) and isinstance(t, str) for n, t in orphan_list)
    returned = sum(len(v.leading) + (v.trailing is not None) for v in comments.values())
    assert returned + len(pre) + len(orphan_list) <= text.count("#")


def test_random_text_never_raises() -> None:
    rnd = random.Random(20240611)
    for _ in range(400):
        check_shape("".join(rnd.choices(FRAGMENTS, k=rnd.randint(0, 60))))


def calls(text: str) -> int:
    """How many Python and C calls reading ``text``'s comments makes: a count of the work that
    does not depend on how loaded the machine is."""
    count = 0

    def profile(frame, event, arg) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        everything(text)
    finally:
        sys.setprofile(None)
    return count


HOSTILE = {
    "open triple quote": lambda n: '"""' + "a\n# c\n" * n,
    "literal quotes": lambda n: "'''" + "'" * (5 * n),
    "backslashes": lambda n: '"' + "\\" * (5 * n),
    "open brackets": lambda n: "[" * (5 * n),
    "close brackets": lambda n: "]" * (5 * n) + "# c\n",
    "hashes": lambda n: "#" * (5 * n),
    "commented keys": lambda n: "x = 1  # c\n" * n,
    "tables": lambda n: "[a]\n" * n,
    "dotted key": lambda n: "a." * (2 * n) + "b = 1  # c",
    "triple quotes": lambda n: '"""' * (3 * n + 1),
    "commented array": lambda n: "x = [\n" + "  1,  # c\n" * n,
}


@pytest.mark.parametrize("build", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_input_stays_linear(build) -> None:
    check_shape(build(10_000))  # the full size still reads
    small, large = calls(build(500)), calls(build(2_000))
    # four times the input, about four times the work (quadratic would be sixteen)
    assert large <= 5 * small + 1_000, (small, large)

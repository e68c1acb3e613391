"""What a Forge app config holds that its run refuses, said as what it is: a ``${...}`` reference
OmegaConf cannot resolve (to no key, or round in a circle) is an error at the reference; a tagged
value names what it holds and what the setting takes; a file that is not UTF-8 or too large is
called that, in a YAML's words (never a TOML's, never an alias bomb)."""

from __future__ import annotations

import pytest
from titan.schemas.yaml_interpolation import MAX_TEXT
from titan.schemas.yaml_messages import MAX_BYTES, MAX_NODES

from tests.helpers import write
from tests.test_forge_yaml import check


def errors(found: list[dict]) -> list[tuple]:
    """The errors as (code, path, line, col)."""
    return [(d["code"], d["path"], d["line"], d["col"]) for d in found if d["severity"] == "error"]


BROKEN = {
    # id: (the app config, the error's path, line, col, words its message has)
    "missing": (
        "trainer:\n  training:\n    local_batch_size: ${lbs}\n",
        "training.local_batch_size", 3, 23, "no key `lbs`",
    ),
    "missing-inside-text": (
        "trainer:\n  job:\n    dump_folder: /out/${run_name}/x\n",
        "job.dump_folder", 3, 18, "no key `run_name`",
    ),
    "missing-at-the-end-of-a-chain": (
        "a: ${b}\nb: ${c}\ntrainer:\n  training:\n    steps: ${a}\n",
        "training.steps", 5, 12, "no key `c` (followed ${a} → ${b} → ${c})",
    ),
    "missing-sum-argument": (
        "x: 2\ntrainer:\n  training:\n    seq_len: ${sum:${x},${y}}\n",
        "training.seq_len", 4, 14, "no key `y`",
    ),
    "cycle": (
        "a: ${b}\nb: ${a}\ntrainer:\n  training:\n    steps: ${a}\n",
        "training.steps", 5, 12, "lead back to themselves (${a} → ${b} → ${a})",
    ),
    "self-reference": (
        "trainer:\n  training:\n    steps: ${trainer.training.steps}\n",
        "training.steps", 3, 12,
        "(${trainer.training.steps} → ${trainer.training.steps})",
    ),
    "list-item": (
        "trainer:\n  checkpoint:\n    exclude_from_loading: [optimizer, '${skip}']\n",
        "checkpoint.exclude_from_loading.1", 3, 39, "no key `skip`",
    ),
}  # fmt: skip


@pytest.mark.parametrize(("text", "path", "line", "col", "words"), BROKEN.values(), ids=BROKEN)
def test_broken_reference_is_an_error_at_the_reference(tmp_path, text, path, line, col, words):
    code, found, err = check(write(tmp_path, "app.yaml", text))
    assert code == 1, (found, err)
    assert errors(found) == [("broken-interpolation", path, line, col)]
    (finding,) = [d for d in found if d["code"] == "broken-interpolation"]
    assert words in finding["message"]
    assert finding["hint"]


@pytest.mark.parametrize(
    "text",
    [
        "trainer:\n  job:\n    dump_folder: ${oc.env:HOME}\n",  # a resolver only Forge runs
        "out: ???\ntrainer:\n  job:\n    dump_folder: ${out}\n",  # given on Forge's command line
        "a: ${b}\nb: ???\ntrainer:\n  job:\n    dump_folder: ${a}/x\n",
    ],
    ids=["resolver", "mandatory", "mandatory-through-a-chain"],
)
def test_what_only_forge_knows_stays_a_warning(tmp_path, text):
    code, found, _ = check(write(tmp_path, "app.yaml", text))
    assert code == 0
    assert [d["code"] for d in found] == ["interpolation"]


@pytest.mark.parametrize(
    ("value", "path", "holds", "takes"),
    [
        ("name: !!binary aGVsbG8=", "model.name", "binary data", "a string"),
        ("flavor: !!timestamp 2024-01-01", "model.flavor", "a date or time", "a string"),
        ("converters: !!set {float8}", "model.converters", "a set", "a list of strings"),
    ],
)
def test_tagged_value_names_what_it_holds_and_what_the_setting_takes(
    tmp_path, value, path, holds, takes
):
    code, found, _ = check(write(tmp_path, "app.yaml", f"trainer:\n  model:\n    {value}\n"))
    assert code == 1
    (finding,) = found  # no second finding about a None the reader made of it
    assert finding["code"] == "yaml-type" and finding["path"] == path
    assert f"holds {holds}" in finding["message"] and f"takes {takes}" in finding["message"]
    assert "NoneType" not in finding["message"]


def test_tagged_value_at_an_unknown_key_is_still_an_unknown_key(tmp_path):
    code, found, _ = check(
        write(tmp_path, "app.yaml", "trainer:\n  model:\n    nmae: !!binary aGk=\n")
    )
    assert code == 1
    assert {d["code"] for d in found} == {"yaml-type", "unknown-key"}


@pytest.mark.parametrize("raw", [b"\xe9", b"\xff\xfe", b"\xc3("])
def test_yaml_that_is_not_utf8_is_said_in_a_yamls_words(tmp_path, raw):
    app = tmp_path / "app.yaml"
    app.write_bytes(b"trainer:\n  model:\n    name: ll" + raw + b"ama\n")
    code, found, _ = check(app)
    assert code == 1
    (finding,) = found
    assert (finding["code"], finding["line"], finding["col"]) == ("yaml-syntax", 3, 13)
    assert "TOML" not in finding["message"] + finding["hint"]
    assert "UTF-8" in finding["message"]


@pytest.mark.parametrize("lines", [MAX_BYTES // 20, 300_000])
def test_large_yaml_is_too_large_with_its_size_never_an_alias_bomb(tmp_path, lines):
    text = "trainer:\n  model:\n    name: llama3\nextra:\n" + "".join(
        f"  key_{i}: value {i:08}\n" for i in range(lines)
    )
    app = write(tmp_path, "app.yaml", text)
    code, found, _ = check(app)
    assert code == 1
    (finding,) = found
    assert finding["code"] == "unreadable-file"
    assert f"({len(text.encode()):,} bytes)" in finding["message"]
    assert f"{MAX_BYTES // 1024} KiB" in finding["message"]
    assert "alias" not in finding["message"] + finding["hint"]


@pytest.mark.parametrize("count", [MAX_NODES + 10, 120_000])
def test_yaml_of_many_values_is_too_large_with_its_count(tmp_path, count):
    text = "trainer:\n  model:\n    name: llama3\nextra: [" + ",".join(["1"] * count) + "]\n"
    code, found, _ = check(write(tmp_path, "app.yaml", text))
    assert code == 1
    (finding,) = found
    assert finding["code"] == "unreadable-file"
    assert f"holds {count + 9:,} YAML values" in finding["message"]
    assert "alias" not in finding["message"] + finding["hint"]


def doubling(depth: int, leaf: str) -> str:
    """An app config whose ``job.description`` doubles ``leaf`` ``depth`` times: ``a0: ${a1}${a1}``,
    ``a1: ${a2}${a2}``, ..."""
    keys = "".join(f"a{i}: ${{a{i + 1}}}${{a{i + 1}}}\n" for i in range(depth))
    return f"trainer:\n  job:\n    description: ${{a0}}\n{keys}a{depth}: '{leaf}'\n"


def test_references_that_double_their_text_are_refused_before_it_is_built(tmp_path):
    # 2**31 characters if built; refused once the text passes MAX_TEXT, at the reference.
    code, found, _ = check(write(tmp_path, "app.yaml", doubling(30, "xx")))
    assert code == 1
    assert errors(found) == [("broken-interpolation", "job.description", 3, 18)]
    (finding,) = found
    assert f"more than {MAX_TEXT:,} characters" in finding["message"]
    assert finding["message"].count("→") < 20  # the chain up to the key that passed the limit
    assert "repeated references" in finding["hint"]


@pytest.mark.parametrize(("depth", "leaf", "length"), [(30, "", 0), (12, "ab", 2 * 2**12)])
def test_references_that_repeat_references_resolve_each_key_once(tmp_path, depth, leaf, length):
    # Resolved by following every reference, ${a0} would take 2**30 steps: each key is resolved
    # once, so the file checks at once and the text is what OmegaConf gives.
    from titan.schemas.yaml_interpolation import resolve

    whole = {"a0": "${a1}${a1}"} | {f"a{i}": f"${{a{i + 1}}}${{a{i + 1}}}" for i in range(1, depth)}
    whole[f"a{depth}"] = leaf
    assert resolve("${a0}", whole) == (leaf * 2**depth, True)
    assert len(leaf * 2**depth) == length
    code, found, _ = check(write(tmp_path, "app.yaml", doubling(depth, leaf)))
    assert (code, errors(found)) == (0, [])


def test_a_key_resolved_once_serves_every_reference_to_it(tmp_path):
    text = (
        "lbs: 4\nbatch: ${lbs}\nname: run-${batch}\n"
        "trainer:\n  training:\n    local_batch_size: ${batch}\n    global_batch_size: ${lbs}\n"
        "  job:\n    description: ${name}/${batch}\n"
    )
    code, found, _ = check(write(tmp_path, "app.yaml", text))
    assert (code, found) == (0, [])
    from titan.schemas.yaml_interpolation import resolve_tree

    tree = {"a": "${batch}", "b": ["${name}", "${batch}x"], "c": "${lbs}"}
    whole = {"lbs": 4, "batch": "${lbs}", "name": "run-${batch}"}
    assert resolve_tree(tree, whole) == []
    assert tree == {"a": 4, "b": ["run-4", "4x"], "c": 4}

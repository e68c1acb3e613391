"""titan-validate --fix and --diff: legacy TOMLs rewritten in place, every other byte kept."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tomllib

import pytest

from tests.helpers import codes, validate, write
from tests.reference import REPO

AT_V022 = ("--era", "2026-02-20")
"""These tests are about the text edits: the files ran on v0.2.2 with keys of older eras left in
them, so no era default is added (``test_fix_era_defaults`` below adds them from the evidence)."""

FLOAT8_TABLE = """\
# A llama3 job from 2024
[model]
name = "llama3"
flavor = "debugmodel"

[training]
steps = 10

# float8 settings
[float8]  # fp8 options
enable_float8_linear = true
# shard the weights in float8
enable_fsdp_float8_all_gather = true
precompute_float8_dynamic_scale_for_fsdp = true   # one all-reduce

[parallelism]
data_parallel_shard_degree = -1
"""


def fix(tmp_path, text: str, *args: str, name: str = "job.toml"):
    """Write ``text``, run ``titan-validate --fix`` on it; the result and the new text."""
    path = write(tmp_path, name, text)
    result = validate("--fix", *AT_V022, *args, path)
    return result, path.read_text(encoding="utf-8")


def test_a_float8_table_becomes_a_converter_and_the_quantize_table(tmp_path):
    result, text = fix(tmp_path, FLOAT8_TABLE)
    # The table's own keys stay in place under its new name, with their comments; the switch
    # joins model.converters (a new key after the last key of [model]).
    assert text == FLOAT8_TABLE.replace(
        'flavor = "debugmodel"\n',
        'flavor = "debugmodel"\nconverters = ["quantize.linear.float8"]\n',
    ).replace(
        "[float8]  # fp8 options\nenable_float8_linear = true\n",
        "[quantize.linear.float8]  # fp8 options\n",
    )
    assert result.code == 0, result.out
    assert "fixed 3 problems in" in result.err
    assert validate(write(tmp_path, "again.toml", text)).code == 0


def test_batch_size_is_renamed_on_its_own_line(tmp_path):
    original = "[training]\n# per device\nbatch_size   =   8  # tokens: 8 x 2048\nsteps = 10\n"
    result, text = fix(tmp_path, original)
    assert text == original.replace("batch_size", "local_batch_size")
    assert result.code == 0
    assert "fixed 1 problem in" in result.err


def test_a_converter_string_becomes_a_list_with_the_new_name(tmp_path):
    result, text = fix(tmp_path, '[model]\nname = "llama3"\nconverters = "float8"  # fp8\n')
    assert text == '[model]\nname = "llama3"\nconverters = ["quantize.linear.float8"]  # fp8\n'
    assert result.code == 0
    assert "fixed 2 problems" in result.err  # the list, and the name


def test_stale_names_in_a_multi_line_array_change_alone(tmp_path):
    original = '[model]\nconverters = [\n    "float8",  # dense layers\n    # more later\n]\n'
    result, text = fix(tmp_path, original)
    assert text == original.replace('"float8"', '"quantize.linear.float8"')
    assert result.code == 0


def test_an_unportable_key_is_left_where_it_is_and_reported(tmp_path):
    original = (
        "[float8]\n"
        "enable_fsdp_float8_all_gather = true\n"
        'scaling_type_input = "delayed"  # from 2024\n'
    )
    result, text = fix(tmp_path, original, "--format", "json")
    assert text == (
        "[float8]\n"
        'scaling_type_input = "delayed"  # from 2024\n'
        "\n"
        "[quantize.linear.float8]\n"
        "enable_fsdp_float8_all_gather = true\n"
    )
    assert result.code == 1
    assert "moved-key" in codes(result)
    assert [d["path"] for d in result.json()["diagnostics"] if d["code"] == "moved-key"] == [
        "float8.scaling_type_input"
    ]


def test_a_no_op_key_is_deleted_with_its_comment(tmp_path):
    original = (
        '[training]\nsteps = 1\n\n[float8]\n# always dynamic\nscaling_type_input = "dynamic"\n'
    )
    result, text = fix(tmp_path, original)
    assert text == "[training]\nsteps = 1\n"
    assert result.code == 0


def test_a_file_that_does_not_parse_is_not_touched(tmp_path):
    original = "[training]\nbatch_size = 8\nsteps = = 3\n"
    result, text = fix(tmp_path, original)
    assert text == original
    assert result.code == 1
    assert "not fixing" in result.err and "it does not parse (line 3: invalid TOML" in result.err
    assert "toml-syntax" in result.out


def test_a_file_whose_custom_module_cannot_be_read_is_not_touched(tmp_path):
    original = '[job]\ncustom_config_module = "no_such_module_here"\n[training]\nbatch_size = 8\n'
    result, text = fix(tmp_path, original)
    assert text == original
    assert result.code == 1
    assert "its custom config module cannot be read" in result.err


def test_a_key_a_custom_module_declares_is_not_old(tmp_path):
    write(
        tmp_path,
        "my_ext.py",
        "from dataclasses import dataclass, field\n\n"
        "@dataclass\nclass Training:\n    batch_size: int = 1\n\n"
        "@dataclass\nclass JobConfig:\n    training: Training = field(default_factory=Training)\n",
    )
    original = '[job]\ncustom_config_module = "my_ext"\n[training]\nbatch_size = 8\n'
    result, text = fix(tmp_path, original)
    assert text == original
    assert result.code == 0, result.out


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX permissions")
def test_a_read_only_file_is_an_error_and_stays_as_it_was(tmp_path):
    path = write(tmp_path, "job.toml", "[training]\nbatch_size = 8\n")
    path.chmod(0o444)
    result = validate("--fix", *AT_V022, path)
    assert result.code == 74
    assert f"cannot fix {path}: the file is read-only (nothing was written)" in result.err
    assert path.read_text() == "[training]\nbatch_size = 8\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o444


def test_a_symlink_keeps_being_a_link_to_the_rewritten_file(tmp_path):
    target = write(tmp_path, "real/job.toml", "[training]\nbatch_size = 8\n")
    target.chmod(0o640)
    link = tmp_path / "job.toml"
    link.symlink_to(target)
    result = validate("--fix", *AT_V022, link)
    assert result.code == 0
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "[training]\nlocal_batch_size = 8\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in target.parent.iterdir()) == ["job.toml"]  # no temporary left


def test_a_hard_link_is_named_when_it_keeps_the_old_text(tmp_path):
    path = write(tmp_path, "job.toml", "[training]\nbatch_size = 8\n")
    other = tmp_path / "other.toml"
    os.link(path, other)
    result = validate("--fix", *AT_V022, path)
    assert result.code == 0
    assert path.read_text() == "[training]\nlocal_batch_size = 8\n"
    assert other.read_text() == "[training]\nbatch_size = 8\n"
    assert "had 1 other hard link(s); they still hold the text before the fix" in result.err


def test_diff_prints_a_unified_diff_and_writes_nothing(tmp_path):
    original = "[training]\nbatch_size = 8\nsteps = 10\n"
    path = write(tmp_path, "job.toml", original)
    result = validate("--diff", *AT_V022, path)
    assert result.code == 1
    assert result.out == (
        f"--- {path}\n+++ {path}\n@@ -1,3 +1,3 @@\n [training]\n-batch_size = 8\n"
        "+local_batch_size = 8\n steps = 10\n"
    )
    assert "would fix 1 problem in 1 file" in result.err
    assert path.read_text() == original
    assert (
        validate("--fix", *AT_V022, "--diff", path).out == result.out
    )  # --diff wins: nothing written
    assert path.read_text() == original


def test_diff_of_a_clean_file_is_empty_and_exits_0(tmp_path):
    path = write(tmp_path, "job.toml", "[training]\nlocal_batch_size = 8\n")
    result = validate("--diff", *AT_V022, path)
    assert (result.code, result.out, result.err) == (0, "", "")


def test_diff_exits_1_for_a_file_it_cannot_fix(tmp_path):
    path = write(tmp_path, "job.toml", "[training\n")
    result = validate("--diff", *AT_V022, path)
    assert result.code == 1 and result.out == ""
    assert "not fixing" in result.err


def test_diff_marks_a_missing_final_newline(tmp_path):
    path = write(tmp_path, "job.toml", "[training]\nbatch_size = 8")
    result = validate("--diff", *AT_V022, path)
    assert result.out.endswith(
        "-batch_size = 8\n\\ No newline at end of file\n+local_batch_size = 8\n\\ No newline at end of file\n"
    )


def test_fix_rewrites_several_files_and_reports_what_remains(tmp_path):
    first = write(tmp_path, "a.toml", "[training]\nbatch_size = 8\n")
    second = write(tmp_path, "b.toml", "[training]\nstpes = 1\ncompile = true\n")
    clean = write(tmp_path, "c.toml", "[training]\nsteps = 1\n")
    before = clean.stat().st_mtime_ns
    result = validate("--fix", *AT_V022, "--format", "json", tmp_path)
    assert first.read_text() == "[training]\nlocal_batch_size = 8\n"
    assert second.read_text() == (
        '[training]\nstpes = 1\n\n[compile]\nenable = true\ncomponents = ["model", "loss"]\n'
    )
    assert clean.stat().st_mtime_ns == before  # nothing to fix: not written
    assert result.code == 1
    assert codes(result) == ["unknown-key"]  # the typo is not a fix with one right answer
    assert (
        f"fixed 1 problem in {first}" in result.err and f"fixed 1 problem in {second}" in result.err
    )


def test_crlf_line_endings_are_kept(tmp_path):
    path = tmp_path / "job.toml"
    path.write_bytes(b"[training]\r\nbatch_size = 8\r\ntensor_parallel_degree = 2\r\n")
    assert validate("--fix", *AT_V022, path).code == 0
    assert path.read_bytes() == (
        b"[training]\r\nlocal_batch_size = 8\r\n\r\n[parallelism]\r\ntensor_parallel_degree = 2\r\n"
    )


def test_dotted_keys_and_inline_tables(tmp_path):
    original = (
        "training.batch_size = 8  # bs\n"
        "training.steps = 10\n"
        "metrics = { rank_0_only = true, log_freq = 5 }\n"
        "\n"
        "[parallelism]\n"
        "data_parallel_shard_degree = -1\n"
        "\n"
        "[experimental]\n"
        "context_parallel_degree = 2\n"
    )
    result, text = fix(tmp_path, original)
    assert text == (
        "training.local_batch_size = 8  # bs\n"
        "training.steps = 10\n"
        "metrics = { save_for_all_ranks = false, log_freq = 5 }\n"
        "\n"
        "[parallelism]\n"
        "data_parallel_shard_degree = -1\n"
        "context_parallel_degree = 2\n"
    )
    assert result.code == 0, result.out


def test_a_key_moving_into_an_existing_table_lands_after_its_last_key(tmp_path):
    original = (
        "[training]\n"
        "  # four-way TP\n"
        "  tensor_parallel_degree=4  # heads / 4\n"
        "  steps=10\n"
        "\n"
        "# parallel settings\n"
        "[parallelism]\n"
        "    data_parallel_shard_degree = -1\n"
        "\n"
        "# the end\n"
    )
    result, text = fix(tmp_path, original)
    assert text == (
        "[training]\n"
        "  steps=10\n"
        "\n"
        "# parallel settings\n"
        "[parallelism]\n"
        "    data_parallel_shard_degree = -1\n"
        "    # four-way TP\n"
        "    tensor_parallel_degree=4  # heads / 4\n"
        "\n"
        "# the end\n"
    )
    assert tomllib.loads(text)["parallelism"]["tensor_parallel_degree"] == 4


def test_an_emptied_table_goes_and_its_header_comment_stays(tmp_path):
    original = (
        "[model]\n"
        'name = "llama3"\n'
        "\n"
        "[float8]  # fp8\n"
        "enable_float8_linear = true\n"
        "\n"
        "[training]\n"
        "steps = 1\n"
    )
    result, text = fix(tmp_path, original)
    assert text == (
        "[model]\n"
        'name = "llama3"\n'
        'converters = ["quantize.linear.float8"]\n'
        "\n"
        "# fp8\n"
        "[training]\n"
        "steps = 1\n"
    )


def test_a_converter_joins_an_existing_multi_line_list_with_its_comments_above(tmp_path):
    original = (
        "[model]\n"
        "converters = [\n"
        '    "quantize.linear.float8",  # dense layers\n'
        "]\n"
        "\n"
        "[float8]\n"
        "# turn it on\n"
        "enable_float8_linear = true  # fp8\n"
        "enable_fsdp_float8_all_gather = true\n"
    )
    result, text = fix(tmp_path, original)
    assert text == (
        "[model]\n"
        "# turn it on\n"
        "# fp8\n"
        "converters = [\n"
        '    "quantize.linear.float8",  # dense layers\n'
        "]\n"
        "\n"
        "[quantize.linear.float8]\n"
        "enable_fsdp_float8_all_gather = true\n"
    )
    assert result.code == 0, result.out


def test_an_old_table_joins_the_new_table_the_file_has(tmp_path):
    original = (
        "[quantize.linear.float8]\n"
        'recipe_name = "tensorwise"\n'
        "\n"
        "[float8]\n"
        "enable_fsdp_float8_all_gather = true\n"
        "\n"
        "[training]\n"
        "steps = 1\n"
    )
    _, text = fix(tmp_path, original)
    assert text == (
        "[quantize.linear.float8]\n"
        'recipe_name = "tensorwise"\n'
        "enable_fsdp_float8_all_gather = true\n"
        "\n"
        "[training]\n"
        "steps = 1\n"
    )


def test_a_key_written_as_two_keeps_its_comment_on_the_one_with_its_value(tmp_path):
    original = '[training]\ncheckpoint_folder = "ckpt"  # where\nsteps = 1\n\n[checkpoint]\ninterval = 10\n'
    _, text = fix(tmp_path, original)
    assert text == (
        '[training]\nsteps = 1\n\n[checkpoint]\ninterval = 10\nfolder = "ckpt"  # where\n'
        "enable = true\n"
    )


def test_a_value_keeps_its_spelling_when_it_does_not_change(tmp_path):
    _, text = fix(tmp_path, "[training]\nseed = 0x2a  # the answer\n[debug]\n")
    assert text == "[debug]\nseed = 0x2a  # the answer\n"  # and [training], left empty, went


def test_a_py_registry_module_is_not_rewritten(tmp_path):
    module = write(tmp_path, "config_registry.py", "x = 1\n")
    result = validate("--fix", *AT_V022, module)
    assert module.read_text() == "x = 1\n"
    assert "is a registry module; --fix rewrites TOML files only" in result.err


@pytest.mark.parametrize("flag", ["--fix", "--diff"])
def test_output_file_with_fix_is_a_usage_error(tmp_path, flag):
    path = write(tmp_path, "job.toml", "[training]\nbatch_size = 8\n")
    result = validate(flag, "-o", tmp_path / "report.txt", path)
    assert result.code == 2
    assert "-o names a report file" in result.err
    assert path.read_text() == "[training]\nbatch_size = 8\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["--fix", "a.toml"],
        ["a.toml", "--diff"],
        ["--fix", "--diff", "a.toml", "b.toml"],
        ["--fix", "--strict", "--format", "json", "a.toml"],
    ],
)
def test_the_fast_parser_reads_fix_and_diff_as_argparse_does(argv):
    from titan.cli.validate_args import build_parser, parse_common

    fast = parse_common(argv)
    assert fast is not None
    full = vars(build_parser().parse_args(argv))
    assert vars(fast) == {name: full[name] for name in vars(fast)}
    assert (fast.fix, fast.diff) == ("--fix" in argv, "--diff" in argv)


def _run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)


def test_fix_never_imports_torch_and_a_plain_check_never_imports_tomlkit(tmp_path):
    path = write(tmp_path, "job.toml", FLOAT8_TABLE)
    fixing = _run_python(
        "import sys\nfrom titan.cli.validate import run\n"
        f"assert run(['--fix', {str(path)!r}]) == 0\n"
        "assert 'tomlkit' in sys.modules\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    assert fixing.returncode == 0, fixing.stderr
    assert "quantize.linear.float8" in path.read_text()
    checking = _run_python(
        "import sys\nfrom titan.cli.validate import run\n"
        f"run([{str(path)!r}, {str(REPO / 'legacy_configs')!r}])\n"
        "assert 'tomlkit' not in sys.modules, 'tomlkit was imported'\n"
    )
    assert checking.returncode == 0, checking.stderr


# --------------------------------------------------------------------------- property test
#
# Files are built from fragments: v0.2.2 keys and old-era keys of a dozen tables, each table
# written as a [header] (with comments above, on and below it, odd spacing and indentation),
# as dotted keys at the top level, or as one inline table. After --fix:
#
# - the file parses, the validator reports no moved-key or unknown-converter finding, and a
#   second --fix changes nothing, byte for byte;
# - the document is schemas.eras.upgrade's (after the converter names are brought up to date);
# - byte-exact outside the fixed keys. Both texts are cut into statements (a key with its whole
#   value, a header, a comment line) and the same statements are struck from both: keys at a
#   fixed path (the old keys, the keys the upgrade writes, a changed model.converters, and an
#   inline table holding any of them), headers of tables whose keys are all old and headers
#   the original did not have, comment lines whose text belonged to an old key (above it or on
#   its line) or to such a header or inline table, and blank lines. What is left of the two must
#   be equal, statement for statement, and the fix adds at most one blank line per new table.

from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

VALID = {
    "job": [("dump_folder", '"./outputs"'), ("description", '"Llama 3 debug"')],
    "model": [("name", '"llama3"'), ("flavor", '"debugmodel"'), ("hf_assets_path", '"./assets"')],
    "training": [("seq_len", "2048"), ("steps", "1_000"), ("max_norm", "1.0")],
    "optimizer": [("name", '"AdamW"'), ("lr", "8e-4"), ("eps", "1e-8")],
    "lr_scheduler": [("decay_ratio", "0.8")],
    "metrics": [("log_freq", "10"), ("enable_tensorboard", "false")],
    "checkpoint": [("interval", "500"), ("keep_latest_k", "2")],
    "parallelism": [("pipeline_parallel_degree", "1")],
    "activation_checkpoint": [("mode", '"selective"')],
    "quantize.linear.float8": [("recipe_name", '"tensorwise"')],
    "quantize.linear.mx": [("filter_fqns", '["output"]')],
}
OLD = {
    "training": [
        ("batch_size", "8"),
        ("tensor_parallel_degree", "2"),
        ("compile", "true"),
        ("seed", "0x2a"),
        ("warmup_steps", "100"),
        ("data_parallel_degree", "-1"),
    ],
    "checkpoint": [("enable_checkpoint", "true"), ("model_weights_only", "true")],
    "float8": [
        ("enable_float8_linear", "true"),
        ("enable_fsdp_float8_all_gather", "true"),
        ("precompute_float8_dynamic_scale_for_fsdp", "true"),
        ("scaling_type_input", "'dynamic'"),
        ("filter_fqns", '[\n    "output",  # {c}\n]'),
    ],
    "metrics": [("rank_0_only", "true"), ("enable_color_printing", "false")],
    "optimizer": [("fused", "true")],
    "job": [("print_args", "true")],
    "lr_scheduler": [("lr_min", "0.1")],
    "experimental": [("context_parallel_degree", "2")],
}
CONVERTER_VALUES = [
    '"float8"',
    '["float8"]',
    "[\n    'float8',  # {c}\n    # {c}\n]",
    '["quantize.linear.float8"]',
]


class Generated:
    """A generated file and what the test needs to know about it."""

    def __init__(self) -> None:
        self.root: list[str] = []  # dotted keys and inline tables, before the first header
        self.tables: list[str] = []
        self.tagged: set[str] = set()  # comment texts that go with a fixed key or table
        self.all_old: set[tuple[str, ...]] = set()  # header tables whose keys are all old
        self.count = 0

    def comment(self) -> str:
        self.count += 1
        return f"c{self.count}"

    def text(self, *, preamble: bool, final_newline: bool) -> str:
        text = ("# a job config\n\n" if preamble else "") + "".join(self.root)
        text += "".join(self.tables)
        return text if final_newline else text.rstrip("\n")


@st.composite
def legacy_files(draw) -> tuple[str, Generated]:
    made = Generated()
    names = draw(
        st.lists(st.sampled_from(sorted({*VALID, *OLD})), unique=True, min_size=1, max_size=6)
    )
    for table in names:
        pool = [(k, v, False) for k, v in VALID.get(table, [])]
        pool += [(k, v, True) for k, v in OLD.get(table, [])]
        keys = draw(
            st.lists(st.sampled_from(pool), unique_by=lambda k: k[0], min_size=1, max_size=4)
        )
        keys = [(k, v.format(c=made.comment()), old) for k, v, old in keys]
        if table == "model" and draw(st.booleans()):
            value = draw(st.sampled_from(CONVERTER_VALUES))
            keys.append(("converters", value.format(c=made.comment()), False))
        forms = ["header", "header", "header", "dotted", "inline"]
        form = draw(st.sampled_from(forms + (["parent"] if "." in table else [])))
        if form == "inline" and any("\n" in v for _, v, _ in keys):
            form = "header"
        _write_table(draw, made, table, keys, form)
    text = made.text(preamble=draw(st.booleans()), final_newline=draw(st.booleans()))
    return text, made


def _write_table(draw, made: Generated, table: str, keys: list, form: str) -> None:
    has_old = any(old for _, _, old in keys)
    if form == "inline":
        comment = f"  # {made.comment()}" if draw(st.booleans()) else ""
        if has_old and comment:
            made.tagged.add(comment.strip(" #"))
        items = ", ".join(f"{k} = {v}" for k, v, _ in keys)
        made.root.append(f"{table} = {{ {items} }}{comment}\n")
        return
    indent = draw(st.sampled_from(["", "", "  "])) if form != "dotted" else ""
    prefix = {"dotted": f"{table}.", "parent": table.partition(".")[2] + "."}.get(form, "")
    if form == "parent":  # [quantize] with linear.float8.key = value
        table = table.partition(".")[0]
    lines = []
    for key, value, old in keys:
        if draw(st.booleans()):
            lines.append("\n")
        block = [made.comment() for _ in range(draw(st.integers(0, 2)))]
        trailing = made.comment() if draw(st.booleans()) else None
        if old:
            made.tagged.update(block)
            made.tagged.add(trailing or "")
        separator = draw(st.sampled_from([" = ", "=", "   =  "]))
        if draw(st.integers(0, 4)) == 0:
            key = f'"{key}"'
        lines += [f"{indent}# {text}\n" for text in block]
        tail = f"  # {trailing}" if trailing else ""
        lines.append(f"{indent}{prefix}{key}{separator}{value}{tail}\n")
    if form == "dotted":
        made.root += lines
        return
    above = [f"# {made.comment()}\n"] if draw(st.booleans()) else []
    header_comment = made.comment() if draw(st.booleans()) else None
    if all(old for _, _, old in keys) and form == "header":
        made.all_old.add((table,))
        made.tagged.add(header_comment or "")
    header = draw(st.sampled_from([f"[{table}]", f"[ {table} ]"]))
    header += f"   # {header_comment}" if header_comment else ""
    blank = "\n" * draw(st.integers(0, 2))
    made.tables.append(blank + "".join(above) + header + "\n" + "".join(lines))


def _normalised_converters(document: dict) -> dict:
    """The document with model.converters as v0.2.2 names it (what the upgrade leaves to --fix)."""
    import copy

    from titan.schemas.rules import STALE_CONVERTER_NAMES

    document = copy.deepcopy(document)
    model = document.get("model", {})
    if "converters" in model:
        names = model["converters"]
        names = [names] if isinstance(names, str) else names
        model["converters"] = list(dict.fromkeys(STALE_CONVERTER_NAMES.get(n, n) for n in names))
    return document


def _kept(text: str, *, fixed_paths: set, struck_headers, tagged: set[str]) -> list[str]:
    """The statements of ``text`` that --fix must leave as they were (see the comment above)."""
    from titan.migrate.tomledit.statements import statements

    kept = []
    for statement in statements(text):
        body = statement.text.rstrip("\r\n")
        if statement.kind == "blank":
            continue
        if statement.kind == "comment" and body.strip().lstrip("#").strip() in tagged:
            continue
        if statement.kind == "header" and struck_headers(statement.table):
            continue
        if statement.kind == "keyval" and any(
            path[: len(statement.path)] == statement.path for path in fixed_paths
        ):
            continue
        kept.append(body)
    return kept


def _same(value, other) -> bool:
    from titan.migrate.tomledit.statements import same_value

    return same_value(value, other)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(legacy_files())
def test_fix_changes_the_fixed_keys_and_nothing_else(generated):
    import tempfile
    from pathlib import Path

    from titan.migrate.tomledit.statements import statements
    from titan.schemas.eras import upgrade

    text, made = generated
    try:
        original = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        assume(False)  # two tables written in ways TOML does not allow together
    expected, steps = upgrade(_normalised_converters(original))
    assert all(step.kind == "upgraded" for step in steps)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "job.toml"
        path.write_bytes(text.encode())
        result = validate("--fix", *AT_V022, path)
        fixed = path.read_bytes().decode()
        found = validate("--format", "json", path).json()["diagnostics"]
        assert validate("--fix", *AT_V022, path).err == ""
        assert path.read_bytes().decode() == fixed  # idempotent, byte for byte
    assert "Traceback" not in result.err and "not fixing" not in result.err, result.err
    document = tomllib.loads(fixed)
    assert _same(document, expected), (text, fixed)
    assert not [d for d in found if d["code"] in ("moved-key", "unknown-converter")], fixed

    fixed_paths = {step.old for step in steps}
    fixed_paths |= {new for step in steps for new, _ in step.writes}
    if not _same(
        original.get("model", {}).get("converters"), expected.get("model", {}).get("converters")
    ):
        fixed_paths.add(("model", "converters"))
    headers = {s.table for s in statements(text) if s.kind == "header"}

    def struck(table: tuple[str, ...]) -> bool:
        return table in made.all_old or table not in headers

    kept_before = _kept(text, fixed_paths=fixed_paths, struck_headers=struck, tagged=made.tagged)
    kept_after = _kept(fixed, fixed_paths=fixed_paths, struck_headers=struck, tagged=made.tagged)
    assert kept_after == kept_before, (text, fixed)
    new_tables = {s.table for s in statements(fixed) if s.kind == "header"} - headers
    blank = lambda t: sum(1 for line in t.splitlines() if not line.strip())  # noqa: E731
    assert blank(fixed) <= blank(text) + len(new_tables), (text, fixed)


def test_diff_with_a_report_format_is_a_usage_error(tmp_path):
    path = write(tmp_path, "job.toml", "[training]\nbatch_size = 8\n")
    result = validate("--diff", *AT_V022, "--format", "json", path)
    assert result.code == 2 and "--diff prints a unified diff" in result.err


# --------------------------------------------------------------------------- real files

ERAS = sorted(p for p in (REPO / "tests" / "eras").glob("*.toml") if ".v022." not in p.name)


@pytest.mark.parametrize("era", ERAS, ids=lambda p: p.stem)
def test_each_torchtitan_era_is_fixed_to_its_upgrade(tmp_path, era):
    """The era files (one per torchtitan era since 2024-H1): --fix gives the upgraded document,
    leaves exactly the unportable keys for the validator, and a second run changes nothing."""
    from titan.schemas.eras import upgrade

    path = tmp_path / era.name
    path.write_bytes(era.read_bytes())
    original = tomllib.loads(era.read_text(encoding="utf-8"))
    expected, steps = upgrade(_normalised_converters(original))
    unportable = {step.old for step in steps if step.kind == "unportable"}
    result = validate("--fix", *AT_V022, "--format", "json", path)
    fixed = tomllib.loads(path.read_text(encoding="utf-8"))
    for old in unportable:  # left where they were, with their values
        table = fixed
        for part in old[:-1]:
            table = table[part]
        assert _same(table.pop(old[-1]), _get(original, old))
        _prune(fixed, old[:-1])
    assert _same(fixed, expected)
    moved = {
        tuple(d["path"].split("."))
        for d in result.json()["diagnostics"]
        if d["code"] == "moved-key"
    }
    assert moved == unportable
    again = validate("--fix", *AT_V022, path)
    assert "fixed" not in again.err and "not fixing" not in again.err


def _get(table: dict, parts: tuple[str, ...]):
    for part in parts:
        table = table[part]
    return table


def _prune(document: dict, parts: tuple[str, ...]) -> None:
    """Drop the tables along ``parts`` that are empty (innermost first)."""
    for end in range(len(parts), 0, -1):
        parent = _get(document, parts[: end - 1])
        if parent[parts[end - 1]] == {}:
            del parent[parts[end - 1]]


def test_the_upstream_corpus_changes_only_where_v022_itself_failed(tmp_path):
    """Upstream's v0.2.2 TOMLs are v0.2.2 already: --fix touches llama3_405b.toml's stale
    converter name (v0.2.2 raised KeyError on it) and no other byte of any file."""
    from tests.reference import CORPUS, corpus_files

    files = corpus_files()
    copies = []
    for source in files:
        copy = tmp_path / source.relative_to(CORPUS)
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_bytes(source.read_bytes())
        copies.append((source, copy))
    result = validate("--fix", *AT_V022, tmp_path)
    changed = [copy.name for source, copy in copies if copy.read_bytes() != source.read_bytes()]
    assert changed == ["llama3_405b.toml"]
    assert result.err.count("fixed 1 problem in") == 1
    for source, copy in copies:
        if copy.name == "llama3_405b.toml":
            before, after = source.read_text().splitlines(), copy.read_text().splitlines()
            assert [(a, b) for a, b in zip(before, after, strict=True) if a != b] == [
                ('converters = ["float8"]', 'converters = ["quantize.linear.float8"]')
            ]


# --------------------------------------------------------------------------- era defaults

OLD_CHECKPOINTING = """\
[model]
name = "llama3"
flavor = "debugmodel"
hf_assets_path = "./tests/assets/tokenizer"

[training]
batch_size = 4  # per device

[checkpoint]
enable_checkpoint = true
"""


def test_fix_era_defaults_are_written_with_their_reason(tmp_path):
    # 2025-06 evidence: batch_size (gone 2025-06-05) and enable_checkpoint; that era's run
    # saved a full last checkpoint and forced one at step 1, under ./torchtitan/outputs
    result, text = fix(tmp_path, OLD_CHECKPOINTING, "--era", "2025-06-04")
    fixed = tomllib.loads(text)
    assert fixed["checkpoint"] == {
        "enable": True,
        "last_save_model_only": False,
        "enable_first_step_checkpoint": True,
    }
    assert fixed["job"]["dump_folder"] == "./torchtitan/outputs"
    assert "# the default of this file's era: the last checkpoint was a full one" in text
    assert "#1336" in text
    assert "\nlocal_batch_size = 4  # per device\n" in text
    assert result.code == 0, result.out + result.err
    # the fixed file is a v0.2.2 file that runs as the old one did
    from titan.migrate.plan.build import build_plan
    from titan.migrate.targets.live import instantiate

    old = write(tmp_path, "old.toml", OLD_CHECKPOINTING)
    new = tmp_path / "job.toml"
    # its old keys are gone, and a comment keeps the day they dated it to: its flavor still
    # builds that day's model (8 layers, RoPE unscaled, the tokenizer's vocabulary)
    assert "# titan: era = 2025-06-04" in text.splitlines()
    assert build_plan(new).era["assumed"] == "2025-06-04"
    assert build_plan(new).era["source"] == "`# titan: era` comment"
    assert instantiate(build_plan(new)) == instantiate(build_plan(old, era="2025-06-04"))
    assert instantiate(build_plan(new)).model_spec.model.n_layers == 6
    assert instantiate(build_plan(new)).model_spec.model.rope.scaling == "none"


def test_fix_dates_the_file_from_its_evidence(tmp_path):
    path = write(tmp_path, "job.toml", OLD_CHECKPOINTING)
    result = validate("--fix", path)
    fixed = tomllib.loads(path.read_text())
    assert fixed["checkpoint"]["last_save_model_only"] is False
    assert result.code == 0, result.out + result.err


def test_fix_refuses_a_file_whose_era_default_v022_cannot_say(tmp_path):
    text = OLD_CHECKPOINTING.replace('hf_assets_path = "./tests/assets/tokenizer"\n', "")
    path = write(tmp_path, "job.toml", text)
    result = validate("--fix", path)
    assert path.read_text() == text  # nothing written
    assert result.code == 1
    assert "not fixing" in result.err and "write `model.hf_assets_path` in the file first" in (
        result.err
    )
    # the validator says so too, with the key to write
    found = validate(path, "--format", "json").json()["diagnostics"]
    (lost,) = [d for d in found if d["code"] == "era-default-lost"]
    assert lost["path"] == "model.tokenizer_path" and lost["line"] == 1
    assert "`model.hf_assets_path`" in lost["hint"]

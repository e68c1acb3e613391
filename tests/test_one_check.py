"""One check for both readers: ``titan-validate`` judges the cross-field rules on the values
``titan-migrate`` judges, the document upgraded through the era chain
(``titan.schemas.era_chain``), so the two report the same rule findings at the same places.

Every file of the suite is read by both, with and without ``--ngpu 8``; then files written in
an older torchtitan's keys whose layout is wrong only through those keys are reported by
``titan-validate`` at the old key that wrote the value, naming it.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from titan.migrate.plan.build import build_plan
from titan.schemas import rules
from titan.schemas.diagnostics import CODES
from titan.schemas.toml_check import CheckOptions

from tests.helpers import legacy_tomls, validate, write
from tests.reference import corpus_files_if_present

TESTS = Path(__file__).resolve().parent


def _rule_codes() -> frozenset[str]:
    """The codes the cross-field rules emit: the finding codes (``diagnostics.CODES``) written
    as strings in the modules of ``rules.RULES`` (a ``diag("code", ...)``, or a module's own
    ``CODE``)."""
    modules = {importlib.import_module(rule.__module__) for rule in rules.RULES}
    return frozenset(
        node.value
        for module in modules
        for node in ast.walk(ast.parse(Path(module.__file__).read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant) and node.value in CODES
    )


RULE_CODES = _rule_codes()


def suite_files() -> list[Path]:
    """Every legacy config of the suite: the project's own, the era files, the job files and
    Forge app configs of tests/data, and the upstream corpus where it is here."""
    return [
        *legacy_tomls(),
        *sorted((TESTS / "eras").rglob("*.toml")),
        *sorted((TESTS / "data").rglob("*.toml")),
        *sorted((TESTS / "data" / "forge").glob("*.yaml")),
        *corpus_files_if_present(),
    ]


def validated(path: Path, *flags: str) -> list[tuple]:
    """The rule findings ``titan-validate`` reports for ``path``, each in full."""
    found = validate(path, "--format", "json", *flags).json()["diagnostics"]
    return sorted(
        (d["code"], d["severity"], d["path"], d["line"], d["col"], d["message"], d["hint"])
        for d in found
        if d["code"] in RULE_CODES
    )


def migrated(path: Path, ngpu: int | None = None) -> list[tuple]:
    """The rule findings of ``titan-migrate``'s plan for ``path``, each in full."""
    plan = build_plan(path, options=CheckOptions(ngpu=ngpu))
    return sorted(
        (d.code, d.severity.value, d.path, d.span.line, d.span.col, d.message, d.hint)
        for d in plan.diagnostics
        if d.code in RULE_CODES
    )


def test_the_rule_codes_are_read_from_every_rule_module() -> None:
    assert {"world-size", "ddp-layout", "tp-heads", "batch-size", "pipeline-layout"} <= RULE_CODES
    # those tests/test_rules.py counts, and the pipeline rule's own
    assert len(RULE_CODES) == 26


@pytest.mark.parametrize("ngpu", [None, 8])
def test_validate_and_migrate_report_the_same_rule_findings_for_every_file(ngpu) -> None:
    flags = () if ngpu is None else ("--ngpu", str(ngpu))
    files = suite_files()
    assert len(files) > 50  # the suite's folders were found: none would compare nothing
    differ = {
        str(path): (mine, theirs)
        for path in files
        if (mine := validated(path, *flags)) != (theirs := migrated(path, ngpu))
    }
    assert differ == {}


# ------------------------------------------------------------- wrong only through the old keys

LLAMA = '[model]\nname = "llama3"\nflavor = "debugmodel"\n\n'

CASES = {
    "ddp-with-pipeline-in-2024-keys": (
        LLAMA + "[training]\n"
        "batch_size = 8\n"
        'data_parallel_type = "ddp"\n'
        "data_parallel_degree = 4\n"
        "\n"
        "[experimental]\n"
        "pipeline_parallel_degree = 2\n",
        None,
        [
            (
                "ddp-layout",
                "parallelism.data_parallel_replicate_degree",
                8,
                "training.data_parallel_degree",
            )
        ],
    ),
    "tp-degree-under-training-not-dividing-the-heads": (
        LLAMA + "[training]\nbatch_size = 8\nseq_len = 2048\ntensor_parallel_degree = 3\n",
        None,
        [
            ("seq-len", "training.seq_len", 7, None),
            (
                "tp-heads",
                "parallelism.tensor_parallel_degree",
                8,
                "training.tensor_parallel_degree",
            ),
        ],
    ),
    "tp-degree-under-training-on-8-gpus": (
        LLAMA + "[training]\nbatch_size = 8\nseq_len = 2048\ntensor_parallel_degree = 3\n",
        8,
        [  # no seq-len: a length for tp=3 is moot while 8 GPUs cannot hold it
            (
                "tp-heads",
                "parallelism.tensor_parallel_degree",
                8,
                "training.tensor_parallel_degree",
            ),
            (
                "world-size",
                "parallelism.tensor_parallel_degree",
                8,
                "training.tensor_parallel_degree",
            ),
        ],
    ),
    # training.batch_size is the local batch the microbatch size must divide (2025-04, when
    # the microbatch size came and batch_size was not yet renamed)
    "old-batch-size-not-divisible-by-the-microbatch-size": (
        LLAMA + "[training]\nbatch_size = 6\n\n"
        "[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_microbatch_size = 4\n",
        None,
        [("pipeline-layout", "parallelism.pipeline_parallel_microbatch_size", 10, None)],
    ),
    # the old PP keys give 2 microbatches of 4 (8 / 2) to a 1F1B pipeline of 4 stages; the
    # schedule is the default, which no line of the file writes
    "old-pipeline-keys-with-fewer-microbatches-than-stages": (
        LLAMA + "[training]\nbatch_size = 8\n\n"
        "[experimental]\npipeline_parallel_degree = 4\npipeline_parallel_microbatches = 2\n",
        None,
        [("pipeline-layout", "parallelism.pipeline_parallel_schedule", 1, None)],
    ),
    "old-cp-key-with-a-sequence-it-cannot-split": (
        LLAMA + "[training]\nbatch_size = 8\nseq_len = 2050\n\n"
        "[experimental]\ncontext_parallel_degree = 2\n",
        None,
        [("seq-len", "training.seq_len", 7, None)],
    ),
    "old-cp-key-on-8-gpus": (
        LLAMA + "[training]\nbatch_size = 8\nseq_len = 2052\n\n"  # 2052 splits into 2·3 chunks
        "[experimental]\ncontext_parallel_degree = 3\n",
        8,
        [
            (
                "world-size",
                "parallelism.context_parallel_degree",
                10,
                "experimental.context_parallel_degree",
            )
        ],
    ),
    # a 2024 data parallel degree that leaves GPUs idle
    "old-dp-degree-on-8-gpus": (
        LLAMA + "[training]\nbatch_size = 8\ndata_parallel_degree = 2\n",
        8,
        [
            (
                "world-size",
                "parallelism.data_parallel_shard_degree",
                7,
                "training.data_parallel_degree",
            )
        ],
    ),
    # the float8 option writes its converter's table, which the file never enables
    "old-float8-option-without-its-converter": (
        LLAMA + "[float8]\nenable_fsdp_float8_all_gather = true\n",
        None,
        [("inert-section", "quantize.linear.float8", 6, "float8.enable_fsdp_float8_all_gather")],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_layout_wrong_through_old_keys_is_reported_at_the_old_key(tmp_path, case) -> None:
    text, ngpu, expected = CASES[case]
    path = write(tmp_path, "job.toml", text)
    flags = () if ngpu is None else ("--ngpu", str(ngpu))
    found = validated(path, *flags)
    assert [(code, key, line) for code, _, key, line, *_ in found] == [
        (code, key, line) for code, key, line, _ in expected
    ]
    for (*_, message, _hint), (*_, old) in zip(found, expected, strict=True):
        if old is None:
            assert "(written by" not in message
        else:
            assert message.endswith(f"(written by `{old}`)")
    assert found == migrated(path, ngpu)  # and titan-migrate says the same


def test_a_file_in_v022_keys_is_judged_as_written(tmp_path) -> None:
    """The same layout in v0.2.2 keys: its findings are at its own keys, naming no old one."""
    path = write(
        tmp_path,
        "job.toml",
        LLAMA + "[parallelism]\ndata_parallel_replicate_degree = 4\n"
        "data_parallel_shard_degree = 1\npipeline_parallel_degree = 2\n",
    )
    found = validated(path)
    assert [(code, key, line) for code, _, key, line, *_ in found] == [
        ("ddp-layout", "parallelism.data_parallel_replicate_degree", 6)
    ]
    assert "written by" not in found[0][5]
    assert found == migrated(path)


def test_the_registry_check_of_the_migrated_file_does_not_repeat_the_finding(tmp_path) -> None:
    """``--as-registry`` adds what the migrated config alone would report: the legacy check
    now reports the DDP layout of the old keys itself, so it is said once."""
    text, _, expected = CASES["ddp-with-pipeline-in-2024-keys"]
    path = write(tmp_path, "job.toml", text)
    found = validate(path, "--as-registry", "--format", "json").json()["diagnostics"]
    assert [(d["code"], d["line"]) for d in found if d["code"] == "ddp-layout"] == [
        ("ddp-layout", expected[0][2])
    ]

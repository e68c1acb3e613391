"""A model family is one folder: ``titan/models/<family>/`` and its ``family.py`` record.

Two guards. Every place outside a family's own folder that names two or more families in one
literal list, tuple, set or dict is listed here with why it may; a new one (a hand-kept list of
families that would need an edit for the next family) fails until it reads titan's list instead
or is added with its reason. And a family folder added to a copy of the checkout is found by
every part of titan after the one regeneration, with no other file edited.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from titan.models import FAMILY_ALIASES, SUPPORTED_MODELS

REPO = Path(__file__).resolve().parents[1]
SCANNED = ("schemas", "migrate", "titan", "tests", "bench")
THIS_FILE = Path(__file__).resolve()
"""This file lists the places, so it is not one."""

PLACES: dict[tuple[str, tuple[str, ...]], str] = {
    ("schemas/flavor_table.py", SUPPORTED_MODELS): "generated from the family records",
    ("schemas/flavor_configs.py", SUPPORTED_MODELS): "generated from the family records",
    ("tests/test_flavor_eras.py", ("deepseek_v3", "llama3", "llama4")): "the families whose "
    "debug model of an older era is built and run (the others' are too large for a CPU test)",
    ("schemas/model_names.py", ("deepseek_v3", "flux", "llama3")): "the point releases (llama3.1, "
    "flux.1) that name a family's own model, not a fork's",
    (
        "migrate/targets/upstream_spec_030.py",
        ("deepseek_v3", "flux", "gpt_oss", "llama3", "qwen3"),
    ): "generated from torchtitan 0.3.0: its families, not titan's",
    (
        "migrate/targets/upstream_api_030.py",
        ("deepseek_v3", "flux", "gpt_oss", "llama3", "qwen3"),
    ): "generated from torchtitan 0.3.0 (its flavor facts): its families, not titan's",
    (
        "migrate/targets/upstream_api_030.py",
        ("deepseek_v3", "llama3", "qwen3"),
    ): "generated from torchtitan 0.3.0 (its module names): its families, not titan's",
    (
        "tests/test_upstream_static.py",
        ("deepseek_v3", "flux", "gpt_oss", "llama3", "qwen3"),
    ): "every family of torchtitan 0.3.0, whose registries the static check reads",
    (
        "tests/test_upstream_static.py",
        ("deepseek_v3", "gpt_oss", "llama3", "qwen3"),
    ): "the 0.3.0 families whose flavors the table gives head counts for",
    (
        "tests/upstream/test_upstream_static_verdict.py",
        ("deepseek_v3", "gpt_oss", "llama3", "qwen3"),
    ): "the 0.3.0 language families whose modules the property test writes",
    (
        "migrate/targets/upstream_spec_030.py",
        ("deepseek_v3", "gpt_oss", "llama3", "qwen3"),
    ): "generated from torchtitan 0.3.0: the linears of its families",
    (
        "migrate/specgen/upstream_codegen.py",
        ("deepseek_v3", "gpt_oss", "llama3", "qwen3"),
    ): "the torchtitan 0.3.0 families whose linears the generator reads (0.3.0 has no llama4)",
    (
        "tests/dist_scripts/expert_parallel_check.py",
        ("deepseek_v3", "gpt_oss", "llama4", "qwen3"),
    ): "each MoE family's small expert-parallel model, built by its own function",
    (
        "tests/test_expert_parallel_tp.py",
        ("deepseek_v3", "gpt_oss", "llama4", "qwen3"),
    ): "the families the expert-parallel script has a small model for",
    ("tests/test_expert_parallel_tp.py", ("gpt_oss", "qwen3")): "cases of two families",
    (
        "tests/test_block_causal.py",
        ("deepseek_v3", "gpt_oss", "llama3", "llama4", "qwen3"),
    ): "each family's flavor with block-causal attention and the fields that shrink it",
    ("tests/test_block_causal.py", ("deepseek_v3", "llama3", "llama4")): "the same, flex only",
    ("tests/test_extensions_cli.py", ("flux", "llama3_ft")): "the legacy folders whose TOMLs "
    "name a built-in custom module",
    ("tests/test_generated_bindings.py", ("llama3", "qwen3")): "names a generated module may "
    "not take (a family package it imports)",
    ("tests/test_generated_names.py", ("llama3", "qwen3")): "names one generated module imports",
    ("tests/test_upstream_spec_data.py", ("deepseek_v3", "flux", "gpt_oss", "qwen3")): "the "
    "torchtitan 0.3.0 families its generated table must hold",
    ("tests/test_upstream_target.py", ("llama3", "qwen3")): "cases of two families",
    (
        "bench/migrate_tree.py",
        ("deepseek_v3", "gpt_oss", "llama3", "llama3_ft", "llama4", "qwen3"),
    ): "the flavors the seeded migrate-tree corpus draws from (changing them changes the bench)",
    ("bench/migrate_tree.py", ("llama3", "qwen3")): "the families its float8 jobs use",
    (
        "tests/test_context_parallel_train.py",
        ("deepseek_v3", "gpt_oss", "llama3", "llama4", "qwen3"),
    ): "each family's context-parallel scenarios on two ranks (masks, iRoPE, sinks)",
    (
        "tests/test_context_parallel_train.py",
        ("deepseek_v3", "gpt_oss", "llama3", "qwen3"),
    ): "each family's context-parallel scenarios on four ranks",
}
"""Every place that names two or more families in one literal (path, the names) -> why it may."""


def _in_a_family_folder(parts: tuple[str, ...]) -> bool:
    """Whether a path (as parts) lies inside ``titan/models/<family>/``: a family names itself."""
    return parts[:2] == ("titan", "models") and len(parts) > 3 and parts[2] in SUPPORTED_MODELS


def places(root: Path, names: set[str]) -> dict[tuple[str, tuple[str, ...]], int]:
    """(path, the family names) -> how many literals there, for every list, tuple, set or dict
    (its keys) of the Python files under ``root``'s scanned folders naming two or more of
    ``names``."""
    found: dict[tuple[str, tuple[str, ...]], int] = {}
    for folder in SCANNED:
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root).parts
            if _in_a_family_folder(parts) or "__pycache__" in parts or path == THIS_FILE:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.List | ast.Tuple | ast.Set):
                    items = node.elts
                elif isinstance(node, ast.Dict):
                    items = [key for key in node.keys if key is not None]
                else:
                    continue
                named = {i.value for i in items if isinstance(i, ast.Constant) and i.value in names}
                if len(named) >= 2:
                    key = ("/".join(parts), tuple(sorted(named)))
                    found[key] = found.get(key, 0) + 1
    return found


def alias_maps(root: Path) -> list[str]:
    """The Python files under ``root``'s scanned folders (outside the family folders) with a
    literal dict that maps a family alias to its family: a copy of what the records say."""
    found = []
    for folder in SCANNED:
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root).parts
            if _in_a_family_folder(parts) or "__pycache__" in parts or path == THIS_FILE:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Dict) and any(
                    isinstance(k, ast.Constant)
                    and isinstance(v, ast.Constant)
                    and k.value in FAMILY_ALIASES
                    and FAMILY_ALIASES[k.value] == v.value
                    for k, v in zip(node.keys, node.values, strict=True)
                ):
                    found.append("/".join(parts))
    return found


def _family_names() -> set[str]:
    return {*SUPPORTED_MODELS, *FAMILY_ALIASES}


def test_no_hand_kept_list_of_families():
    found = places(REPO, _family_names())
    listed = set(PLACES)
    new = sorted(set(found) - listed)
    assert not new, (
        "a literal names several model families; read titan.models.SUPPORTED_MODELS (or "
        "titan.schemas.flavors in titan.schemas / titan.migrate) instead, or add it to PLACES "
        f"with why it may: {new}"
    )
    gone = sorted(listed - set(found))
    assert not gone, f"PLACES lists places that no longer name families: {gone}"


def test_no_literal_names_every_family():
    # Only the generated tables may: a list of all families is a list someone must keep.
    every = tuple(sorted(SUPPORTED_MODELS))
    found = [
        path for (path, names) in places(REPO, _family_names()) if names[: len(every)] == every
    ]
    assert found == ["schemas/flavor_configs.py", "schemas/flavor_table.py"], found


def test_no_copy_of_the_alias_map():
    assert alias_maps(REPO) == []


def test_the_scan_finds_lists_sets_and_dict_keys(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "case.py").write_text(
        textwrap.dedent(
            """
            A = ("llama3", "qwen3")
            B = {"flux", "gpt_oss", "other"}
            C = {"llama4": 1, "llama3_ft": 2}
            D = ["llama3"]  # one family is a case, not a list
            E = {"key": "llama3", "other": "qwen3"}  # values are not keys
            """
        )
    )
    models = tmp_path / "titan" / "models" / "llama3"
    models.mkdir(parents=True)
    (models / "x.py").write_text('SELF = ("llama3", "llama3_ft")\n')  # a family names itself
    assert places(tmp_path, _family_names()) == {
        ("tests/case.py", ("llama3", "qwen3")): 1,
        ("tests/case.py", ("flux", "gpt_oss")): 1,
        ("tests/case.py", ("llama3_ft", "llama4")): 1,
    }
    (tmp_path / "tests" / "aliases.py").write_text('ALIASES = {"llama3_ft": "llama3"}\n')
    assert alias_maps(tmp_path) == ["tests/aliases.py"]


# A family made of a llama3 flavor under a new name, with an alias, declared by its folder only.
TOY_FAMILY = {
    "__init__.py": '''
        """toyfam: a family made in a test."""

        from titan.models.llama3.model_config import Llama3Model
        from titan.models.toyfam.family import FAMILY


        def model_registry(flavor):
            """A fresh ModelSpec of ``flavor``."""
            return FAMILY.model_spec(flavor)
        ''',
    "family.py": '''
        """The toyfam record."""

        from titan.models.common.model_family import ModelFamily
        from titan.models.llama3 import flavors
        from titan.models.llama3.model_config import Llama3Model
        from titan.protocols.model_spec import Capabilities

        FAMILY = ModelFamily(
            name="toyfam",
            flavors={"tiny": flavors.FLAVORS["debugmodel"]},
            model_config=Llama3Model.Config,
            capabilities=Capabilities(fsdp=True),
            aliases={"toyfam_ft": "titan.experiments.ft.trainer:FaultTolerantTrainer.Config"},
        )
        ''',
}

PROBE = """
import io, json, sys
import titan.models
from titan.cli import migrate, validate
from titan.migrate.codegen import names
from titan.migrate.plan import trainers
from titan.schemas import flavors

spec = titan.models.model_registry("toyfam_ft", "tiny")
out, err = io.StringIO(), io.StringIO()
validate.run(["job.toml", "--format", "json"], stdout=out, stderr=err)
code = io.StringIO()
migrate.run(["job.toml"], stdout=code, stderr=io.StringIO())
print(json.dumps({
    "supported": titan.models.SUPPORTED_MODELS,
    "aliases": titan.models.FAMILY_ALIASES,
    "spec": [spec.name, spec.flavor, spec.capabilities.fsdp],
    "flavors": flavors.flavor_names("toyfam_ft"),
    "heads": flavors.flavor("toyfam", "tiny").n_heads,
    "names": names.FAMILIES,
    "config": names.MODEL_CONFIGS.get("toyfam"),
    "trainer": trainers.MODEL_TRAINERS.get("toyfam_ft"),
    "findings": [d["code"] for d in json.loads(out.getvalue())["diagnostics"]],
    "code": code.getvalue(),
}))
"""


def test_a_new_family_folder_is_found_everywhere_after_one_regeneration(tmp_path):
    copy = tmp_path / "checkout"
    for folder in ("titan", "schemas", "migrate"):
        shutil.copytree(REPO / folder, copy / folder, ignore=shutil.ignore_patterns("__pycache__"))
    family = copy / "titan" / "models" / "toyfam"
    family.mkdir()
    for name, text in TOY_FAMILY.items():
        (family / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    (copy / "job.toml").write_text('[model]\nname = "toyfam_ft"\nflavor = "tiny"\n')
    env = {**os.environ, "PYTHONPATH": str(copy)}

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *argv], cwd=copy, env=env, capture_output=True, text=True, check=True
        )

    run("-m", "titan.schemas.flavor_codegen")  # `make schema`'s step for the table
    found = json.loads(run("-c", PROBE).stdout)
    assert found["supported"] == sorted([*SUPPORTED_MODELS, "toyfam"])
    assert found["aliases"] == {**FAMILY_ALIASES, "toyfam_ft": "toyfam"}
    assert found["spec"] == ["toyfam", "tiny", True]
    assert found["flavors"] == ["tiny"] and found["heads"] == 16
    assert "toyfam" in found["names"]
    assert found["config"] == "titan.models.toyfam:Llama3Model.Config"
    assert found["trainer"] == "titan.experiments.ft.trainer:FaultTolerantTrainer.Config"
    assert "unknown-model" not in found["findings"], found["findings"]
    assert "from titan.models.toyfam import model_registry" in found["code"], found["code"]
    assert "FaultTolerantTrainer" in found["code"]
    # The checkout's own files are untouched: only the copy was regenerated.
    assert "toyfam" not in (REPO / "schemas" / "flavor_table.py").read_text(encoding="utf-8")

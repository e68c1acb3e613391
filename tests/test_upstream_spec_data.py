"""What the migration to torchtitan 0.3.0 relies on in ``migrate/targets/upstream_spec_030.py``.

The table is generated from the real package (``tests/upstream/test_upstream_spec.py`` keeps it
current); these are the facts of it that the migration's mapping was written against, checked in
titan's own environment, which has no torch-free way to look at torchtitan otherwise.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from titan.migrate.targets.spec_types import REQUIRED, ClassInfo, Default, FamilyInfo
from titan.migrate.targets.upstream_spec_030 import (
    ATTENTION_BACKENDS,
    CLASSES,
    FAMILIES,
    REFUSED_ATTENTION_BACKENDS,
    VERSION,
)

TRAINER = "torchtitan.trainer:Trainer.Config"
PROFILER = "torchtitan.tools.profiler:Profiler.Config"
PARAM_GROUP = "torchtitan.components.optimizer.optimizer:ParamGroupConfig"
REPO = Path(__file__).resolve().parents[1]


def test_the_version_and_the_value_types():
    assert VERSION == "0.3.0"
    assert all(isinstance(info, ClassInfo) for info in CLASSES.values())
    assert all(isinstance(info, FamilyInfo) for info in FAMILIES.values())


def test_trainer_config_has_the_registry_eras_sections():
    fields = CLASSES[TRAINER].defaults
    for name in ("loss", "dataloader", "profiler", "model_spec", "optimizer", "validator"):
        assert name in fields
    assert "profiling" not in fields
    assert "description" not in fields
    assert fields["model_spec"] is None


def test_loss_and_dataloader_default_to_abstract_bases():
    fields = CLASSES[TRAINER].defaults
    assert fields["loss"] == Default("torchtitan.components.loss:BaseLoss.Config", {})
    assert fields["dataloader"].cls == "torchtitan.components.dataloader:BaseDataLoader.Config"


def test_a_default_of_a_subclass_names_the_subclass():
    # checkpoint is annotated BaseCheckpointManager.Config; its default is the DCP manager's.
    checkpoint = CLASSES[TRAINER].defaults["checkpoint"]
    assert checkpoint.cls == "torchtitan.components.checkpointer.dcp:CheckpointManager.Config"
    assert "async_mode" in CLASSES[checkpoint.cls].defaults


def test_profiler_folders():
    fields = CLASSES[PROFILER].defaults
    assert fields["save_traces_folder"] == "profiling/traces"
    assert fields["save_memory_snapshot_folder"] == "profiling/memory_snapshot"


def test_param_group_fields_without_a_default_are_required():
    info = CLASSES[PARAM_GROUP]
    assert info.defaults["pattern"] is REQUIRED
    assert info.defaults["optimizer_name"] is REQUIRED
    assert info.defaults["optimizer_kwargs"] == {}
    assert (info.module, info.owner, info.qualname) == (
        "torchtitan.components.optimizer",
        "ParamGroupConfig",
        "ParamGroupConfig",
    )


def test_every_default_object_is_a_class_of_the_table():
    def objects(value):
        if isinstance(value, Default):
            yield value
            for inner in value.changed.values():
                yield from objects(inner)
        elif isinstance(value, list | tuple):
            for inner in value:
                yield from objects(inner)
        elif isinstance(value, dict):
            for inner in value.values():
                yield from objects(inner)

    for info in CLASSES.values():
        for default in objects(info.defaults):
            assert default.cls in CLASSES


def test_the_roots_are_there():
    for path in (
        "torchtitan.distributed.activation_checkpoint:SelectiveAC.Config",
        "torchtitan.distributed.activation_checkpoint:FullAC.Config",
        "torchtitan.distributed.activation_checkpoint:MemoryBudgetAC.Config",
        "torchtitan.components.quantization.float8:Float8LinearConverter.Config",
        "torchtitan.components.quantization.mx:MXFP8LinearConverter.Config",
        "torchtitan.components.quantization.float8:Float8GroupedExpertsConverter.Config",
        "torchtitan.components.quantization.mx:MXFP8GroupedExpertsConverter.Config",
        "torchtitan.components.loss:ChunkedLossWrapper.Config",
        "torchtitan.components.loss:CrossEntropyLoss.Config",
        "torchtitan.hf_datasets.text_datasets:HuggingFaceTextDataLoader.Config",
        "torchtitan.experiments.torchft.trainer:FaultTolerantTrainer.Config",
        "torchtitan.experiments.torchft.checkpoint:TorchFTCheckpointManager.Config",
        "torchtitan.models.flux.trainer:FluxTrainer.Config",
    ):
        assert path in CLASSES, path


def test_families_and_flavors():
    assert FAMILIES["llama3"].module == "torchtitan.models.llama3"
    assert FAMILIES["llama3"].flavors == ("debugmodel", "1B", "3B", "8B", "70B", "405B")
    assert "llama4" not in FAMILIES
    for family in ("qwen3", "deepseek_v3", "gpt_oss", "kimi_k2_7", "qwen3_5", "flux"):
        assert FAMILIES[family].module == f"torchtitan.models.{family}"
        assert FAMILIES[family].flavors
    assert "flavor" not in FAMILIES["llama3"].params
    assert FAMILIES["llama3"].params["attn_backend"] == "flex"
    assert FAMILIES["gpt_oss"].params["attn_backend"] == "varlen"
    assert FAMILIES["deepseek_v3"].params["moe_comm_backend"] == "standard"


def test_attention_backends():
    assert {"flex", "varlen"} <= set(ATTENTION_BACKENDS)
    assert "sdpa" not in ATTENTION_BACKENDS
    assert "sdpa" in REFUSED_ATTENTION_BACKENDS
    for family in FAMILIES.values():
        backend = family.params.get("attn_backend")
        assert backend is None or backend in ATTENTION_BACKENDS


def test_reading_the_table_imports_neither_torch_nor_torchtitan():
    code = (
        "import sys, titan.migrate.targets.upstream_spec_030\n"
        "print(sorted(m for m in ('torch', 'torchtitan', 'titan.config', 'titan.models') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert done.stdout.strip() == "[]"

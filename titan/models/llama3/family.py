"""The llama3 family's record: its flavors, what titan-train runs for it, and with what."""

from __future__ import annotations

from titan.models.common.model_family import ModelFamily
from titan.models.llama3 import flavors
from titan.models.llama3.model_config import Llama3Model
from titan.protocols.model_spec import Capabilities

FAMILY = ModelFamily(
    name="llama3",
    flavors=flavors.FLAVORS,
    model_config=Llama3Model.Config,
    aliases={"llama3_ft": "titan.experiments.ft.trainer:FaultTolerantTrainer.Config"},
    # EP is not in titan-train for llama3 (it has no experts); everything else it runs, tests
    # prove it.
    capabilities=Capabilities(
        fsdp=True,
        ddp=True,
        tp=True,
        cp=True,
        pp=True,
        float8=True,
        compile=True,
        activation_checkpoint=True,
        hf_checkpoints=True,
    ),
    build_loss_fn="titan.components.loss:build_cross_entropy_loss",
    parallelize_fn="titan.models.llama3.parallelize:parallelize_llama",
    state_dict_adapter="titan.models.llama3.state_dict_adapter:Llama3StateDictAdapter",
)
"""The llama3 family, as every other part of titan reads it."""

"""``ModelSpec``: a flavor's model config, the functions that train it, and what it supports.

Whether titan-train can run a config on a family is decided in one place,
:meth:`ModelSpec.refusals`, from the family's :class:`Capabilities` record, before anything is
built or written. Everything here is plain data: reading a registry never imports torch.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from titan.config.configurable import NotBuildableError
from titan.protocols.module import BaseModel
from titan.schemas.layout_rules import resolve_dp_shard
from titan.schemas.ranges import is_int64


# Not frozen: it is a field of the config tree, whose classes refuse unknown attributes with
# AttributeError, and Python 3.11's frozen+slots dataclasses raise TypeError for them instead.
@dataclasses.dataclass(kw_only=True, slots=True)
class Capabilities:
    """What titan-train can run for one model family: training at all, then each feature.

    A feature is ``False`` until the family's code implements it and a test proves it; turning
    one on is one keyword here (plus the code behind it).
    """

    training_refusal: str | None = None
    """Why titan-train cannot train this family at all; ``None`` when it can."""
    fsdp: bool = False
    """FSDP2 sharding, alone or inside replicas (HSDP): data_parallel_shard_degree > 1."""
    ddp: bool = False
    """Pure replication (DDP): data_parallel_replicate_degree > 1 with shard degree 1."""
    tp: bool = False
    """Tensor parallel (with sequence and loss parallel): tensor_parallel_degree > 1."""
    ep: bool = False
    """Expert parallel: expert_parallel_degree > 1."""
    etp: bool = False
    """Tensor parallel inside the experts: expert_tensor_parallel_degree > 1."""
    pp: bool = False
    """Pipeline parallel: pipeline_parallel_degree > 1."""
    cp: bool = False
    """Context parallel: context_parallel_degree > 1."""
    float8: bool = False
    """torchao float8 linears (the float8 linear converter)."""
    compile: bool = False
    """torch.compile of the model's blocks."""
    activation_checkpoint: bool = False
    """Activation checkpointing of the model's blocks (any mode but "none")."""
    hf_checkpoints: bool = False
    """Loading and saving Hugging Face safetensors through the family's state-dict adapter."""
    loaders_read_assets: bool = False
    """The family's data loaders build their own tokenizers: the run passes every loader it
    builds its ``hf_assets_path=`` and its text encoders' settings (``encoder=``)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class Refusal:
    """One thing titan-train will not run, named by the config key that asks for it."""

    key: str
    """Dotted path of the setting, in registry spelling (``parallelism.tensor_parallel_degree``)."""
    message: str
    """What is refused, with the value asked for."""
    hint: str
    """How to change the config so that it runs."""

    def __str__(self) -> str:
        """The refusal as one sentence: what, then how to fix it."""
        return f"{self.message}; {self.hint}"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class _Feature:
    """A capability, how a trainer config turns it on, and how to turn it off."""

    name: str
    """The ``Capabilities`` field that allows it."""
    words: str
    """The feature in the user's words."""
    key: str
    """The config key that turns it on."""
    asked: Callable[[Any, int | None], Any]
    """The value of ``key`` that turns the feature on (or ``None``/``False`` when it is off)."""
    fix: str
    """How to turn it off."""


# A config's values are read here before, or beside, its type check: a value of the wrong type
# is that check's finding, never a feature asked for (nor a crash in the arithmetic below).


def _whole(value: Any) -> int | None:
    """``value`` when it is a whole number (not a bool), else None."""
    return value if is_int64(value) else None


def _degree(field: str) -> Callable[[Any, int | None], Any]:
    """How a config asks for the parallelism ``parallelism.<field>``: a degree other than 1."""

    def asked(config: Any, world_size: int | None) -> Any:
        """The degree, or None when it is 1 (or not a whole number)."""
        degree = _whole(getattr(config.parallelism, field))
        return degree if degree is not None and degree != 1 else None

    return asked


def _shard_degree(config: Any, world_size: int | None) -> int | None:
    """The FSDP degree when > 1: -1 takes the ranks the other degrees leave over
    (``titan.schemas.layout_rules.resolve_dp_shard``, as the rules resolve it)."""
    parallelism = config.parallelism
    names = ("replicate", "tp", "pp", "cp")
    fields = (
        "data_parallel_replicate_degree",
        "tensor_parallel_degree",
        "pipeline_parallel_degree",
        "context_parallel_degree",
    )
    others = {name: _whole(getattr(parallelism, f)) for name, f in zip(names, fields, strict=True)}
    shard = _whole(parallelism.data_parallel_shard_degree)
    if shard is None or None in others.values():
        return None
    resolved = resolve_dp_shard(shard, world_size=world_size, **others)
    return resolved if resolved is not None and resolved > 1 else None


def _ddp_degree(config: Any, world_size: int | None) -> int | None:
    """The DDP degree when replicas are not also sharded (that is HSDP, an FSDP feature)."""
    replicate = _whole(config.parallelism.data_parallel_replicate_degree)
    if replicate is None or replicate <= 1:
        return None
    return replicate if _shard_degree(config, world_size) is None else None


def _expert_tensor_degree(config: Any, world_size: int | None) -> int | None:
    """The expert TP degree when > 1 under expert parallel. Without EP (degree 1) there are no
    expert shards to split, and torchtitan reads the degree only with EP, so it asks nothing."""
    if _degree("expert_parallel_degree")(config, world_size) is None:
        return None
    return _degree("expert_tensor_parallel_degree")(config, world_size)


def _float8(config: Any, world_size: int | None) -> bool:
    """Whether the converters include torchao's float8 linears."""
    converters = config.model_converters.converters
    return isinstance(converters, list | tuple) and any(
        getattr(type(c), "_legacy_name", None) == "quantize.linear.float8" for c in converters
    )


def _compile(config: Any, world_size: int | None) -> bool:
    """Whether the model's blocks are compiled (compiling only the loss is not the model's)."""
    components = config.compile.components
    return (
        config.compile.enable is True
        and isinstance(components, list | tuple)
        and "model" in components
    )


def _activation_checkpoint(config: Any, world_size: int | None) -> str | None:
    """The activation checkpointing mode, or None when it is off."""
    mode = config.activation_checkpoint.mode
    return mode if isinstance(mode, str) and mode != "none" else None


def _checkpoint_flag(field: str) -> Callable[[Any, int | None], Any]:
    """How a config asks for the checkpoint switch ``checkpoint.<field>``: setting it."""

    def asked(config: Any, world_size: int | None) -> Any:
        """Whether the switch is on."""
        return getattr(config.checkpoint, field) is True

    return asked


FEATURES: tuple[_Feature, ...] = (
    _Feature(
        name="pp",
        words="pipeline parallel",
        key="parallelism.pipeline_parallel_degree",
        asked=_degree("pipeline_parallel_degree"),
        fix="set parallelism.pipeline_parallel_degree to 1",
    ),
    _Feature(
        name="cp",
        words="context parallel",
        key="parallelism.context_parallel_degree",
        asked=_degree("context_parallel_degree"),
        fix="set parallelism.context_parallel_degree to 1",
    ),
    _Feature(
        name="ep",
        words="expert parallel",
        key="parallelism.expert_parallel_degree",
        asked=_degree("expert_parallel_degree"),
        fix="set parallelism.expert_parallel_degree to 1",
    ),
    _Feature(
        name="etp",
        words="expert tensor parallel",
        key="parallelism.expert_tensor_parallel_degree",
        asked=_expert_tensor_degree,
        fix="set parallelism.expert_tensor_parallel_degree to 1",
    ),
    _Feature(
        name="tp",
        words="tensor parallel",
        key="parallelism.tensor_parallel_degree",
        asked=_degree("tensor_parallel_degree"),
        fix="set parallelism.tensor_parallel_degree to 1",
    ),
    _Feature(
        name="fsdp",
        words="FSDP/HSDP sharding",
        key="parallelism.data_parallel_shard_degree",
        asked=_shard_degree,
        fix="set parallelism.data_parallel_shard_degree to 1",
    ),
    _Feature(
        name="ddp",
        words="DDP replication",
        key="parallelism.data_parallel_replicate_degree",
        asked=_ddp_degree,
        fix="set parallelism.data_parallel_replicate_degree to 1",
    ),
    _Feature(
        name="float8",
        words="float8 training",
        key="model_converters.converters",
        asked=_float8,
        fix="remove the float8 converter from model_converters.converters",
    ),
    _Feature(
        name="compile",
        words="torch.compile of the model",
        key="compile.enable",
        asked=_compile,
        fix="set compile.enable = False or drop 'model' from compile.components",
    ),
    _Feature(
        name="activation_checkpoint",
        words="activation checkpointing",
        key="activation_checkpoint.mode",
        asked=_activation_checkpoint,
        fix='set activation_checkpoint.mode = "none"',
    ),
    _Feature(
        name="hf_checkpoints",
        words="loading Hugging Face checkpoints",
        key="checkpoint.initial_load_in_hf",
        asked=_checkpoint_flag("initial_load_in_hf"),
        fix="set checkpoint.initial_load_in_hf = False and load a DCP checkpoint",
    ),
    _Feature(
        name="hf_checkpoints",
        words="saving Hugging Face checkpoints",
        key="checkpoint.last_save_in_hf",
        asked=_checkpoint_flag("last_save_in_hf"),
        fix="set checkpoint.last_save_in_hf = False",
    ),
)
"""Every capability a config can ask for, in the order refusals are reported (degrees first)."""


@dataclasses.dataclass(kw_only=True, slots=True)
class ModelSpec:
    """What ``model_registry(flavor)`` returns: which model, with which hyperparameters.

    The training functions are named as ``"package.module:function"`` strings and imported only
    when the trainer asks for them, so a registry can be read without torch. A family whose
    training has not landed leaves them ``None`` and says why in ``capabilities``.
    """

    name: str
    """Model family, e.g. ``"llama3"``."""
    flavor: str
    """Flavor key, e.g. ``"8B"``."""
    model: BaseModel.Config
    """The model's nested config tree (decoder, layers, attention, feed-forward, RoPE)."""
    capabilities: Capabilities = dataclasses.field(default_factory=Capabilities)
    """What titan-train can run for this family (training at all, parallelisms, features)."""
    build_loss_fn: str | None = None
    """Import path of the loss builder."""
    parallelize_fn: str | None = None
    """Import path of the family's TP plan:
    ``(model, *, tp_mesh, loss_parallel, float8_enabled, moe_layout) -> None``
    (``moe_layout``: how TP runs the MoE layers, ``ParallelDims.moe_layout``)."""
    pipelining_fn: str | None = None
    """Import path of the pipeline-splitting function; ``None`` when not supported."""
    post_optimizer_build_fn: str | None = None
    """Import path of a hook run after the optimizers are built, called as
    ``(optimizers, *, model_parts, parallel_dims, world_mesh)``; ``None`` when not needed."""
    state_dict_adapter: str | None = None
    """Import path of the HF safetensors state-dict adapter class; ``None`` when not supported."""

    def refusals(self, config: Any, *, world_size: int | None) -> list[Refusal]:
        """What titan-train cannot run of the trainer ``config`` on this family, one refusal per
        setting; ``world_size`` resolves ``data_parallel_shard_degree = -1`` (None: unknown).

        A family that does not train at all gets that one refusal (its features are moot).
        """
        if self.capabilities.training_refusal is not None:
            return [
                Refusal(
                    key="model_spec",
                    message=f"{self.name} {self.flavor!r}: {self.capabilities.training_refusal}",
                    hint="choose a model family titan-train trains",
                )
            ]
        found = []
        for feature in FEATURES:
            value = feature.asked(config, world_size)
            if not value or getattr(self.capabilities, feature.name):
                continue
            shown = "" if value is True else f" ({feature.key} = {value})"
            found.append(
                Refusal(
                    key=feature.key,
                    message=f"{feature.words} is not supported by titan-train yet{shown} "
                    f"for {self.name}",
                    hint=feature.fix,
                )
            )
        return found

    def check_capabilities(self, config: Any, *, world_size: int | None) -> None:
        """Raise ``NotBuildableError`` naming every refusal of :meth:`refusals`, if any."""
        found = self.refusals(config, world_size=world_size)
        if found:
            raise NotBuildableError("\n".join(str(refusal) for refusal in found))

    def resolve(self, field: str) -> Any:
        """Import and return the function (or class) named by ``field``, or refuse clearly."""
        path = getattr(self, field)
        if path is None:
            raise NotBuildableError(f"{self.name} {self.flavor!r} has no {field}")
        module_name, _, qualname = path.partition(":")
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
        return target

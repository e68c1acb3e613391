"""Every refusal a run can meet before its first step, as one sequence that both ``titan-train
--preflight`` and the run's setup (``build_run``) call, so both find the same problem first and
word it the same way.

Two parts:

- :func:`check_config`, on every rank: the family's capabilities, the parallel layout for the
  world size, the family's functions, the batch arithmetic, checkpoint and metrics settings, the
  tokenizer, the model built on the meta device with its converters and the parallelization
  refusals, the optimizer and LR schedule (over the meta model), the training data loader
  (built for data-parallel rank 0: the dataset is located, no batch is read), the Hugging Face
  state-dict adapter and the validator's loader. Nothing is written.
- ``check_folders`` (``titan.training.folder_checks``), on rank 0 (the run) or in pre-flight:
  the output folders can be created, the names the run writes are files, and the checkpoint
  folder holds what the run would resume from (a ``step-N`` that is not a checkpoint folder, a
  checkpoint folder that is a file, a ``checkpoint.load_step`` it does not hold, an initial load
  path that is missing). Pre-flight also probes the dump folder's lock without taking it.
  Nothing is written either.

The pieces the run goes on to use (tokenizer, rank 0's loader, model config, EOS id, adapter)
come back in :class:`CheckedRun`, so the run reads its tokenizer and assets once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from titan.config.configurable import NotBuildableError
from titan.distributed.parallel_dims import ParallelDims
from titan.training.weights import DTYPES, default_dtype

log = logging.getLogger("titan")


class ConfigFindings(ValueError):
    """The errors ``titan-validate`` reports for a config, met by a run or a pre-flight."""

    def __init__(self, findings: list[Any]) -> None:
        self.findings = findings
        super().__init__(
            "the config has errors:\n"
            + "\n".join(
                f"  error[{d.code}] `{d.path}`: {d.message}\n    hint: {d.hint}" for d in findings
            )
        )


def refuse_findings(config: Any, *, world_size: int, warn_findings: bool = False) -> None:
    """``ConfigFindings`` for the errors of ``config`` on ``world_size`` processes: the types,
    ranges and cross-field rules ``titan-validate`` and ``titan-train --preflight`` report
    (``titan.config.check``), so a run built from Python refuses exactly the layouts the
    command line does, with the same code and hint.

    ``warn_findings``: also say the warnings among them (a setting with no effect, ...) through
    the run's logger, on rank 0 only so that a job says each once; a run started by
    ``titan-train`` has printed them already, beside the lines of the config."""
    from titan.config.check import check_config as findings_of
    from titan.schemas.diagnostics import Severity

    found = findings_of(config, ngpu=world_size, locate=lambda path: None)
    errors = [d for d in found if d.severity is Severity.ERROR]
    if errors:
        raise ConfigFindings(errors)
    if warn_findings and int(os.environ.get("RANK", "0")) == 0:
        for finding in found:
            if finding.severity is Severity.WARNING:
                hint = f"; hint: {finding.hint}" if finding.hint else ""
                log.warning("[%s] %s: %s%s", finding.code, finding.path, finding.message, hint)


CHECKPOINTED_STATES = ("model", "optimizer", "lr_scheduler", "dataloader", "train_state")
"""The states a run's checkpoints hold, by name (``checkpoint.exclude_from_loading`` names them)."""


@dataclasses.dataclass(kw_only=True)
class CheckedRun:
    """What the checks built that the run goes on to use."""

    spec: Any
    """The model family and flavor."""
    parallel_dims: ParallelDims
    """The parallel degrees for the world size."""
    accumulation_steps: int
    """Micro-batches per optimizer step."""
    hf_assets_path: str
    """``hf_assets_path`` as the run reads it."""
    tokenizer: Any
    """The tokenizer; None when the config has none."""
    dataloader: Any
    """The training loader of data-parallel rank 0 (reused by the ranks of that position)."""
    model_config: Any
    """The flavor's model config, updated from the trainer config."""
    eos_id: int | None
    """The id that ends documents for per-document attention; None when no layer needs one."""
    sd_adapter: Any
    """The family's Hugging Face state-dict adapter; None when it has none."""
    parameters: int
    """The model's parameter count (after its converters)."""


def check_config(
    config: Any, *, world_size: int, warn: bool = True, warn_findings: bool = False
) -> CheckedRun:
    """Every refusal of ``config`` for ``world_size`` processes that needs no output folder, in
    the order the run meets them; raises what the run raises (``NotBuildableError``,
    ``ValueError`` and its subclasses, ``OSError``).

    ``warn=False`` (the run, which builds the optimizer and LR schedule again for real) keeps
    the warnings of the checks' throw-away optimizer and schedule from being said twice;
    ``warn_findings`` logs the config's warning findings (:func:`refuse_findings`).

    A seed checkpoint run in one process first takes one process's layout, in ``config``
    itself (``titan.training.seed_run``)."""
    from titan.training.seed_run import is_seed_run, one_process_layout

    if is_seed_run(config, world_size=world_size):
        changed = one_process_layout(config)
        if changed:
            log.info(
                "a seed checkpoint is the unsharded model, made by one process: %s",
                ", ".join(changed),
            )
    spec = config.model_spec
    if spec is None:
        raise NotBuildableError("the config has no model: set model_spec=model_registry(flavor)")
    refuse_findings(config, world_size=world_size, warn_findings=warn_findings)
    spec.check_capabilities(config, world_size=world_size)
    parallel_dims = ParallelDims.from_config(config.parallelism, world_size=world_size)
    # The family's functions the run imports (the loss always, the TP plan under TP, the others
    # when named), so that a missing one is found before anything is built.
    needed = ["build_loss_fn", *(["parallelize_fn"] if parallel_dims.tp_enabled else [])]
    named = [f for f in ("post_optimizer_build_fn", "state_dict_adapter") if getattr(spec, f)]
    for field in needed + named:
        spec.resolve(field)
    training = config.training
    accumulation = accumulation_steps(training, parallel_dims.dp_degree)
    _check_settings(config, world_size=world_size, has_adapter=spec.state_dict_adapter is not None)

    hf_assets = hf_assets_path(config.hf_assets_path)
    tokenizer = None
    if config.tokenizer is not None:
        tokenizer = config.tokenizer.build(tokenizer_path=hf_assets)
    model_config = model_config_of(config, tokenizer)
    with torch.device("meta"), default_dtype(DTYPES[training.dtype]):
        model = model_config.build()
    eos_id = document_eos_id(
        model, tokenizer=tokenizer, model_config=model_config, hf_assets_path=hf_assets
    )
    _check_model(config, model, spec=spec, parallel_dims=parallel_dims, world_size=world_size)
    with contextlib.nullcontext() if warn else _errors_only(log):
        optimizers = config.optimizer.build(
            model_parts=[model], gradient_accumulation_steps=accumulation
        )
        config.lr_scheduler.build(optimizers=optimizers, training_steps=training.steps)
    # After the model: its refusals (a missing EOS id says to set the tokenizer) come first.
    loader_args = {
        "dp_world_size": parallel_dims.dp_degree,
        "dp_rank": 0,
        "tokenizer": tokenizer,
        "seq_len": training.seq_len,
        "local_batch_size": training.local_batch_size,
    }
    if spec.capabilities.loaders_read_assets:
        loader_args["hf_assets_path"] = hf_assets
        loader_args["encoder"] = config.encoder
    dataloader = config.dataloader.build(**loader_args)
    sd_adapter = state_dict_adapter(spec, model_config, hf_assets)
    if config.checkpoint.enable:
        from titan.components.checkpoint import check_settings

        check_settings(config.checkpoint, states=CHECKPOINTED_STATES, sd_adapter=sd_adapter)
    if config.validator.enable:
        _check_validator(config, loader_args)
    return CheckedRun(
        spec=spec,
        parallel_dims=parallel_dims,
        accumulation_steps=accumulation,
        hf_assets_path=hf_assets,
        tokenizer=tokenizer,
        dataloader=dataloader,
        model_config=model_config,
        eos_id=eos_id,
        sd_adapter=sd_adapter,
        parameters=sum(p.numel() for p in model.parameters()),
    )


def check_first_batches(checked: CheckedRun) -> None:
    """Pre-flight's last check: read what data-parallel rank 0 reads before its first step (one
    step's micro-batches) when its dataset is local files, so that a record the loader cannot
    parse is refused as the run refuses it. A Hub dataset is not streamed; the run never reads
    these batches from this loader (its own position starts at the beginning)."""
    from titan.hf_datasets.documents import LocalDocuments

    if not isinstance(getattr(checked.dataloader, "source", None), LocalDocuments):
        return
    batches = iter(checked.dataloader)
    for _ in range(checked.accumulation_steps):
        if next(batches, None) is None:
            return  # a finite set that runs out: the run stops there, with a warning


def accumulation_steps(training: Any, dp_degree: int) -> int:
    """Micro-batches per step: global batch over (local batch × data-parallel degree); that it
    divides is the ``batch-size`` rule's (``refuse_findings``)."""
    per_step = training.local_batch_size * dp_degree
    global_batch = per_step if training.global_batch_size < 0 else training.global_batch_size
    return global_batch // per_step


def model_config_of(config: Any, tokenizer: Any) -> Any:
    """The flavor's model config, updated from the trainer config (sequence length, ...)."""
    model_config = config.model_spec.model
    model_config.update_from_config(trainer_config=config)
    if tokenizer is not None and tokenizer.vocab_size > model_config.vocab_size:
        raise ValueError(
            f"the tokenizer in {config.hf_assets_path} has {tokenizer.vocab_size} tokens but the "
            f"model's vocab_size is {model_config.vocab_size}; use a tokenizer that fits the flavor"
        )
    return model_config


def document_eos_id(
    model: torch.nn.Module, *, tokenizer: Any, model_config: Any, hf_assets_path: str
) -> int | None:
    """The token id that ends a document for ``block_causal`` attention: the tokenizer's EOS,
    else (a config without a tokenizer) the model config's ``eos_id``; None when no layer masks
    by document. ``NotBuildableError`` when a layer does and there is no such id."""
    if not model.needs_documents():
        return None
    hint = "or set the attention's attn_mask_type to 'causal' (one sequence per row)"
    if tokenizer is not None:
        eos_id = getattr(tokenizer, "eos_id", None)
        if eos_id is None:
            raise NotBuildableError(
                "block_causal attention ends each document at the EOS token, but the tokenizer "
                f"in {hf_assets_path} has no eos_token; use a tokenizer that has one, {hint}"
            )
        return eos_id
    eos_id = getattr(model_config, "eos_id", None)
    if eos_id is None:
        raise NotBuildableError(
            "block_causal attention ends each document at the EOS token, but this config has "
            f"no tokenizer and {type(model_config).__qualname__} no eos_id; set the tokenizer, "
            + hint
        )
    return eos_id


def hf_assets_path(path: str) -> str:
    """``hf_assets_path`` as given, or under titan's checkout when only found there."""
    from titan.components.local_paths import existing_path

    found = existing_path(path)
    if found is None or found == Path(path).expanduser():
        return path  # a missing folder is reported by whoever reads it, with the key's name
    log.info("hf_assets_path %r is not under the working folder; using %s", path, found)
    return str(found)


def state_dict_adapter(spec: Any, model_config: Any, hf_assets_path: str) -> Any:
    """The family's HF state-dict adapter for ``model_config``; None when it has none."""
    if spec.state_dict_adapter is None:
        return None
    return spec.resolve("state_dict_adapter")(
        model_config=model_config, hf_assets_path=hf_assets_path
    )


def _check_settings(config: Any, *, world_size: int, has_adapter: bool) -> None:
    """Settings refused by components built later (checkpointing's step choices, metrics)."""
    from titan.components.checkpoint import check_start
    from titan.components.metrics import check_metrics_settings
    from titan.tools.profiling import check_profiling

    check_start(config.checkpoint, world_size=world_size)
    check_metrics_settings(config.metrics)
    check_profiling(config.profiling)


def check_compile_backend(backend: str) -> None:
    """Refuse torch.compile where this torch cannot compile, or a backend it does not know (the
    run would stop on torch's ``InvalidBackend`` when it compiles the model or the loss)."""
    import torch._dynamo

    if not torch._dynamo.is_dynamo_supported():
        raise ValueError(
            f"compile.enable is set, but torch.compile is not supported by this Python or torch "
            f"({torch.__version__}); set compile.enable = false"
        )
    try:
        torch._dynamo.lookup_backend(backend)
    except torch._dynamo.exc.InvalidBackend:
        known = ", ".join(torch._dynamo.list_backends())
        raise ValueError(
            f"compile.backend {backend!r} is not a torch.compile backend of this torch "
            f"({torch.__version__}); choose one of {known}, or set compile.enable = false"
        ) from None


@contextlib.contextmanager
def _errors_only(logger: logging.Logger) -> Iterator[None]:
    """``logger`` says only errors while the block runs."""
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _check_model(
    config: Any, model: torch.nn.Module, *, spec: Any, parallel_dims: ParallelDims, world_size: int
) -> None:
    """The model converters on the meta model, and the parallelization's refusals."""
    from titan.distributed.parallelize import refuse_unrunnable
    from titan.distributed.process_group import default_device_type

    compile_model = config.compile.enable and "model" in config.compile.components
    converters = config.model_converters.build(
        parallel_dims=parallel_dims, model_compile_enabled=compile_model
    )
    converters.convert(model)
    if config.compile.enable:
        check_compile_backend(config.compile.backend)
    refuse_unrunnable(
        parallelism=config.parallelism,
        # A run has a device mesh, and so a device type, only with several processes.
        device_type=default_device_type() if world_size > 1 else None,
    )
    if parallel_dims.pp_enabled:
        from titan.distributed.pipeline_parallel import refuse_unpipelinable

        refuse_unpipelinable(
            config.parallelism,
            model_config=config.model_spec.model,
            documents=model.needs_documents(),
        )


def _check_validator(config: Any, loader_args: dict[str, Any]) -> None:
    """The validator as the run builds it (its loader locates the validation set), on rank 0's
    share; the runtime pieces it only stores are left out."""
    validator = config.validator
    config.validator.build(
        **{
            **loader_args,
            "seq_len": validator.seq_len or loader_args["seq_len"],
            "local_batch_size": validator.local_batch_size or loader_args["local_batch_size"],
        },
        loss_fn=None,
        attention_masks=None,
        metrics=None,
        device=None,
        dp_mesh=None,
        amp=None,
        loss_context=None,
    )

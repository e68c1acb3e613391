"""``titan-train --preflight [--ngpu N]``: every check a run makes before it trains, for a job of
N processes, without starting one.

What is checked, in the order a real run meets it:

1. the config's findings at world size N (titan-validate's rules and titan-train's refusals of
   parallel degrees and of a dump folder it could not write), rendered as a run renders them;
2. the family's capability record (``ModelSpec.refusals``) for every other feature;
3. the parallel layout: ``ParallelDims`` for N processes, the expert-parallel rule included,
   and the family's functions the run imports (loss, TP plan, MoE hook, HF adapter);
4. the tokenizer, when its files are here: its vocabulary fits the model's;
5. the model built on the meta device with its converters, so a shape that does not build, or
   a converter that cannot run here, is found, and the EOS id that per-document
   (``block_causal``) attention ends documents at: the tokenizer's, else the model config's;
6. the combinations the generic parallelization refuses before it touches the model (tensor
   parallel vs heads and sequence length, DDP with TP, CPU offload without FSDP, async TP).

Checks that depend on the hardware (float8's GPU, async tensor parallel's CUDA) judge this
machine, as a run here would: run pre-flight where the job will run to have them judged there.

Nothing is started or written: no process group, no device mesh, no dump folder, no lock, no
log file. The dataset is not read, and the tokenizer only when its files are on this machine
(they may exist only where the job runs; then its checks are left to the run).
A pass prints one line on stdout, e.g. ``pre-flight passed: qwen3 32B, 8 GPUs (FSDP 8),
32.8B parameters``, and exits 0; a finding or refusal prints the message a run would print and
exits 1; a malformed command line exits 2.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any, TextIO

from titan.cli.exits import FINDINGS, OK, UsageError

PREFLIGHT_FLAG = "--preflight"
NGPU_FLAG = "--ngpu"


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class PreflightRequest:
    """What a ``titan-train`` command line asks of pre-flight."""

    enabled: bool
    """Whether ``--preflight`` was given."""
    ngpu: int
    """The number of processes the job would run on (``--ngpu``, else ``WORLD_SIZE``, else 1)."""
    rest: list[str]
    """The command line without the pre-flight flags: the config and its overrides."""


def split_preflight(argv: Sequence[str]) -> PreflightRequest:
    """``--preflight`` and ``--ngpu N`` (or ``--ngpu=N``) taken out of ``argv``.

    :class:`UsageError` for ``--ngpu`` without ``--preflight`` (a run's world size is the
    launcher's, not a flag's), a missing or non-positive count, or a flag given twice.
    """
    rest: list[str] = []
    enabled = False
    ngpu: str | None = None
    args = list(argv)
    i = 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        if flag == PREFLIGHT_FLAG:
            if eq:
                raise UsageError(f"{PREFLIGHT_FLAG} takes no value")
            if enabled:
                raise UsageError(f"{PREFLIGHT_FLAG} is given twice")
            enabled = True
        elif flag == NGPU_FLAG:
            if not eq:
                if i + 1 >= len(args):
                    raise UsageError(f"{NGPU_FLAG} requires a number of GPUs")
                value = args[i + 1]
                i += 1
            if ngpu is not None:
                raise UsageError(f"{NGPU_FLAG} is given twice")
            ngpu = value
        else:
            rest.append(args[i])
        i += 1
    if ngpu is not None and not enabled:
        raise UsageError(
            f"{NGPU_FLAG} is for {PREFLIGHT_FLAG}: a run's world size is the number of "
            "processes torchrun starts"
        )
    return PreflightRequest(enabled=enabled, ngpu=_count(ngpu), rest=rest)


def _count(ngpu: str | None) -> int:
    """The world size to check: ``--ngpu``'s value, else ``WORLD_SIZE``, else 1."""
    source, text = (NGPU_FLAG, ngpu) if ngpu is not None else ("WORLD_SIZE", None)
    if text is None:
        text = os.environ.get("WORLD_SIZE", "1")
    try:
        count = int(text)
    except ValueError:
        raise UsageError(f"{source} must be a whole number of GPUs, got {text!r}") from None
    if count < 1:
        raise UsageError(f"{source} must be at least 1, got {count}")
    return count


def preflight(args: list[str], *, ngpu: int, stdout: TextIO, stderr: TextIO) -> int:
    """Check the config ``args`` names for a job of ``ngpu`` processes; the exit code.

    Findings are rendered on ``stderr`` as a run renders them; a refusal is one
    ``titan-train: error:`` line, as a run's; a pass is one summary line on ``stdout``.
    """
    from titan.cli.streams import write
    from titan.cli.train_config import load
    from titan.training.errors import USER_ERRORS, RunFailure, describe

    # One process speaking for itself: no launcher's error file, no peers to tell.
    failure = RunFailure(stderr=stderr)
    try:
        loaded = load(args, world_size=ngpu, stdout=stdout, stderr=stderr)
    except UsageError as error:
        failure.report(str(error))
        return 2
    if loaded.config is None:
        return loaded.exit_code
    try:
        summary = _check_run(loaded.config, ngpu=ngpu)
    except USER_ERRORS as error:
        failure.report(describe(error))
        return FINDINGS
    except Exception as error:
        if os.environ.get("TITAN_DEBUG"):
            raise
        # A run saves the traceback in its dump folder; pre-flight writes nothing.
        failure.report(
            f"pre-flight stopped on an unexpected {type(error).__name__}: {error}\n"
            "  TITAN_DEBUG=1 prints its traceback; if the message does not point at your "
            "config, it is a bug in titan: please report it"
        )
        return FINDINGS
    write(f"pre-flight passed: {summary}\n", out=stdout)
    return OK


def _check_run(config: Any, *, ngpu: int) -> str:
    """The checks a run makes after its config check, as ``build_run`` makes them; the summary.

    Raises what the run would raise (``NotBuildableError``, ``ValueError``).
    """
    import torch

    from titan.config.configurable import NotBuildableError
    from titan.distributed.parallel_dims import ParallelDims
    from titan.distributed.parallelize import refuse_unrunnable
    from titan.distributed.process_group import default_device_type
    from titan.training.setup import (
        _document_eos_id,
        _hf_assets_path,
        _model_config,
        degrees_in_words,
    )
    from titan.training.weights import DTYPES, default_dtype

    spec = config.model_spec
    if spec is None:
        raise NotBuildableError("the config has no model: set model_spec=model_registry(flavor)")
    spec.check_capabilities(config, world_size=ngpu)
    parallel_dims = ParallelDims.from_config(config.parallelism, world_size=ngpu)
    # The family's functions the run imports (the loss always, the TP plan under TP, the others
    # when named), so that a missing one is found here too.
    needed = ["build_loss_fn", *(["parallelize_fn"] if parallel_dims.tp_enabled else [])]
    named = [f for f in ("post_optimizer_build_fn", "state_dict_adapter") if getattr(spec, f)]
    for field in needed + named:
        spec.resolve(field)
    hf_assets_path = _hf_assets_path(config.hf_assets_path)
    tokenizer = _tokenizer_if_here(config, hf_assets_path=hf_assets_path)
    model_config = _model_config(config, tokenizer)
    with torch.device("meta"), default_dtype(DTYPES[config.training.dtype]):
        model = model_config.build()
    if tokenizer is not None or config.tokenizer is None:
        _document_eos_id(
            model, tokenizer=tokenizer, model_config=model_config, hf_assets_path=hf_assets_path
        )
    compile_model = config.compile.enable and "model" in config.compile.components
    converters = config.model_converters.build(
        parallel_dims=parallel_dims, model_compile_enabled=compile_model
    )
    converters.convert(model)
    refuse_unrunnable(
        spec,
        parallel_dims=parallel_dims,
        training=config.training,
        parallelism=config.parallelism,
        activation_checkpoint=config.activation_checkpoint,
        model_compile_enabled=compile_model,
        # A run has a device mesh, and so a device type, only with several processes.
        device_type=default_device_type() if ngpu > 1 else None,
    )
    parameters = sum(p.numel() for p in model.parameters())
    gpus = f"{ngpu} GPU" if ngpu == 1 else f"{ngpu} GPUs"
    # The degrees in the words of the run's own summary line.
    return (
        f"{spec.name} {spec.flavor}, {gpus} ({degrees_in_words(parallel_dims)}), "
        f"{_amount(parameters)} parameters"
    )


def _tokenizer_if_here(config: Any, *, hf_assets_path: str) -> Any:
    """The run's tokenizer when the config has one and its files are on this machine, else None."""
    from titan.components.tokenizer import TokenizerNotFoundError

    if config.tokenizer is None:
        return None
    try:
        return config.tokenizer.build(tokenizer_path=hf_assets_path)
    except TokenizerNotFoundError:
        return None  # read where the job runs, which may be the only place it exists


def _amount(count: int) -> str:
    """A parameter count as people say it: 32.8B, 6.1M, 512."""
    for scale, suffix in ((10**12, "T"), (10**9, "B"), (10**6, "M"), (10**3, "K")):
        if count >= scale:
            return f"{count / scale:.1f}{suffix}"
    return str(count)

"""Make upstream torchtitan 0.3.0 train on CPU in one process, and read back its losses.

Runs inside an environment that has ``torchtitan==0.3.0`` (``.venv-upstream``), never in
titan's own. It is the one place that knows what 0.3.0 needs to train on a CPU, so every
comparison against upstream (tests/upstream, benchmarks) trains the same way. It only patches
attributes of the installed package at run time; no torchtitan code is copied.

What 0.3.0 assumes, and what :func:`apply` changes (each found by running it):

- **An accelerator.** ``torchtitan.tools.utils`` picks ``device_type = "cuda"`` when torch sees
  no accelerator, and the trainer, metrics and MoE dispatch call ``torch.cuda`` through it. The
  shim points it at ``"cpu"`` with a device module that has the few calls torch.cpu lacks
  (device name and properties, memory statistics: empty, so memory is logged as unknown).
- **Fused FlexAttention.** 0.3.0 runs ``flex_attention`` compiled, and torch 2.13 refuses any
  CPU flex call whose inputs need gradients (its fused CPU kernel has no backward). The eager
  flex path computes the same attention densely (it materialises the scores) and differentiates
  it with the HOP's own math backward, so the shim runs flex eagerly and lets CPU inputs with
  gradients through that one check (every other check is kept).
- **A compiled block mask.** 0.3.0 builds each ``BlockMask`` through ``torch.compile``; on CPU
  that compiles a C++ kernel per shape (about 2 s on the debug model, and a C++ toolchain). The
  eager ``create_block_mask`` builds the same mask.
- **Process-group timeouts.** After the first step 0.3.0's ``set_pg_timeouts`` waits at a
  barrier for every rank, then lowers each group's timeout with ``torch.distributed.set_timeout``,
  which torch 2.13 does not have; with one process there is nothing to wait for or to time out,
  so the shim makes it a no-op.
- **A launcher.** 0.3.0 initialises ``torch.distributed`` from torchrun's variables; the shim sets
  them for a world of one (a free local port), and refuses a real multi-process world.
- **Its own test data.** 0.3.0's ``c4_test`` is the folder ``tests/assets/c4_test`` read as a
  Hugging Face dataset with a ``train`` split. titan ships that folder as ``data.jsonl`` (train)
  and ``validation.jsonl``, which the folder reader would take as a validation split only, so
  ``c4_test`` is pointed at titan's ``data.jsonl``: the same documents titan trains on.

Identical batches (:class:`FixedBatches`): 0.3.0 packs documents with per-document positions and
block-causal attention; v0.2.2 and titan pack one token stream and attend causally across
documents. A fixed batch is fed with positions ``0..seq_len-1`` on every row: 0.3.0's document
mask then sees one document per row, its block-causal mask is plain causal, and RoPE sees the
positions titan uses, so both trainers compute the same function of the same tokens.

Identical weights: :func:`save_hf_weights` writes 0.3.0's model as Hugging Face safetensors and
:func:`load_hf_weights` starts it from such a folder (``train(initial_weights=...)``), e.g. one
titan-train wrote, through 0.3.0's own state-dict adapter either way.

Timing without eager flex: :func:`use_causal_sdpa` runs 0.3.0's FlexAttention layers as causal
SDPA, valid only for :class:`FixedBatches` rows (it checks every mask): the same attention
under the same mask, without materialising the scores (``bench/vs_torchtitan.py
--upstream-attention sdpa``).

Typical use (in the upstream environment)::

    import upstream_shim
    upstream_shim.apply()                     # before any trainer is built (train() calls it)
    config = upstream_shim.load_config("config_registry.py", "llama3_debugmodel")
    run = upstream_shim.train(config, batches=[(inputs, labels), ...])
    run.losses                                # one float per step
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import socket
import sys
import time
import types
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
C4_TEST_TRAIN = REPOSITORY_ROOT / "tests" / "assets" / "c4_test" / "data.jsonl"

_applied = False


class _CpuDeviceModule(types.ModuleType):
    """``torch.cpu`` with the calls 0.3.0 makes on its device module that torch.cpu lacks."""

    def __getattr__(self, name: str) -> Any:
        """Everything else is torch.cpu's."""
        return getattr(torch.cpu, name)

    def current_device(self) -> int:
        """Device index 0."""
        # torch.cpu answers "cpu"; 0.3.0 builds torch.device(device_type, index) from it.
        return 0

    def get_device_name(self, device: Any = None) -> str:
        """``"cpu"``."""
        return "cpu"

    def get_device_properties(self, device: Any = None) -> Any:
        """The name and the machine's physical memory, the two properties 0.3.0 reads."""
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return types.SimpleNamespace(name="cpu", total_memory=memory)

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        """No statistics."""
        return {}  # no allocator statistics on CPU: 0.3.0 then logs its "-1" (unknown) values

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        """Nothing to reset."""

    def empty_cache(self) -> None:
        """No cache to empty."""


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _one_process_world() -> None:
    """torchrun's variables for a world of one; refuse a launcher's larger world."""
    if os.environ.get("WORLD_SIZE", "1") != "1":
        raise RuntimeError(
            f"the upstream CPU shim trains one process; WORLD_SIZE={os.environ['WORLD_SIZE']}"
        )
    defaults = {
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
    }
    for name, value in defaults.items():
        os.environ.setdefault(name, value)
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(_free_port())


def _cpu_device() -> None:
    """Point 0.3.0's device type and module at the CPU, wherever it copied them."""
    import torchtitan.tools.utils as utils

    before = utils.device_type
    cpu = _CpuDeviceModule("torchtitan_cpu_device")
    utils.device_type, utils.device_module = "cpu", cpu
    # Modules that copied the names at import (metrics, parallel_dims, distributed.utils, ...)
    # get them too, so apply() works whatever was imported before it.
    for name, module in list(sys.modules.items()):
        if name.startswith("torchtitan.") and getattr(module, "device_type", None) == before:
            module.device_type = "cpu"
            if hasattr(module, "device_module"):
                module.device_module = cpu


def _eager_flex_attention() -> None:
    """Run flex attention and its block masks eagerly, CPU inputs with gradients allowed."""
    import torch.nn.attention.flex_attention as flex
    from torchtitan.models.common import attention, decoder

    refuse = flex._validate_device

    def validate_device(query: Any, key: Any, value: Any) -> None:
        """torch's device check, skipped for CPU inputs (the eager path differentiates them)."""
        if query.device.type != "cpu":
            refuse(query, key, value)

    flex._validate_device = validate_device
    attention.FlexAttention._compiled_flex_attn = flex.flex_attention
    decoder.create_attention_mask = flex.create_block_mask
    # The eager path is the point here; its advice to compile is not.
    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")


def use_causal_sdpa() -> None:
    """Run 0.3.0's FlexAttention layers as causal ``scaled_dot_product_attention`` instead.

    For timing only, and only with batches whose rows are each one document
    (:class:`FixedBatches`): there 0.3.0's block-causal mask is plain causal, and SDPA computes
    the same attention without materialising the scores as the eager flex path does (that
    path is most of a CPU step at a few hundred tokens). Every new mask is checked to be
    exactly causal before it is replaced (one check per batch: the layers share the mask), and
    a score modifier or a request for the log-sum-exp is refused, so the switch can never
    silently compute something else. Call it after :func:`apply`.
    """
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import create_mask
    from torchtitan.models.common import attention

    checked: list[Any] = [None]

    def causal_sdpa(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        score_mod: Any,
        block_mask: Any,
        scale: float | None,
        enable_gqa: bool,
        return_aux: Any,
        kernel_options: dict,
    ) -> tuple[torch.Tensor, None]:
        """0.3.0's flex call as causal SDPA, after checking it asks for nothing else."""
        if score_mod is not None:
            raise ValueError(
                "use_causal_sdpa: this model's flex attention has a score modifier, which causal "
                "SDPA cannot apply; time it with --upstream-attention flex"
            )
        if return_aux.lse:
            raise ValueError(
                "use_causal_sdpa: this model's flex attention needs the log-sum-exp (attention "
                "sinks), which causal SDPA does not return; time it with --upstream-attention flex"
            )
        if checked[0] is not block_mask:
            batch, _, q_len, kv_len = block_mask.shape
            dense = create_mask(block_mask.mask_mod, batch, 1, q_len, kv_len, device=q.device)
            causal = torch.ones(q_len, kv_len, dtype=torch.bool, device=q.device).tril()
            if not torch.equal(dense, causal.expand_as(dense)):
                raise ValueError("the attention mask is not plain causal: feed FixedBatches")
            checked[0] = block_mask
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=scale, enable_gqa=enable_gqa
        )
        return out, None

    attention.FlexAttention.compiled_flex_attn = staticmethod(causal_sdpa)


def _no_timeout_change() -> None:
    """Make 0.3.0's after-first-step process-group timeout change a no-op."""
    import torchtitan.distributed.utils as dist_utils

    def set_pg_timeouts(timeout: Any, parallel_dims: Any) -> None:
        """One process: no peer to wait for, and torch 2.13 has no set_timeout to call."""

    dist_utils.set_pg_timeouts = set_pg_timeouts


def _titan_test_data() -> None:
    """Point 0.3.0's ``c4_test`` dataset at titan's copy of its training documents."""
    from datasets import load_dataset
    from torchtitan.hf_datasets import text_datasets

    def load_train_file(path: str) -> Any:
        """The JSON-lines file as a dataset's train split."""
        return load_dataset("json", data_files=path, split="train")

    text_datasets.DATASETS["c4_test"] = dataclasses.replace(
        text_datasets.DATASETS["c4_test"], path=str(C4_TEST_TRAIN), loader=load_train_file
    )


def apply() -> None:
    """Patch torchtitan 0.3.0 for one CPU process (idempotent)."""
    global _applied
    if _applied:
        return
    _one_process_world()
    _cpu_device()
    _eager_flex_attention()
    _no_timeout_change()
    _titan_test_data()
    _applied = True


def load_config(module_file: str | os.PathLike[str], function: str) -> Any:
    """The ``Trainer.Config`` that ``function()`` of the registry module ``module_file`` returns."""
    path = Path(module_file)
    spec = importlib.util.spec_from_file_location(f"_upstream_registry_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{path} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    make = getattr(module, function, None)
    if make is None:
        raise AttributeError(f"{path} has no function {function!r}")
    return make()


class FixedBatches:
    """Token batches fed to 0.3.0's trainer in place of its data loader, in order.

    Each item is ``(inputs, labels)``, two ``[batch, seq_len]`` integer tensors as titan's loader
    yields them (labels already shifted). Every row gets positions ``0..seq_len-1``: one document
    per row, so 0.3.0's block-causal mask is plain causal (see the module docstring).
    """

    def __init__(self, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Keep ``batches`` to feed in order."""
        self.batches = list(batches)

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        """Each batch as 0.3.0's loader yields one: inputs with positions, then labels."""
        for inputs, labels in self.batches:
            positions = torch.arange(inputs.shape[1]).expand_as(inputs).contiguous()
            yield {"input": inputs.long(), "positions": positions}, labels.long()


@dataclasses.dataclass
class Run:
    """What one 0.3.0 training run logged."""

    losses: list[float]
    """The loss 0.3.0 logged after each step (``global_avg_loss``), in step order."""
    grad_norms: list[float]
    """The gradient norm 0.3.0 logged after each step, in step order."""
    step_seconds: list[float]
    """Wall time of each step, up to its loss being logged."""
    step_cpu_seconds: list[float]
    """CPU time of the process (all its threads) in each step: on a shared machine it counts
    only this run's own work, where the wall time also counts waiting for a core."""
    build_seconds: float
    """Building the trainer: process group, model, optimizer, tokenizer, data loader."""
    train_seconds: float
    """All of ``Trainer.train()``, which ends with a fixed 2 s wait for other ranks."""


def _intervals(start: float, marks: list[float]) -> list[float]:
    """The time from ``start`` to the first mark, then between consecutive marks."""
    return [b - a for a, b in zip([start, *marks[:-1]], marks, strict=True)]


def save_hf_weights(trainer: Any, folder: str | os.PathLike[str]) -> Path:
    """Write the trainer's current weights as Hugging Face safetensors, through 0.3.0's own
    state-dict adapter (``folder/model.safetensors``), e.g. to start another trainer from them."""
    from safetensors.torch import save_file
    from torch.distributed.tensor import DTensor

    config = trainer.config
    if config.model_spec.state_dict_adapter is None:
        raise ValueError(f"{config.model_spec.name} has no Hugging Face state-dict adapter")
    adapter = config.model_spec.state_dict_adapter(trainer.model_config, config.hf_assets_path)
    [model] = trainer.model_parts
    # model.state_dict(), as 0.3.0's checkpointer takes it: its hooks give the canonical keys
    # (a fused wqkv is split back into wq/wk/wv); FSDP's shards are gathered into whole tensors.
    full = {
        key: value.full_tensor() if isinstance(value, DTensor) else value
        for key, value in model.state_dict().items()
    }
    hf = {key: value.detach().contiguous() for key, value in adapter.to_hf(full).items()}
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    save_file(hf, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def load_hf_weights(trainer: Any, folder: str | os.PathLike[str]) -> None:
    """Replace the trainer's weights with the Hugging Face safetensors in ``folder`` (every
    ``*.safetensors`` file), through 0.3.0's own state-dict adapter, e.g. weights another trainer
    exported, so that both start from the same numbers.

    Every parameter must be in the folder; buffers a Hugging Face checkpoint does not carry (an
    MoE layer's expert bias) keep their values. Each tensor is laid out as the model holds it (a
    DTensor on FSDP's mesh) before loading, and the model's load hooks fuse the canonical
    wq/wk/wv back into its wqkv.
    """
    from safetensors.torch import load_file
    from torch.distributed.tensor import DTensor, distribute_tensor

    config = trainer.config
    if config.model_spec.state_dict_adapter is None:
        raise ValueError(f"{config.model_spec.name} has no Hugging Face state-dict adapter")
    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{folder} holds no *.safetensors files")
    hf: dict[str, torch.Tensor] = {}
    for file in files:
        hf.update(load_file(str(file)))
    adapter = config.model_spec.state_dict_adapter(trainer.model_config, config.hf_assets_path)
    [model] = trainer.model_parts
    current = model.state_dict()
    loaded = adapter.from_hf(hf)
    buffers = {name for name, _ in model.named_buffers()}
    missing = sorted(set(current) - set(loaded) - buffers)
    unexpected = sorted(set(loaded) - set(current))
    if missing or unexpected:
        raise ValueError(
            f"{folder} does not match the model: missing {missing}, extra {unexpected}"
        )
    state = {}
    for key, value in loaded.items():
        like = current[key]
        value = value.to(dtype=like.dtype)
        if isinstance(like, DTensor):
            value = distribute_tensor(value, like.device_mesh, like.placements)
        state[key] = value
    result = model.load_state_dict(state, strict=False)
    if result.unexpected_keys or set(result.missing_keys) - buffers:
        raise ValueError(f"{folder} did not load into the model: {result}")


def train(
    config: Any,
    *,
    batches: Sequence[tuple[torch.Tensor, torch.Tensor]] | None = None,
    repeat_first_batch: bool = False,
    save_initial_weights: str | os.PathLike[str] | None = None,
    initial_weights: str | os.PathLike[str] | None = None,
) -> Run:
    """Build the trainer of ``config``, train ``training.steps`` steps and return the losses.

    ``batches``: train on these (see :class:`FixedBatches`) instead of the config's data loader.
    ``repeat_first_batch``: train every step on the first batch of the config's own data loader
    (as 0.3.0 packed it), so that a falling loss shows the model learns.
    ``save_initial_weights``: a folder to write the freshly initialised weights to (Hugging Face
    safetensors, :func:`save_hf_weights`) before the first step.
    ``initial_weights``: a folder of Hugging Face safetensors to start from instead of 0.3.0's
    own initialisation (:func:`load_hf_weights`), loaded after ``save_initial_weights`` is
    written, so a caller can both compare the two initialisations and train from one.
    """
    if batches is not None and repeat_first_batch:
        raise ValueError("give batches or repeat_first_batch, not both")
    apply()
    config.metrics.log_freq = 1  # a loss for every step
    begin = time.perf_counter()
    trainer = config.build()
    built = time.perf_counter()
    losses: list[float] = []
    grad_norms: list[float] = []
    logged_at: list[float] = []
    cpu_at: list[float] = []
    try:
        if save_initial_weights is not None:
            save_hf_weights(trainer, save_initial_weights)
        if initial_weights is not None:
            load_hf_weights(trainer, initial_weights)
        if batches is not None:
            trainer.dataloader = FixedBatches(batches)
        if repeat_first_batch:
            per_step = (
                trainer.gradient_accumulation_steps * trainer.num_pipeline_parallel_microbatches
            )
            first = next(iter(trainer.dataloader))
            trainer.dataloader = [first] * (config.training.steps * per_step)
        log = trainer.metrics_processor.log

        def record(
            step: int,
            global_avg_loss: float,
            global_max_loss: float,
            grad_norm: float,
            *args: Any,
            **kwargs: Any,
        ) -> Any:
            """0.3.0's metrics log, after noting the step's loss, gradient norm and times."""
            logged_at.append(time.perf_counter())
            cpu_at.append(time.process_time())
            losses.append(float(global_avg_loss))
            grad_norms.append(float(grad_norm))
            return log(step, global_avg_loss, global_max_loss, grad_norm, *args, **kwargs)

        trainer.metrics_processor.log = record
        started, cpu_started = time.perf_counter(), time.process_time()
        trainer.train()
        done = time.perf_counter()
    finally:
        trainer.close()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return Run(
        losses=losses,
        grad_norms=grad_norms,
        step_seconds=_intervals(started, logged_at),
        step_cpu_seconds=_intervals(cpu_started, cpu_at),
        build_seconds=built - begin,
        train_seconds=done - started,
    )

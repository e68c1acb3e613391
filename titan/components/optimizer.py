"""Optimizers: one per model part, stepped together.

torch is imported inside the methods: this module defines configs, and reading a config must never
pay for torch.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterator
from typing import Any, ClassVar, Literal

from titan.config.configurable import Configurable
from titan.schemas.rule_helpers import OPTIMIZER_NAMES

log = logging.getLogger(__name__)


KERNEL_FLAGS: dict[str, dict[str, bool]] = {
    "fused": {"fused": True, "foreach": False},
    "foreach": {"fused": False, "foreach": True},
    "for-loop": {"fused": False, "foreach": False},
}
"""``implementation`` -> the ``fused`` / ``foreach`` arguments of the torch optimizer."""

StepHook = Callable[["OptimizersContainer"], Any]


class OptimizersContainer(Configurable):
    """One Adam-family optimizer per model part, stepped after backward."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """The Adam-family optimizer."""

        name: str = "AdamW"
        """Optimizer class; only Adam and AdamW are accepted when the trainer builds it."""
        lr: float = 8e-4
        """Peak learning rate."""
        beta1: float = 0.9
        """Adam beta1."""
        beta2: float = 0.95
        """Adam beta2."""
        eps: float = 1e-8
        """Adam epsilon."""
        weight_decay: float = 0.1
        """Weight decay."""
        implementation: Literal["for-loop", "foreach", "fused"] = "fused"
        """Optimizer kernel flavour: fused (one kernel, CPU or CUDA), foreach, or a for-loop."""

    steps_in_backward: ClassVar[bool] = False
    """True when parameters are updated during backward (no gradients left to clip)."""

    def __init__(
        self, *, config: Config, model_parts: list[Any], gradient_accumulation_steps: int = 1
    ) -> None:
        # gradient_accumulation_steps is accepted so the trainer builds either container with the
        # same call; only the in-backward one depends on it.
        self.config = config
        self.model_parts = list(model_parts)
        self._step_post_hooks: list[StepHook] = []
        self._optimizer_class, self._optimizer_kwargs = _torch_optimizer(config)
        # optimizers_of_part[i] are the torch optimizers over model_parts[i]'s parameters.
        self.optimizers_of_part = [self._build_part(part) for part in self.model_parts]
        self.optimizers = [opt for opts in self.optimizers_of_part for opt in opts]

    def _build_part(self, part: Any) -> list[Any]:
        params = [p for p in part.parameters() if p.requires_grad]
        return [self._new_optimizer(params)]

    def _new_optimizer(self, params: list[Any]) -> Any:
        optimizer_class, kwargs = self._optimizer_class, self._optimizer_kwargs
        try:
            return optimizer_class(params, **kwargs)
        except RuntimeError as error:
            # torch refuses fused kernels for parameters on a device without them; the foreach
            # kernels compute the same update, so fall back instead of failing the run.
            if not kwargs["fused"] or "fused" not in str(error):
                raise
            log.warning("fused %s is unavailable here (%s); using foreach", self.config.name, error)
            self._optimizer_kwargs = {**kwargs, "fused": False, "foreach": True}
            return optimizer_class(params, **self._optimizer_kwargs)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.optimizers)

    def __len__(self) -> int:
        return len(self.optimizers)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The parameter groups of every inner optimizer, in order."""
        return [group for opt in self.optimizers for group in opt.param_groups]

    def register_step_post_hook(self, hook: StepHook) -> None:
        """Call ``hook(self)`` after every ``step()`` (e.g. float8 scale precomputation)."""
        self._step_post_hooks.append(hook)

    def step(self) -> None:
        """Step every optimizer, then run the post-step hooks."""
        for opt in self.optimizers:
            opt.step()
        self._run_step_post_hooks()

    def _run_step_post_hooks(self) -> None:
        for hook in self._step_post_hooks:
            hook(self)

    def zero_grad(self) -> None:
        """Drop every gradient (set to None, torch's default)."""
        for opt in self.optimizers:
            opt.zero_grad()

    def state_dict(self) -> dict[str, Any]:
        """Optimizer state keyed by parameter FQN: resharding-safe for plain and FSDP2 models."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_optimizer_state_dict,
        )

        options = StateDictOptions(flatten_optimizer_state_dict=True)
        state: dict[str, Any] = {}
        for part, opts in zip(self.model_parts, self.optimizers_of_part, strict=True):
            state.update(get_optimizer_state_dict(part, opts, options=options))
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load what ``state_dict()`` returned (possibly saved under another sharding)."""
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            set_optimizer_state_dict,
        )

        options = StateDictOptions(flatten_optimizer_state_dict=True)
        for part, opts in zip(self.model_parts, self.optimizers_of_part, strict=True):
            set_optimizer_state_dict(part, opts, state_dict, options=options)


class OptimizersInBackwardContainer(OptimizersContainer):
    """Steps each parameter's optimizer inside backward, as soon as its gradient is ready.

    Saves the memory of holding all gradients; rules out gradient clipping, expert and pipeline
    parallel (the legacy ``optimizer.early_step_in_backward = true``).

    Each parameter gets its own optimizer, stepped from a post-accumulate-grad hook that frees the
    gradient right after. So no gradient survives backward: gradient clipping cannot run (the
    trainer must skip it and has no grad norm to log) and gradient accumulation over several
    micro-batches is impossible (the first micro-batch would already update the weights).
    ``step()`` and ``zero_grad()`` have nothing to do; ``step()`` still runs the post-step hooks.
    """

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(OptimizersContainer.Config):
        """Same options as the plain optimizer; choosing this class is the switch."""

    steps_in_backward: ClassVar[bool] = True

    def __init__(
        self, *, config: Config, model_parts: list[Any], gradient_accumulation_steps: int = 1
    ) -> None:
        if gradient_accumulation_steps > 1:
            raise ValueError(
                f"the in-backward optimizer (OptimizersInBackwardContainer) updates each weight "
                f"as soon as its gradient is ready, so it cannot accumulate gradients over "
                f"{gradient_accumulation_steps} micro-batches; use the plain OptimizersContainer "
                "or make training.global_batch_size equal local_batch_size × data-parallel degree"
            )
        super().__init__(
            config=config,
            model_parts=model_parts,
            gradient_accumulation_steps=gradient_accumulation_steps,
        )

    def _build_part(self, part: Any) -> list[Any]:
        optimizers = []
        for param in part.parameters():
            if not param.requires_grad:
                continue
            optimizer = self._new_optimizer([param])
            param.register_post_accumulate_grad_hook(_step_and_free(optimizer))
            optimizers.append(optimizer)
        return optimizers

    def step(self) -> None:
        """Nothing left to step (backward did it); runs the post-step hooks."""
        self._run_step_post_hooks()

    def zero_grad(self) -> None:
        """Nothing to zero: each gradient was freed right after its optimizer step."""


def _torch_optimizer(config: OptimizersContainer.Config) -> tuple[type, dict[str, Any]]:
    """The ``torch.optim`` class and constructor arguments ``config`` asks for."""
    import torch

    if config.name not in OPTIMIZER_NAMES:
        raise ValueError(
            f"optimizer.name {config.name!r} is not supported; choose one of "
            f"{', '.join(OPTIMIZER_NAMES)}"
        )
    if config.implementation not in KERNEL_FLAGS:
        raise ValueError(
            f"optimizer.implementation {config.implementation!r} is not one of "
            f"{', '.join(KERNEL_FLAGS)}"
        )
    kwargs = {
        "lr": config.lr,
        "betas": (config.beta1, config.beta2),
        "eps": config.eps,
        "weight_decay": config.weight_decay,
        **KERNEL_FLAGS[config.implementation],
    }
    return getattr(torch.optim, config.name), kwargs


def _step_and_free(optimizer: Any) -> Callable[[Any], None]:
    def hook(_param: Any) -> None:
        optimizer.step()
        optimizer.zero_grad()

    return hook

"""Built-in copy of ``torchtitan.components.ft.config`` (its ``job_config.py``) at v0.2.2.

Upstream ``FaultTolerance`` subclasses the base ``[fault_tolerance]`` section; only the fields it
adds are declared here, the base ones come from titan's built-in schema when the two are merged.
"""

from dataclasses import dataclass, field


@dataclass
class FaultTolerance:
    """Fault tolerance extended for Streaming DiLoCo."""

    sync_steps: int = 5
    """Steps between synchronizations; only used when semi_sync_method is set."""
    should_quantize: bool = False
    """Quantize the gradients before the allreduce; only used when semi_sync_method is set."""
    fragment_sync_delay: int = 0
    """Inner steps to wait before blocking on a fragment's synchronization (DiLoCo's tau)."""
    fragment_update_alpha: float = 0.0
    """How much of the local parameters to mix into the synchronized ones (0 = global only)."""
    module_fqns_per_model_fragment: list[list[str]] = field(default_factory=list)
    """Module FQNs of each model fragment, one inner list per fragment."""
    num_fragments: int = 1
    """Number of fragments to split the model into when semi_sync_method is diloco."""


@dataclass
class JobConfig:
    """Sections fault tolerance extends in the base config."""

    fault_tolerance: FaultTolerance = field(default_factory=FaultTolerance)
    """Fault tolerance options."""

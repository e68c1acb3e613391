"""titan's registry-era config system: ``Configurable`` and the trainer's own config sections.

Registry functions import from here::

    from titan.config import TrainingConfig, ParallelismConfig
"""

from titan.config.configs import (
    ActivationCheckpointConfig,
    CommConfig,
    CompileConfig,
    DebugConfig,
    ParallelismConfig,
    TrainingConfig,
)
from titan.config.configurable import Configurable, NotBuildableError
from titan.tools.profiling import ProfilingConfig

__all__ = [
    "ActivationCheckpointConfig",
    "CommConfig",
    "CompileConfig",
    "Configurable",
    "DebugConfig",
    "NotBuildableError",
    "ParallelismConfig",
    "ProfilingConfig",
    "TrainingConfig",
]

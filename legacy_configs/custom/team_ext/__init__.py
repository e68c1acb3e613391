"""Package form of a legacy custom config module: ``custom_config_module = "team_ext"``."""

from .job_config import JobConfig

__all__ = ["JobConfig"]

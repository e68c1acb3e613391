"""titan: migrate, validate and train torchtitan configs.

This package must stay cheap to import: ``titan-validate FILE.toml`` runs through ``titan.cli``
without importing torch. Modules that need torch import it themselves.
"""

__version__ = "0.1.0"

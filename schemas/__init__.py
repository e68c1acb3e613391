"""The legacy torchtitan v0.2.2 config schema, diagnostics and the TOML validator.

Pure Python: this package never imports torch, and neither ``migrate`` nor ``titan``.
"""

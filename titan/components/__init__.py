"""Trainer components; each owns a nested ``Config`` and is constructed with ``config.build()``."""

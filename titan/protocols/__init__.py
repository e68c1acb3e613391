"""Contracts between the trainer and the components it builds (models, converters)."""

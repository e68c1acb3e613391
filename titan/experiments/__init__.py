"""Trainer variants outside the core: fault tolerance."""

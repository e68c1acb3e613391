"""Trainer tools that are not components: profiling."""

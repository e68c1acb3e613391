"""The torch side of ``Trainer``: building a run's parts from its config, and their state."""

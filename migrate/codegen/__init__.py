"""Python source output: the registry modules titan-migrate writes and the extension scaffolds.

``pyfmt`` prints a small syntax tree exactly as ``ruff format`` would, ``render_code`` turns plans
into a ``config_registry.py`` module, ``scaffold`` writes a fork's extension module, and ``names``
says which names generated code may define.
"""

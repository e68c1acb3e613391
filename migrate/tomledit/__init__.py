"""TOML editing: a legacy TOML read and rewritten as text, keeping every byte it does not change.

``statements`` cuts a file into statements, ``statement_edits`` applies the upgrade steps to them,
``fix`` decides what ``titan-validate --fix`` writes, and ``comments`` reads the comments the
migration carries to the generated code.
"""

"""Legacy TOML -> migration plan -> registry code or live config.

Packages by job: ``plan`` (the migration plan and what feeds it), ``targets`` (the trainers a plan
can be written for: titan, torchtitan 0.3.0), ``codegen`` (Python source output), ``tomledit``
(``titan-validate --fix``'s TOML editing) and ``specgen`` (the generators of the spec tables the
runtime reads; no runtime module imports them). Never imports torch at import time.
"""

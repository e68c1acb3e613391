"""Legacy TOML -> migration plan -> registry code or live config (built by a later issue).

Never imports torch at import time.
"""

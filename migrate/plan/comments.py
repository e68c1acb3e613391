"""The TOML's comments carried to the config paths their keys went to (and its leading block to
the module's preamble).
"""

from __future__ import annotations

from titan.migrate.plan import homes as homes_table
from titan.migrate.plan.draft import PlanDraft

_SECTION_PATHS = {section: path for section, path in homes_table.SECTION_HOMES.items()}
_SECTION_PATHS["quantize.linear.float8"] = "model_converters"
"""Legacy section -> the config path its table's own comments go to."""


def carry_comments(draft: PlanDraft) -> None:
    """Carry the TOML's comments to the config paths their keys went to."""
    text = draft.check.text
    if not text or draft.check.form != "toml":
        return  # a YAML app config's comments are not carried
    from titan.migrate.tomledit.comments import preamble, toml_comments
    from titan.schemas import era_pragma

    # the file's `# titan: era` comment is said by the era itself, not as a comment
    draft.plan.preamble = tuple(
        line for line in preamble(text) if era_pragma.find(f"#{line}") is None
    )
    for parts, found in toml_comments(text).items():
        if not all(isinstance(p, str) for p in parts):
            continue
        key = ".".join(parts)
        outcome = draft.plan.outcomes.get(key)
        lines, trailing = tuple(found.leading), found.trailing
        if outcome is not None and outcome.status in ("carried", "renamed") and outcome.paths:
            path = outcome.paths[0]
        elif key in _SECTION_PATHS:
            path = _SECTION_PATHS[key]
        else:
            continue
        if "[" in path:
            continue  # inside the converter list: not addressable by a path
        old_lines, old_trailing = draft.plan.comments.get(path, ((), None))
        draft.plan.comments[path] = (old_lines + lines, old_trailing or trailing)

"""The plan steps only a Forge app config needs: what a human must still decide (Hugging Face Hub
paths, a trainer block with no JobConfig, a recipe's own validation loop)."""

from __future__ import annotations

from titan.migrate.plan import homes as homes_table
from titan.migrate.plan.draft import PlanDraft


def todos(draft: PlanDraft) -> None:
    """What a human must decide before a Forge app's migration is complete: a folder Forge
    downloads from the Hugging Face Hub, a ``trainer:`` block that held only Forge's own
    trainer actor, a validation loop the SFT recipe ran itself."""
    plan = draft.plan
    for finding in plan.diagnostics:
        if finding.code == "hub-path":
            home = homes_table.home(finding.path, extension=draft.extension)
            path = home.path if home is not None and home.path else ""
            plan.todo(path, f"{finding.path}: Forge downloaded it; write the local folder")
        elif finding.code == "forge-app" and finding.path == "validation":
            plan.todo("", "the SFT recipe ran its own validation loop; set the validator by hand")
    if draft.check.form == "yaml" and not draft.check.written:
        actor = [d.path for d in plan.diagnostics if d.code == "forge-app"]
        if actor:
            plan.todo(
                "",
                "the trainer: block holds no JobConfig, only Forge's own trainer actor's "
                f"settings ({', '.join(f'`{a}`' for a in actor)}): this config is titan's defaults",
            )

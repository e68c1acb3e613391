"""What torchtitan 0.3.0's config classes refuse when the config is built.

Their ``__post_init__`` checks refuse values a v0.2.2 run accepted as long as it never read them
(checkpoint settings with checkpointing off, async TP without TP). A value the legacy run did not
use is left at 0.3.0's default and noted; a relative ``initial_load_path`` is made absolute when
the function runs, as v0.2.2 resolved it; a value the legacy run did use is kept and reported as
an error: 0.3.0 refuses the config with its own message, as v0.2.2 refused the run.
``builder`` is :class:`titan.migrate.targets.upstream._Upstream`.
"""

from __future__ import annotations

from typing import Any

from titan.migrate.targets.config_objects import Call, Obj
from titan.migrate.targets.upstream_homes import cls
from titan.schemas.diagnostics import Severity


def refusals(builder: Any) -> None:
    """Every refusal of the module docstring, checked on the built 0.3.0 tree."""
    checkpoint = builder.root.fields.get("checkpoint")
    if isinstance(checkpoint, Obj):
        checkpoint_refusals(builder, checkpoint)
    tp = builder.value("parallelism.tensor_parallel_degree") or 1
    compile_model = bool(builder.value("compile.enable")) and "model" in (
        builder.value("compile.components") or []
    )
    builder.refused(
        "parallelism.enable_async_tensor_parallel",
        "compile.enable_async_tensor_parallel",
        bool(builder.value("parallelism.enable_async_tensor_parallel")) and not compile_model,
        used=tp > 1,
        why="0.3.0 refuses async tensor parallel unless the model is compiled",
    )
    cp = builder.value("parallelism.context_parallel_degree") or 1
    builder.refused(
        "parallelism.context_parallel_load_balancer",
        "parallelism.context_parallel_load_balancer",
        builder.value("parallelism.context_parallel_load_balancer") == "",
        used=cp > 1,
        why="0.3.0 refuses an empty load balancer name (None turns load balancing off)",
    )
    pp = builder.value("parallelism.pipeline_parallel_degree") or 1
    microbatch = builder.value("parallelism.pipeline_parallel_microbatch_size")
    batch = builder.value("training.local_batch_size")
    if isinstance(microbatch, int) and isinstance(batch, int):
        builder.refused(
            "parallelism.pipeline_parallel_microbatch_size",
            "parallelism.pipeline_parallel_microbatch_size",
            microbatch <= 0 or (pp > 1 and batch % microbatch != 0),
            used=pp > 1,
            why="0.3.0 needs a positive microbatch size that divides training."
            "local_batch_size under pipeline parallel",
        )
    ac = builder.root.fields.get("activation_checkpoint")
    if isinstance(ac, Obj) and ac.cls == cls("MemoryBudgetAC.Config") and not compile_model:
        builder.gone(
            "activation_checkpoint.mode",
            "0.3.0 refuses memory-budget activation checkpointing unless the model is "
            "compiled (compile.enable with 'model' in compile.components); the migrated "
            "function will not build until it is",
            "activation_checkpoint",
            hint="compile the model, or choose another activation-checkpointing mode",
        )


def checkpoint_refusals(builder: Any, checkpoint: Obj) -> None:
    fields = checkpoint.fields
    used = bool(fields.get("enable"))
    path = fields.get("initial_load_path")
    if isinstance(path, str) and path.strip() and not path.strip().startswith("/"):
        if "://" not in path:
            fields["initial_load_path"] = Call("os.path", "abspath", (path,))
            builder.changed(
                "checkpoint.initial_load_path",
                f"0.3.0 needs an absolute initial_load_path; {path!r} is written as "
                "abspath(...), which resolves it against the working folder when the "
                "registry function runs, as v0.2.2 did",
                "nothing to do, unless the run starts from another folder than before",
                Severity.INFO,
            )
    checks = (
        ("folder", not str(fields.get("folder", "x")).strip(), used, "an empty folder"),
        ("interval", (fields.get("interval") or 1) < 1, used, "an interval below 1"),
        (
            "keep_latest_k",
            fields.get("keep_latest_k") in (1,) or (fields.get("keep_latest_k") or 0) < 0,
            used,
            "keep_latest_k of 1 or below 0",
        ),
        (
            "exclude_from_loading",
            "model" in (fields.get("exclude_from_loading") or []),
            used,
            "'model' in exclude_from_loading",
        ),
        (
            "initial_load_in_hf",
            bool(fields.get("initial_load_in_hf")) and not fields.get("initial_load_model_only"),
            used,
            "an HF initial load that is not model-only",
        ),
        (
            "initial_load_in_hf_quantized",
            bool(fields.get("initial_load_in_hf_quantized"))
            and not (fields.get("initial_load_in_hf") and fields.get("initial_load_path")),
            False,  # read only with an HF initial load from a path
            "a quantized HF load without an HF initial load from a path",
        ),
        (
            "last_save_in_hf",
            bool(fields.get("last_save_in_hf"))
            and (not fields.get("last_save_model_only") or "://" in str(fields.get("folder", ""))),
            used,
            "an HF last save that is not model-only, or to a remote folder",
        ),
    )
    for name, refused, read, what in checks:
        builder.refused(
            f"checkpoint.{name}",
            f"checkpoint.{name}",
            refused,
            used=read,
            why=f"0.3.0 refuses {what} when the config is built",
        )

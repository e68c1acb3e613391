"""A migration plan for upstream torchtitan 0.3.0 instead of titan's own trainer.

The plan stays one (:func:`titan.migrate.plan.build.build_plan` reads, checks and upgrades the TOML, and
records what a v0.2.2 run of it used in :attr:`~titan.migrate.plan.migration_plan.Plan.effective`); this
module puts those values at their 0.3.0 homes (``migrate/targets/upstream_homes.py``) inside the
default tree of 0.3.0's real classes (``migrate/targets/upstream_spec_030.py``, generated from the
installed package).

Where 0.3.0 cannot say what the legacy run did, the key is reported (``upstream-gone`` as an
error when the run would differ, the closest 0.3.0 setting written with a TODO), never dropped
silently. A value 0.3.0 needs but no legacy key sets is written as upstream's own registries
write it: ``loss`` (chunked cross-entropy over the model's vocabulary), ``dataloader`` (the
HuggingFace text loader), the profiler folders of the legacy defaults.
"""

from __future__ import annotations

from typing import Any

from titan.migrate.plan import flavor_era
from titan.migrate.plan.extension_classes import generate_classes
from titan.migrate.plan.legacy_values import copy_value
from titan.migrate.plan.migration_plan import KeyOutcome, Plan
from titan.migrate.plan.model_keys import FAMILY_ALIASES
from titan.migrate.targets import upstream_pp, upstream_quantize, upstream_refusals
from titan.migrate.targets import upstream_spec_030 as spec
from titan.migrate.targets.config_objects import (
    Call,
    Local,
    ModelEdit,
    Obj,
    RegistryCall,
    UnsupportedModel,
    default_object,
    same,
)
from titan.migrate.targets.upstream_homes import cls, split_flavor, upstream_homes, upstream_path
from titan.schemas.diagnostics import Diagnostic, Severity, Span

TARGET = "torchtitan==0.3.0"
PACKAGE = "torchtitan"


_TITAN_FT = "titan.experiments.ft.trainer:FaultTolerantTrainer.Config"
_TITAN_FLUX = "titan.models.flux.trainer:FluxTrainer.Config"

_CONVERTERS = {
    "Float8LinearConverter.Config": "Float8LinearConverter.Config",
    "Float8GroupedMMConverter.Config": "Float8GroupedExpertsConverter.Config",
    "MXLinearConverter.Config": "MXFP8LinearConverter.Config",
    "MXGroupedMMConverter.Config": "MXFP8GroupedExpertsConverter.Config",
}
"""titan converter config -> the 0.3.0 one."""

_CONVERTER_TABLES = {
    "Float8LinearConverter.Config": "quantize.linear.float8",
    "Float8GroupedMMConverter.Config": "quantize.grouped_mm.float8",
    "MXLinearConverter.Config": "quantize.linear.mx",
    "MXGroupedMMConverter.Config": "quantize.grouped_mm.mx",
}


SECTION_HOMES_030 = {
    "training": "training",
    "parallelism": "parallelism",
    "checkpoint": "checkpoint",
    "metrics": "metrics",
    "comm": "comm",
    "compile": "compile",
    "debug": "debug",
    "lr_scheduler": "lr_scheduler",
    "profiling": "profiler",
    "validation": "validator",
    "training.dataloader": "dataloader",
    "validation.dataloader": "validator.dataloader",
}
"""Legacy table -> the 0.3.0 config object a custom module's fields extend."""


def retarget(plan: Plan) -> Plan:
    """``plan`` (built for titan) as a plan for torchtitan 0.3.0."""
    new = Plan(plan.source, plan.function)
    for name in (
        "description",
        "preamble",
        "extension",
        "module_files",
        "declared_extensions",
        "text",
        "effective",
        "spans",
        "era",
    ):
        setattr(new, name, getattr(plan, name))
    new.target = TARGET
    new.diagnostics = list(plan.diagnostics)
    new.outcomes = {key: _copy_outcome(o) for key, o in plan.outcomes.items()}
    if plan.root is None:
        return new
    _Upstream(plan, new).build()
    flavor_era.measure(new)
    return new


ERA_FIELDS: dict[tuple[str, str], tuple[str, str]] = {
    ("llama3", "rope.scaling"): ("layers", "attention.rope.scaling"),
}
"""(family, titan model-config path) -> (the list of torchtitan 0.3.0's model config whose every
item holds the field, the field's path in an item): the fields of a flavor's era that 0.3.0's
per-layer configs can say. Every other era field is reported (``flavor_era.measure``)."""


def era_edits(family: str, spec_value: RegistryCall) -> tuple[ModelEdit, ...]:
    """The era's flavor fields of titan's plan, as 0.3.0 spells them, where it can."""
    found = []
    for edit in spec_value.edits:
        where = ERA_FIELDS.get((family, edit.means))
        if where is not None:
            each, path = where
            found.append(ModelEdit(path, edit.value, edit.why, each=each, means=edit.means))
    return tuple(found)


def _copy_outcome(outcome: KeyOutcome) -> KeyOutcome:
    paths = tuple(p for p in (_path(p) for p in outcome.paths) if p)
    return KeyOutcome(outcome.key, outcome.status, paths, outcome.note, outcome.era)


def _path(titan_path: str) -> str | None:
    """The 0.3.0 path of a titan config path, ``None`` where 0.3.0 has no such field."""
    if titan_path.startswith(("model_converters", "description")) or titan_path in (
        "validator.local_batch_size",
        "validator.seq_len",
    ):
        return None
    if titan_path == "parallelism.enable_async_tensor_parallel":
        return "compile.enable_async_tensor_parallel"
    if titan_path.startswith("optimizer."):
        return "optimizer"
    return upstream_path(titan_path)


class _Upstream:
    def __init__(self, plan: Plan, new: Plan) -> None:
        self.old = plan
        self.plan = new
        self.effective = plan.effective
        self.written = set(plan.outcomes)

    # ----------------------------------------------------------------- helpers

    def value(self, key: str) -> Any:
        return self.effective.get(key)

    def span(self, key: str) -> Span:
        """Where the file writes ``key`` (or its nearest table), else its first line."""
        parts = key.split(".")
        while parts:
            found = self.old.spans.get(".".join(parts))
            if found is not None:
                return found
            parts.pop()
        return Span(file=self.old.source, line=1, col=1)

    def report(self, code: str, key: str, message: str, hint: str, severity: Severity) -> None:
        self.plan.diagnostics.append(
            Diagnostic(
                code=code,
                severity=severity,
                path=key,
                message=message,
                hint=hint,
                span=self.span(key),
            )
        )

    def gone(
        self,
        key: str,
        why: str,
        todo_path: str = "",
        *,
        hint: str | None = None,
        numerics: bool = True,
        value: Any = None,
    ) -> None:
        """A legacy value 0.3.0 cannot express, although the run used it: an error when the
        migrated run computes something else (or may not start), a warning when only memory,
        speed or logs differ (``numerics=False``)."""
        value = self.value(key) if value is None else value
        self.report(
            "upstream-gone",
            key,
            f"`{key} = {_show(value)}` cannot be said in torchtitan {spec.VERSION}: {why}",
            hint
            or "decide whether the run can do without it; the generated function carries a TODO",
            Severity.ERROR if numerics else Severity.WARNING,
        )
        self.plan.todo(todo_path, f"`{key} = {_show(value)}` has no torchtitan 0.3.0 home: {why}")
        if key in self.written:
            self.plan.outcomes[key] = KeyOutcome(key, "dropped", (), why)

    def changed(self, key: str, message: str, hint: str, severity=Severity.WARNING) -> None:
        """A value carried with another meaning or spelling that the user should know about."""
        self.report("upstream-changed", key, message, hint, severity)

    def outcome(self, key: str, status: str, paths: tuple[str, ...] = (), note: str = "") -> None:
        if key in self.written and self.plan.outcomes[key].status not in ("rejected", "inert"):
            old = self.plan.outcomes[key]
            era = old.era
            status = "upgraded" if old.status == "upgraded" and status == "carried" else status
            self.plan.outcomes[key] = KeyOutcome(key, status, paths, note, era)

    def set(self, path: str, value: Any) -> bool:
        """Put ``value`` at ``path`` of the tree; False where 0.3.0's tree has no such field."""
        *parents, name = path.split(".")
        node: Any = self.root
        for part in parents:
            node = node.fields.get(part) if isinstance(node, Obj) else None
        if not isinstance(node, Obj) or name not in node.fields:
            return False
        node.fields[name] = copy_value(value)
        return True

    # ----------------------------------------------------------------- the steps

    def build(self) -> None:
        self.fault_tolerant = self.flux = False
        trainer = self.trainer()
        self.root = default_object(trainer)
        if self.flux:
            from titan.migrate.targets import upstream_flux

            upstream_flux.prepare(self)
        else:
            loader = default_object(cls("HuggingFaceTextDataLoader.Config"))
            loader.shown = frozenset({"dataset"})  # upstream's registries always name it
            self.root.fields["dataloader"] = loader
        if self.fault_tolerant:
            self.root.fields["checkpoint"] = default_object(cls("TorchFTCheckpointManager.Config"))
        self.carry_plain()
        self.legacy_behaviour()
        self.custom_values()
        self.model()
        if self.flux:
            from titan.migrate.targets import upstream_flux

            upstream_flux.finish(self)
        else:
            self.loss()
        self.optimizer()
        self.activation_checkpoint()
        self.profiler()
        self.gone_keys()
        self.validation_shape()
        upstream_pp.convert_module_fqns(self)
        upstream_refusals.refusals(self)
        self.plan.root = self.root
        self.comments()
        self.todos()
        self.packing_note()
        self.pipeline_note()

    def trainer(self) -> str:
        """0.3.0's trainer config for the legacy run, or the subclass generated for its custom
        config modules on top of it."""
        titan = self.old.root.cls
        if self.old.classes:  # a custom module: its trainer subclass extends one of titan's
            titan = self.old.classes[-1].base or titan
        wanted = cls("Trainer.Config")
        if titan == _TITAN_FT:
            wanted = self.ft_trainer()
        elif titan == _TITAN_FLUX:
            wanted = self.flux_trainer()
        extension = self.old.user_extension
        if extension is None:
            return wanted
        from titan.schemas.legacy_spec import LEGACY_SPEC

        generated = generate_classes(
            extension, wanted, LEGACY_SPEC, target=TARGET, section_homes=SECTION_HOMES_030
        )
        self.plan.classes = generated.classes
        for key, note in generated.notes:
            if not any(note == text for _, text in _old_notes(self.old)):
                self.report(
                    "extension-class",
                    key,
                    note,
                    "rename the field in the custom config module, or set the value by hand",
                    Severity.WARNING,
                )
        return generated.root

    def ft_trainer(self) -> str:
        """The torchft experiment's trainer config; its checkpoint config is the one that has
        ``enable_ft_dataloader_checkpoints``."""
        self.fault_tolerant = True
        return cls("FaultTolerantTrainer.Config")

    def flux_trainer(self) -> str:
        self.flux = True
        return cls("FluxTrainer.Config")

    def carry_plain(self) -> None:
        """Every ``same`` and ``moved`` key, at its 0.3.0 path."""
        for key, home in upstream_homes().items():
            if home.status not in ("same", "moved") or home.path is None:
                continue
            if home.path.startswith(("model_spec:", "activation_checkpoint.")):
                continue  # the model and AC steps place these
            if key not in self.effective:
                continue  # invalid in the file: reported already
            value = self.effective[key]
            if self.set(home.path, value):
                self.outcome(key, "carried", (home.path,), home.note)
            elif key == "checkpoint.enable_ft_dataloader_checkpoints":
                self.outcome(key, "inert", (), "only fault-tolerant runs read it")
            elif not same(value, _legacy_default(key)):
                self.gone(key, home.note or "no field for it in this trainer config")

    def legacy_behaviour(self) -> None:
        """0.3.0 features a v0.2.2 run never had, switched off so the run does what it did:
        CUDA graphs (on by default in 0.3.0, and refused with pipeline parallel or the
        all-to-all expert dispatcher)."""
        self.set("training.disable_cuda_graphs", True)

    def custom_values(self) -> None:
        """Values of a custom module's fields: same paths as in titan's tree."""
        from titan.migrate.plan.homes import EXTENSION_HOMES

        for key, outcome in self.old.outcomes.items():
            if key in upstream_homes() or outcome.status not in ("carried", "default"):
                continue
            if self.flux and ("flux", key) in EXTENSION_HOMES:
                continue  # upstream_flux places the Flux trainer's keys
            for path in outcome.paths:
                target = _path(path)
                try:
                    value = self.old.root.get(path)
                except (KeyError, AttributeError):
                    continue
                if target is None or not self.set(target, value):
                    self.gone(key, "no field for it in the generated 0.3.0 classes", value=value)

    # ----------------------------------------------------------------- model

    def model(self) -> None:
        spec_value = self.old.root.fields.get("model_spec")
        if isinstance(spec_value, UnsupportedModel):
            self.no_model(
                f"it has no {spec_value.name} model family",
                f"keep {spec_value.name} runs where they are, or bring a model_registry of your "
                "own (--model-registry)",
            )
            return
        if not isinstance(spec_value, RegistryCall):
            return
        if spec_value.module is not None:  # the user's own family: their model_registry
            # Without titan's model config subclass: its [model] fields were reported (the
            # classes for 0.3.0 have no home for them).
            self.plan.locals["model_spec"] = RegistryCall(
                spec_value.family, spec_value.flavor, spec_value.module, spec_value.kwargs
            )
            if self.old.root.get("model_converters.converters"):
                self.gone(
                    "model.converters",
                    "0.3.0 passes converters to model_registry(converters=...), and the "
                    "project's own model_registry takes none that titan-migrate knows of",
                )
            self.root.fields["model_spec"] = Local("model_spec")
            return
        family = FAMILY_ALIASES.get(spec_value.family, spec_value.family)
        flavor, backend = split_flavor(family, spec_value.flavor)
        info = spec.FAMILIES.get(family)
        if info is None:
            self.no_model(
                f"it has no {family} model family",
                f"keep {family} runs on titan's trainer, or bring a {family} model_registry of "
                "your own (--model-registry)",
            )
            return
        if flavor not in info.flavors:
            self.gone(
                "model.flavor",
                f"its {family} family has no flavor {flavor!r} (it has "
                + ", ".join(repr(f) for f in info.flavors)
                + ")",
                hint="pick the 0.3.0 flavor with the same shape, or register your own",
            )
            return
        kwargs: dict[str, Any] = {}
        legacy_backend = backend
        if backend == "sdpa":
            backend = "flex"
        default_backend = info.params.get("attn_backend")
        if "attn_backend" in info.params and backend != default_backend:
            kwargs["attn_backend"] = backend
        if legacy_backend == "sdpa" and "attn_backend" in info.params:
            self.changed(
                "model.flavor",
                f"flavor {spec_value.flavor!r} ran scaled-dot-product attention; torchtitan "
                f"{spec.VERSION} refuses SDPA for language models, so the migrated run uses "
                f"FlexAttention ({backend!r})",
                "nothing to do: FlexAttention computes the same attention under the same mask "
                "(the mask itself follows 0.3.0's per-document packing: see the seq_len note)",
                Severity.INFO,
            )
        converters = self.converters()
        if converters:
            kwargs["converters"] = converters
        comm = self.value("parallelism.expert_parallel_comm_backend")
        if comm is not None and comm != "standard":
            if "moe_comm_backend" in info.params:
                kwargs["moe_comm_backend"] = comm
                self.outcome(
                    "parallelism.expert_parallel_comm_backend",
                    "carried",
                    ("model_spec",),
                    "model_registry(moe_comm_backend=...)",
                )
            else:
                self.gone(
                    "parallelism.expert_parallel_comm_backend",
                    f"the {family} family takes no MoE communication backend",
                )
        elif "parallelism.expert_parallel_comm_backend" in self.written:
            self.outcome("parallelism.expert_parallel_comm_backend", "default", ("model_spec",))
        call = RegistryCall(
            family, flavor, module=info.module, kwargs=kwargs, edits=era_edits(family, spec_value)
        )
        self.plan.locals["model_spec"] = call
        self.root.fields["model_spec"] = Local("model_spec")
        for name in ("model.name", "model.flavor"):
            self.outcome(name, "structural", ("model_spec",), "model_registry(...)")

    def no_model(self, why: str, hint: str) -> None:
        """No 0.3.0 model for the file: ``model_spec`` stays unset (the function builds, a run
        of it stops at once) and the model keys are reported."""
        self.gone("model.name", why, hint=hint)
        for key in ("model.flavor", "model.converters"):
            if key in self.written and self.plan.outcomes[key].status != "rejected":
                self.plan.outcomes[key] = KeyOutcome(key, "dropped", (), "no model family for it")

    def converters(self) -> list[Obj]:
        built: list[Obj] = []
        compile_model = bool(self.value("compile.enable")) and "model" in (
            self.value("compile.components") or []
        )
        for old in self.old.root.get("model_converters.converters"):
            qualname = old.cls.rpartition(":")[2]
            if qualname not in _CONVERTER_TABLES:  # a fork's own converter ([tool.titan])
                why = f"the fork's converter {qualname} is built for titan's trainer config"
                self.gone("model.converters", why)
                continue
            table = _CONVERTER_TABLES[qualname]
            new = default_object(cls(_CONVERTERS[qualname]))
            if "model_compile_enabled" in new.fields:
                new.fields["model_compile_enabled"] = compile_model
            upstream_quantize.CONVERTERS[table](self, old, new, table)
            built.append(new)
        if "model.converters" in self.written and self.plan.outcomes[
            "model.converters"
        ].status not in ("dropped", "rejected"):
            self.outcome("model.converters", "carried", ("model_spec",), "model_registry(...)")
        return built

    def loss(self) -> None:
        """Chunked cross-entropy over the model's vocabulary, as upstream's registries set it
        (0.3.0's default loss config is abstract)."""
        if "model_spec" not in self.plan.locals:
            return
        vocab = Call(
            "torchtitan.models.common.config_utils",
            "decoder_vocab_size",
            (Local("model_spec"),),
        )
        loss = default_object(cls("ChunkedLossWrapper.Config"))
        loss.fields["loss_fn"] = default_object(cls("CrossEntropyLoss.Config"))
        loss.fields["loss_fn"].fields["global_vocab_size"] = vocab
        self.root.fields["loss"] = loss

    # ----------------------------------------------------------------- optimizer

    def optimizer(self) -> None:
        keys = ("name", "lr", "beta1", "beta2", "eps", "weight_decay")
        name, lr, beta1, beta2, eps, weight_decay = (self.value(f"optimizer.{k}") for k in keys)
        if None in (name, lr, beta1, beta2, eps, weight_decay):
            return  # an invalid optimizer value: reported by the validator
        container = self.root.fields["optimizer"]
        kwargs = {"lr": lr, "betas": (beta1, beta2), "eps": eps, "weight_decay": weight_decay}
        if name == "AdamW" and same(container.fields, _adamw_defaults(container)):
            extra = {
                k: v for k, v in kwargs.items() if k != "lr" and not same(v, _ADAMW_DEFAULTS[k])
            }
            self.root.fields["optimizer"] = Call(
                "torchtitan.components.optimizer", "default_adamw", (), {"lr": lr, **extra}
            )
        else:
            group = default_object(cls("ParamGroupConfig"))
            group.fields.update(pattern=".*", optimizer_name=name, optimizer_kwargs=kwargs)
            container.fields["param_groups"] = [group]
        for k in keys:
            self.outcome(f"optimizer.{k}", "carried", ("optimizer",), "optimizer.param_groups")
        if self.value("optimizer.early_step_in_backward"):
            self.gone(
                "optimizer.early_step_in_backward",
                "0.3.0 has no optimizer-in-backward container; the step runs after backward "
                "(same math, more memory)",
                "optimizer",
                numerics=False,
            )

    # ----------------------------------------------------------------- activation checkpointing

    def activation_checkpoint(self) -> None:
        mode = self.value("activation_checkpoint.mode")
        if mode is None:
            return
        option = self.value("activation_checkpoint.selective_ac_option")
        common = {
            name: self.value(f"activation_checkpoint.{name}")
            for name in ("preserve_rng_state", "determinism_check", "debug")
        }
        key = "activation_checkpoint.mode"
        if mode == "none":
            self.root.fields["activation_checkpoint"] = None
            self.outcome(key, "carried", ("activation_checkpoint",), "activation_checkpoint=None")
            return
        policy = {"full": "FullAC", "selective": "SelectiveAC", "memory_budget": "MemoryBudgetAC"}
        obj = default_object(cls(f"{policy[mode]}.Config"))
        obj.fields.update({k: v for k, v in common.items() if v is not None})
        if mode == "selective":
            fqns = self.value("activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns")
            if fqns is not None:
                obj.fields["force_recompute_mm_shapes_by_fqns"] = copy_value(fqns)
            if option != "op":
                self.gone(
                    "activation_checkpoint.selective_ac_option",
                    f"layer-wise selective AC ({_every(option)} transformer block) has no "
                    "equivalent: 0.3.0's SelectiveAC is per operator, which the migrated run "
                    "uses (other memory and speed, same numerics)",
                    "activation_checkpoint",
                    hint="keep SelectiveAC.Config() (per-op), or use FullAC.Config() if memory "
                    "was the reason",
                    numerics=False,
                )
        if mode == "memory_budget":
            for name in ("memory_budget", "visualize_memory_budget_pareto"):
                obj.fields[name] = copy_value(self.value(f"activation_checkpoint.{name}"))
        self.root.fields["activation_checkpoint"] = obj
        self.outcome(key, "carried", ("activation_checkpoint",), f"{policy[mode]}.Config")
        for name in (*common, "per_op_sac_force_recompute_mm_shapes_by_fqns"):
            path = f"activation_checkpoint.{name}"
            self.outcome(path, "carried", ("activation_checkpoint",))
        for name in ("memory_budget", "visualize_memory_budget_pareto"):
            if mode == "memory_budget":
                self.outcome(f"activation_checkpoint.{name}", "carried", ("activation_checkpoint",))
            else:
                self.outcome(f"activation_checkpoint.{name}", "inert", (), "not memory_budget AC")
        if self.value("activation_checkpoint.early_stop"):
            self.gone(
                "activation_checkpoint.early_stop", "early stop is always off", numerics=False
            )

    # ----------------------------------------------------------------- profiler and the rest

    def profiler(self) -> None:
        """Traces and snapshots land where they did: the legacy folders are written even when
        they are the legacy defaults, which 0.3.0 moved."""
        for name in ("save_traces_folder", "save_memory_snapshot_folder"):
            value = self.value(f"profiling.{name}")
            if value is not None:
                self.root.fields["profiler"].fields[name] = value
                self.outcome(f"profiling.{name}", "carried", (f"profiler.{name}",))

    def gone_keys(self) -> None:
        """Keys 0.3.0 has no home for: reported when the legacy value makes the run differ."""
        tp = self.value("parallelism.tensor_parallel_degree") or 1
        pp = self.value("parallelism.pipeline_parallel_degree") or 1
        ep = self.value("parallelism.expert_parallel_degree") or 1
        cp = self.value("parallelism.context_parallel_degree") or 1
        numerics_same = {
            "parallelism.disable_loss_parallel",
            "parallelism.pipeline_parallel_expert_parallel_overlap",
            "parallelism.context_parallel_rotate_method",
            "model.print_after_conversion",
            "memory_estimation.enable",
        }
        checks = {
            "parallelism.disable_loss_parallel": (
                self.value("parallelism.disable_loss_parallel") is True and tp != 1,
                "the loss is always vocabulary-parallel under tensor parallel",
            ),
            "parallelism.pipeline_parallel_expert_parallel_overlap": (
                self.value("parallelism.pipeline_parallel_expert_parallel_overlap") is True
                and pp > 1
                and ep > 1,
                "expert-parallel communication is not overlapped with pipeline stages",
            ),
            "parallelism.context_parallel_rotate_method": (
                cp > 1 and self.value("parallelism.context_parallel_rotate_method") != "allgather",
                "context parallel has no rotate-method choice",
            ),
            "parallelism.expert_tensor_parallel_degree": (
                (self.value("parallelism.expert_tensor_parallel_degree") or 1) != 1,
                "experts are not tensor-parallel; expert parallel borrows ranks from "
                "FSDP x CP x TP",
            ),
            "model.print_after_conversion": (
                self.value("model.print_after_conversion") is True,
                "no switch to print the model after its converters",
            ),
            "memory_estimation.enable": (
                self.value("memory_estimation.enable") is True,
                "no memory estimator",
            ),
            "experimental.custom_import": (
                bool(self.value("experimental.custom_import")),
                "no import hook: import the module at the top of the registry module",
            ),
        }
        for key, (differs, why) in checks.items():
            if differs:
                self.gone(key, why, numerics=key not in numerics_same)
            elif key in self.written and self.plan.outcomes[key].status not in (
                "rejected",
                "inert",
                "dropped",
            ):
                self.outcome(key, "default", (), "0.3.0 behaves the same for this run")
        for key, home in upstream_homes().items():  # the rest of the gone keys, when written
            if home.status == "gone" and key in self.written:
                current = self.plan.outcomes[key].status
                if current in ("carried", "upgraded") and key != "job.description":
                    self.outcome(key, "default", (), home.note)
        if "job.description" in self.written:
            self.outcome("job.description", "structural", (), "the function's docstring")

    def validation_shape(self) -> None:
        enabled = bool(self.value("validation.enable"))
        for key, training in (
            ("validation.local_batch_size", "training.local_batch_size"),
            ("validation.seq_len", "training.seq_len"),
        ):
            if self.flux and key == "validation.seq_len":
                if key in self.written:  # v0.2.2's Flux validator never read it
                    self.plan.outcomes[key] = KeyOutcome(key, "inert", (), "Flux never read it")
                continue
            legacy, follows = self.value(key), self.value(training)
            if legacy is None or same(legacy, follows):
                continue
            text = (
                f"legacy validation used {key} = {legacy!r}; torchtitan {spec.VERSION}'s "
                f"validator uses {training} = {follows!r}"
            )
            if enabled:
                self.gone(key, f"the validator uses {training} ({follows!r})")
            else:
                self.report(
                    "upstream-changed",
                    key,
                    text + " (validation is off in this file)",
                    "nothing to do unless validation is switched on; then the validation loss "
                    "is measured on another batch shape",
                    Severity.INFO,
                )
                if key in self.written:
                    self.plan.outcomes[key] = KeyOutcome(key, "inert", (), "validation is off")

    # ----------------------------------------------------------------- what 0.3.0 refuses

    def refused(self, key: str, path: str, refused: bool, *, used: bool, why: str) -> None:
        """One 0.3.0 refusal: reset an unused value (noted), report a used one."""
        if not refused:
            return
        if used:
            self.gone(
                key,
                f"{why}, and this run used the value; the migrated function will not build "
                "until it is changed",
                hint="fix the value in the TOML (v0.2.2 refused it at run time too) and "
                "migrate again",
            )
            return
        *parents, name = path.split(".")
        node: Any = self.root
        for part in parents:
            node = node.fields[part]
        node.fields[name] = copy_value(default_object(node.cls).fields[name])
        self.report(
            "upstream-changed",
            key,
            f"`{key} = {_show(self.value(key))}` is not written: {why}, and the legacy run "
            "never read it; 0.3.0's default is kept",
            "nothing to do",
            Severity.INFO,
        )
        if key in self.written:
            self.plan.outcomes[key] = KeyOutcome(key, "inert", (), "unused by the legacy run")

    def packing_note(self) -> None:
        if "model_spec" not in self.plan.locals or self.flux:
            return  # a language model's packing; Flux trains on images
        self.report(
            "upstream-changed",
            "training.seq_len",
            f"torchtitan {spec.VERSION} packs each document on its own (positions restart and "
            "attention stops at document boundaries); v0.2.2 attended across the packed stream, "
            "so losses differ from the legacy run's from the first step",
            "expected: compare loss curves, not exact values, against the legacy run",
            Severity.INFO,
        )

    def pipeline_note(self) -> None:
        degree = self.value("parallelism.pipeline_parallel_degree")
        if not isinstance(degree, int) or isinstance(degree, bool) or degree <= 1:
            return
        self.report(
            "upstream-changed",
            "parallelism.pipeline_parallel_degree",
            f"under pipeline parallel torchtitan {spec.VERSION} divides the loss by the batch's "
            "valid tokens before backward; v0.2.2 ran backward on each microbatch's summed loss "
            "and divided only the logged loss, so its gradients, grad norms and max_norm "
            "clipping differ from the migrated run's (which are those of the run without PP)",
            "expected: compare loss curves and grad norms, not exact values, against the "
            "legacy run",
            Severity.INFO,
        )

    # ----------------------------------------------------------------- comments and TODOs

    def comments(self) -> None:
        for path, comment in self.old.comments.items():
            target = _path(path)
            if target is not None:
                self.plan.comments.setdefault(target, comment)

    def todos(self) -> None:
        for path, texts in self.old.todos.items():
            target = "" if path == "" else _path(path)
            for text in texts:
                self.plan.todo(target if target is not None else "", text)


_ADAMW_DEFAULTS = {"betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}
"""What ``default_adamw`` puts in its one parameter group besides ``lr``."""


def _adamw_defaults(container: Obj) -> dict[str, Any]:
    return default_object(container.cls).fields


def _legacy_default(key: str) -> Any:
    from titan.migrate.plan.legacy_values import schema_default
    from titan.schemas.legacy_spec import LEGACY_SPEC

    return schema_default(LEGACY_SPEC, key)


def _old_notes(plan: Plan) -> list[tuple[str, str]]:
    return [(d.path, d.message) for d in plan.diagnostics if d.code == "extension-class"]


def _every(option: Any) -> str:
    """``"2"`` -> ``every 2nd``."""
    text = str(option)
    if not text.isdigit():
        return f"option {text!r}"
    n = int(text)
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return "every" if n == 1 else f"every {n}{suffix}"


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."

"""The one diagnostic type shared by the validator and the migrator.

A diagnostic is data: a stable code, a severity, the dotted key path it is about, a message, an
optional hint (did-you-mean, moved-to) and a source span. Renderers (``titan.schemas.render``) turn a
list of them into text, JSON, GitHub annotations or SARIF.
"""

from __future__ import annotations

import enum

from titan.schemas._frozen import Frozen, _set


class Severity(enum.StrEnum):
    """How bad a finding is: errors fail a run, warnings fail only under ``--strict``."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


class Span(Frozen):
    """A place in a source file; lines and columns start at 1, ``end_col`` is exclusive."""

    __slots__ = ("file", "line", "col", "end_line", "end_col")
    __match_args__ = ()

    file: str
    """Path of the file as the user named it."""
    line: int
    """1-based line of the first character."""
    col: int
    """1-based column of the first character."""
    end_line: int | None
    """1-based line after the last character (defaults to ``line``)."""
    end_col: int | None
    """1-based column just past the last character (defaults to ``col + 1``)."""

    def __init__(
        self,
        *,
        file: str,
        line: int,
        col: int,
        end_line: int | None = None,
        end_col: int | None = None,
    ) -> None:
        _set(self, "file", file)
        _set(self, "line", line)
        _set(self, "col", col)
        _set(self, "end_line", end_line)
        _set(self, "end_col", end_col)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class Diagnostic(Frozen):
    """One finding about a config."""

    __slots__ = ("code", "severity", "path", "message", "hint", "span")
    __match_args__ = ()

    code: str
    """Stable kebab-case identifier (``unknown-key``, ``wrong-type``); SARIF's rule id."""
    severity: Severity
    """Error, warning or info."""
    path: str
    """Dotted key path the finding is about (``training.steps``); empty for the whole file."""
    message: str
    """One sentence saying what is wrong."""
    hint: str | None
    """What to do about it (did you mean ..., moved to ...), if titan knows."""
    span: Span | None
    """Where in the source; ``None`` when the finding has no single place (e.g. a default)."""

    def __init__(
        self,
        *,
        code: str,
        severity: Severity,
        path: str,
        message: str,
        hint: str | None = None,
        span: Span | None = None,
    ) -> None:
        _set(self, "code", code)
        _set(self, "severity", severity)
        _set(self, "path", path)
        _set(self, "message", message)
        _set(self, "hint", hint)
        _set(self, "span", span)

    def sort_key(self) -> tuple:
        """Order by file, then position, then code, so output is stable."""
        if self.span is None:
            return ("", 0, 0, self.code, self.path)
        return (self.span.file, self.span.line, self.span.col, self.code, self.path)


def count(diagnostics: list[Diagnostic], severity: Severity) -> int:
    """Number of findings of one severity."""
    return sum(1 for d in diagnostics if d.severity is severity)


CODES: dict[str, str] = {
    "toml-syntax": "The file is not valid TOML (or not UTF-8).",
    "unreadable-file": "The file or folder could not be read (missing, not a regular file, too large).",
    "too-deep": "Tables and arrays nested deeper than titan reads (100 levels).",
    "yaml-syntax": "A Forge app config (YAML) that Forge's loader refuses: not YAML, not UTF-8, a key written twice, an alias bomb or cycle.",
    "no-trainer": "A Forge app config (YAML) without legacy sections: neither a trainer: mapping nor top-level sections (the SFT layout).",
    "forge-app": "A part of a Forge app config that is Forge's own, not a JobConfig setting: its trainer actor's arguments, its spawner's options, where its engine kept checkpoints.",
    "yaml-type": "A YAML value no legacy setting holds (a date, binary, a Python tag) or a key that is not a name.",
    "interpolation": "A ${...} value of a Forge app config that titan cannot resolve (left unchecked).",
    "unknown-optimizer": "An optimizer name titan-train does not build (it builds Adam and AdamW).",
    "broken-interpolation": "A ${...} reference of a Forge app config to a key the file does not have, or one leading back to itself: OmegaConf refuses it.",
    "hub-path": "A Hugging Face Hub path (hf://...) that Forge downloads when it starts, which titan-train cannot read: it needs a local folder.",
    "unknown-key": "A key or section that the schema does not have.",
    "moved-key": "A key from an older torchtitan that lives elsewhere in v0.2.2.",
    "upgraded-key": "A key from an older torchtitan that titan-migrate carried at its v0.2.2 home (titan.schemas.eras).",
    "wrong-type": "A value of the wrong type (no silent coercion).",
    "invalid-choice": "A value outside the allowed choices.",
    "invalid-value": "A value torchtitan rejects while building the config.",
    "out-of-range": "A number outside the range its setting allows (negative steps, a non-finite learning rate).",
    "deprecated-key": "A key v0.2.2 still accepts but deprecates.",
    "ignored-key": "A key the loader of the file's era ignored (a key gone by then, or one the loader never read): not carried.",
    "extension-error": "A custom config module that cannot be found or read.",
    "extension-unreadable": "Part of a custom config module that cannot be read statically.",
    "extension-imported": "Which file a custom config module was imported from (--allow-import).",
    "parallel-degree": "A parallel degree outside its allowed range.",
    "world-size": "Parallel degrees that do not fit the number of GPUs.",
    "expert-parallel": "Expert parallel settings that torchtitan rejects.",
    "moe-routing": "Mixture-of-experts routing the model cannot run (top_k, expert groups).",
    "batch-size": "Batch sizes that do not divide as gradient accumulation needs.",
    "seq-len": "A sequence length that tensor/context parallel cannot split.",
    "tp-heads": "A tensor parallel degree that does not divide the attention heads.",
    "pipeline-layout": "A pipeline the model cannot be split into: an unknown schedule, stages the pipeline ranks cannot share, too few layers, a bad module_fqns_per_model_part.",
    "keep-latest-k": "checkpoint.keep_latest_k = 1, which torchtitan refuses.",
    "hf-model-only": "Hugging Face checkpoint I/O without model-only loading or saving.",
    "initial-load-disabled": "An initial load (initial_load_path, initial_load_in_hf) with checkpointing off: the weights are not loaded and the run starts from random ones.",
    "unknown-converter": "A model converter name that is not registered.",
    "converter-families": "float8 and mx converters in one model.",
    "inert-section": "A [quantize.*] table whose converter is not enabled.",
    "float8-options": "float8 options that do not work together.",
    "optimizer-in-backward": "early_step_in_backward with a feature it does not support.",
    "activation-checkpoint": "Activation checkpointing options torchtitan rejects.",
    "async-tp": "Async tensor parallel without a compiled model, or without tensor parallel (no effect).",
    "ddp-layout": "DDP (unsharded replicas) combined with tensor, pipeline or context parallel.",
    "cpu-offload": "CPU offload without FSDP shards to offload.",
    "no-effect": "A setting titan-train accepts but does not act on (context parallel's rotate method and load balancer).",
    "unknown-model": "A model name titan does not know.",
    "unknown-flavor": "A flavor the model does not have.",
    "unknown-config": "A registry function name (--config) that no registry defines.",
    "registry-error": "A registry file or function that fails to import or raises.",
    "cli-syntax": "A command-line override that cannot be read (no value, a stray token, a value for a switch).",
    "dropped-key": "A legacy key titan-migrate cannot carry: titan has no place for it.",
    "era-default": "A key the file omits, written with the default of the file's torchtitan era where that differs from v0.2.2's (titan-migrate; --era sets the era).",
    "era-default-lost": "A key the file omits whose default in the file's era v0.2.2 cannot express (a .model tokenizer, a removed dataset): the run used it.",
    "era-flavor": "A flavor whose definition in the file's era differs from v0.2.2's: titan-migrate writes that era's model (torchtitan v0.2.2 would build its own).",
    "era-flavor-lost": "A flavor whose definition in the file's era titan cannot build (a masking bug, an update rule titan lacks): the run computed something else.",
    "era-flavor-tokenizer": "A flavor whose era took a field (the vocabulary size) from the tokenizer the run loaded.",
    "era-flavor-init": "A flavor whose era initialised a run from scratch otherwise than titan does (a resumed run is the same).",
    "era-flavor-changed": "A migrated config that builds another model than the file's era did (a target that cannot carry the era's flavor).",
    "era-undated": "A file nothing dates whose run its era would change: read as v0.2.2 until --era, a `# titan: era` comment or [tool.titan] era says when it was written.",
    "value-changed": "The migrated config holds another value than the legacy run used (measured by reading the built config back).",
    "stale-name": "A stale name (v0.1 converter) migrated under its new name (--fix-stale-names).",
    "behaviour-change": "A migrated setting that makes the run behave differently from v0.2.2.",
    "upstream-gone": "A legacy value upstream torchtitan 0.3.0 cannot express (--target torchtitan==0.3.0): an error when the run computes something else, a warning when only memory, speed or logs differ.",
    "upstream-import": "A registry module for upstream torchtitan 0.3.0 imports a module or name that 0.3.0 does not have (the import fails).",
    "upstream-field": "A keyword or attribute that the torchtitan 0.3.0 config class does not have (TypeError or AttributeError when the function runs).",
    "upstream-positional": "A torchtitan 0.3.0 config class called with positional arguments (its fields are keyword-only: TypeError).",
    "upstream-required": "A torchtitan 0.3.0 config class called without a field it requires (TypeError).",
    "upstream-type": "A value of the wrong type for a torchtitan 0.3.0 config field or parameter (its dataclasses do not check: the run gets the value as it is).",
    "upstream-choice": "A value that is not one of the choices of a torchtitan 0.3.0 field (its Literal type, or the names an argument accepts).",
    "upstream-value": "A value that a torchtitan 0.3.0 config class' own check refuses when the config is built (ValueError).",
    "upstream-flavor": "A flavor that the torchtitan 0.3.0 family does not register (model_registry raises).",
    "upstream-argument": "A call of a torchtitan 0.3.0 function, or of the module's own, whose arguments do not bind (TypeError).",
    "upstream-name": "A name the registry module never defines or imports (NameError when the function runs).",
    "upstream-raises": "A registry function that always raises when it is called.",
    "upstream-return": "A registry function that returns something other than a Trainer.Config.",
    "upstream-unread": "What the static check of an upstream torchtitan 0.3.0 registry function could not read without running it (one note per function).",
    "upstream-build": "What building a registry function in the interpreter given by --python reported (an exception at its line, or a problem of the interpreter).",
    "upstream-changed": "A legacy setting that upstream torchtitan 0.3.0 spells or does otherwise (--target torchtitan==0.3.0).",
    "unsupported-model": "A model titan has no family for: recorded by name, not trainable.",
    "custom-model": "A model family the project declares (its own package's model_registry).",
    "user-code": "The project's own code a check would import: imported only with --allow-import, or one that cannot be imported.",
    "trainer-conflict": "Keys that need two different trainer classes.",
    "extension-class": "Part of a custom config module that cannot become a titan config class.",
    "renamed-function": "A registry function name that is taken (an earlier file, a keyword, a builtin, an import) gets a suffix.",
    "renamed-class": "A generated class name that is taken (a keyword, a builtin, an import, another class) gets a suffix.",
    "unsupported-parallelism": "A parallel degree titan-train cannot run yet (pipeline, context, expert).",
    "dump-folder": "A dump folder titan-train cannot create or write into.",
}
"""Every diagnostic code with a one-line description (SARIF rules, README)."""

"""Check one legacy TOML file: syntax, schema (with extensions), deprecations and cross-field rules.

Every problem is collected in one pass and returned as diagnostics; nothing here prints or exits.
The parsed document and the merged schema are returned too, for callers that go on (the migrator).
"""

from __future__ import annotations

import os
import sys
import typing
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from titan.schemas import ranges, rule_facts, rules, typecheck
from titan.schemas._frozen import DataclassFields, Frozen, _set
from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.legacy_spec import LEGACY_RANGES, LEGACY_SPEC
from titan.schemas.merge import merge_sections
from titan.schemas.source_forms import is_app_config
from titan.schemas.spans import KeySpan, locate_keys
from titan.schemas.spec import MISSING, ExtensionSpec, SectionSpec
from titan.schemas.suggest import choice_hint, schema_paths, suggest, value_hint
from titan.schemas.toml_source import parse, read_text

if TYPE_CHECKING:
    from pathlib import Path

    from titan.schemas.project import Declaration, DeclaredExtension

# pathlib, difflib and dataclasses are imported only on the paths that need them: together they
# cost more than checking a whole corpus, and this module runs in pre-commit hooks.


SourceForm = Literal["toml", "yaml", "sections"]
"""How legacy sections reach the checker: a TOML job config, a Forge app config's ``trainer:``
block, or a dict in memory."""


class CheckOptions(Frozen):
    """How to check: world size for the rules, and how custom config modules are found."""

    __slots__ = ("ngpu", "allow_import", "module_path", "extensions", "era")
    __match_args__ = ()

    ngpu: int | None
    """World size the parallel degrees must fit; ``None`` skips world-size rules."""
    allow_import: bool
    """Import custom config modules instead of reading their source."""
    module_path: tuple[Path, ...]
    """Extra directories to search for custom config modules."""
    extensions: tuple[str, ...]
    """Extensions to merge although the TOML does not declare them (short names or modules)."""
    era: str | None
    """The torchtitan era the files were written for (``--era YYYY-MM[-DD]``); ``None`` dates
    each file from its own evidence (``titan.schemas.era_defaults``)."""

    def __init__(
        self,
        *,
        ngpu: int | None = None,
        allow_import: bool = False,
        module_path: tuple[Path, ...] = (),
        extensions: tuple[str, ...] = (),
        era: str | None = None,
    ) -> None:
        _set(self, "ngpu", ngpu)
        _set(self, "allow_import", allow_import)
        _set(self, "module_path", module_path)
        _set(self, "extensions", extensions)
        _set(self, "era", era)


class FileCheck:
    """The outcome of checking one file."""

    __slots__ = (
        "file",
        "diagnostics",
        "document",
        "schema",
        "extensions",
        "spans",
        "text",
        "declared",
        "form",
        "written",
    )
    __match_args__ = ()
    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value
    # Written out rather than a dataclass, as the values in titan.schemas._frozen are, and likewise
    # still usable with dataclasses.replace, fields and asdict.
    __dataclass_fields__ = DataclassFields()
    __dataclass_params__ = DataclassFields()
    _default_factories = {"spans": dict}

    file: str
    """The path as the user named it."""
    diagnostics: list[Diagnostic]
    """Every finding, sorted by position."""
    document: dict[str, Any] | None
    """The parsed TOML, when it parsed."""
    schema: SectionSpec | None
    """The legacy schema merged with the file's extensions, when they could be read."""
    extensions: tuple[ExtensionSpec, ...]
    """The extensions that were merged."""
    spans: dict[tuple, KeySpan]
    """Positions of the keys in the file."""
    text: str | None
    """The source text, when it decoded (renderers show lines from it)."""
    declared: tuple[str, ...]
    """The modules merged because the project declares them (``[tool.titan] extensions`` of
    the nearest ``pyproject.toml``; see ``titan.schemas.project``)."""
    form: SourceForm
    """How the sections were written: ``toml`` (a job config), ``yaml`` (the ``trainer:`` block
    of a Forge app config, ``titan.schemas.yaml_source``) or ``sections`` (a dict in memory)."""
    written: dict[str, Any] | None
    """The sections as written, before the era upgrades and overrides changed ``document``."""

    def __init__(
        self,
        *,
        file: str,
        diagnostics: list[Diagnostic],
        document: dict[str, Any] | None = None,
        schema: SectionSpec | None = None,
        extensions: tuple[ExtensionSpec, ...] = (),
        spans: dict[tuple, KeySpan] | None = None,
        text: str | None = None,
        declared: tuple[str, ...] = (),
        form: SourceForm = "toml",
        written: dict[str, Any] | None = None,
    ) -> None:
        self.file = file
        self.diagnostics = diagnostics
        self.document = document
        self.schema = schema
        self.extensions = extensions
        self.spans = {} if spans is None else spans
        self.text = text
        self.declared = declared
        self.form = form
        self.written = written

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__slots__)
        return f"FileCheck({fields})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self.__slots__)


_DEFAULTS = CheckOptions()


Adjust = Callable[[dict, SectionSpec], tuple[dict, list[Diagnostic]]]
"""Changes the parsed document before it is checked (legacy command-line overrides): gets the
document and the merged schema, returns the new document and findings on the change itself."""


def check_file(
    path: str | os.PathLike[str],
    options: CheckOptions = _DEFAULTS,
    *,
    shown: str | None = None,
    adjust: Adjust | None = None,
) -> FileCheck:
    """Read and check one file; unreadable files become a diagnostic, not an exception."""
    shown = shown or str(path)
    text, problem = read_text(path, shown=shown)
    if text is None:
        return FileCheck(file=shown, diagnostics=[problem])

    def base_dir() -> Path:
        from pathlib import Path

        return Path(path).resolve().parent

    # The project is the one the file is named in (its folder as given, links not followed).
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
    form: SourceForm = "yaml" if is_app_config(path) else "toml"
    return _check_text(text, shown, base_dir, options, adjust, folder=folder, form=form)


def check_sections(
    sections: Any,
    options: CheckOptions = _DEFAULTS,
    *,
    file: str,
    adjust: Adjust | None = None,
) -> FileCheck:
    """Check legacy sections held in memory (a dict, as an app config's ``trainer:`` holds
    them); findings name the key path, with no position. The dict is not changed.
    Custom config modules and the project declaration are looked up from the working folder."""
    from titan.schemas.plain_sections import plain_sections

    document, problems = plain_sections(sections, file=file)
    if document is None:
        return FileCheck(file=file, diagnostics=problems, form="sections")
    from pathlib import Path

    check = _check_document(
        document, file, Path.cwd, options, adjust, folder=os.getcwd(), spans={}, text=None
    )
    check.diagnostics = sorted(problems + check.diagnostics, key=Diagnostic.sort_key)
    check.form = "sections"
    return check


def check_text(
    text: str, *, file: str, base_dir: Path, options: CheckOptions = _DEFAULTS
) -> FileCheck:
    """Check TOML source text; ``base_dir`` is where custom config modules are looked up first,
    and where the search for the project declaration (``pyproject.toml``) starts."""
    return _check_text(text, file, lambda: base_dir, options, folder=os.fspath(base_dir))


def _check_text(
    text: str,
    file: str,
    base_dir: Callable[[], Path],
    options: CheckOptions,
    adjust: Adjust | None = None,
    *,
    folder: str,
    form: SourceForm = "toml",
) -> FileCheck:
    # ``base_dir`` is a function: resolving the path is needed only to search for a custom
    # module, never for the built-in ones or for files without extensions.
    if form == "yaml":
        from titan.schemas import yaml_source

        source: Any = yaml_source.parse(text, file=file)
    else:
        source = parse(text, file=file)
    if source.document is None:
        return FileCheck(file=file, diagnostics=list(source.problems), text=text, form=form)
    spans = source.spans if form == "yaml" else locate_keys(text)
    check = _check_document(
        source.document, file, base_dir, options, adjust, folder=folder, spans=spans, text=text
    )
    # A YAML that loads may still have findings of its own (an unresolved interpolation).
    check.diagnostics = sorted([*source.problems, *check.diagnostics], key=Diagnostic.sort_key)
    check.form = form
    return check


def _check_document(
    document: dict[str, Any],
    file: str,
    base_dir: Callable[[], Path],
    options: CheckOptions,
    adjust: Adjust | None,
    *,
    folder: str,
    spans: dict[tuple, KeySpan],
    text: str | None,
) -> FileCheck:
    """Check parsed sections: extensions, era findings, schema, deprecations, rules."""
    import copy

    written = copy.deepcopy(document)  # the era upgrade and the overrides make new documents
    checker = _Checker(file=file, spans=spans)
    from titan.schemas import project

    declaration = project.for_folder(folder)
    extensions = _load_extensions(document, base_dir, options, checker)
    declared = _load_declared(declaration, options, checker, loaded=extensions)
    extensions += declared
    schema = merged_schema(extensions)
    from titan.schemas import eras

    flat = eras.leaves(document)  # once: the era checks below all walk it
    checker.refusals(document, flat)
    checker.lost_era_defaults(document, flat, era=options.era)
    if adjust is not None:
        document, found = adjust(document, schema)
        checker.diagnostics.extend(found)
    checker.walk(document, schema, ())
    checker.deprecations(document)
    from titan.schemas.fork_names import for_declaration

    fork = for_declaration(declaration)
    facts = legacy_facts(
        document, schema, checker.span_of, options.ngpu, fork=fork, declaration=declaration
    )
    for finding in rules.check(facts):
        if finding.span is None:
            # A default the file did not write (perhaps from a custom module): point at the
            # nearest section the file does write, else at the file itself.
            span = checker.span_of(tuple(finding.path.split("."))) or Span(file=file, line=1, col=1)
            finding = Diagnostic(
                code=finding.code,
                severity=finding.severity,
                path=finding.path,
                message=finding.message,
                hint=finding.hint,
                span=span,
            )
        checker.diagnostics.append(finding)
    checker.diagnostics.sort(key=Diagnostic.sort_key)
    return FileCheck(
        file=file,
        diagnostics=checker.diagnostics,
        document=document,
        schema=schema,
        extensions=tuple(extensions),
        spans=spans,
        text=text,
        declared=tuple(spec.module for spec in declared),
        written=written,
    )


def _search_dirs(base_dir: Path, options: CheckOptions) -> list[Path]:
    from pathlib import Path

    # The TOML's own folder, then --module-path, then the working folder (where v0.2.2, started
    # as `torchrun -m torchtitan.train`, found modules), then the rest of Python's path. Never
    # the TOML's parent folders: with --allow-import a module planted in one (in /tmp, say)
    # would run before the one the user pointed at.
    dirs = [base_dir, *options.module_path, Path.cwd(), *(Path(p) for p in sys.path if p)]
    return list(dict.fromkeys(dirs))


def load_extension(
    name: str, *, search_dirs: list[Path], allow_import: bool, from_toml: bool
) -> ExtensionSpec:
    """One extension: built in, read from source, or imported; raises ``ExtensionError``."""
    return _load_extension(
        name, lambda: search_dirs, allow_import=allow_import, from_toml=from_toml
    )


def _load_extension(
    name: str, search_dirs: Callable[[], list[Path]], *, allow_import: bool, from_toml: bool
) -> ExtensionSpec:
    # ``search_dirs`` is a function: building the list resolves paths and imports pathlib, and
    # the built-in modules (the common case) never look at it, nor load the static reader.
    from titan.schemas import builtin_extensions

    # Short names (`flux`) are titan's flags; a TOML names a module as v0.2.2 imported it.
    builtin = None if from_toml else builtin_extensions.known_extension(name)
    if builtin is not None:
        return builtin
    if name in builtin_extensions.KNOWN_EXTENSIONS:  # an upstream module: read_extension's answer
        return builtin_extensions.known_extension(name)  # type: ignore[return-value]
    from titan.schemas import extension_reader

    if allow_import:
        return extension_reader.import_extension(name, search_dirs=search_dirs())
    return extension_reader.read_extension(name, search_dirs=search_dirs())


def merged_schema(extensions: list[ExtensionSpec]) -> SectionSpec:
    """The legacy schema with each extension merged in order."""
    schema = LEGACY_SPEC
    for extension in extensions:
        schema = merge_sections(schema, extension.root)
    return schema


def _load_extensions(
    document: dict, base_dir: Callable[[], Path], options: CheckOptions, checker: _Checker
) -> list[ExtensionSpec]:
    from titan.schemas.builtin_extensions import ExtensionError

    requested: list[tuple[str, tuple]] = []
    job = document.get("job")
    module = job.get("custom_config_module") if isinstance(job, dict) else None
    if isinstance(module, str) and module:
        requested.append((module, ("job", "custom_config_module")))
    else:
        # From 2025-04 to 2025-10 the loader merged this module's sections, as
        # job.custom_config_module does now (titan.schemas.eras upgrades the key)
        from titan.schemas.moved_keys import current_module

        experimental = document.get("experimental")
        old = experimental.get("custom_args_module") if isinstance(experimental, dict) else None
        if isinstance(old, str) and old:
            requested.append((current_module(old), ("experimental", "custom_args_module")))
    requested += [(name, ()) for name in options.extensions]

    loaded: list[ExtensionSpec] = []
    for name, where in requested:
        path = ".".join(where) or "--extension"
        try:
            spec = _load_extension(
                name,
                lambda: _search_dirs(base_dir(), options),
                allow_import=options.allow_import,
                from_toml=bool(where),
            )
        except ExtensionError as error:
            if where == ("experimental", "custom_args_module"):
                continue  # v0.2.2 never imports it: its deprecation warning says what it is
            checker.add("extension-error", where, str(error), _extension_hint(name), path=path)
            continue
        if options.allow_import and spec.origin != "built-in":
            checker.add(
                "extension-imported",
                where,
                f"custom config module `{name}` was imported from {spec.origin}",
                "searched in order: the TOML's folder, --module-path, the working folder, "
                "Python's path",
                severity=Severity.INFO,
                path=path,
            )
        for note in spec.notes:
            checker.add(
                "extension-unreadable",
                where,
                note,
                "pass --allow-import to import the module instead",
                severity=Severity.WARNING,
                path=path,
            )
        loaded.append(spec)
    return loaded


def _load_declared(
    declaration: Declaration,
    options: CheckOptions,
    checker: _Checker,
    *,
    loaded: list[ExtensionSpec],
) -> list[ExtensionSpec]:
    """The modules the project declares, merged as ``--extension`` merges one; what is wrong
    with the declaration or a module in it is a finding located in ``pyproject.toml``."""
    checker.diagnostics.extend(declaration.problems)
    if not declaration.extensions:
        return []
    from titan.schemas.builtin_extensions import ExtensionError

    found: list[ExtensionSpec] = []
    for entry in declaration.extensions:
        try:
            spec = _declared_extension(entry, options)
        except ExtensionError as error:
            checker.report(_declared_error(entry, declaration, str(error)))
            continue
        if any((e.module, e.origin) == (spec.module, spec.origin) for e in (*loaded, *found)):
            continue  # the TOML names it too: merged once
        where = f"extension `{entry.entry}` declared in {declaration.shown}"
        if options.allow_import and spec.origin != "built-in":
            checker.report(
                _at_entry(
                    entry,
                    "extension-imported",
                    f"{where} was imported from {spec.origin}",
                    f"{declaration.shown} declares it in [tool.titan] extensions",
                    severity=Severity.INFO,
                )
            )
        for note in spec.notes:
            if "from __future__ import" in note:
                # v0.2.2 never loads a declared module (only titan does), and titan reads such
                # annotations: the import is what keeps a field named `list` from shadowing
                # the `list[...]` of the fields after it.
                continue
            checker.report(
                _at_entry(
                    entry,
                    "extension-unreadable",
                    f"{where}: {note}",
                    "pass --allow-import to import the module instead",
                    severity=Severity.WARNING,
                )
            )
        found.append(spec)
    return found


_declared_reads: dict[tuple, ExtensionSpec] = {}
"""Declared modules read from source in this run: every TOML of a project merges the same
modules, so each is read once (again when its file changes; the files it imports are not
watched, which a run never needs)."""


def _declared_extension(entry: DeclaredExtension, options: CheckOptions) -> ExtensionSpec:
    """One declared module: built in, read from source (once per run), or imported."""
    from pathlib import Path

    dirs = [Path(d) for d in entry.search_dirs]
    if options.allow_import:
        return _load_extension(entry.module, lambda: dirs, allow_import=True, from_toml=True)
    from titan.schemas.extension_reader import find_module_source

    source = find_module_source(entry.module, search_dirs=dirs)
    try:
        info = os.stat(source) if source is not None else None
    except OSError:
        info = None
    key = (entry.module, entry.search_dirs, str(source), info and (info.st_mtime_ns, info.st_size))
    spec = _declared_reads.get(key)
    if spec is None:
        spec = _load_extension(entry.module, lambda: dirs, allow_import=False, from_toml=True)
        _declared_reads[key] = spec
    return spec


def _declared_error(entry: DeclaredExtension, declaration: Declaration, error: str) -> Diagnostic:
    where = f"extension `{entry.entry}` declared in {declaration.shown}"
    relative = f"paths in [tool.titan] extensions are relative to the folder of {declaration.shown}"
    if entry.file is not None and not os.path.isfile(entry.file):
        return _at_entry(
            entry,
            "extension-error",
            f"{where} does not exist: no file {entry.file}",
            f"fix the path: {relative}",
        )
    if entry.file is None and not _module_found(entry):
        return _at_entry(
            entry,
            "extension-error",
            f"{where} not found: no {entry.module.replace('.', '/')}.py or its package in "
            f"{declaration.root} or on Python's path",
            f'install the package, or write the file\'s path instead ("tools/fork_ext.py"): '
            f"{relative}",
        )
    return _at_entry(
        entry,
        "extension-error",
        f"{where} cannot be read: {error}",
        "fix the module, or pass --allow-import to import it instead of reading its source",
    )


def _module_found(entry: DeclaredExtension) -> bool:
    from pathlib import Path

    from titan.schemas.builtin_extensions import KNOWN_EXTENSIONS
    from titan.schemas.extension_reader import find_module_source

    dirs = [Path(d) for d in entry.search_dirs]
    found = find_module_source(entry.module, search_dirs=dirs)
    return entry.module in KNOWN_EXTENSIONS or found is not None


def _at_entry(
    entry: DeclaredExtension,
    code: str,
    message: str,
    hint: str,
    *,
    severity: Severity = Severity.ERROR,
) -> Diagnostic:
    return Diagnostic(
        code=code,
        severity=severity,
        path="tool.titan.extensions",
        message=message,
        hint=hint,
        span=entry.span,
    )


def _extension_hint(name: str) -> str:
    from titan.schemas.builtin_extensions import KNOWN_EXTENSIONS
    from titan.schemas.misspelling import closest_one

    meant = closest_one(name, [*KNOWN_EXTENSIONS, *KNOWN_EXTENSIONS.values()])
    if meant is not None:
        return f"did you mean `{meant}`?"
    return "put the module next to the TOML or pass --module-path DIR"


class _Checker:
    """Walks a document against a schema, collecting diagnostics with spans."""

    def __init__(self, *, file: str, spans: dict[tuple, KeySpan]) -> None:
        self.file = file
        self.spans = spans
        self.diagnostics: list[Diagnostic] = []
        self._schema: SectionSpec | None = None
        self._document: dict = {}

    def span_of(self, parts: tuple) -> Span | None:
        """The span of a key path, or of its nearest written ancestor."""
        for end in range(len(parts), 0, -1):
            found = self.spans.get(parts[:end])
            if found is not None:
                return Span(file=self.file, line=found.line, col=found.col, end_col=found.end_col)
        return None

    def report(self, finding: Diagnostic) -> None:
        """A finding located elsewhere (in ``pyproject.toml``), kept as it is."""
        self.diagnostics.append(finding)

    def add(
        self,
        code: str,
        parts: tuple,
        message: str,
        hint: str | None = None,
        *,
        severity: Severity = Severity.ERROR,
        path: str | None = None,
    ) -> None:
        span = self.span_of(parts) if parts else Span(file=self.file, line=1, col=1)
        dotted = path if path is not None else ".".join(str(p) for p in parts)
        self.diagnostics.append(
            Diagnostic(
                code=code, severity=severity, path=dotted, message=message, hint=hint, span=span
            )
        )

    def walk(self, data: dict, section: SectionSpec, parts: tuple) -> None:
        if not parts:
            self._schema = section
            self._document = data
        for key, value in data.items():
            here = (*parts, key)
            field = section.field(key)
            if field is None:
                self.unknown(here, value)
            elif isinstance(field.annotation, SectionSpec):
                if isinstance(value, dict):
                    self.walk(value, field.annotation, here)
                else:
                    dotted = ".".join(here)
                    self.add(
                        "wrong-type",
                        here,
                        f"`{dotted}` must be a table [{dotted}], got {typecheck.value_name(value)}",
                        _table_hint(dotted, value),
                    )
            elif not typecheck.matches(value, field.annotation):
                self.mismatch(here, value, field.annotation)
            elif isinstance(value, int | float):
                self.bounds(here, value)

    def bounds(self, parts: tuple, value: float) -> None:
        """A well-typed number outside the range of its key (``titan.schemas.ranges``)."""
        dotted = ".".join(parts)
        finding = ranges.out_of_range(
            value, LEGACY_RANGES.get(dotted), path=dotted, span=self.span_of(parts)
        )
        if finding is not None:
            self.diagnostics.append(finding)

    def unknown(self, parts: tuple, value: Any) -> None:
        dotted = ".".join(parts)
        is_table = isinstance(value, dict)
        if is_table and value and _is_old_table(parts):
            # [float8], [quantize.dense.float8]...: each key went somewhere else, so each is
            # reported at its own line with its own destination.
            for key, item in value.items():
                self.unknown((*parts, key), item)
            return
        if not is_table and self.era_value(parts, value, old=True):
            return
        # Only files with unknown keys pay for listing every path of the schema.
        found = suggest(
            parts,
            schema_paths(self._schema),
            is_table=is_table,
            value=value,
            document=self._document,
            schema=self._schema,
        )
        kind = "section" if is_table else "key"
        where = f"[{'.'.join(parts[:-1])}]" if len(parts) > 1 else "the top level"
        message = (
            f"unknown {kind} `{dotted}`"
            if is_table or len(parts) == 1
            else f"unknown key `{parts[-1]}` in {where}"
        )
        if found.code == "moved-key":
            message = f"`{dotted}` is not a v0.2.2 {kind}"
        self.add(found.code, parts, message, found.hint)

    def era_value(self, parts: tuple, value: Any, *, old: bool, annotation: Any = None) -> bool:
        """A value an older era read otherwise (``titan.schemas.moved_keys`` ``SPLITS`` and
        ``REFUSALS``): a comma-separated string its loader split, or a value v0.2.2 cannot
        express; False when it is neither."""
        from titan.schemas import eras

        step = eras.translate(parts, value, self._document) if old else None
        step = step if old else eras.value_step(parts, value)
        if step is None or (step.kind == "upgraded" and old):
            return False  # an old key's own moved-key finding says what it becomes
        shown = f"`{'.'.join(parts)} = {eras.toml_value(value)}`"
        if step.kind == "upgraded":
            ((_, names),) = step.writes
            said = value_hint(parts, value, annotation, self._document)
            era = (
                f"{step.why} ({step.era}): titan-migrate reads it as `{parts[-1]} = "
                f"{eras.toml_value(names)}`"
            )
            self.add(
                "wrong-type",
                parts,
                f"{shown} is a comma-separated string; v0.2.2 takes a list",
                f"{said}; {era}" if said else era,
            )
            return True
        return step.severity == "error"  # reported from the file as written: refusals()

    def lost_era_defaults(self, document: dict, flat: list, *, era: str | None) -> None:
        """Defaults of the file's era that v0.2.2 cannot say, for keys it omits: the run used
        them (a .model tokenizer, a removed dataset), so they are errors, as in titan-migrate.
        ``era`` (``--era``) dates the file instead of its evidence."""
        from titan.schemas import era_defaults

        guess = era_defaults.date_file(document, flat)
        if era is None and guess.current:
            return
        day = era_defaults.parse_era(era) if era is not None else guess.date
        dated = "--era" if era is not None else era_defaults.dated_by(guess)
        for found in era_defaults.era_defaults(document, day):
            if found.portable:
                continue
            message, hint = era_defaults.lost_text(found, day=day, dated_by=dated)
            parts = tuple(found.key.split("."))
            span = self.span_of(parts[:1]) or Span(file=self.file, line=1, col=1)
            self.diagnostics.append(
                Diagnostic(
                    code="era-default-lost",
                    severity=Severity.ERROR,
                    path=found.key,
                    message=message,
                    hint=hint,
                    span=span,
                )
            )

    def refusals(self, document: dict, flat: list) -> None:
        """Values the run computed with that v0.2.2 cannot express, from the file as written
        (the migrator checks the upgraded document, where such a key is no longer)."""
        from titan.schemas import eras

        for step in eras.refusals(document, flat):
            shown = f"`{step.dotted} = {eras.toml_value(eras.get(document, step.old))}`"
            code = "invalid-choice" if eras.rule_for(step.old) is None else "moved-key"
            message = f"{shown} cannot be expressed at v0.2.2: {step.why}"
            self.add(code, step.old, message, f"{step.hint}; {step.era}")

    def mismatch(self, parts: tuple, value: Any, annotation: Any) -> None:
        if self.era_value(parts, value, old=False, annotation=annotation):
            return
        dotted = ".".join(parts)
        choices = _literal_choices(annotation)
        if choices and isinstance(value, str):
            message = f"`{dotted}` is {typecheck.value_name(value)}; expected {typecheck.type_name(annotation)}"
            self.add("invalid-choice", parts, message, choice_hint(parts, value, choices))
            return
        message = f"`{dotted}` must be {typecheck.type_name(annotation)}, got {typecheck.value_name(value)}"
        self.add(
            "wrong-type",
            parts,
            message + _element_detail(value, annotation),
            value_hint(parts, value, annotation, self._document),
        )

    def deprecations(self, document: dict) -> None:
        model = document.get("model")
        if isinstance(model, dict) and isinstance(model.get("tokenizer_path"), str):
            self.add(
                "deprecated-key",
                ("model", "tokenizer_path"),
                "`model.tokenizer_path` is deprecated; the old loader copied it into model.hf_assets_path",
                "set `model.hf_assets_path` to the folder that holds tokenizer.json instead",
                severity=Severity.WARNING,
            )
        experimental = document.get("experimental")
        if isinstance(experimental, dict) and experimental.get("custom_args_module"):
            from titan.schemas import eras

            module = experimental["custom_args_module"]
            step = eras.value_step(("experimental", "custom_args_module"), module)
            hint = "use `[job] custom_config_module` instead"
            if step is not None:
                hint = f"{eras.action(step)}: {step.why}; {step.era}; titan-migrate carries it"
            self.add(
                "deprecated-key",
                ("experimental", "custom_args_module"),
                "`experimental.custom_args_module` is deprecated: v0.2.2 does not add the "
                "module's sections",
                hint,
                severity=Severity.WARNING,
            )
        job = document.get("job")
        if isinstance(job, dict) and "config_file" in job:
            self.add(
                "ignored-key",
                ("job", "config_file"),
                "`job.config_file` inside a TOML is ignored; the file to load is named on the command line",
                "delete the key",
                severity=Severity.WARNING,
            )


def _literal_choices(annotation: Any) -> tuple:
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return typing.get_args(annotation)
    return tuple(
        c
        for arg in typing.get_args(annotation)
        if typing.get_origin(arg) is Literal
        for c in typing.get_args(arg)
    )


def _element_detail(value: Any, annotation: Any) -> str:
    """For a list with one bad element, say which (the list itself had the right shape)."""
    if not isinstance(value, list):
        return ""
    for arg in [annotation, *typing.get_args(annotation)]:
        if typing.get_origin(arg) is list and typing.get_args(arg):
            inner = typing.get_args(arg)[0]
            for index, item in enumerate(value):
                if not typecheck.matches(item, inner):
                    return f": element {index} is {typecheck.value_name(item)}"
    return ""


def _table_hint(dotted: str, value: Any) -> str:
    """For a section written as a value: how to write it as a table."""
    from titan.schemas import eras

    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return (
            f"write `[{dotted}]` with one pair of brackets: `[[{dotted}]]` declares an array of "
            "tables"
        )
    return (
        f"write its keys under a `[{dotted}]` header (v0.2.2 silently replaced "
        f"`{dotted} = {eras.toml_value(value)}` with the defaults)"
    )


def _effective(
    document: dict, schema: SectionSpec, parts: tuple[str, ...], span_of
) -> rule_facts.Setting:
    """The value at ``parts``: written, else the schema default, with the span where written."""
    node: Any = document
    written = True
    for part in parts:
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            written = False
            break
    if not written:
        node = _default(schema, parts)
    return rule_facts.Setting(
        value=node, path=".".join(parts), span=span_of(parts) if written else None
    )


def _default(schema: SectionSpec, parts: tuple[str, ...]) -> Any:
    section: Any = schema
    for part in parts:
        field = section.field(part) if isinstance(section, SectionSpec) else None
        if field is None:
            return None
        section = field.annotation
        default = field.default
    return None if default is MISSING else default


def legacy_facts(
    document: dict,
    schema: SectionSpec,
    span_of,
    ngpu: int | None,
    *,
    fork: Any = None,
    declaration: Declaration | None = None,
) -> rule_facts.ConfigFacts:
    """The rule inputs of a legacy document (defaults from the merged schema); ``fork`` is what
    its project declares (``titan.schemas.fork_names.ForkNames``), ``declaration`` the project itself
    (its datasets)."""
    from titan.schemas import flavors

    def get(path: str) -> rule_facts.Setting:
        return _effective(document, schema, tuple(path.split(".")), span_of)

    tables = []
    for name in rules.CONVERTER_NAMES:  # each names its table
        parts = tuple(name.split("."))
        node: Any = document
        for part in parts:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict):
            tables.append(rule_facts.Setting(value=name, path=name, span=span_of(parts)))
    model_name, flavor_name = get("model.name"), get("model.flavor")
    found = (
        flavors.flavor(model_name.value, flavor_name.value)
        if isinstance(model_name.value, str) and isinstance(flavor_name.value, str)
        else None
    )
    fault_tolerance = get("fault_tolerance.enable")
    return rule_facts.ConfigFacts(
        ngpu=ngpu,
        **{fact: get(path) for fact, path in rule_facts.SHARED_FACT_PATHS.items()},
        converters=get("model.converters"),
        quantize_tables=tuple(tables),
        early_step_in_backward=get("optimizer.early_step_in_backward"),
        fault_tolerance=fault_tolerance,
        validation_steps=get("validation.steps"),
        validation_enable=get("validation.enable"),
        validation_seq_len=get("validation.seq_len"),
        validation_batch_size=get("validation.local_batch_size"),
        float8_recipe=get("quantize.linear.float8.recipe_name"),
        float8_all_gather=get("quantize.linear.float8.enable_fsdp_float8_all_gather"),
        float8_precompute=get("quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp"),
        model_name=model_name,
        flavor=flavor_name,
        n_heads=found.n_heads if found else None,
        n_kv_heads=found.n_kv_heads if found else None,
        n_layers=found.n_layers if found else None,
        # a decoder (a flavor with blocks) sizes its rotary tables by training.seq_len
        max_seq_len=get("training.seq_len").value if found and found.n_layers else None,
        moe=found.moe if found else None,
        experts=(rule_facts.ExpertRouting.of_flavor(found.routing, at=flavor_name),)
        if found is not None and found.moe and found.routing is not None
        else (),
        fork=fork,
        dataset=get("training.dataset"),
        validation_dataset=get("validation.dataset")
        if get("validation.enable").value is True
        else None,
        datasets=_dataset_facts(model_name.value, get, declaration),
    )


def _dataset_facts(model: Any, get, declaration: Declaration | None) -> Any:
    """The names v0.2.2's registry for ``model`` has, with the project's own; ``None`` for a
    model whose data loader titan does not know (a custom train spec may bring its own)."""
    from titan.schemas import dataset_names, flavors

    if not isinstance(model, str):
        return None  # a wrong-typed model.name has its own finding
    known = model in dataset_names.V022_DATASETS or model in rules.EXPERIMENT_MODELS
    if not known and not (isinstance(model, str) and flavors.flavor_names(model) is not None):
        return None
    registered, lowercased = dataset_names.v022_registry(model)
    custom = get("experimental.custom_import").value
    return dataset_names.DatasetFacts(
        registered=registered,
        lowercased=lowercased,
        declared=declaration.datasets if declaration is not None else (),
        project=declaration.shown if declaration is not None else None,
        custom_import=custom if isinstance(custom, str) and custom else None,
    )


def _is_old_table(parts: tuple) -> bool:
    from titan.schemas import eras  # only files with unknown sections get here

    return eras.is_old_table(parts)

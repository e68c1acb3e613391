"""Check one legacy TOML file: syntax, schema (with extensions), deprecations and cross-field rules.

Every problem is collected in one pass and returned as diagnostics; nothing here prints or exits.
The parsed document and the merged schema are returned too, for callers that go on (the migrator).

This module reads the file (``toml_source`` and ``spans`` for a TOML, ``yaml_source`` for a Forge
app config) and runs the checks in order: the extensions to merge (``merged_extensions``), each
key against the merged schema (``document_checker``), then the cross-field rules on the facts the
document sets (``legacy_facts``, ``rules``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from titan.schemas import rules
from titan.schemas._frozen import DataclassFields, Frozen, _set
from titan.schemas.diagnostics import Diagnostic, Span
from titan.schemas.document_checker import DocumentChecker
from titan.schemas.legacy_facts import legacy_facts
from titan.schemas.merged_extensions import load_declared, load_extensions, merged_schema
from titan.schemas.source_forms import is_app_config
from titan.schemas.spans import KeySpan, locate_keys
from titan.schemas.spec import ExtensionSpec, SectionSpec
from titan.schemas.toml_source import parse, read_text

if TYPE_CHECKING:
    from pathlib import Path

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


Adjust = Callable[[dict, SectionSpec, "Dated | None"], tuple[dict, list[Diagnostic], "str | None"]]
"""Changes the parsed document before it is checked (legacy command-line overrides): gets the
document, the merged schema and what dates it besides its keys (:data:`Dated`), returns the new
document, findings on the change itself, and the day of the era it was read in (``None``:
v0.2.2)."""

Dated = tuple[str, str]
"""``(day, evidence)``: when a file was written, as something other than its keys tells (a
TorchForge app's shape: the torchtitan Forge pinned then, ``titan.schemas.forge_eras``)."""


def check_file(
    path: str | os.PathLike[str],
    options: CheckOptions = _DEFAULTS,
    *,
    shown: str | None = None,
    adjust: Adjust | None = None,
) -> FileCheck:
    """Read and check one file; unreadable files become a diagnostic, not an exception."""
    shown = shown or str(path)
    form: SourceForm = "yaml" if is_app_config(path) else "toml"
    text, problem = read_text(path, shown=shown, form=form)
    if text is None:
        return FileCheck(file=shown, diagnostics=[problem])

    def base_dir() -> Path:
        from pathlib import Path

        return Path(path).resolve().parent

    # The project is the one the file is named in (its folder as given, links not followed).
    folder = os.path.dirname(os.path.abspath(os.fspath(path)))
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
    """Read ``text`` as a TOML or a Forge app config (``form``), with its keys' positions, and
    check the sections it holds."""
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
    dated = None
    if form == "yaml" and source.app is not None:
        from titan.schemas.forge_eras import forge_era

        dated = forge_era(source.app)
    check = _check_document(
        source.document,
        file,
        base_dir,
        options,
        adjust,
        folder=folder,
        spans=spans,
        text=text,
        dated=dated,
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
    dated: Dated | None = None,
) -> FileCheck:
    """Check parsed sections: extensions, era findings, schema, deprecations, rules. ``dated``
    says when the file was written where its keys do not (a Forge app's shape)."""
    import copy

    written = copy.deepcopy(document)  # the era upgrade and the overrides make new documents
    checker = DocumentChecker(file=file, spans=spans)
    from titan.schemas import project

    declaration = project.for_folder(folder)
    extensions = load_extensions(
        document,
        base_dir=base_dir,
        checker=checker,
        allow_import=options.allow_import,
        module_path=options.module_path,
        extensions=options.extensions,
    )
    declared = load_declared(
        declaration, checker=checker, allow_import=options.allow_import, loaded=extensions
    )
    extensions += declared
    schema = merged_schema(extensions)
    from titan.schemas import eras

    flat = eras.leaves(document)  # once: the era checks below all walk it
    pragma = checker.era_pragma(text)
    era = options.era or pragma
    checker.lost_era_defaults(
        document,
        flat,
        era=era,
        era_source="--era" if options.era or pragma is None else "its `# titan: era` comment",
        project_era=declaration.era,
        dated=dated,
    )
    checker.refusals(document, flat)  # after the era: a key the era ignored refuses nothing
    ruled, wrote, day = document, {}, None
    if adjust is not None:
        document, found, day = adjust(document, schema, dated)
        checker.diagnostics.extend(found)
        ruled = document  # upgraded by the hook, whose caller re-points the findings
    else:
        # The run had the values the old keys and the era's defaults give: the rules judge
        # them as titan-migrate does, and their findings point at the old key that wrote one.
        from titan.schemas import era_chain

        upgraded = era_chain.upgrade(
            document, schema, era=era, project_era=declaration.era, dated=dated, flat=flat
        )
        ruled, wrote = upgraded.document, era_chain.wrote(upgraded.steps, spans)
        day = upgraded.day
    checker.walk(document, schema, ())
    checker.deprecations(document)
    from titan.schemas.fork_names import for_declaration

    fork = for_declaration(declaration)
    facts = legacy_facts(
        ruled,
        schema,
        checker.span_of,
        options.ngpu,
        fork=fork,
        declaration=declaration,
        era_day=day,
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
        if wrote:
            finding = era_chain.repoint(finding, wrote)
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

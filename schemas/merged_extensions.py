"""The extensions one file's schema merges: the custom config module the file names, those passed
with ``--extension``, and those its project declares (``[tool.titan] extensions`` of the nearest
``pyproject.toml``); each built in, read from its source, or imported with ``--allow-import``.

A module that cannot be loaded is a finding, at the key that names it or at its entry in
``pyproject.toml``; the checks go on with the extensions that did load.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from titan.schemas.diagnostics import Diagnostic, Severity
from titan.schemas.legacy_spec import LEGACY_SPEC
from titan.schemas.merge import merge_sections
from titan.schemas.spec import ExtensionSpec, SectionSpec

if TYPE_CHECKING:
    from pathlib import Path

    from titan.schemas.document_checker import DocumentChecker
    from titan.schemas.project import Declaration, DeclaredExtension

# pathlib is imported only on the paths that need it: this module runs in pre-commit hooks.


def _search_dirs(base_dir: Path, module_path: tuple[Path, ...]) -> list[Path]:
    """Where a module the file names is looked for, in order."""
    from pathlib import Path

    # The TOML's own folder, then --module-path, then the working folder (where v0.2.2, started
    # as `torchrun -m torchtitan.train`, found modules), then the rest of Python's path. Never
    # the TOML's parent folders: with --allow-import a module planted in one (in /tmp, say)
    # would run before the one the user pointed at.
    dirs = [base_dir, *module_path, Path.cwd(), *(Path(p) for p in sys.path if p)]
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
    """:func:`load_extension`, with the search folders listed only when needed."""
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


def load_extensions(
    document: dict,
    *,
    base_dir: Callable[[], Path],
    checker: DocumentChecker,
    allow_import: bool,
    module_path: tuple[Path, ...],
    extensions: tuple[str, ...],
) -> list[ExtensionSpec]:
    """The modules the file names (``job.custom_config_module``, or the older
    ``experimental.custom_args_module``) and those passed as ``extensions``; what cannot be
    loaded is a finding at the key that names it."""
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
    requested += [(name, ()) for name in extensions]

    loaded: list[ExtensionSpec] = []
    for name, where in requested:
        path = ".".join(where) or "--extension"
        try:
            spec = _load_extension(
                name,
                lambda: _search_dirs(base_dir(), module_path),
                allow_import=allow_import,
                from_toml=bool(where),
            )
        except ExtensionError as error:
            if where == ("experimental", "custom_args_module"):
                continue  # v0.2.2 never imports it: its deprecation warning says what it is
            checker.add("extension-error", where, str(error), _extension_hint(name), path=path)
            continue
        if allow_import and spec.origin != "built-in":
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


def load_declared(
    declaration: Declaration,
    *,
    checker: DocumentChecker,
    allow_import: bool,
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
            spec = _declared_extension(entry, allow_import=allow_import)
        except ExtensionError as error:
            checker.report(_declared_error(entry, declaration, str(error)))
            continue
        if any((e.module, e.origin) == (spec.module, spec.origin) for e in (*loaded, *found)):
            continue  # the TOML names it too: merged once
        where = f"extension `{entry.entry}` declared in {declaration.shown}"
        if allow_import and spec.origin != "built-in":
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


def _declared_extension(entry: DeclaredExtension, *, allow_import: bool) -> ExtensionSpec:
    """One declared module: built in, read from source (once per run), or imported."""
    from pathlib import Path

    dirs = [Path(d) for d in entry.search_dirs]
    if allow_import:
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
    """Why a declared module could not be merged: a missing file, a module not found, or a
    module that cannot be read."""
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
    """Whether a declared module is built in or has a source file to read."""
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
    """A finding at a declared module's entry in ``pyproject.toml``."""
    return Diagnostic(
        code=code,
        severity=severity,
        path="tool.titan.extensions",
        message=message,
        hint=hint,
        span=entry.span,
    )


def _extension_hint(name: str) -> str:
    """The built-in extension meant, else where to put the module."""
    from titan.schemas.builtin_extensions import KNOWN_EXTENSIONS
    from titan.schemas.misspelling import closest_one

    meant = closest_one(name, [*KNOWN_EXTENSIONS, *KNOWN_EXTENSIONS.values()])
    if meant is not None:
        return f"did you mean `{meant}`?"
    return "put the module next to the TOML or pass --module-path DIR"

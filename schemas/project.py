"""The project declaration: titan's settings in the ``[tool.titan]`` table of ``pyproject.toml``.

    [tool.titan]
    registry-files = ["configs/*.py"]                           # more registry modules to check
    extensions = ["tools/fork_ext.py", "forkpkg.config_ext"]    # merged into every TOML's schema
    model-registries = { mymodel = "forkpkg.models.mymodel" }   # model families titan lacks
    flavors = { llama3 = ["1B"], mymodel = ["small"] }          # flavors titan does not ship
    converters = ["npu_rms_norm"]                               # the fork's model converters
    datasets = ["my_corpus"]                                    # datasets the fork registers
    era = "v0.2.2"                                              # when the TOMLs were written
    upstream-python = ".venv-upstream/bin/python"               # where torchtitan is installed

A fork adds sections and keys (``[infra]``, ``optimizer.swap_optimizer``) that no
``custom_config_module`` declares. Naming a module in every TOML is what v0.2.2 asked, and a fork
that runs its own loader has no reason to; so the project says it once, here, and every TOML of
the project is checked, migrated and trained with those modules merged, as ``--extension NAME``
merges one. An entry ending in ``.py`` is a file relative to the folder of ``pyproject.toml``
(loaded as a module named after the file); any other entry is a dotted module looked up in that
folder first, then on Python's path. ``model-registries`` names the package whose
``model_registry(flavor)`` builds a model family titan does not ship (``model.name = "mymodel"``);
titan-migrate writes a call of it instead of ``unsupported_model(...)``. ``flavors`` and
``converters`` name what the fork's code adds to ``model.flavor`` and ``model.converters`` (a list
of names, or a table of NAME = "package.module.Class"); ``titan.schemas.fork_names`` is how the checks
see them. ``datasets`` names the datasets the fork's code adds to the dataset registry, so a
``training.dataset`` titan does not ship is not reported as one the run cannot load. ``era``
says when the project's TOMLs were written (a release, ``YYYY-MM`` or ``YYYY-MM-DD``, as
``--era`` takes it), for files whose keys do not date them; ``--era`` wins. ``upstream-python``
names an interpreter that has upstream torchtitan installed (relative to the folder of
``pyproject.toml``, or absolute): ``titan-validate`` builds the project's upstream registry
modules with it, as ``--python`` does; ``--python`` wins.

Which declaration applies to a file is the nearest ``pyproject.toml`` above the file's folder, up
to the repository root, and outside any repository no higher than the working folder
(``titan.schemas.project_search``): the nearest one wins even when it has no ``[tool.titan]``
table, as each ``pyproject.toml`` is a project of its own. Commands that work on the working
folder (the folder walk of ``titan-validate``) start there. The commands name the
``pyproject.toml`` whose ``[tool.titan]`` table they applied (:attr:`Declaration.declares`).

This is the one reader of the declaration, with the one list of its keys (:data:`KEYS`). It never
raises for what a user wrote: a declaration titan cannot use (not a table, a wrong type, a key
titan does not know) comes back as findings located in ``pyproject.toml``, and each caller decides
what they mean (a finding for each TOML checked, a usage error for a folder walk).

Cheap on purpose, since it runs for every file ``titan-validate`` checks in a pre-commit hook: the
walk up is cached per folder, and a ``pyproject.toml`` that does not mention ``titan`` costs one
small read and is never parsed. Only ``os`` is imported here.
"""

from __future__ import annotations

import os
import sys

from titan.schemas._frozen import Frozen, _set
from titan.schemas.diagnostics import Diagnostic, Severity, Span
from titan.schemas.project_search import PYPROJECT, applying, forget_search, passed_over

KEYS = {
    "registry-files": "shell patterns of registry modules, relative to pyproject.toml",
    "extensions": "config modules merged into every TOML of the project: .py paths relative to "
    "pyproject.toml, or dotted module names",
    "model-registries": 'custom model families: a table of NAME = "package.module"',
    "flavors": 'model flavors the fork builds: a table of FAMILY = ["flavor", ...]',
    "converters": 'model converters the fork registers: ["name", ...] or a table of NAME = '
    '"package.module.Class"',
    "datasets": 'dataset names the fork registers: ["name", ...]',
    "era": 'when the TOMLs were written, for files their keys do not date: "v0.2.2", '
    '"YYYY-MM" or "YYYY-MM-DD"',
    "upstream-python": "an interpreter with upstream torchtitan installed, to build upstream "
    "registry modules with (relative to pyproject.toml, or absolute)",
}
"""The keys ``[tool.titan]`` may hold, with what each means."""

_PATH = "tool.titan"


class DeclaredExtension(Frozen):
    """One entry of ``[tool.titan] extensions``: what to load, where from, and where it is written."""

    __slots__ = ("entry", "module", "search_dirs", "file", "span")
    __match_args__ = ()

    entry: str
    """The entry as written (``tools/fork_ext.py``, ``forkpkg.config_ext``)."""
    module: str
    """The dotted module name it is loaded as (a ``.py`` entry: the file's name)."""
    search_dirs: tuple[str, ...]
    """Folders to look for the module in, first first."""
    file: str | None
    """The absolute file a ``.py`` entry names; ``None`` for a dotted module."""
    span: Span
    """Where the entry is written in ``pyproject.toml`` (findings about it point there)."""

    def __init__(
        self,
        *,
        entry: str,
        module: str,
        search_dirs: tuple[str, ...],
        file: str | None,
        span: Span,
    ) -> None:
        _set(self, "entry", entry)
        _set(self, "module", module)
        _set(self, "search_dirs", search_dirs)
        _set(self, "file", file)
        _set(self, "span", span)


class Declaration(Frozen):
    """What the nearest ``pyproject.toml`` declares (nothing when there is none)."""

    __slots__ = (
        "root",
        "file",
        "shown",
        "registry_files",
        "extensions",
        "model_registries",
        "flavors",
        "converters",
        "datasets",
        "era",
        "upstream_python",
        "problems",
        "declares",
    )
    __match_args__ = ()

    root: str
    """The folder of ``pyproject.toml`` (the folder the search started in when there is none)."""
    file: str | None
    """The absolute path of ``pyproject.toml``; ``None`` when no project was found."""
    shown: str | None
    """``pyproject.toml`` as findings name it (relative to the working folder when inside it)."""
    registry_files: tuple[str, ...]
    """``registry-files``: shell patterns of registry modules, relative to :attr:`root`."""
    extensions: tuple[DeclaredExtension, ...]
    """``extensions``: modules merged into every TOML of the project, in the order written."""
    model_registries: tuple[tuple[str, str], ...]
    """``model-registries``: (family name, ``package.module``) pairs, in the order written."""
    flavors: tuple[tuple[str, tuple[str, ...]], ...]
    """``flavors``: (family name, flavor names) pairs, in the order written."""
    converters: tuple[tuple[str, str | None], ...]
    """``converters``: (name, ``package.module.Class`` or ``None`` for a bare name) pairs."""
    datasets: tuple[str, ...]
    """``datasets``: dataset names the fork's code registers, in the order written."""
    era: str | None
    """``era``: when the project's TOMLs were written, as ``--era`` takes it; ``None``: unsaid."""
    upstream_python: str | None
    """``upstream-python``: the absolute path of an interpreter with torchtitan; ``None``: unsaid."""
    problems: tuple[Diagnostic, ...]
    """Why (part of) the declaration cannot be used, each located in ``pyproject.toml``."""
    declares: bool
    """Whether ``pyproject.toml`` has a ``[tool.titan]`` table (or one titan cannot read): a
    declaration that applies, which the commands name in their reports."""

    def __init__(
        self,
        *,
        root: str,
        file: str | None = None,
        shown: str | None = None,
        registry_files: tuple[str, ...] = (),
        extensions: tuple[DeclaredExtension, ...] = (),
        model_registries: tuple[tuple[str, str], ...] = (),
        flavors: tuple[tuple[str, tuple[str, ...]], ...] = (),
        converters: tuple[tuple[str, str | None], ...] = (),
        datasets: tuple[str, ...] = (),
        era: str | None = None,
        upstream_python: str | None = None,
        problems: tuple[Diagnostic, ...] = (),
        declares: bool = False,
    ) -> None:
        _set(self, "root", root)
        _set(self, "file", file)
        _set(self, "shown", shown)
        _set(self, "registry_files", registry_files)
        _set(self, "extensions", extensions)
        _set(self, "model_registries", model_registries)
        _set(self, "flavors", flavors)
        _set(self, "converters", converters)
        _set(self, "datasets", datasets)
        _set(self, "era", era)
        _set(self, "upstream_python", upstream_python)
        _set(self, "problems", problems)
        _set(self, "declares", declares or bool(problems))


_read: dict[tuple[str, int, int], Declaration] = {}
"""(file, mtime, size) -> its declaration: an edited file is read again."""


def for_file(path: str | os.PathLike[str]) -> Declaration:
    """The declaration that applies to the file ``path`` (the folder it is named in)."""
    return for_folder(os.path.dirname(os.path.abspath(os.fspath(path))))


def for_folder(folder: str | os.PathLike[str]) -> Declaration:
    """The declaration that applies in ``folder``: its nearest ``pyproject.toml``'s."""
    start = os.path.abspath(os.fspath(folder))
    file = applying(start)
    if file is None:
        return Declaration(root=start)
    try:
        info = os.stat(file)
    except OSError:
        info = None
    key = (file, info.st_mtime_ns, info.st_size) if info is not None else (file, -1, -1)
    found = _read.get(key)
    if found is None:
        found = _read[key] = _parse(file)
    return found


def forget() -> None:
    """Drop the cached lookups (for a long-lived process whose projects change layout)."""
    forget_search()
    _read.clear()


def _shown(file: str) -> str:
    relative = os.path.relpath(file)
    return file if relative.startswith(os.pardir) else relative


def _parse(file: str) -> Declaration:
    from titan.schemas.toml_source import decode, parse, read_bytes

    root, shown = os.path.dirname(file), _shown(file)
    raw, problem = read_bytes(file, shown=shown)
    if raw is not None and b"titan" not in raw:
        return Declaration(root=root, file=file, shown=shown)  # nothing declared: not parsed
    source = None
    if raw is not None:
        text, problem = decode(raw, shown=shown)
        source = parse(text, file=shown) if text is not None else None
    if source is None or source.problem is not None:
        problem = problem if source is None else source.problem
        fix = "make it readable" if raw is None else "fix its syntax"
        hint = problem.hint or (
            f"titan reads the [tool.titan] table of the nearest {PYPROJECT} above each TOML; {fix}"
        )
        return Declaration(root=root, file=file, shown=shown, problems=(_with_hint(problem, hint),))
    tool = source.document.get("tool")
    table = tool.get("titan") if isinstance(tool, dict) else None
    if table is None:
        return Declaration(root=root, file=file, shown=shown)
    return _Reader(root=root, file=file, shown=shown, text=text).declaration(table)


def not_applied(folders: object) -> list[str]:
    """The ``pyproject.toml`` files mentioning titan that the walk up from ``folders`` met but
    did not apply (outside any repository, above the working folder), each once: a command
    names them, so a declaration that does not apply is never mistaken for one that does."""
    found: dict[str, None] = {}
    for folder in folders:  # type: ignore[attr-defined]
        start = os.path.abspath(folder)
        nearest = passed_over(start)
        if nearest is None:
            continue
        try:
            with open(nearest, "rb") as handle:
                mentions = b"titan" in handle.read()
        except OSError:
            continue
        if mentions:
            found.setdefault(_shown(nearest))
    return list(found)


def applied(folders: object) -> list[str]:
    """The ``pyproject.toml`` files (as findings name them) whose ``[tool.titan]`` table applies
    in ``folders`` (an iterable of folders), each once, in the order met."""
    found: dict[str, None] = {}
    for folder in folders:  # type: ignore[attr-defined]
        declaration = for_folder(folder)
        if declaration.declares and declaration.shown is not None:
            found.setdefault(declaration.shown)
    return list(found)


def _with_hint(problem: Diagnostic, hint: str) -> Diagnostic:
    return Diagnostic(
        code=problem.code,
        severity=problem.severity,
        path=problem.path,
        message=problem.message,
        hint=hint,
        span=problem.span,
    )


class _Reader:
    """Checks one ``[tool.titan]`` table, collecting what it declares and what is wrong with it."""

    def __init__(self, *, root: str, file: str, shown: str, text: str) -> None:
        from titan.schemas.spans import locate_keys

        self.root, self.file, self.shown, self.text = root, file, shown, text
        self.spans = locate_keys(text)
        self.problems: list[Diagnostic] = []

    def declaration(self, table: object) -> Declaration:
        registry_files: tuple[str, ...] = ()
        extensions: tuple[DeclaredExtension, ...] = ()
        registries: tuple[tuple[str, str], ...] = ()
        flavors: tuple[tuple[str, tuple[str, ...]], ...] = ()
        converters: tuple[tuple[str, str | None], ...] = ()
        datasets: tuple[str, ...] = ()
        era: str | None = None
        upstream_python: str | None = None
        if not isinstance(table, dict):
            self.problem(
                "wrong-type",
                (),
                f"`{_PATH}` must be a table, got {_kind(table)}",
                f"write a [{_PATH}] table with {', '.join(KEYS)}",
            )
        else:
            for key in table:
                if key not in KEYS:
                    self.unknown(key)
            registry_files = self.registry_files(table.get("registry-files", []))
            extensions = self.extensions(table.get("extensions", []))
            registries = self.model_registries(table.get("model-registries", {}))
            flavors = self.flavors(table.get("flavors", {}))
            converters = self.converters(table.get("converters", []))
            datasets = self.datasets(table.get("datasets", []))
            era = self.era(table.get("era"))
            upstream_python = self.upstream_python(table.get("upstream-python"))
        return Declaration(
            root=self.root,
            file=self.file,
            shown=self.shown,
            registry_files=registry_files,
            extensions=extensions,
            model_registries=registries,
            flavors=flavors,
            converters=converters,
            datasets=datasets,
            era=era,
            upstream_python=upstream_python,
            problems=tuple(self.problems),
            declares=True,
        )

    # ----------------------------------------------------------------- keys

    def unknown(self, key: str) -> None:
        import difflib

        close = difflib.get_close_matches(key, list(KEYS), n=1)
        hint = f"did you mean `{close[0]}`?" if close else f"known: {', '.join(KEYS)}"
        self.problem("unknown-key", (key,), f"[{_PATH}] has no setting `{key}`", hint)

    def registry_files(self, value: object) -> tuple[str, ...]:
        if not _strings(value):
            self.problem(
                "wrong-type",
                ("registry-files",),
                f"[{_PATH}] registry-files must be a list of file patterns, such as "
                '["configs/*.py"]',
                f"got {_kind(value)}; patterns are relative to {PYPROJECT}",
            )
            return ()
        return tuple(pattern.removeprefix("./") for pattern in value)  # type: ignore[union-attr]

    def extensions(self, value: object) -> tuple[DeclaredExtension, ...]:
        if not _strings(value):
            self.problem(
                "wrong-type",
                ("extensions",),
                f"[{_PATH}] extensions must be a list of modules, such as "
                '["tools/fork_ext.py", "forkpkg.config_ext"]',
                f"got {_kind(value)}; a .py path is relative to {PYPROJECT}, any other entry is "
                "a dotted module name",
            )
            return ()
        found: dict[str, DeclaredExtension] = {}
        for entry in value:  # type: ignore[union-attr]
            declared = self.extension(entry)
            if declared is not None:
                found.setdefault(declared.module, declared)  # the same module twice: once
        return tuple(found.values())

    def extension(self, entry: str) -> DeclaredExtension | None:
        span = self.entry_span(("extensions",), entry)
        if entry.endswith(".py"):
            file = os.path.normpath(os.path.join(self.root, entry))
            module = os.path.basename(file)[: -len(".py")]
            if not _dotted(module) or "." in module:
                self.problem(
                    "wrong-type",
                    ("extensions",),
                    f"extension `{entry}` cannot be loaded as a module: `{module}` is not a "
                    "Python name",
                    "rename the file to a Python identifier, such as fork_ext.py",
                    span=span,
                )
                return None
            dirs: tuple[str, ...] = (os.path.dirname(file),)
            return DeclaredExtension(
                entry=entry, module=module, search_dirs=dirs, file=file, span=span
            )
        if not _dotted(entry):
            self.problem(
                "wrong-type",
                ("extensions",),
                f"extension `{entry}` is neither a .py path nor a dotted module name",
                f'write a path relative to {PYPROJECT} ("tools/fork_ext.py") or a module '
                '("forkpkg.config_ext")',
                span=span,
            )
            return None
        dirs = tuple(dict.fromkeys([self.root, *(p for p in sys.path if p)]))
        return DeclaredExtension(entry=entry, module=entry, search_dirs=dirs, file=None, span=span)

    def model_registries(self, value: object) -> tuple[tuple[str, str], ...]:
        if not isinstance(value, dict) or not all(
            isinstance(v, str) and _dotted(v) for v in value.values()
        ):
            self.problem(
                "wrong-type",
                ("model-registries",),
                f'[{_PATH}] model-registries must be a table of NAME = "package.module"',
                f"got {_kind(value)}; each value names the module of one model family",
            )
            return ()
        return tuple(value.items())

    def era(self, value: object) -> str | None:
        """The project's era, as ``--era`` would take it (``None`` when unsaid or unusable)."""
        if value is None:
            return None
        from titan.schemas.era_names import era_error

        problem = era_error(value) if isinstance(value, str) else None
        if isinstance(value, str) and problem is None:
            return value.strip()
        self.problem(
            "wrong-type" if not isinstance(value, str) else "invalid-value",
            ("era",),
            f"[{_PATH}] era must say when the project's TOMLs were written, got "
            + (_kind(value) if not isinstance(value, str) else repr(value)),
            (problem or "").replace("--era", "era").rsplit(": ", 1)[-1]
            or 'write a release ("v0.2.2"), a month ("2025-09") or a day ("2025-09-14")',
        )
        return None

    def upstream_python(self, value: object) -> str | None:
        """The interpreter ``upstream-python`` names, made absolute (``None`` when unsaid)."""
        if value is None:
            return None
        if isinstance(value, str) and value.strip() and "\x00" not in value:
            return os.path.normpath(os.path.join(self.root, os.path.expanduser(value.strip())))
        self.problem(
            "wrong-type",
            ("upstream-python",),
            f"[{_PATH}] upstream-python must be the path of a Python interpreter, got "
            + (_kind(value) if not isinstance(value, str) else repr(value)),
            'write a path such as ".venv-upstream/bin/python" (relative to pyproject.toml)',
        )
        return None

    def datasets(self, value: object) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            self.problem(
                "wrong-type",
                ("datasets",),
                f'[{_PATH}] datasets must be a list of names, such as ["my_corpus"]',
                f"got {_kind(value)}; each name is spelt as training.dataset spells it",
            )
            return ()
        return tuple(dict.fromkeys(value))

    def flavors(self, value: object) -> tuple[tuple[str, tuple[str, ...]], ...]:
        from titan.schemas.fork_names import read_flavors

        found = read_flavors(value)
        if found is None:
            self.problem(
                "wrong-type",
                ("flavors",),
                f'[{_PATH}] flavors must be a table of FAMILY = ["flavor", ...], such as '
                '{ llama3 = ["1B", "3B"] }',
                f"got {_entry_kind(value, lists=True)}; each list names the flavors your fork builds for "
                "that model family, as model.flavor spells them",
            )
            return ()
        return found

    def converters(self, value: object) -> tuple[tuple[str, str | None], ...]:
        from titan.schemas.fork_names import read_converters
        from titan.schemas.rules import CONVERTER_NAMES

        found = read_converters(value)
        if found is None:
            self.problem(
                "wrong-type",
                ("converters",),
                f'[{_PATH}] converters must be a list of names, such as ["npu_rms_norm"], or a '
                'table of NAME = "package.module.Class"',
                f"got {_entry_kind(value, lists=False)}; names are spelt as model.converters spells them",
            )
            return ()
        for name, _ in found:
            if name in CONVERTER_NAMES:
                self.problem(
                    "invalid-value",
                    ("converters",),
                    f"[{_PATH}] converters declares `{name}`, which torchtitan registers itself",
                    f"declare only your fork's converters: delete `{name}` from the list",
                    span=self.entry_span(("converters",), name),
                )
        return tuple(entry for entry in found if entry[0] not in CONVERTER_NAMES)

    # ----------------------------------------------------------------- places

    def problem(
        self,
        code: str,
        parts: tuple[str, ...],
        message: str,
        hint: str,
        *,
        span: Span | None = None,
    ) -> None:
        self.problems.append(
            Diagnostic(
                code=code,
                severity=Severity.ERROR,
                path=".".join((_PATH, *parts)),
                message=message,
                hint=hint,
                span=span or self.span(parts),
            )
        )

    def span(self, parts: tuple[str, ...]) -> Span:
        """Where ``[tool.titan]`` (or one of its keys) is written; the file's start if unknown."""
        for end in range(len(parts), -1, -1):
            found = self.spans.get(("tool", "titan", *parts[:end]))
            if found is not None:
                return Span(file=self.shown, line=found.line, col=found.col, end_col=found.end_col)
        return Span(file=self.shown, line=1, col=1)

    def entry_span(self, parts: tuple[str, ...], entry: str) -> Span:
        """Where the string ``entry`` is written in the array of key ``parts`` (the key itself
        when the string is spelt with escapes that make it hard to find)."""
        key = self.span(parts)
        lines = self.text.splitlines()
        for index in range(key.line - 1, len(lines)):
            line = lines[index]
            start = key.col - 1 if index == key.line - 1 else 0
            for quote in ('"', "'"):
                col = line.find(f"{quote}{entry}{quote}", start)
                if col >= 0:
                    end = col + len(entry) + 3
                    return Span(file=self.shown, line=index + 1, col=col + 1, end_col=end)
            if index > key.line - 1 and "=" in line.split("#")[0]:
                break  # the next key: the entry was not found as written
        return key


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) and item for item in value)


def _dotted(text: str) -> bool:
    """A dotted module name: identifiers that are not keywords, joined by dots."""
    import keyword

    return bool(text) and all(
        part.isidentifier() and not keyword.iskeyword(part) for part in text.split(".")
    )


def _entry_kind(value: object, *, lists: bool) -> str:
    """What is wrong in a table of names (``lists``: of lists of names): its first bad entry."""
    if isinstance(value, dict):
        for key, item in value.items():
            if item == []:
                return f"`{key}` = an empty array"
            if not (_strings(item) if lists else isinstance(item, str)):
                return f"`{key}` = {_kind(item)}"
    return _kind(value)


def _kind(value: object) -> str:
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array" if _strings(value) else "an array with an empty or non-string entry"
    if isinstance(value, str):
        return f"the string {value!r}"
    return f"{type(value).__name__} {value!r}"

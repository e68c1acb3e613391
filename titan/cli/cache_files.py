"""The files a cached registry result depends on: which imported files those are, and how to read
them without hanging or reading without end.

Every file a registry module imported is a dependency of its findings except:

- titan's own sources (``titan/``, ``schemas/``, ``migrate/``), which the cache key covers
  already;
- the Python standard library and the third-party distributions installed normally in a
  site-packages folder, which the key covers by the names (and versions) of what is installed.

A distribution installed in editable mode (``pip install -e``) is the user's project wherever its
folder lies (in ``<venv>/src/`` for a VCS checkout, in the virtual environment's own folder, even
inside site-packages): its files are dependencies. Editable installs are found as pip and the
build backends record them in each site-packages folder:

- ``*.dist-info/direct_url.json`` with ``"dir_info": {"editable": true}`` and a ``file://`` URL
  (every PEP 660 backend through pip or uv);
- setuptools' ``__editable__.*.pth`` (a folder on ``sys.path``) and
  ``__editable___*_finder.py`` (a ``MAPPING`` of package names to folders);
- ``*.egg-link`` (``setup.py develop``).

When folders nest, the innermost decides: a virtual environment inside an editable checkout is
installed code, an editable checkout inside a site-packages folder is the user's.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import stat
import sys

MAX_DEPENDENCY_BYTES = 256 * 1024 * 1024
"""A dependency larger than this is not hashed: its result is not cached."""
_RECORD_BYTES = 1024 * 1024
"""The most read of one editable-install record (they hold a path or a few)."""

_TITAN, _EDITABLE, _INSTALLED = 0, 1, 2
"""Kinds of folder, in the order that settles a folder recorded as two kinds."""


def read_regular(
    name: str, *, limit: int, dir_fd: int | None = None, follow: bool = True
) -> bytes | None:
    """The bytes of regular file ``name``, or ``None`` for anything else (a FIFO, a socket, a
    device, a folder, a dangling link, a file over ``limit`` bytes, one that cannot be read).

    The kind is checked before opening (opening a device can have effects of its own) and again on
    the open descriptor, in case the name was switched in between; the open never waits for a
    writer and never reads more than ``limit + 1`` bytes."""
    fd = _open_regular(name, dir_fd=dir_fd, follow=follow, limit=limit)
    if fd is None:
        return None
    try:
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1024 * 1024, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks) if total <= limit else None


def stamp(path: str) -> list | None:
    """``[size, sha256]`` of a dependency as it is now, or ``None`` when it is not a readable
    regular file (following links: an editable install's link tree points at the sources)."""
    fd = _open_regular(path, dir_fd=None, follow=True, limit=MAX_DEPENDENCY_BYTES)
    if fd is None:
        return None
    hashed, size = hashlib.sha256(), 0
    try:
        while chunk := os.read(fd, 1024 * 1024):
            size += len(chunk)
            if size > MAX_DEPENDENCY_BYTES:
                return None
            hashed.update(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return [size, hashed.hexdigest()]


def _open_regular(name: str, *, dir_fd: int | None, follow: bool, limit: int) -> int | None:
    """A read descriptor on regular file ``name`` of at most ``limit`` bytes, else ``None``."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        before = os.stat(name, dir_fd=dir_fd, follow_symlinks=follow)
        if not stat.S_ISREG(before.st_mode) or before.st_size > limit:
            return None
        fd = os.open(name, flags, dir_fd=dir_fd)
    except (OSError, ValueError):  # ValueError: a NUL byte in the name
        return None
    try:
        now = os.fstat(fd)
    except OSError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        return None
    return fd


def is_dependency(file: str) -> bool:
    """Whether an imported ``file`` is one the cached findings must be keyed by (see the module
    docstring): not titan's, not the standard library's, not a normally installed
    distribution's."""
    file = os.path.normcase(os.path.abspath(file))
    for root, kind in _roots():
        if file.startswith(root):
            return kind == _EDITABLE
    return True


def imported_dependencies() -> list[str]:
    """The dependencies among the files of every module imported now (those a registry module
    imported, and any of the project's that titan imported before it)."""
    found = set()
    for name, module in list(sys.modules.items()):
        if name in ("__main__", "__mp_main__"):  # the program running, not an import
            continue
        try:
            file = getattr(module, "__file__", None)
        except Exception:  # a module object of the user's that fails on attribute access
            continue
        if isinstance(file, str) and file and is_dependency(file):
            found.add(os.path.abspath(file))
    return sorted(found)


def installed_fingerprint() -> str:
    """A digest of the names of every distribution installed in a site-packages folder (their
    versions are part of the names) and of its ``.pth`` files, so that an upgrade, an install or
    an uninstall is a new cache key."""
    global _installed
    if _installed is None:
        names = []
        for folder in _site_folders(sysconfig_too=False):  # on every run: kept cheap
            try:
                names += [
                    f"{folder}/{n}" for n in os.listdir(folder) if n.endswith(_INSTALL_RECORDS)
                ]
            except OSError:
                continue
        _installed = hashlib.sha256("\n".join(sorted(names)).encode()).hexdigest()
    return _installed


_installed: str | None = None
_INSTALL_RECORDS = (".dist-info", ".egg-info", ".egg-link", ".pth")
"""What an installation leaves in site-packages, named after the distribution and its version
(a ``.pth`` file adds folders to the import path)."""
_cached_roots: list[tuple[str, int]] | None = None


def _roots() -> list[tuple[str, int]]:
    """``(folder + separator, kind)`` in the order that decides (see :func:`is_dependency`)."""
    global _cached_roots
    if _cached_roots is None:
        import sysconfig

        kinds: dict[str, int] = {}

        def add(folder: str, kind: int) -> None:
            for form in {os.path.abspath(folder), os.path.realpath(folder)}:
                root = os.path.join(os.path.normcase(form), "")
                kinds[root] = min(kind, kinds.get(root, kind))

        for folder in titan_folders():
            add(folder, _TITAN)
        installed = [*_site_folders()]
        installed += [sysconfig.get_paths().get(k) or "" for k in ("stdlib", "platstdlib")]
        if os.name == "nt":  # the standard library's extension modules
            installed.append(os.path.join(sys.base_prefix, "DLLs"))
        for folder in filter(None, installed):
            add(folder, _INSTALLED)
        for folder in _editable_folders():
            add(folder, _EDITABLE)
        # titan's folders first: nothing inside them is the user's (titan's own editable
        # install maps its data folders too); then the innermost folder decides
        _cached_roots = sorted(
            kinds.items(), key=lambda item: (item[1] != _TITAN, -len(item[0]), item[1])
        )
    return _cached_roots


def titan_folders() -> list[str]:
    """The folders of titan's three packages (``titan.schemas`` and ``titan.migrate`` live in
    folders of their own)."""
    import titan
    import titan.migrate
    import titan.schemas

    return [
        os.path.dirname(os.path.abspath(p.__file__)) for p in (titan, titan.schemas, titan.migrate)
    ]


def _site_folders(*, sysconfig_too: bool = True) -> list[str]:
    """Every folder third-party distributions are installed in, for this interpreter
    (``sysconfig_too=False``: those the ``site`` module names, without the few milliseconds
    ``sysconfig`` takes to start, which nearly every interpreter's ``site`` names as well)."""
    import site

    folders = []
    if sysconfig_too:
        import sysconfig

        folders += [sysconfig.get_paths().get(k) or "" for k in ("purelib", "platlib")]
    try:
        folders += site.getsitepackages()
    except AttributeError:  # an embedded or old virtualenv's site module
        pass
    try:
        folders.append(site.getusersitepackages())
    except AttributeError:
        pass
    # a site-packages folder that reaches sys.path otherwise (a .pth line, PYTHONPATH)
    folders += [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
    unique = dict.fromkeys(os.path.abspath(f) for f in folders if f)
    return [f for f in unique if os.path.isdir(f)]


def _editable_folders() -> list[str]:
    """The source folders of the distributions installed in editable mode."""
    folders = []
    for site_folder in _site_folders():
        try:
            names = sorted(os.listdir(site_folder))
        except OSError:
            continue
        for name in names:
            for matches, inner, read in _EDITABLE_RECORDS:
                if not matches(name):
                    continue
                record = (
                    os.path.join(site_folder, name, inner)
                    if inner
                    else os.path.join(site_folder, name)
                )
                text = read_regular(record, limit=_RECORD_BYTES)
                if text is not None:
                    # a relative folder in a .pth file is relative to the site-packages folder
                    found = read(text.decode("utf-8", "replace"))
                    folders += [os.path.join(site_folder, f) for f in found if isinstance(f, str)]
    return [os.path.abspath(f) for f in folders if "\0" not in f]


def _direct_url(text: str) -> list[str]:
    """The project folder of an editable install's ``direct_url.json`` (PEP 610)."""
    from urllib.parse import unquote, urlsplit

    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        return []
    if not isinstance(record, dict) or not isinstance(record.get("dir_info"), dict):
        return []
    url = record.get("url")
    if record["dir_info"].get("editable") is not True or not isinstance(url, str):
        return []
    parts = urlsplit(url)
    if parts.scheme != "file":
        return []
    path = unquote(parts.path)
    if os.name == "nt" and path[:1] == "/" and path[2:3] == ":":  # file:///C:/x
        path = path[1:]
    return [path]


def _path_lines(text: str) -> list[str]:
    """The folders a ``.pth`` file (or an ``.egg-link``) puts on ``sys.path``."""
    lines = [line.strip() for line in text.splitlines()]
    return [line for line in lines if line and not line.startswith(("#", "import ", "import\t"))]


def _finder_mapping(text: str) -> list[str]:
    """The folders of setuptools' editable finder: ``MAPPING`` and ``NAMESPACES`` values."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    folders: list[str] = []
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        if not (isinstance(target, ast.Name) and target.id in ("MAPPING", "NAMESPACES")):
            continue
        try:
            value = ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            continue
        for item in value.values() if isinstance(value, dict) else ():
            folders += item if isinstance(item, list) else [item]
    return folders


_EDITABLE_RECORDS = [
    # (which entries of a site-packages folder, the file to read in it, what it says)
    (lambda name: name.endswith(".dist-info"), "direct_url.json", _direct_url),
    (lambda name: name.startswith("__editable__") and name.endswith(".pth"), "", _path_lines),
    (
        lambda name: name.startswith("__editable__") and name.endswith("_finder.py"),
        "",
        _finder_mapping,
    ),
    (lambda name: name.endswith(".egg-link"), "", lambda text: _path_lines(text)[:1]),
]

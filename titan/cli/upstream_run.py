"""Import one upstream torchtitan registry module and build its configs, inside the worker process.

This is the part of ``titan-validate --python PATH`` that runs user code: the worker
(``titan.cli.registry_worker``) runs in PATH, an interpreter where upstream torchtitan 0.3.0 is
installed, and titan's side (``titan.cli.upstream_build``) reads what comes back. So this module
and everything it imports use only the standard library and torchtitan: titan's dependencies
(pydantic, torch of titan's own environment...) are not there.

A request is ``{"path", "shown", "functions": [names], "package", "module_path", "skip"}``. The
module is imported as ``titan-train --registry FILE`` imports it (its folder on ``sys.path``), or,
when it is ``package``'s module, by its dotted name, so that ``from . import model_registry``
works as in torchtitan's own tree. Each function is called with no arguments and what it returned
is sent as plain JSON (:func:`dump`), or what it raised with where:

- ``{"ev": "built", "name": NAME, "config": DUMP, "returned_type": "module:Qual.Name"}``;
- ``{"ev": "built", "name": NAME, "error": {"type", "message", "frames": [[file, line], ...]}}``
  (innermost first); ``name`` is null for the import, ``""`` for an ``atexit`` handler.

The ``step`` events are those of ``titan.cli.registry_run`` (before the import, each function and
each ``atexit`` handler), so the time limit, ``--memory-limit`` and every other way the process
ends read the same on titan's side.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import io
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

Send = Callable[..., None]

_CONVERTERS = (
    "torchtitan.components.quantization.float8",
    "torchtitan.components.quantization.mx",
    "torchtitan.components.quantization.nvfp4",
)
"""The quantization converters, which ask the GPU's generation when their config is built."""

_PRELOADED = ("torchtitan.trainer", "torchtitan.protocols.model_spec", *_CONVERTERS)
"""What nearly every registry module imports (torch with it): imported once, when the worker
starts, before ``--memory-limit`` applies and outside any function's time limit."""

_MAX_DEPTH = 60
"""How deep :func:`dump` follows nested values (a config tree is a dozen levels)."""

_MACHINERY = (
    os.path.abspath(__file__),
    os.path.join(os.path.dirname(os.path.abspath(importlib.__file__)), ""),
    "<frozen importlib.",
)
"""Where frames of this module and of the import machinery lie: never the user's code."""

_PLAIN = {bool: bool, int: int.__int__, float: float.__float__, str: str.__str__}
"""JSON's leaves, and how a subclass of one (an enum of strings) becomes the plain value
(``str.__str__``: not the subclass's own ``__str__``)."""


def prepare() -> None:
    """Import torchtitan's config tree before any module needs it. What fails here fails again
    when a module imports it, and is reported there, at the module's line."""
    for name in _PRELOADED:
        try:
            importlib.import_module(name)
        except BaseException:  # reported by the module's own import, at its line
            continue


def build_as_on_target_gpus() -> None:
    """Let the quantization converters build on a machine without the GPU they target: float8
    asks for SM89 and MXFP8 / NVFP4 for SM100 when the config is built, which says nothing about
    the config itself (``tests/upstream/build_runner.py`` does the same). Converters that do not
    import (no torchao, another torchtitan) are left alone."""
    for name in _CONVERTERS:
        try:
            module = importlib.import_module(name)
        except Exception:  # nothing to patch
            continue
        if hasattr(module, "has_cuda_capability"):
            module.has_cuda_capability = _any_capability


def _any_capability(major: int, minor: int) -> bool:
    return True


class _Failed(Exception):
    """User code raised: ``error`` is what the ``built`` event says of it."""

    def __init__(self, error: dict) -> None:
        super().__init__(error["message"])
        self.error = error


class ModuleRun:
    """One module's import and builds; ``send`` reports each event to titan's process."""

    def __init__(self, request: dict, *, send: Send, watchdog: Any, atexits: list) -> None:
        self.path, self.shown = request["path"], request["shown"]
        self.full = os.path.abspath(self.path)
        skip = set(request.get("skip", ()))
        self.names = [name for name in request["functions"] if name not in skip]
        self.package = request.get("package")
        self.module_path = tuple(request.get("module_path", ()))
        self.memory_limit = request.get("memory_limit")
        self.send, self.watchdog, self.atexits = send, watchdog, atexits
        self.retire = False

    def run(self) -> None:
        """Import and build; then put the process back as it was and send ``done``."""
        from titan.cli.module_path import importable

        before, path, cwd = set(sys.modules), list(sys.path), os.getcwd()
        try:
            with importable(self.module_path):
                module = self._import()
                for name in self.names if module is not None else ():
                    self._build(name, module)
                    if self.retire:
                        break  # out of memory: the rest is built by a fresh process
            self._run_atexits()
        finally:
            self._forget(before)
            sys.path[:] = path
            _back_to(cwd)  # a module that changed folder would move every later path
        self.send(ev="done", deps=[], cacheable=False, retire=self.retire)

    def _import(self) -> Any:
        doing = f"importing {self.shown}"
        self.send(ev="step", doing=doing, name=None)
        try:
            with self._user_code(doing):
                module = self._load()
                build_as_on_target_gpus()
        except _Failed as failed:
            self.send(ev="built", name=None, error=failed.error)
            return None
        return module

    def _load(self) -> Any:
        """The module by its dotted name when it is ``package``'s, else from its file."""
        dotted = self._dotted()
        if dotted is not None:
            module = importlib.import_module(dotted)
            if os.path.abspath(getattr(module, "__file__", "") or "") == self.full:
                return module
        return self._load_file()

    def _dotted(self) -> str | None:
        """``package.stem`` when the file lies in ``package``'s folder (``None``: no package
        given, or none of that name here)."""
        stem = os.path.splitext(os.path.basename(self.full))[0]
        if not self.package or not stem.isidentifier():
            return None
        try:
            spec = importlib.util.find_spec(self.package)
        except ModuleNotFoundError:
            return None
        folders = getattr(spec, "submodule_search_locations", None) or ()
        if os.path.dirname(self.full) not in {os.path.abspath(f) for f in folders}:
            return None
        return f"{self.package}.{stem}"

    def _load_file(self) -> Any:
        """The file under a private name, its folder on ``sys.path`` while it is imported (so it
        imports its neighbours, as a script would)."""
        name = "_titan_upstream_" + hashlib.sha1(self.full.encode()).hexdigest()[:16]
        spec = importlib.util.spec_from_file_location(name, self.full)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        folder = os.path.dirname(self.full)
        sys.path.insert(0, folder)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        finally:
            if folder in sys.path:
                sys.path.remove(folder)
        return module

    def _build(self, name: str, module: Any) -> None:
        doing = f"running {name}()"
        self.send(ev="step", doing=doing, name=name)
        try:
            function = self._function(name, module)
            with self._user_code(doing):
                config = function()
            with self._user_code(f"reading the config {name}() returned"):
                dumped, returned = dump(config), class_path(type(config))
                if inspect.iscoroutine(config):
                    config.close()  # an async def: never awaited, and Python would say so
        except _Failed as failed:
            self.send(ev="built", name=name, error=failed.error)
            return
        self.send(ev="built", name=name, config=dumped, returned_type=returned)

    def _function(self, name: str, module: Any) -> Any:
        """The function to call, or :class:`_Failed` saying why there is none."""
        missing = object()
        function = vars(module).get(name, missing)
        if function is missing:
            message = f"{self.shown} defines no `{name}`"
            raise _Failed({"type": "AttributeError", "message": message, "frames": []})
        if not callable(function):
            message = f"`{name}` is {type(function).__qualname__}, not a function"
            raise _Failed({"type": "TypeError", "message": message, "frames": []})
        return function

    def _run_atexits(self) -> None:
        """The ``atexit`` handlers the module registered, last first, as the module expects at
        the end of its process (the worker itself never runs them)."""
        while self.atexits:
            function, args, kwargs = self.atexits.pop()
            name = getattr(function, "__qualname__", None) or type(function).__name__
            doing = f"running the atexit handler {name}() of {self.shown}"
            self.send(ev="step", doing=doing, name="")
            try:
                with self._user_code(doing):
                    function(*args, **kwargs)
            except _Failed as failed:
                self.send(ev="built", name="", error=failed.error)

    @contextlib.contextmanager
    def _user_code(self, doing: str) -> Iterator[None]:
        """Run user code under the time limit with nothing to read on stdin (a prompt would
        wait for ever); whatever it raises, of any kind, becomes :class:`_Failed`."""
        self.watchdog.arm(doing)
        stdin = sys.stdin
        sys.stdin = io.StringIO()
        try:
            yield
        except _Failed:
            raise
        except BaseException as error:  # also SystemExit, KeyboardInterrupt, GeneratorExit
            if isinstance(error, MemoryError) and self.memory_limit:
                self.retire = True  # a process that ran out of memory is not trusted again
            raise _Failed(self._described(error)) from None
        finally:
            sys.stdin = stdin
            self.watchdog.disarm()

    def _described(self, error: BaseException) -> dict:
        message = _text(error)
        if isinstance(error, MemoryError) and self.memory_limit and not message:
            from titan.cli.registry_errors import memory_text

            message = f"out of memory under --memory-limit {memory_text(self.memory_limit)}"
        return {"type": type(error).__name__, "message": message, "frames": error_frames(error)}

    def _forget(self, before: set[str]) -> None:
        """Drop the module and the neighbours it imported from its own folder, so that an edited
        file, or another folder's module of the same name, is imported afresh. torchtitan's own
        modules stay: importing them again would register torch's custom ops twice."""
        folder = os.path.join(os.path.dirname(self.full), "")
        for name in set(sys.modules) - before:
            file = getattr(sys.modules.get(name), "__file__", None) or ""
            if name.startswith("_titan_upstream_") or (
                self.package is None and os.path.abspath(file).startswith(folder)
            ):
                del sys.modules[name]
            elif self.package and os.path.abspath(file) == self.full:
                del sys.modules[name]


def _back_to(cwd: str) -> None:
    try:
        moved = os.getcwd() != cwd
    except OSError:  # the module removed the folder it changed to
        moved = True
    if moved:
        os.chdir(cwd)


def _text(error: BaseException) -> str:
    try:
        return str(error)
    except BaseException:  # an exception whose own text fails
        return ""


def error_frames(error: BaseException) -> list[list]:
    """``[[file, line], ...]`` of where ``error`` was raised, innermost first, without this
    module's frames and the import machinery's; a ``SyntaxError``'s own place comes first."""
    found = []
    tb = error.__traceback__
    while tb is not None and len(found) < 200:
        file = tb.tb_frame.f_code.co_filename
        file = file if file.startswith("<") else os.path.abspath(file)
        if isinstance(tb.tb_lineno, int) and not file.startswith(_MACHINERY):
            found.append([file, tb.tb_lineno])
        tb = tb.tb_next
    found.reverse()
    if isinstance(error, SyntaxError) and isinstance(error.filename, str) and error.lineno:
        found.insert(0, [os.path.abspath(error.filename), int(error.lineno)])
    return found


def class_path(cls: type) -> str:
    """``module:Qual.Name``, as torchtitan's config dumps name a class."""
    module = getattr(cls, "__module__", None) or "?"
    return f"{module}:{getattr(cls, '__qualname__', None) or getattr(cls, '__name__', '?')}"


def dump(value: Any) -> Any:
    """``value`` as plain JSON: a dataclass is ``{"__class__": "module:Qual.Name", field:
    value, ...}``; a ``ModelSpec`` keeps its name, flavor and the class of its model config; lists
    and tuples are lists, dicts have string keys; any other leaf is ``"<TypeName>"``. A value met
    again inside itself is ``"<cycle>"``, one nested deeper than any config is ``"<too deep>"``."""
    return _dump(value, 0, set())


def _dump(value: Any, depth: int, within: set[int]) -> Any:
    if value is None:
        return None
    for kind, plain in _PLAIN.items():
        if isinstance(value, kind):
            return plain(value)
    if depth > _MAX_DEPTH:
        return "<too deep>"
    if id(value) in within:
        return "<cycle>"
    within.add(id(value))
    try:
        return _dump_container(value, depth + 1, within)
    finally:
        within.discard(id(value))


def _dump_container(value: Any, depth: int, within: set[int]) -> Any:
    if _is_model_spec(value):
        model = getattr(value, "model", None)
        return {
            "__class__": class_path(type(value)),
            "name": _dump(getattr(value, "name", None), depth, within),
            "flavor": _dump(getattr(value, "flavor", None), depth, within),
            "model": None
            if model is None
            else class_path(model if isinstance(model, type) else type(model)),
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {"__class__": class_path(type(value))}
        for field in dataclasses.fields(value):
            missing = object()
            item = getattr(value, field.name, missing)  # a slot never set has no value
            out[field.name] = "<unset>" if item is missing else _dump(item, depth, within)
        return out
    if isinstance(value, list | tuple):
        return [_dump(item, depth, within) for item in value]
    if isinstance(value, dict):
        return {_key(key): _dump(item, depth, within) for key, item in value.items()}
    return f"<{type(value).__name__}>"


def _key(key: Any) -> str:
    return str.__str__(key) if isinstance(key, str) else str(key)


def _is_model_spec(value: Any) -> bool:
    """Whether ``value`` is torchtitan's ``ModelSpec`` (or a subclass), without importing it."""
    return any(
        getattr(cls, "__module__", None) == "torchtitan.protocols.model_spec"
        and getattr(cls, "__qualname__", None) == "ModelSpec"
        for cls in type(value).__mro__
    )

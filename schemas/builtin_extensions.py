"""The upstream custom config modules titan knows by name, without the static reader.

``titan-validate`` meets them in most real TOMLs (``[job] custom_config_module =
"torchtitan.models.flux.job_config"``) and in every did-you-mean search, so they must cost next to
nothing: their :class:`ExtensionSpec` trees are read once, at development time, from the sources in
``known_extensions/`` by ``titan.schemas.extension_reader`` and stored as plain data in the generated
``titan.schemas.builtin_extensions_spec`` (``python -m titan.schemas.spec_codegen`` rewrites it; a test fails
while it is stale). Reading a user's module still goes through ``titan.schemas.extension_reader``, which
re-exports everything here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from titan.schemas.spec import ExtensionSpec

KNOWN_EXTENSIONS: dict[str, str] = {
    "torchtitan.models.flux.job_config": "flux",
    "torchtitan.components.ft.config": "ft",
    "torchtitan.experiments.vlm.job_config": "vlm",
    "torchtitan.experiments.transformers_modeling_backend.job_config": (
        "transformers_modeling_backend"
    ),
    "torchtitan.experiments.simple_fsdp.job_config": "simple_fsdp",
    "torchtitan.experiments.compiler_toolkit.job_config": "compiler_toolkit",
    "torchtitan.experiments.autoparallel.job_config": "autoparallel",
    "tests.assets.extended_job_config_example": "extended_job_config_example",
}
"""Upstream dotted module path -> short name of its built-in copy in ``known_extensions/``."""


class ExtensionError(Exception):
    """A problem the user can fix (module not found, no ``JobConfig``, a syntax error in it); the
    message says what is wrong and how to fix it (``--module-path DIR``, ``--extension NAME``)."""


def known_extension(name_or_module: str) -> ExtensionSpec | None:
    """A built-in upstream module by short name (``"flux"``) or dotted path, else None."""
    short = KNOWN_EXTENSIONS.get(name_or_module, name_or_module)
    if short not in KNOWN_EXTENSIONS.values():
        return None
    from titan.schemas.builtin_extensions_spec import BUILT_IN

    return BUILT_IN[short]

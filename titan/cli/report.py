"""Where a command's findings go: rendered once, in the chosen format, to a stream or a file.

Every command reports diagnostics through :func:`publish` (or renders its own report text and
hands it to :func:`deliver`), so the formats, the colour rule and the safe output writing are the
same everywhere.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Sequence
from typing import TextIO

from titan.schemas.render import FORMATS as _RENDERERS

FORMATS = tuple(_RENDERERS)
"""The ``--format`` choices of titan-validate and titan-migrate."""
COLORS = ("auto", "always", "never")
"""The ``--color`` choices of every command."""


def publish(
    diagnostics: Sequence,
    *,
    format: str,
    files: int,
    sources: dict[str, str],
    color: str,
    output: str | os.PathLike[str] | None,
    stream: TextIO,
    tool: str,
    extra: dict | None = None,
) -> None:
    """Render ``diagnostics`` and deliver them to ``output`` (a file) or ``stream``.

    ``color`` is the ``--color`` choice; a file never gets colour. ``extra`` keys are added to
    the top level of the JSON format (the other formats say them elsewhere).
    """
    from titan import __version__
    from titan.cli.streams import wants_color
    from titan.schemas import render

    buffer = io.StringIO()
    render.render(
        diagnostics,
        format=format,
        files=files,
        out=buffer,
        sources=sources,
        color=output is None and wants_color(color, out=stream),
        tool=tool,
        version=__version__,
    )
    text = buffer.getvalue()
    if format == "json" and extra:
        text = with_keys(text, extra)
    deliver(text, output=output, stream=stream)


def with_keys(text: str, extra: dict) -> str:
    """A JSON report object with the ``extra`` keys added at its top level."""
    import json

    document = json.loads(text)
    document.update(extra)
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def deliver(text: str, *, output: str | os.PathLike[str] | None, stream: TextIO) -> None:
    """Write a finished report to the file ``output``, or to ``stream`` when there is none."""
    if output is None:
        from titan.cli.streams import write

        write(text, out=stream)
        return
    from titan.cli.output import write_text

    write_text(output, text=text)


def add_sources(diagnostics: Iterable, *, sources: dict[str, str]) -> dict[str, str]:
    """``sources`` with the text of every file a finding points into (to quote its line);
    files that cannot be read are left out, as the report can do without their lines."""
    from titan.schemas.toml_source import read_text

    for d in diagnostics:
        name = d.span.file if d.span is not None else None
        if name and name not in sources:
            text, _ = read_text(name, shown=name)
            if text is not None:
                sources[name] = text
    return sources

"""Every setting of a registry config set to a value of the wrong type: ``titan-train --preflight``
and ``titan-validate --config`` name it as a ``wrong-type`` finding at the line that set it and
exit 1; nothing titan computes from the config beside that check (the dump folder, the saved
config's path, the capability record, the -1 shard degree) crashes on it first."""

from __future__ import annotations

import dataclasses
import io
import textwrap

import pytest

from titan.cli import validate
from titan.models.llama3.config_registry import llama3_debugmodel
from titan.train import main

WRONG = ["1j", "{'x': 1}"]
"""Values no setting takes: a complex number and a dict."""


def leaf_paths(node, prefix: str = "") -> list[str]:
    """The dotted paths of every plain setting in a config tree (not its nested configs)."""
    found = []
    for field in dataclasses.fields(node):
        value = getattr(node, field.name)
        path = f"{prefix}{field.name}"
        if field.name in ("model_spec", "tokenizer"):
            continue  # the model and tokenizer are objects, checked by their own tests
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            found += leaf_paths(value, f"{path}.")
        else:
            found.append(path)
    return found


PATHS = leaf_paths(llama3_debugmodel())


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    """A registry module with one function per (setting, wrong value)."""
    folder = tmp_path_factory.mktemp("wrong_types")
    lines = [
        "from titan.models.llama3.config_registry import llama3_debugmodel",
        "",
        "",
        "def _set(path, value):",
        "    config = llama3_debugmodel()",
        "    *parents, name = path.split('.')",
        "    node = config",
        "    for part in parents:",
        "        node = getattr(node, part)",
        "    setattr(node, name, value)",
        "    return config",
        "",
    ]
    for index, path in enumerate(PATHS):
        for kind, value in enumerate(WRONG):
            lines += ["", f"def case_{index}_{kind}():", f"    return _set({path!r}, {value})", ""]
    module = folder / "config_registry.py"
    module.write_text("\n".join(lines), encoding="utf-8")
    return module


def test_the_walk_reaches_every_section():
    assert len(PATHS) > 100
    sections = {path.partition(".")[0] for path in PATHS}
    assert {
        "training",
        "parallelism",
        "checkpoint",
        "optimizer",
        "debug",
        "dump_folder",
    } <= sections


@pytest.mark.parametrize("index", range(len(PATHS)), ids=PATHS)
def test_a_wrongly_typed_setting_is_a_finding_not_a_crash(
    registry, index, capsys, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    path = PATHS[index]
    for kind in range(len(WRONG)):
        name = f"case_{index}_{kind}"
        code = main(["--preflight", "--ngpu", "1", "--registry", str(registry), "--config", name])
        out, err = capsys.readouterr()
        assert code == 1, (path, out, err)
        assert "internal error" not in err and "Traceback" not in err, err
        # At its own path (a Literal's wrong value is an invalid choice).
        assert any(f"error[{c}] `{path}" in err for c in ("wrong-type", "invalid-choice")), err
        stdout, stderr = io.StringIO(), io.StringIO()
        checked = validate.run(
            ["--registry", str(registry), "--config", name], stdout=stdout, stderr=stderr
        )
        assert checked == 1, textwrap.shorten(stdout.getvalue() + stderr.getvalue(), 2000)
        assert "internal error" not in stdout.getvalue() + stderr.getvalue()
    assert list(tmp_path.iterdir()) == []  # nothing written

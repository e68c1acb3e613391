"""Numbers on the command line are ASCII digits only: Python's ``int()`` reads other scripts'
digits (``８``, ``٨``) and ``8_0`` as numbers, which no shell script or launcher means."""

from __future__ import annotations

import pytest

from tests.helpers import validate
from tests.test_cli_install import DEBUG, command

NOT_NUMBERS = ["８", "٨", "8_0", "²"]


@pytest.mark.parametrize("ngpu", NOT_NUMBERS)
def test_validate_ngpu_takes_ascii_digits_only(ngpu, capsys):
    result = validate("--ngpu", ngpu, DEBUG)
    assert result.code == 2
    assert f"expected a whole number, got {ngpu!r}" in capsys.readouterr().err  # argparse's


@pytest.mark.parametrize("ngpu", NOT_NUMBERS)
def test_preflight_ngpu_takes_ascii_digits_only(ngpu):
    result = command("titan-train", "--preflight", "--ngpu", ngpu, "--job.config_file", str(DEBUG))
    assert result.returncode == 2, result.stderr
    assert f"--ngpu must be a whole number of GPUs, got {ngpu!r}" in result.stderr


@pytest.mark.parametrize("size", ["２", "8_0"])
def test_preflight_world_size_takes_ascii_digits_only(size):
    result = command(
        "titan-train", "--preflight", "--job.config_file", str(DEBUG), env={"WORLD_SIZE": size}
    )
    assert result.returncode == 2, result.stderr
    assert f"WORLD_SIZE must be a whole number of GPUs, got {size!r}" in result.stderr


def test_ascii_ngpu_still_reads():
    assert validate("--ngpu", " 8", DEBUG).code == 0
    assert validate("--ngpu=8", DEBUG).code == 0

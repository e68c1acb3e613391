"""Flux's data loaders tokenize for the run's ``encoder``: one ``--encoder.test_mode`` puts the
registry form in test mode as ``--training.test_mode`` does the TOML form; a loader's own
``encoder``, when set, must equal the run's, or the run (and its pre-flight) is refused naming
the loader and every field that differs."""

from __future__ import annotations

import io
import textwrap

import pytest

from tests.training_runs import REPO
from titan.cli.train_preflight import preflight
from titan.models.flux.configs import Encoder
from titan.models.flux.flux_datasets import loader_encoder

SHRINK = ["--dataloader.img_size", "32", "--training.local_batch_size", "2"]


def _preflight(args: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = preflight(args, ngpu=1, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "args",
    [
        ["--config", "flux_debugmodel", "--encoder.test_mode", *SHRINK],
        ["--config", "flux_debugmodel", "--encoder.test_mode", "--validator.enable", *SHRINK],
        [
            "--job.config_file",
            str(REPO / "legacy_configs/flux/debug_model.toml"),
            "--training.test_mode",
            "--training.img_size",
            "32",
        ],
    ],
)
def test_one_test_mode_setting_reaches_every_loader(args):
    code, out, err = _preflight(args)
    assert (code, out) == (0, out), err
    assert out.startswith("pre-flight passed: flux flux-debug"), err


def _registry(tmp_path, body: str) -> list[str]:
    registry = tmp_path / "config_registry.py"
    registry.write_text(
        "from titan.models.flux.config_registry import flux_debugmodel\n"
        "from titan.models.flux.configs import Encoder\n\n\n"
        "def run():\n"
        "    config = flux_debugmodel()\n"
        "    config.encoder.test_mode = True\n"
        + textwrap.indent(textwrap.dedent(body), "    ")
        + "    return config\n",
        encoding="utf-8",
    )
    return ["--registry", str(registry), "--config", "run", *SHRINK]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            """\
            config.dataloader.encoder = Encoder(test_mode=False)
            config.dataloader.encoder.t5_encoder = config.encoder.t5_encoder
            config.dataloader.encoder.autoencoder_path = config.encoder.autoencoder_path
            """,
            "dataloader.encoder differs from the run's encoder in test_mode (False here, True "
            "in the run's); leave dataloader.encoder unset (it takes the run's encoder) or make "
            "the two the same",
        ),
        (
            """\
            import dataclasses
            config.validator.enable = True
            config.validator.dataloader.encoder = dataclasses.replace(
                config.encoder, max_t5_encoding_len=77, clip_encoder="other/clip"
            )
            """,
            "validator.dataloader.encoder differs from the run's encoder in clip_encoder "
            "('other/clip' here, 'openai/clip-vit-large-patch14' in the run's), "
            "max_t5_encoding_len (77 here, 256 in the run's)",
        ),
    ],
)
def test_a_loader_encoder_that_differs_from_the_runs_is_refused(tmp_path, body, message):
    code, out, err = _preflight(_registry(tmp_path, body))
    assert (code, out) == (1, ""), err
    assert message in err


def test_a_loader_encoder_equal_to_the_runs_is_taken(tmp_path):
    body = """\
        import dataclasses
        config.dataloader.encoder = dataclasses.replace(config.encoder)
        config.validator.dataloader.encoder = dataclasses.replace(config.encoder)
        config.validator.enable = True
        """
    code, out, err = _preflight(_registry(tmp_path, body))
    assert code == 0, err


def test_the_loader_encoder_rule():
    run, own = Encoder(max_t5_encoding_len=8), Encoder(max_t5_encoding_len=8)
    assert loader_encoder(None, run=run, where="dataloader") is run
    assert loader_encoder(own, run=None, where="dataloader") is own
    assert loader_encoder(own, run=run, where="dataloader") is own
    assert loader_encoder(None, run=None, where="dataloader") == Encoder()
    with pytest.raises(ValueError, match=r"^dataloader\.encoder differs .* in test_mode"):
        loader_encoder(Encoder(max_t5_encoding_len=8, test_mode=True), run=run, where="dataloader")

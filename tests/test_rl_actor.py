"""TitanTrainer, the TorchForge-style actor on legacy sections: the sections of
legacy_configs/llama3/debug_model.toml as a dict train to titan-train's losses bit for bit on
the same batches, a Forge GRPO step runs and its pushed weights load; a misspelt key, a bad
section and bad targets are refused with what to fix."""

from __future__ import annotations

import json
import tomllib

import pytest
import torch
from titan.migrate.legacy_config import LegacyConfigError

from tests.training_runs import DEBUG_TOML, SEED, SMALL, loss_bits, titan_train
from titan.rl import TitanTrainer, snapshots
from titan.training.step_api import TrainerUsageError

STEPS = 3


def _sections(tmp_path) -> dict:
    """debug_model.toml's sections, shrunk as ``SMALL`` and seeded as ``SEED``."""
    with open(DEBUG_TOML, "rb") as handle:
        sections = tomllib.load(handle)
    sections["training"].update(seq_len=64, local_batch_size=2, steps=STEPS)
    sections["training"]["mixed_precision_param"] = "float32"
    sections["job"]["dump_folder"] = str(tmp_path / "actor")
    sections["debug"] = {"seed": 7}
    return sections


@pytest.mark.slow
def test_actor_trains_like_titan_train_and_pushes_weights(tmp_path):
    """train_step with next-token targets gives titan-train's losses bit for bit; then one
    GRPO step with Forge's target fields, and push_weights writes what model_state_dict holds."""
    run = titan_train(
        ["--job.config_file", str(DEBUG_TOML), *SMALL, *SEED, "--training.steps", str(STEPS)],
        dump_folder=tmp_path / "cli",
        legacy=True,
    ).check()
    actor = TitanTrainer(_sections(tmp_path))
    with pytest.raises(TrainerUsageError, match="call setup"):
        actor.train_step([{}], [{}])
    actor.setup()
    try:
        batches = iter(actor.trainer.parts.dataloader)  # the batches titan-train draws
        losses = []
        for _ in range(STEPS):
            inputs, labels = next(batches)
            losses.append(actor.train_step([{"tokens": inputs}], [{"labels": labels}]))
        assert loss_bits(losses) == loss_bits(run.losses)
        assert actor.step == STEPS

        tokens = next(batches)[0]
        response = tokens[:, -10:]
        padding = torch.ones(2, 10, dtype=torch.bool)
        padding[1, 6:] = False
        target = {
            "response": response,
            "advantages": torch.tensor([[0.5], [-0.5]]),
            "padding_mask": padding,
            "generator_logprobs": torch.full((2, 10), -7.5),
        }
        loss = actor.train_step([{"tokens": tokens}], [target])
        assert loss == loss and abs(loss) < 100  # a finite GRPO loss
        for bad, words in [
            ({"response": response}, "needs 'advantages'"),
            ({**target, "ref_logprobs": response}, "unknown target field"),
            ({**target, "padding_mask": torch.ones(2, 3)}, "does not fit"),
            ({**target, "labels": tokens}, "not both"),
        ]:
            with pytest.raises(TrainerUsageError, match=words):
                actor.train_step([{"tokens": tokens}], [bad])
        path = actor.push_weights(STEPS + 1)
        assert path == str(tmp_path / "actor" / "weights" / f"v{STEPS + 1}")
        pushed = snapshots.load(path.rsplit("/", 1)[0])
        held = actor.trainer.model_state_dict(dtype=torch.bfloat16, hf_names=True)
        assert sorted(pushed) == sorted(held)
        assert all(torch.equal(pushed[name], held[name].cpu()) for name in held)
        assert pushed["model.embed_tokens.weight"].dtype == torch.bfloat16
        config_json = json.loads(
            (tmp_path / "actor" / "weights" / "v4" / "config.json").read_text()
        )
        assert config_json["torch_dtype"] == "bfloat16"
    finally:
        actor.cleanup()
    actor.cleanup()  # twice does nothing


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda s: s["training"].update(stepz=3), ["stepz", "steps"]),
        (lambda s: s["optimizer"].update(lr="fast"), ["optimizer.lr"]),
        (lambda s: s.update(trainning={"steps": 1}), ["trainning"]),
    ],
)
def test_a_misspelt_key_gets_the_located_diagnostic(tmp_path, change, words):
    """A misspelt key, a wrong type or an unknown section in the dict raises LegacyConfigError
    whose text is titan-validate's, naming the key path; nothing is built."""
    sections = _sections(tmp_path)
    change(sections)
    with pytest.raises(LegacyConfigError) as raised:
        TitanTrainer(sections)
    text = str(raised.value)
    assert all(word in text for word in words), text
    assert "error[" in text and "Traceback" not in text
    assert not (tmp_path / "actor").exists()


def test_sections_as_keywords_or_a_path(tmp_path):
    """Keyword sections and a TOML path make the same config as the dict; both at once is
    refused."""
    sections = _sections(tmp_path)
    by_dict = TitanTrainer(sections).config
    by_keywords = TitanTrainer(**sections).config
    assert by_keywords == by_dict
    by_path = TitanTrainer(DEBUG_TOML, weights_folder=tmp_path / "w")
    assert by_path.config.training.seq_len == 2048
    assert by_path.weights_folder == str(tmp_path / "w")
    with pytest.raises(TypeError, match="not both"):
        TitanTrainer(sections, job={"dump_folder": "x"})
    with pytest.raises(LegacyConfigError, match="training.seq_len|seq_len"):
        TitanTrainer(**dict(sections, training={"seq_len": "long"}))


def test_a_forge_app_yaml_path(tmp_path):
    """A Forge app YAML's trainer block makes the config; a misspelt key in it is reported at
    the YAML's line and column."""
    app = tmp_path / "app.yaml"
    app.write_text(
        "model_name: llama\n"
        "trainer:\n"
        "  model:\n    name: llama3\n    flavor: debugmodel\n"
        "  training:\n    seq_len: 64\n    local_batch_size: 2\n"
    )
    assert TitanTrainer(app).config.training.seq_len == 64
    app.write_text(app.read_text().replace("seq_len", "seq_lenn"))
    with pytest.raises(LegacyConfigError) as raised:
        TitanTrainer(app)
    assert f"{app}:7:5" in str(raised.value) and "training.seq_len" in str(raised.value)


@pytest.mark.parametrize(
    ("sections", "where", "words"),
    [
        ({"model": "llama3"}, "trainer.model:", "`model` must be a table"),
        ({"model": ["llama3"]}, "trainer.model:", "`model` must be a table"),
        ({"model": None}, "trainer.model:", "`model` must be a table"),
        ({"training": [1, 2]}, "trainer.training:", "`training` must be a table"),
        ({"optimizer": 3}, "trainer.optimizer:", "`optimizer` must be a table"),
        ([{"training": {}}], "trainer:", "must be a mapping of section names, not list"),
        ({"training": {"stepz": 3}}, "trainer.training.stepz:", "did you mean `training.steps`"),
    ],
)
def test_a_section_of_the_wrong_type_is_named(sections, where, words):
    """A section that is not a dict (a string, list, None, number), sections that are not a
    dict, a misspelt key: LegacyConfigError at the section's key path, in words that fit a
    dict given in code (no file, line or column)."""
    with pytest.raises(LegacyConfigError) as raised:
        TitanTrainer(sections)
    text = str(raised.value)
    assert where in text and words in text, text
    assert "file" not in text and ":1:1" not in text, text
    assert "in the sections given as 'trainer' in code" in text


@pytest.mark.parametrize(
    ("tokens", "target", "words"),
    [
        (torch.zeros(2, 8), {"response": torch.zeros(2, 3, dtype=torch.long)}, "tokens must"),
        (torch.zeros(2, 8, dtype=torch.long), {"response": torch.zeros(2, 3)}, "response must"),
        (
            torch.zeros(2, 8, dtype=torch.long),
            {"response": torch.zeros(2, 3, dtype=torch.bool)},
            "response must hold integer token ids",
        ),
        (
            torch.zeros(2, 8, dtype=torch.long),
            {
                "response": torch.zeros(2, 3, dtype=torch.long),
                "padding_mask": torch.full((2, 3), 0.5),
            },
            "padding_mask must be bool",
        ),
    ],
)
def test_grpo_targets_of_the_wrong_dtype(tokens, target, words):
    """Float or bool token ids (which would be cast to integers without a word) and a padding
    mask that is not 0 or 1 are refused."""
    from titan.rl.forge_actor import _grpo_microbatch

    with pytest.raises(TrainerUsageError, match=words):
        _grpo_microbatch(tokens, {"advantages": torch.zeros(2), **target})


@pytest.mark.parametrize(
    ("keywords", "words"),
    [
        ({"clip_eps": -1}, "`clip_eps` is -1; it must be a finite number > 0"),
        ({"clip_eps": "big"}, "`clip_eps` is 'big'"),
        ({"loss_mean": "mean"}, "`loss_mean` is 'mean'"),
        ({"generator_dtype": "fp8"}, "generator_dtype = 'fp8' is not a floating dtype"),
        ({"keep_weights": 0}, "`keep_weights` is 0; it must be ≥ 1"),
        ({"weights_folder": 3}, "weights_folder must be a path, not int"),
    ],
)
def test_bad_policy_keywords_are_refused_by_the_constructor(tmp_path, keywords, words):
    """The policy keywords are checked when the actor is made, not at setup(), naming the
    keyword as the caller wrote it."""
    with pytest.raises(TrainerUsageError, match=words.replace("(", r"\(")) as raised:
        TitanTrainer(_sections(tmp_path), **keywords)
    assert str(raised.value).startswith("TitanTrainer: ")

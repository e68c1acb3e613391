"""Flavor eras: a legacy file's flavor builds the model its own torchtitan built, not v0.2.2's.

The table (``schemas/era_flavors.py``) is checked against titan's flavors and config classes;
migrating files of several eras per family must build, in both forms (the generated registry
module and the live config ``titan-train --job.config_file`` runs), the era's definition as the
table records it, and the debug flavors are built and run: their parameter shapes are the era's,
and their first forward is the era model's, not v0.2.2's. Llama 3 without RoPE scaling is also
checked against Hugging Face ``transformers`` with ``rope_scaling=None``, an implementation
that owes titan nothing.
"""

from __future__ import annotations

import dataclasses
import json
import runpy
import subprocess
import sys
from typing import Any

import pytest
from titan.migrate.codegen.render_code import render_module
from titan.migrate.plan.build import build_plan
from titan.migrate.targets.live import instantiate
from titan.schemas import flavor_eras
from titan.schemas.era_clues import ERA_START, V022
from titan.schemas.era_flavors import FLAVOR_ADDED, FLAVOR_CHANGES, FromTokenizer
from titan.schemas.flavor_configs import FLAVOR_CONFIGS

from tests.helpers import write
from titan.models import SUPPORTED_MODELS, family_record

# --------------------------------------------------------------------------- the table


def _factory(family: str, flavor: str) -> Any:
    return family_record(family).flavors[flavor]()


@pytest.mark.parametrize("change", FLAVOR_CHANGES, ids=lambda c: f"{c.family}:{c.commit}")
def test_each_change_names_real_flavors_fields_and_a_commit(change) -> None:
    assert change.family in SUPPORTED_MODELS
    assert ERA_START <= change.since < change.until <= V022
    assert len(change.commit) == 8 and change.pr.startswith("#") and change.why
    assert bool(change.sets) != bool(change.lost)
    for flavor in change.flavors:
        fields = FLAVOR_CONFIGS[change.family][flavor]
        for path, value in change.sets.items():
            assert path in fields, (flavor, path)
            if not isinstance(value, FromTokenizer):  # an old value, never v0.2.2's own
                assert flavor_eras.v022_value(change.family, flavor, path) != value, (flavor, path)


def test_changes_of_one_field_of_one_flavor_never_overlap() -> None:
    held: dict[tuple[str, str, str], list] = {}
    for change in FLAVOR_CHANGES:
        for flavor in change.flavors:
            for path in change.sets:
                held.setdefault((change.family, flavor, path), []).append(change)
    for key, changes in held.items():
        for a in changes:
            for b in changes:
                if a is not b:
                    assert a.until <= b.since or b.until <= a.since, (key, a.era, b.era)


def test_every_family_and_flavor_has_its_first_day() -> None:
    for family in SUPPORTED_MODELS:
        assert (family, None) in FLAVOR_ADDED, family
        for flavor in FLAVOR_CONFIGS[family]:
            day, commit, pr = FLAVOR_ADDED[(family, flavor)]
            assert ERA_START <= FLAVOR_ADDED[(family, None)][0] <= day <= V022, (family, flavor)
            assert len(commit) == 8 and pr.startswith("#")


def _era_day(change) -> str:
    """A day inside ``change``'s span for each of its flavors (its flavors' first days
    allowing)."""
    starts = [flavor_eras.first_day(change.family, f) for f in change.flavors]
    start = max([change.since, *(s[0] for s in starts if s is not None)])
    return start if start < change.until else change.since


@pytest.mark.parametrize(
    "change", [c for c in FLAVOR_CHANGES if c.sets], ids=lambda c: f"{c.family}:{c.commit}"
)
def test_every_era_value_is_one_titans_config_check_accepts(change) -> None:
    """Each era value set on the flavor's config gives a config titan's own registry check
    passes: the table only says what titan's config classes can hold."""
    from titan.config.check import check_config
    from titan.trainer import Trainer

    for flavor in change.flavors:
        model = _factory(change.family, flavor)
        for path, value in change.sets.items():
            if not isinstance(value, FromTokenizer):
                _set_path(model, path, value)
        spec = family_record(change.family).model_spec(flavor)
        config = Trainer.Config(model_spec=dataclasses.replace(spec, model=model))
        errors = [d for d in check_config(config, ngpu=None, locate=lambda _: None)]
        assert not [d for d in errors if d.severity.value == "error"], (flavor, errors)


def _set_path(obj: Any, path: str, value: Any) -> None:
    """The test's own way of setting a dotted field (not the migration's)."""
    *parents, name = path.split(".")
    for part in parents:
        obj = getattr(obj, part)
    setattr(obj, name, value)


# --------------------------------------------------------------------------- a flavor's era


def test_llama3_debugmodel_through_its_history() -> None:
    at = lambda day: flavor_eras.flavor_at("llama3", "debugmodel", day)  # noqa: E731
    assert at("2024-05-01").sets == {"n_layers": 2, "rope.scaling": "none"}
    assert at("2024-05-01").tokenizer == ("vocab_size",)
    assert at("2024-12-01").sets == {"n_layers": 8, "rope.scaling": "none"}
    assert at("2025-08-01").sets == {"vocab_size": 2000, "rope.scaling": "none"}
    assert at("2025-09-30").sets == {"rope.scaling": "none"}
    assert not at("2025-10-08").differs and not at(V022).differs
    # a flavor is no older than its name: 8B_flex came with varlen attention in 2025-11
    assert not flavor_eras.flavor_at("llama3", "8B_flex", "2025-06-01").differs
    assert flavor_eras.flavor_at("llama3", "8B", "2024-06-01").sets == {"rope.scaling": "none"}


def test_an_alias_builds_its_familys_flavors_of_that_era() -> None:
    assert flavor_eras.flavor_at("llama3_ft", "debugmodel", "2025-05-01").sets == {
        "rope.scaling": "none"
    }


def test_what_titan_cannot_build_is_said() -> None:
    found = flavor_eras.flavor_at("llama3", "debugmodel_flex_attn", "2025-04-20")
    (lost,) = found.lost
    assert lost.commit == "73439e1c" and "token id 0" in lost.lost


# --------------------------------------------------------------------------- migrated files

LLAMA3_8B_2024 = """\
# Llama 3 8B, written for torchtitan of mid 2024
[job]
dump_folder = "./outputs"
description = "Llama 3 8B training"

[model]
name = "llama3"
flavor = "8B"
norm_type = "rmsnorm"
tokenizer_path = "./torchtitan/datasets/tokenizer/original/tokenizer.model"

[training]
batch_size = 1
seq_len = 8192
steps = 1000
data_parallel_degree = -1
tensor_parallel_degree = 1
fp8_linear = ""
compile = false
dataset = "c4"
"""


def test_a_2024_llama3_8b_file_is_migrated_with_unscaled_rope_and_says_why(tmp_path) -> None:
    path = write(tmp_path, "llama3_8b.toml", LLAMA3_8B_2024)
    done = subprocess.run(
        [sys.executable, "-m", "titan.cli.migrate", str(path), "-o", str(tmp_path / "reg.py")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    code = (tmp_path / "reg.py").read_text(encoding="utf-8")
    assert 'model_spec = model_registry("8B")' in code
    assert 'model_spec.model.rope.scaling = "none"' in code
    assert "# 8B as torchtitan built it before 5bbda42c (#1839, 2025-10-08): RoPE" in code
    report = done.stdout + done.stderr
    assert 'model: 8B as its era built it: rope.scaling = "none"' in report
    assert "info[era-flavor]" in report and "RoPE frequencies were not scaled" in report
    built = runpy.run_path(str(tmp_path / "reg.py"))["llama3_8b"]()
    assert built.model_spec.model.rope.scaling == "none"
    assert built == instantiate(build_plan(path))


# (family, flavor, day, the fields the model of that day has where v0.2.2's differs)
ERAS = [
    ("llama3", "debugmodel", "2024-05-01", {"n_layers": 2, "rope.scaling": "none"}),
    ("llama3", "debugmodel", "2024-12-01", {"n_layers": 8, "rope.scaling": "none"}),
    ("llama3", "debugmodel", "2025-08-01", {"vocab_size": 2000, "rope.scaling": "none"}),
    ("llama3", "405B", "2025-01-01", {"rope.scaling": "none"}),
    ("deepseek_v3", "debugmodel", "2025-07-15", {"n_layers": 3, "rope.mscale": 0.0}),
    ("deepseek_v3", "debugmodel", "2025-08-15", {"n_layers": 3, "vocab_size": 2000}),
    (
        "deepseek_v3",
        "16B",
        "2025-08-01",
        {"layer.attention.attn_type": "sdpa", "layer.attention.attn_mask_type": "causal"},
    ),
    ("qwen3", "0.6B", "2025-09-01", {"enable_weight_tying": False}),
    ("qwen3", "debugmodel", "2025-11-01", {"enable_weight_tying": False}),
    ("qwen3", "debugmodel_moe", "2025-09-20", {"dim": 1024, "n_layers": 28, "vocab_size": 151936}),
    (
        "llama4",
        "debugmodel",
        "2025-04-12",
        {
            "n_layers": 8,
            "layer.moe.load_balance_coeff": None,
            "layer.moe.score_func": "softmax",
            "rope.scaling": "none",
        },
    ),
    (
        "llama4",
        "debugmodel",
        "2025-08-01",
        {"vocab_size": 2000, "layer.moe.score_func": "softmax", "rope.scaling": "none"},
    ),
    (
        "gpt_oss",
        "debugmodel",
        "2025-12-01",
        {"layer.moe.route_norm": False, "layer.moe.gate_bias": False, "rope.rope_factor": 1.0},
    ),
    ("flux", "flux-debug", "2025-05-01", {"hidden_size": 3072, "num_heads": 24}),
    ("flux", "flux-dev", "2025-04-08", {"guidance_embed": True}),
]


def _toml(family: str, flavor: str) -> str:
    if family == "flux":
        return (
            '[job]\ncustom_config_module = "torchtitan.models.flux.job_config"\n'
            f'[model]\nname = "flux"\nflavor = "{flavor}"\n'
        )
    return f'[model]\nname = "{family}"\nflavor = "{flavor}"\n[training]\nsteps = 2\n'


def _expected(family: str, flavor: str, sets: dict[str, Any]) -> Any:
    """The era's model config as the table records it: v0.2.2's factory, then its fields."""
    model = _factory(family, flavor)
    for path, value in sets.items():
        _set_path(model, path, value)
    return model


@pytest.mark.parametrize(
    ("family", "flavor", "day", "sets"), ERAS, ids=[f"{e[0]}:{e[1]}@{e[2]}" for e in ERAS]
)
def test_both_forms_build_the_eras_model(tmp_path, family, flavor, day, sets) -> None:
    path = write(tmp_path, "job.toml", _toml(family, flavor))
    plan = build_plan(path, era=day)
    assert plan.era["flavor"]["sets"] == sets
    live = instantiate(plan)
    assert live.model_spec.model == _expected(family, flavor, sets)
    assert live.model_spec.model != _factory(family, flavor)  # not v0.2.2's
    module = write(tmp_path, "reg.py", render_module([plan]))
    built = runpy.run_path(str(module))[plan.function]()
    assert built == live
    # the commit of every field is named in the report, once per change
    commits = {c["commit"] for c in plan.era["flavor"]["changes"]}
    said = [d for d in plan.diagnostics if d.code == "era-flavor"]
    assert {c for c in commits if any(c in d.hint for d in said)} == {
        c["commit"] for c in plan.era["flavor"]["changes"] if not c["lost"]
    } - _tokenizer_only(plan)


def _tokenizer_only(plan) -> set[str]:
    """Changes that set only a field the era took from the tokenizer (reported apart)."""
    from titan.schemas.era_flavors import FLAVOR_CHANGES as ROWS

    commits = {c["commit"] for c in plan.era["flavor"]["changes"]}
    return {
        row.commit
        for row in ROWS
        if row.commit in commits and all(isinstance(v, FromTokenizer) for v in row.sets.values())
    }


def test_the_same_file_dated_v022_builds_v022s_flavor(tmp_path) -> None:
    path = write(tmp_path, "job.toml", _toml("llama3", "8B"))
    plan = build_plan(path, era="v0.2.2")
    assert "flavor" not in plan.era
    assert instantiate(plan).model_spec.model == _factory("llama3", "8B")


# --------------------------------------------------------------------------- built and run

SMALL = [e for e in ERAS if e[0] in ("llama3", "deepseek_v3", "llama4") and e[1] == "debugmodel"]
SMALL += [("qwen3", "debugmodel", "2025-11-01", {"enable_weight_tying": False})]


def _built(model_config: Any, seed: int = 0) -> Any:
    import torch

    with torch.device("meta"):
        model = model_config.build()
    model.to_empty(device="cpu")
    torch.manual_seed(seed)
    model.init_weights()
    return model.eval()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "flavor", "day", "sets"), SMALL, ids=[f"{e[0]}:{e[1]}@{e[2]}" for e in SMALL]
)
def test_the_eras_debug_model_has_its_shapes_and_first_forward(
    tmp_path, family, flavor, day, sets
) -> None:
    import torch

    plan = build_plan(write(tmp_path, "job.toml", _toml(family, flavor)), era=day)
    migrated = _built(instantiate(plan).model_spec.model)
    expected = _built(_expected(family, flavor, sets))
    v022 = _built(_factory(family, flavor))
    shapes = {k: tuple(v.shape) for k, v in migrated.state_dict().items()}
    assert shapes == {k: tuple(v.shape) for k, v in expected.state_dict().items()}
    config = instantiate(plan).model_spec.model
    assert sum(k.endswith("attention_norm.weight") for k in shapes) == config.n_layers
    embedding = next(s for k, s in shapes.items() if "embed" in k)
    assert embedding[0] == config.vocab_size
    tokens = torch.randint(0, 2000, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = migrated(tokens)
        assert torch.equal(got, expected(tokens))
        if shapes == {k: tuple(v.shape) for k, v in v022.state_dict().items()}:
            # same weights, other model: the era's fields change what it computes
            v022.load_state_dict(migrated.state_dict(), strict=False)
            assert not torch.equal(got, v022(tokens))


@pytest.mark.slow
def test_unscaled_rope_llama3_equals_transformers_without_rope_scaling(tmp_path) -> None:
    """The 2024 llama3 debug model (8 layers, RoPE unscaled) migrated from its TOML computes what
    Hugging Face's LlamaForCausalLM computes with ``rope_scaling=None`` on the same weights;
    with llama 3.1's scaling (v0.2.2's) it does not."""
    import torch

    transformers = pytest.importorskip("transformers")
    from safetensors.torch import save_file

    from titan.models.llama3.state_dict_adapter import Llama3StateDictAdapter

    plan = build_plan(write(tmp_path, "job.toml", _toml("llama3", "debugmodel")), era="2024-12")
    config = instantiate(plan).model_spec.model
    model = _built(config, seed=5)
    adapter = Llama3StateDictAdapter(model_config=config, hf_assets_path=None)
    folder = tmp_path / "hf"
    folder.mkdir()
    save_file(
        {k: v.contiguous() for k, v in adapter.to_hf(model.state_dict()).items()},
        folder / "model.safetensors",
    )
    hf_config = {  # written from the era's flavor, not from titan's exporter
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "intermediate_size": adapter.config_json()["intermediate_size"],
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "vocab_size": 2048,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000,
        "rope_scaling": None,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
    }
    (folder / "config.json").write_text(json.dumps(hf_config), encoding="utf-8")
    reference = transformers.LlamaForCausalLM.from_pretrained(folder).eval()
    tokens = torch.randint(0, 2048, (1, 1024), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours = model(tokens)
        # float32, two implementations: they agree to a few ulps (1.9e-6 measured)
        torch.testing.assert_close(ours, reference(tokens).logits, rtol=0, atol=1e-5)
        hf_config["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        }
        (folder / "config.json").write_text(json.dumps(hf_config), encoding="utf-8")
        scaled = transformers.LlamaForCausalLM.from_pretrained(folder).eval()
        # far beyond that tolerance (8e-4 measured): scaling slows the low-frequency bands
        assert (ours - scaled(tokens).logits).abs().max() > 20 * 1e-5


# --------------------------------------------------------------------------- findings


def test_a_flavor_titan_cannot_build_is_an_error_in_both_readers(tmp_path) -> None:
    from titan.schemas.toml_check import CheckOptions, check_file

    path = write(tmp_path, "job.toml", _toml("llama3", "debugmodel_flex_attn"))
    plan = build_plan(path, era="2025-04-20")
    (error,) = [d for d in plan.errors() if d.code == "era-flavor-lost"]
    assert "73439e1c" in error.message and error.hint
    assert not plan.lossless()
    checked = check_file(path, CheckOptions(era="2025-04-20"))
    # (the tiktoken .model file that era's runs read is an error of its own)
    assert [d.code for d in checked.diagnostics if d.severity.value == "error"] == [
        "era-default-lost",
        "era-flavor-lost",
    ]


def test_a_vocabulary_the_tokenizer_gave_is_a_warning_and_a_todo(tmp_path) -> None:
    plan = build_plan(write(tmp_path, "job.toml", _toml("llama3", "debugmodel")), era="2025-03")
    (warning,) = [d for d in plan.diagnostics if d.code == "era-flavor-tokenizer"]
    assert warning.severity.value == "warning" and "2048" in warning.message
    assert any("vocab_size" in t for t in plan.todos["model_spec"])
    # 8B with its own tokenizer had v0.2.2's 128256: said, nothing to do
    plan = build_plan(write(tmp_path, "job.toml", _toml("llama3", "8B")), era="2025-03")
    (note,) = [d for d in plan.diagnostics if d.code == "era-flavor-tokenizer"]
    assert note.severity.value == "info" and "model_spec" not in plan.todos


def test_an_initialisation_titan_does_not_have_is_a_warning(tmp_path) -> None:
    plan = build_plan(write(tmp_path, "job.toml", _toml("gpt_oss", "debugmodel")), era="2025-12")
    (warning,) = [d for d in plan.diagnostics if d.code == "era-flavor-init"]
    assert warning.severity.value == "warning" and "resumed" in warning.hint
    assert not plan.errors()


def test_the_0_3_0_target_sets_what_it_can_and_says_what_it_cannot(tmp_path) -> None:
    from titan.migrate.codegen.render_code import render_module
    from titan.migrate.targets.choice import UPSTREAM_030, converter

    # RoPE scaling is a field of every layer of 0.3.0's llama3: set on each of them
    path = write(tmp_path, "job.toml", _toml("llama3", "8B"))
    plan = converter(UPSTREAM_030)(build_plan(path, era="2025-03"))
    assert not [d for d in plan.errors() if d.code == "era-flavor-changed"]
    code = render_module([plan])
    assert (
        'for layer in model_spec.model.layers:\n        layer.attention.rope.scaling = "none"'
        in code
    )
    # the debug model's 8 layers of early 2025 are not a field 0.3.0's config can be told
    path = write(tmp_path, "debug.toml", _toml("llama3", "debugmodel"))
    plan = converter(UPSTREAM_030)(build_plan(path, era="2025-03"))
    (error,) = [d for d in plan.errors() if d.code == "era-flavor-changed"]
    assert "`n_layers = 8`" in error.message and "rope.scaling" not in error.message
    assert not plan.lossless()
    assert not [d for d in plan.diagnostics if d.code == "era-flavor"]  # not all written there


def test_a_flavor_name_dates_an_undated_file_no_earlier_than_the_name(tmp_path) -> None:
    from titan.schemas.era_defaults import date_file
    from titan.schemas.era_stakes import stakes

    document = {"model": {"name": "llama3", "flavor": "8B_flex"}}
    found = stakes(document, date_file(document))
    assert found.floor == "2025-11-21"  # 8B_flex's first day (f8fa21e1, #2000)
    assert not found.flavor  # RoPE scaling had come before the flavor existed


@pytest.mark.parametrize(("era", "refused"), [("2025-09-20", False), ("v0.2.2", True)])
def test_the_rules_judge_the_eras_flavor_in_both_readers(tmp_path, era, refused) -> None:
    """qwen3's 30B-A3B had 32B's 64 heads and 8 key/value heads for its first two weeks: TP 8
    fits that model, not v0.2.2's 4 key/value heads."""
    from titan.schemas.toml_check import CheckOptions, check_file

    path = write(
        tmp_path,
        "job.toml",
        '[model]\nname = "qwen3"\nflavor = "30B-A3B"\n[parallelism]\ntensor_parallel_degree = 8\n',
    )
    checked = check_file(path, CheckOptions(ngpu=8, era=era))
    migrated = build_plan(path, era=era, options=CheckOptions(ngpu=8))
    for found in (checked.diagnostics, migrated.diagnostics):
        assert ("tp-heads" in {d.code for d in found}) is refused

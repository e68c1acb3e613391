"""Flux TOMLs migrated for torchtitan 0.3.0 build there and hold every Flux value where 0.3.0's
Flux trainer reads it, as v0.2.2's Flux run read it.

The three ``legacy_configs/flux`` TOMLs, a small TOML that switches on what they leave off
(test mode, all timesteps, validation, an inference size v0.2.2 never read), and the corpus's
Flux TOMLs (when ``../shared`` is there) are migrated with the 0.3.0 target and built in the
upstream environment by ``build_runner.py``, together with upstream's own ``flux_debugmodel()``
and the model config of each 0.3.0 Flux flavor. Each Flux field of the built config is then
compared with what v0.2.2 used: the TOML's value or v0.2.2's default (:data:`V022_DEFAULTS`),
through the facts of how v0.2.2 read it (written out in :func:`_expected`, not taken from
``migrate/targets/upstream_flux.py``).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest
from titan.migrate.codegen.render_code import function_names, render_module
from titan.migrate.plan.build import build_plan
from titan.migrate.plan.migration_plan import Plan
from titan.migrate.targets.upstream import retarget
from titan.schemas.diagnostics import Severity

from tests import v022_flavors
from tests.reference import corpus_files
from tests.upstream.building import build

ROOT = Path(__file__).resolve().parents[2]
LEGACY = sorted((ROOT / "legacy_configs" / "flux").glob("*.toml"))

V022_DEFAULTS: dict[str, Any] = {
    "training.classifier_free_guidance_prob": 0.0,
    "training.img_size": 256,
    "training.test_mode": False,
    "encoder.t5_encoder": "google/t5-v1_1-small",
    "encoder.clip_encoder": "openai/clip-vit-large-patch14",
    "encoder.autoencoder_path": "torchtitan/experiments/flux/assets/autoencoder/ae.safetensors",
    "encoder.max_t5_encoding_len": 256,
    "validation.enable_classifier_free_guidance": False,
    "validation.classifier_free_guidance_scale": 5.0,
    "validation.denoising_steps": 50,
    "validation.eval_freq": 100,
    "validation.save_img_count": 1,
    "validation.save_img_folder": "img",
    "validation.all_timesteps": False,
    "inference.save_img_folder": "inference_results",
    "inference.prompts_path": "./torchtitan/experiments/flux/inference/prompts.txt",
    "inference.local_batch_size": 2,
    "inference.img_size": 256,
}
"""The Flux keys of v0.2.2 (``torchtitan/models/flux/job_config.py``) and their defaults."""

CASE = """\
[job]
custom_config_module = "torchtitan.models.flux.job_config"
[model]
name = "flux"
flavor = "flux-debug"
hf_assets_path = "tests/assets/tokenizer"
[training]
dataset = "cc12m-test"
local_batch_size = 2
steps = 4
classifier_free_guidance_prob = 0.2
img_size = 128
test_mode = true
[encoder]
t5_encoder = "tests/assets/flux_test_encoders/t5-v1_1-xxl"
clip_encoder = "tests/assets/flux_test_encoders/clip-vit-large-patch14"
max_t5_encoding_len = 128
autoencoder_path = "tests/assets/ae.safetensors"
[validation]
enable = true
dataset = "cc12m-test"
local_batch_size = 2
freq = 2
steps = 3
enable_classifier_free_guidance = true
classifier_free_guidance_scale = 3.5
denoising_steps = 6
eval_freq = 7
save_img_count = -1
save_img_folder = "samples"
all_timesteps = true
[inference]
save_img_folder = "out"
prompts_path = "prompts.txt"
local_batch_size = 3
img_size = 512
"""
"""What the shipped Flux TOMLs leave at their defaults: test mode, all timesteps, validation
on, an inference size v0.2.2 never read, the unused ``eval_freq``."""

UPSTREAM = """\
from torchtitan.models.flux import model_registry
from torchtitan.models.flux.config_registry import flux_debugmodel


def upstream_flux_debugmodel():
    return flux_debugmodel()


def flavor_flux_debug():
    return model_registry("flux-debug").model


def flavor_flux_dev():
    return model_registry("flux-dev").model


def flavor_flux_schnell():
    return model_registry("flux-schnell").model
"""
"""Upstream's own debug registry, and the model config of each 0.3.0 Flux flavor."""


class Built:
    """Migrated Flux files (path -> (0.3.0 plan, built config)) and upstream's own configs."""

    def __init__(self) -> None:
        self.files: dict[Path, tuple[Plan, dict[str, Any]]] = {}
        self.upstream: dict[str, dict[str, Any]] = {}


def _build(upstream_python: Path, folder: Path, paths: list[Path]) -> Built:
    """Migrate ``paths`` (one module per folder, as titan-migrate writes them), build them and
    upstream's module in the upstream environment; every module and function must build."""
    groups: dict[Path, list[tuple[Path, Plan]]] = {}
    for path in paths:
        plan = retarget(build_plan(path))
        assert plan.ok, (path, [d.message for d in plan.diagnostics])
        groups.setdefault(path.parent, []).append((path, plan))
    modules = []
    for index, members in enumerate(groups.values()):
        plans = [plan for _, plan in members]
        module = folder / f"m{index}" / "config_registry.py"
        module.parent.mkdir()
        module.write_text(render_module(plans), encoding="utf-8")
        modules.append((module, members, function_names(plans)))
    upstream = folder / "upstream" / "config_registry.py"
    upstream.parent.mkdir()
    upstream.write_text(UPSTREAM, encoding="utf-8")
    result = folder / "built.json"
    dumped = build(upstream_python, [*(m for m, _, _ in modules), upstream], result, timeout=600)
    built = Built()
    failures = []
    for module, members, names in modules:
        entry = dumped[str(module)]
        if entry["error"]:
            failures.append(f"{module}: import failed\n{entry['error']}")
            continue
        for (path, plan), name in zip(members, names, strict=True):
            function = entry["functions"].get(name)
            if function is None or "error" in function:
                failures.append(f"{path} ({name}): {function and function['error']}")
                continue
            built.files[path] = (plan, function["config"])
    entry = dumped[str(upstream)]
    assert not entry["error"], entry["error"]
    for name, function in entry["functions"].items():
        assert "error" not in function, function["error"]
        built.upstream[name] = function["config"]
    assert not failures, "\n\n".join(failures)
    return built


@pytest.fixture(scope="module")
def built(upstream_python: Path, tmp_path_factory) -> Built:
    folder = tmp_path_factory.mktemp("upstream_flux")
    case = folder / "case" / "flux_all_keys.toml"
    case.parent.mkdir()
    case.write_text(CASE, encoding="utf-8")
    return _build(upstream_python, folder, [*LEGACY, case])


@pytest.fixture(scope="module")
def corpus_built(upstream_python: Path, tmp_path_factory) -> Built:
    paths = [p for p in corpus_files() if "flux" in p.parts]
    assert len(paths) == 3, paths
    return _build(upstream_python, tmp_path_factory.mktemp("upstream_flux_corpus"), paths)


# --------------------------------------------------------------------------- helpers


def _at(config: dict[str, Any], path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(path)
        node = node[part]
    return node


def _legacy(path: Path) -> dict[str, Any]:
    """Each Flux key -> the value a v0.2.2 run of the TOML used."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    values = {}
    for key, default in V022_DEFAULTS.items():
        section, name = key.split(".")
        values[key] = data.get(section, {}).get(name, default)
    return values


def _json(value: Any) -> Any:
    return [_json(v) for v in value] if isinstance(value, list | tuple) else value


def _expected(plan: Plan, path: Path) -> dict[str, Any]:
    """0.3.0 path -> the value v0.2.2's Flux run used there."""
    flux = _legacy(path)
    base = plan.effective
    test_mode = flux["training.test_mode"]
    sampling = ("enable_classifier_free_guidance", "classifier_free_guidance_scale")
    sampling += ("denoising_steps",)
    want = {
        # the training loader: dataset, image size and prompt dropout (v0.2.2's FluxDataset
        # read the last two from [training])
        "dataloader.dataset": base["training.dataset"],
        "dataloader.dataset_path": base["training.dataset_path"],
        "dataloader.prompt_dropout_prob": flux["training.classifier_free_guidance_prob"],
        "dataloader.img_size": flux["training.img_size"],
        # the validation loader: [validation]'s dataset at training.img_size, with dropout
        # forced to 0.0 and stratified timesteps unless all_timesteps
        "validator.enable": base["validation.enable"],
        "validator.freq": base["validation.freq"],
        "validator.steps": base["validation.steps"],
        "validator.dataloader.dataset": base["validation.dataset"],
        "validator.dataloader.dataset_path": base["validation.dataset_path"],
        "validator.dataloader.img_size": flux["training.img_size"],
        "validator.dataloader.prompt_dropout_prob": 0.0,
        "validator.dataloader.generate_timesteps": not flux["validation.all_timesteps"],
        "validator.all_timesteps": flux["validation.all_timesteps"],
        "validator.save_img_count": flux["validation.save_img_count"],
        "validator.save_img_folder": flux["validation.save_img_folder"],
        # validation's sampling settings drove the images of validation and of infer.py,
        # which sampled at training.img_size (inference.img_size was never read)
        **{f"validator.sampling.{n}": flux[f"validation.{n}"] for n in sampling},
        **{f"inference.sampling.{n}": flux[f"validation.{n}"] for n in sampling},
        "inference.img_size": flux["training.img_size"],
        "inference.save_img_folder": flux["inference.save_img_folder"],
        "inference.prompts_path": flux["inference.prompts_path"],
        "inference.local_batch_size": flux["inference.local_batch_size"],
        # the tokenizers were the encoders' own, or the test tokenizer of hf_assets_path
        "tokenizer.t5_tokenizer_path": (
            base["model.hf_assets_path"] if test_mode else flux["encoder.t5_encoder"]
        ),
        "tokenizer.clip_tokenizer_path": (
            base["model.hf_assets_path"] if test_mode else flux["encoder.clip_encoder"]
        ),
        "tokenizer.max_t5_encoding_len": flux["encoder.max_t5_encoding_len"],
        "tokenizer.test_mode": test_mode,
        # test mode initialised the encoders and the autoencoder at random
        "encoder.random_init": test_mode,
        "encoder.autoencoder_path": flux["encoder.autoencoder_path"],
    }
    return want


def _resolved_encoder(config: dict[str, Any], name: str, built: Built) -> str:
    """The encoder 0.3.0's Flux trainer loads: ``encoder.<name>``, or the model registry's
    own where that is empty."""
    model = built.upstream["flavor_" + config["model_spec"]["flavor"].replace("-", "_")]
    return config["encoder"][name] or model[name]["version"]


def _check(built: Built) -> list[str]:
    problems = []
    for path, (plan, config) in built.files.items():
        want = _expected(plan, path)
        for name in ("t5_encoder", "clip_encoder"):
            want[f"encoder.{name} (resolved)"] = _legacy(path)[f"encoder.{name}"]
        for where, value in want.items():
            got = (
                _resolved_encoder(config, where.split()[0].split(".")[1], built)
                if where.endswith("(resolved)")
                else _at(config, where)
            )
            if _json(got) != _json(value) or type(got) is not type(value):
                problems.append(f"{path.name}: {where}: 0.3.0 has {got!r}, v0.2.2 used {value!r}")
        classes = {
            "dataloader": "FluxDataLoader.Config",
            "validator": "FluxValidator.Config",
            "validator.dataloader": "FluxDataLoader.Config",
            "tokenizer": "FluxTokenizerContainer.Config",
            "loss": "MSELoss.Config",
        }
        for where, name in classes.items():
            if not _at(config, f"{where}.__class__").endswith(":" + name):
                problems.append(f"{path.name}: {where} is {_at(config, where)['__class__']}")
        if config["model_spec"]["flavor"] != plan.effective["model.flavor"]:
            problems.append(f"{path.name}: flavor {config['model_spec']['flavor']}")
    return problems


# --------------------------------------------------------------------------- tests


def test_every_flux_value_is_where_the_flux_trainer_reads_it(built):
    assert len(built.files) == len(LEGACY) + 1
    assert not _check(built), "\n".join(_check(built))


def test_corpus_flux_files_too(corpus_built):
    assert not _check(corpus_built), "\n".join(_check(corpus_built))


def test_every_written_flux_key_has_a_030_outcome(built):
    """A carried key names fields the 0.3.0 config has; the others say why they are not."""
    for path, (plan, config) in built.files.items():
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        written = [k for k in V022_DEFAULTS if k.split(".")[1] in data.get(k.split(".")[0], {})]
        assert written, path
        for key in written:
            outcome = plan.outcomes[key]
            if outcome.status in ("inert", "dropped"):
                assert outcome.note, (path.name, outcome)
                continue
            assert outcome.status in ("carried", "default", "upgraded"), (path.name, outcome)
            assert outcome.paths, (path.name, outcome)
            for where in outcome.paths:
                _at(config, where)  # KeyError: a path 0.3.0's config does not have


def test_keys_no_flux_run_read_are_inert_and_said(built):
    case = next(p for p in built.files if p.name == "flux_all_keys.toml")
    plan = built.files[case][0]
    for key in ("validation.eval_freq", "inference.img_size"):
        assert plan.outcomes[key].status == "inert", plan.outcomes[key]
    found = {(d.code, d.path, d.severity) for d in plan.diagnostics}
    # inference.img_size = 512 was never read; the migrated inference samples at 128 as before
    assert ("upstream-changed", "inference.img_size", Severity.WARNING) in found
    # the validation loss is logged in another scale
    assert ("upstream-changed", "validation.enable", Severity.WARNING) in found
    assert not [d for d in plan.diagnostics if d.severity == Severity.ERROR]


def test_training_seq_len_is_left_to_the_flux_trainer(tmp_path):
    """0.3.0's Flux trainer sets training.seq_len itself (image patches plus T5 tokens);
    v0.2.2's Flux run read it for nothing but a log line."""
    toml = tmp_path / "flux.toml"
    toml.write_text(CASE.replace("steps = 4", "steps = 4\nseq_len = 512"), encoding="utf-8")
    plan = retarget(build_plan(toml))
    assert plan.outcomes["training.seq_len"].status == "inert"
    assert "seq_len=512" not in render_module([plan])


def test_no_language_model_notes_for_flux(built):
    """Flux has no attention backend to choose and no packed text stream."""
    for plan, _ in built.files.values():
        for d in plan.diagnostics:
            assert "SDPA" not in d.message and "scaled-dot-product" not in d.message, d
            assert "FlexAttention" not in d.message, d


def test_no_packing_or_validation_seq_len_findings_for_flux(built, tmp_path):
    for path, (plan, _) in built.files.items():
        assert not [d for d in plan.diagnostics if "packs each document" in d.message], path
    toml = tmp_path / "flux.toml"
    toml.write_text(CASE.replace("\nfreq = 2", "\nseq_len = 99\nfreq = 2"), encoding="utf-8")
    plan = retarget(build_plan(toml))  # v0.2.2's Flux validator never read validation.seq_len
    assert plan.outcomes["validation.seq_len"].status == "inert"
    errors = [d for d in plan.diagnostics if d.severity == Severity.ERROR]
    assert not [d for d in errors if d.path == "validation.seq_len"], errors


def test_030_flux_flavors_have_the_v022_shapes(built):
    """``model.flavor`` keeps its name, so each 0.3.0 flavor must be the v0.2.2 model."""
    for name in ("flux-debug", "flux-dev", "flux-schnell"):
        model = built.upstream["flavor_" + name.replace("-", "_")]
        args = v022_flavors.args("flux", name)
        autoencoder = args.pop("autoencoder_params")
        for field, value in args.items():
            assert _json(model[field]) == _json(value), (name, field)
        for field, value in autoencoder.items():
            assert _json(model["autoencoder"][field]) == _json(value), (name, field)
        assert len(model["double_blocks"]) == args["depth"]
        assert len(model["single_blocks"]) == args["depth_single_blocks"]


DEBUG_DIFFERS = {
    "profiler.save_traces_folder": "the legacy folder is written (0.3.0 moved the default)",
    "profiler.save_memory_snapshot_folder": "the legacy folder is written",
    "validator.dataloader.dataset": "upstream's debug registry validates on the local "
    "cc12m-test set for its CI; the legacy debug TOML names coco-validation",
    "inference.sampling.enable_classifier_free_guidance": "v0.2.2's infer.py sampled with the "
    "[validation] settings; upstream's debug registry leaves inference at SamplingConfig's",
    "inference.sampling.denoising_steps": "the same",
    "encoder.t5_encoder": "written by name (v0.2.2's default encoder is not 0.3.0's); the "
    "resolved encoder is compared below",
    "encoder.clip_encoder": "the same",
}
"""Where the migrated legacy debug TOML and upstream's ``flux_debugmodel()`` differ, and why."""


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_leaves(item, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: value}


def test_legacy_debug_toml_is_upstreams_debug_registry(built):
    """The two spell the same debug run: every built field is equal but the listed ones."""
    plan, migrated = built.files[ROOT / "legacy_configs" / "flux" / "debug_model.toml"]
    upstream = built.upstream["upstream_flux_debugmodel"]
    ours, theirs = _leaves(migrated), _leaves(upstream)
    assert ours.keys() == theirs.keys()
    differs = {path for path in ours if ours[path] != theirs[path]}
    assert differs == set(DEBUG_DIFFERS), sorted(differs ^ set(DEBUG_DIFFERS))
    for name in ("t5_encoder", "clip_encoder"):
        assert _resolved_encoder(migrated, name, built) == _resolved_encoder(upstream, name, built)

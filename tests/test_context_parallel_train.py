"""Context parallel in titan-train: the layouts ``ParallelDims`` builds for it (with expert
parallel, the expert group borrows the CP ranks), the refusals before launch (a sequence that does
not cut into ``2·cp(·tp)`` chunks), the notes on settings that have no effect, each batch's CP
view, and training under torchrun (gloo).

The multi-process tests compare with one process: ``dist_scripts/cp_train_check.py`` trains
every family's tiny model 10 AdamW steps under CP 2 (causal and per-document masks, AC), CP
with FSDP, HSDP, CP 4 and CP with TP (llama4 also with its chunked iRoPE layers), checking the
loss, every gradient, the gradient norm and the MoE load-balancing biases (bitwise) each step.
fp32 tolerances: gradients rtol 1e-4 / atol 2e-6, losses and norms 1e-5 relative; measured
worst: gradients 9.0e-7 (deepseek_v3 CP 2 x TP 2; others <= 2.4e-7), losses 2.1e-7, norms
2.3e-7. ``titan-train`` itself then runs CP 2 and CP 2 x TP 2 against one process (training
and validation losses), the TOML form of a CP run against its generated registry bit for bit,
and a CP run resumed from its checkpoint against the straight run bit for bit.

Expert parallel with CP: the check script's ``_ep`` scenarios (qwen3 and deepseek_v3 CP 2 × EP 2;
qwen3 FSDP 2 × CP 2 × EP 4, EP over the shard and CP ranks; CP 2 × TP 2 × EP 4, EP over the CP
and TP ranks) train 4 steps each to the same tolerances (measured: gradients within 1.1e-7,
losses 9.3e-8, norms 3.4e-7); ``titan-train`` under CP 2 × EP 2 against one process, with its
DCP checkpoint resumed bit for bit.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import sys

import pytest
import torch

from tests.training_runs import (
    DEBUG_TOML,
    REPO,
    SEED,
    SMALL,
    Launch,
    child_env,
    loss_bits,
    migrated,
    titan_trains,
)
from titan.config.configs import ParallelismConfig
from titan.distributed.context_parallel import balance, cp_mask, positions
from titan.distributed.cp_batch import LocalLabelsLoss, batch_view
from titan.distributed.parallel_dims import ParallelDims
from titan.models.common.attention_masks import MaskSpec
from titan.train import main

CHECK = REPO / "tests" / "dist_scripts" / "cp_train_check.py"


def dims(world_size: int, **degrees) -> ParallelDims:
    return ParallelDims.from_config(ParallelismConfig(**degrees), world_size=world_size)


@pytest.mark.parametrize(
    ("world_size", "degrees", "names", "fsdp_dims", "dp_degree"),
    [
        # CP alone: FSDP shards over the CP ranks, which share one data-parallel rank.
        (2, {}, ("cp",), ("cp",), 1),
        (4, {"context_parallel_degree": 4}, ("cp",), ("cp",), 1),
        # FSDP x CP: the shard and CP ranks flattened, as torchtitan's dp_shard_cp.
        (4, {"data_parallel_shard_degree": 2}, ("dp_shard", "cp"), ("dp_shard_cp",), 2),
        # -1 takes what replicas, CP and TP leave over.
        (8, {"tensor_parallel_degree": 2}, ("dp_shard", "cp", "tp"), ("dp_shard_cp",), 2),
        # HSDP x CP: replicas outside, the CP ranks as the shard dimension.
        (
            4,
            {"data_parallel_replicate_degree": 2},
            ("dp_replicate", "cp"),
            ("dp_replicate", "cp"),
            2,
        ),
        (4, {"tensor_parallel_degree": 2}, ("cp", "tp"), ("cp",), 1),
    ],
)
def test_context_parallel_layouts(world_size, degrees, names, fsdp_dims, dp_degree):
    got = dims(world_size, **{"context_parallel_degree": 2, **degrees})
    assert got.cp_enabled and got.fsdp_enabled
    assert got.mesh_dim_names == names
    assert got.fsdp_mesh_dim_names == fsdp_dims
    assert got.dp_degree == dp_degree
    assert got.seq_len_divisor == 2 * got.cp * got.tp
    # The loss is averaged over the data-parallel and CP ranks together.
    assert set(got._present_dims("dp_cp")) == set(names) - {"tp"}


def test_without_context_parallel_nothing_changes():
    got = dims(4, tensor_parallel_degree=2)
    assert not got.cp_enabled and got.mesh_dim_names == ("dp_shard", "tp")
    assert got.fsdp_mesh_dim_names == ("dp_shard",) and got.seq_len_divisor == 2
    assert got._present_dims("dp_cp") == ("dp_shard",)


@pytest.mark.parametrize(
    ("world_size", "degrees", "words"),
    [
        (3, {"context_parallel_degree": 2}, "3 GPUs cannot be split by context_parallel_degree=2"),
        (
            4,
            {"context_parallel_degree": 2, "data_parallel_shard_degree": 1},
            "multiply to 2 (context_parallel_degree=2 × dp_shard=1)",
        ),
        (6, {"context_parallel_degree": 4}, "6 GPUs cannot be split by context_parallel_degree=4"),
        (2, {"context_parallel_degree": 0}, "`parallelism.context_parallel_degree` is 0"),
    ],
)
def test_degrees_that_do_not_fit_the_world_name_context_parallel(world_size, degrees, words):
    """The layout rules every command shares name the CP degree; ParallelDims never builds it."""
    from titan.models.llama3.config_registry import llama3_debugmodel
    from titan.training.run_checks import ConfigFindings, refuse_findings

    config = llama3_debugmodel()
    config.parallelism = ParallelismConfig(**degrees)
    with pytest.raises(ConfigFindings) as caught:
        refuse_findings(config, world_size=world_size)
    assert words in str(caught.value)
    with pytest.raises(ValueError):
        dims(world_size, **degrees)


@pytest.mark.parametrize(
    ("world_size", "degrees", "names", "ep_dims"),
    [
        # EP takes the CP ranks: each CP rank routes its own head-tail chunks.
        (2, {"expert_parallel_degree": 2}, ("dp_shard_mod_ep", "cp"), ("cp",)),
        # EP beyond the CP ranks borrows shard ranks: dp_shard_in_ep × cp, as v0.2.2's dp_shard × cp.
        (
            4,
            {"expert_parallel_degree": 4},
            ("dp_shard_mod_ep", "dp_shard_in_ep", "cp"),
            ("dp_shard_in_ep", "cp"),
        ),
        # The shard ranks EP leaves shard the experts with FSDP (efsdp).
        (4, {"expert_parallel_degree": 2}, ("dp_shard_mod_ep", "cp"), ("cp",)),
        (8, {"expert_parallel_degree": 4}, ("dp_shard_mod_ep", "dp_shard_in_ep", "cp"), None),
        # With TP and experts not TP-sharded: cp × tp, then shard ranks.
        (4, {"expert_parallel_degree": 4, "tensor_parallel_degree": 2}, None, ("cp", "tp")),
        (
            8,
            {"expert_parallel_degree": 8, "tensor_parallel_degree": 2},
            None,
            ("dp_shard_in_ep", "cp", "tp"),
        ),
        # Expert TP: the experts' hidden units over tp, whole experts over the CP (and shard) ranks.
        (
            4,
            {
                "expert_parallel_degree": 2,
                "tensor_parallel_degree": 2,
                "expert_tensor_parallel_degree": 2,
            },
            None,
            ("cp",),
        ),
    ],
)
def test_expert_parallel_borrows_the_context_parallel_ranks(world_size, degrees, names, ep_dims):
    got = dims(world_size, context_parallel_degree=2, **degrees)
    assert got.ep_enabled and got.cp_enabled
    if names is not None:
        assert got.mesh_dim_names == names
    present = got._present_dims("ep")
    if ep_dims is not None:
        assert present == ep_dims
    # The expert group and the ranks that shard the experts cover every data-parallel and CP rank
    # (and the TP ranks when EP takes them).
    assert math.prod(got._degrees()[name] for name in present) == got.ep
    borrowed_tp = got.tp if got.ep_borrows_tp else 1
    assert got.ep * got.dp_shard_mod_ep == got.dp_shard * got.cp * borrowed_tp
    # Every rank that routes its own tokens pools its load-balancing counts: CP ranks too.
    if got.ep_borrows_tp:
        assert set(got._present_dims("dp_tp")) == set(got.mesh_dim_names)


@pytest.mark.parametrize(
    ("ngpu", "degrees", "summary"),
    [
        (4, {"expert_parallel_degree": 2}, "(FSDP 2, CP 2, EP 2)"),
        (4, {"expert_parallel_degree": 4}, "(FSDP 2, CP 2, EP 4)"),
        (2, {"expert_parallel_degree": 2}, "(CP 2, EP 2)"),
    ],
)
def test_expert_parallel_with_context_parallel_passes_preflight(capsys, ngpu, degrees, summary):
    """The pair is no longer refused: titan-train's pre-flight accepts it as titan-validate does."""
    flags = [f"--parallelism.{name}={value}" for name, value in degrees.items()]
    code, out, err = preflight(
        capsys,
        "--ngpu",
        str(ngpu),
        "--config",
        "qwen3_moe_debug",
        "--parallelism.context_parallel_degree",
        "2",
        *flags,
    )
    assert code == 0, err
    assert summary in out and "not supported" not in err


def preflight(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["--preflight", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("config", "summary"),
    [
        ("llama3_debugmodel", "llama3 debugmodel, 4 GPUs (FSDP 2, CP 2)"),
        ("qwen3_moe_debug", "4 GPUs (FSDP 2, CP 2)"),
        ("llama4_debugmodel", "4 GPUs (FSDP 2, CP 2)"),
        ("deepseek_v3_debugmodel", "4 GPUs (FSDP 2, CP 2)"),
        ("gpt_oss_debugmodel", "4 GPUs (FSDP 2, CP 2)"),
    ],
)
def test_every_trainable_family_passes_preflight_with_context_parallel(capsys, config, summary):
    code, out, err = preflight(
        capsys, "--ngpu", "4", "--config", config, "--parallelism.context_parallel_degree", "2"
    )
    assert code == 0, err
    assert summary in out
    assert "context parallel" not in err


@pytest.mark.parametrize(
    ("flags", "divisor"),
    [
        (["--training.seq_len", "66"], "4"),
        (["--training.seq_len", "60", "--parallelism.context_parallel_degree", "4"], "8"),
        (["--training.seq_len", "68", "--parallelism.tensor_parallel_degree", "2"], "8"),
    ],
)
@pytest.mark.parametrize("form", ["legacy", "registry"])
def test_a_sequence_that_does_not_cut_into_the_chunks_is_refused_before_launch(
    capsys, tmp_path, flags, divisor, form
):
    config = (
        ["--job.config_file", str(DEBUG_TOML)]
        if form == "legacy"
        else ["--config", "llama3_debugmodel"]
    )
    cp = (
        []
        if "--parallelism.context_parallel_degree" in flags
        else ["--parallelism.context_parallel_degree", "2"]
    )
    code, out, err = preflight(capsys, "--ngpu", "8", *config, *cp, *flags)
    assert code == 1 and out == ""
    assert "error[seq-len] sequence length" in err and "Traceback" not in err
    assert f"is not divisible by tp × 2·cp = {divisor}" in err


def test_a_validation_sequence_that_does_not_cut_is_the_seq_len_finding(capsys):
    code, out, err = preflight(
        capsys,
        "--ngpu",
        "2",
        "--config",
        "llama3_debugmodel",
        "--parallelism.context_parallel_degree",
        "2",
        "--validator.enable",
        "--validator.seq_len",
        "30",
    )
    assert code == 1 and out == ""
    assert "error[seq-len] sequence length 30 is not divisible by tp × 2·cp = 4" in err
    assert "--validator.seq_len" in err  # the flag that set it is underlined


@pytest.mark.parametrize(
    ("settings", "noted"),
    [
        ({"context_parallel_rotate_method": "alltoall"}, ["context_parallel_rotate_method"]),
        ({"context_parallel_load_balancer": None}, ["context_parallel_load_balancer = None"]),
        ({"context_parallel_load_balancer": "ptrr"}, ["'ptrr'"]),
        (
            {
                "context_parallel_rotate_method": "alltoall",
                "context_parallel_load_balancer": "ptrr",
            },
            ["context_parallel_rotate_method", "'ptrr'"],
        ),
        ({}, []),
    ],
)
def test_settings_without_effect_are_noted(settings, noted):
    """A warning of the shared rules (titan-validate in both forms, titan-train's check)."""
    from titan.config.check import check_config
    from titan.models.llama3.config_registry import llama3_debugmodel

    config = llama3_debugmodel()
    config.parallelism = ParallelismConfig(context_parallel_degree=2, **settings)
    found = check_config(config, ngpu=2, locate=lambda path: None)
    notes = [d.message for d in found if d.code == "no-effect"]
    assert all(d.severity.value == "warning" for d in found if d.code == "no-effect")
    assert len(notes) == len(noted)
    for note, words in zip(notes, noted, strict=True):
        assert words in note and "has no effect in titan-train" in note


def test_preflight_accepts_the_rotate_method_and_says_it_has_no_effect(capsys):
    code, out, err = preflight(
        capsys,
        "--ngpu",
        "2",
        "--job.config_file",
        str(DEBUG_TOML),
        "--parallelism.context_parallel_degree",
        "2",
        "--parallelism.context_parallel_rotate_method",
        "alltoall",
    )
    assert code == 0, err
    assert "(CP 2)" in out
    assert "context_parallel_rotate_method = 'alltoall' has no effect" in err


@pytest.mark.parametrize("cp", [2, 4])
def test_each_rank_views_its_head_and_tail_chunks(cp):
    seq = 8 * cp
    tokens = torch.arange(2 * seq).view(2, seq) % 11 + 1
    tokens[0, 3] = tokens[1, 10] = 0  # EOS ends a document in each row
    specs = [MaskSpec(), MaskSpec(documents=True), MaskSpec(window=4), MaskSpec(window=4)]
    for rank in range(cp):
        view = batch_view(tokens, mask_specs=specs, eos_id=0, group=None, cp=cp, rank=rank)
        chunk = seq // (2 * cp)
        held = [*range(rank * chunk, (rank + 1) * chunk)]
        held += [*range((2 * cp - 1 - rank) * chunk, (2 * cp - rank) * chunk)]
        assert view.positions.tolist() == held
        assert torch.equal(view.local(tokens), tokens[:, held])
        table = torch.randn(seq, 3)
        assert torch.equal(view.rotary(table), table[held])
        documents = torch.cumsum(tokens == 0, 1) - (tokens == 0).long()
        for spec in specs:
            want = cp_mask(
                spec, seq_len=seq, cp=cp, rank=rank, device=tokens.device, documents=documents
            )
            assert torch.equal(view.get(spec).mask, want)
        # Equal kinds share one tensor.
        assert view.get(specs[2]) is view.get(specs[3])
        labels = torch.randint(0, 5, (2, seq))
        # The loss sees this rank's labels: those of the tokens it holds.
        local = LocalLabelsLoss(lambda pred, lab: lab, cp=cp, rank=rank)(None, labels)
        assert torch.equal(local, balance(labels, 1, cp=cp, rank=rank))
        assert torch.equal(local, labels[:, held])
    assert positions(seq, cp=cp, rank=0).numel() == seq // cp


def test_a_per_document_view_needs_the_eos_id():
    with pytest.raises(ValueError, match="EOS"):
        batch_view(
            torch.ones(1, 8, dtype=torch.long),
            mask_specs=[MaskSpec(documents=True)],
            eos_id=None,
            group=None,
            cp=2,
            rank=0,
        )


def torchrun_check(nproc: int, runs: dict[str, tuple[str, ...]]) -> None:
    """The CP check script's scenarios of each family in ``runs``, in one launch on ``nproc``
    gloo processes (one start-up for all), each reported OK."""
    pairs = [f"{family}:{scenario}" for family, scenarios in runs.items() for scenario in scenarios]
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        + [f"--nproc-per-node={nproc}", str(CHECK), *pairs],
        capture_output=True,
        text=True,
        timeout=900,
        env=child_env(PYTHONPATH=str(REPO)),
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-6000:]
    for pair in pairs:
        family, scenario = pair.split(":")
        steps = 4 if "_ep" in scenario else 10
        assert f"OK {family} {scenario}: {steps} steps" in done.stdout, done.stdout


@pytest.mark.slow
def test_two_cp_ranks_train_every_family_like_one_process():
    torchrun_check(
        2,
        {
            "llama3": ("cp2", "cp2_docs", "cp2_ac"),
            "qwen3": ("cp2", "cp2_docs", "cp2_ep2"),
            # iRoPE: a layer without rope, then one attending within chunks across the CP chunks.
            "llama4": ("cp2", "cp2_docs", "cp2_irope"),
            # The experts split over the two CP ranks.
            "deepseek_v3": ("cp2", "cp2_docs", "cp2_ep2"),
            # A sliding window on the first layer, sinks on both.
            "gpt_oss": ("cp2", "cp2_docs"),
        },
    )


@pytest.mark.slow
def test_cp_with_fsdp_and_tp_on_four_ranks_trains_like_one_process():
    torchrun_check(
        4,
        {
            "llama3": ("fsdp2_cp2", "cp2_tp2", "hsdp_cp2", "cp4_docs"),
            # Expert parallel over the shard and CP ranks, and over the CP and TP ranks.
            "qwen3": ("fsdp2_cp2_docs", "cp2_tp2", "fsdp2_cp2_ep4", "cp2_tp2_ep4"),
            "gpt_oss": ("fsdp2_cp2", "cp2_tp2_docs"),
            # MLA's heads are DTensors under TP; CP gathers their local shards.
            "deepseek_v3": ("cp2_tp2",),
        },
    )


# fp32 parameters in every run, so FSDP's mixed precision does not separate the layouts.
FP32 = ["--training.mixed_precision_param", "float32", "--training.steps", "10"]
LOSS_RTOL = 1e-5
# The one-process norm sums a 2048 x 256 output gradient in fp32 on CPU, off by ~5e-5 of the
# float64 norm (measured); the CP run sums half of it per rank and is closer.
NORM_RTOL = 2e-4


@pytest.mark.slow
def test_titan_train_under_cp_and_cp_with_tp_matches_one_process(tmp_path):
    args = ["--job.config_file", str(DEBUG_TOML), *SMALL, *SEED, *FP32]
    # Validation under CP: each rank's share of the validation batches, averaged over dp_cp.
    args += ["--validation.enable", "--validation.freq", "5", "--validation.steps", "2"]
    args += ["--validation.dataset", "c4_test_validation", "--validation.seq_len", "64"]
    cp2 = ["--parallelism.context_parallel_degree", "2"]
    runs = titan_trains(
        [
            Launch(args, dump_folder=tmp_path / "one", legacy=True),
            Launch([*args, *cp2], dump_folder=tmp_path / "cp2", legacy=True, nproc=2),
            Launch(
                [*args, *cp2, "--parallelism.tensor_parallel_degree", "2"],
                dump_folder=tmp_path / "cp2_tp2",
                legacy=True,
                nproc=4,
            ),
        ]
    )
    one, *parallel = (run.check() for run in runs)
    assert "world size 2 (CP 2)" in parallel[0].stderr
    assert "world size 4 (CP 2, TP 2)" in parallel[1].stderr
    want = [m for m in one.metrics if "loss" in m]
    want_validation = [m for m in one.metrics if "validation_loss" in m]
    assert len(want) == 10 and [m["step"] for m in want_validation] == [1, 5, 10]
    for run in parallel:
        got = [m for m in run.metrics if "loss" in m]
        validation = [m for m in run.metrics if "validation_loss" in m]
        for a, b in zip(validation, want_validation, strict=True):
            assert a["step"] == b["step"]
            assert (
                abs(a["validation_loss"] - b["validation_loss"]) <= LOSS_RTOL * b["validation_loss"]
            )
        assert [m["step"] for m in got] == list(range(1, 11))
        for a, b in zip(got, want, strict=True):
            assert abs(a["loss"] - b["loss"]) <= LOSS_RTOL * b["loss"], (a, b)
            assert abs(a["grad_norm"] - b["grad_norm"]) <= NORM_RTOL * b["grad_norm"], (a, b)
    assert want[-1]["loss"] < want[0]["loss"] - 0.5


@pytest.mark.slow
def test_a_cp_toml_and_its_generated_registry_train_bit_for_bit(tmp_path):
    text = DEBUG_TOML.read_text(encoding="utf-8")
    assert "context_parallel_degree = 1" in text
    text = text.replace(
        "context_parallel_degree = 1",
        'context_parallel_degree = 2\ncontext_parallel_rotate_method = "alltoall"',
    )
    # Named as the shipped file, so the generated function is llama3_debugmodel as well.
    (tmp_path / "cp").mkdir()
    toml = tmp_path / "cp" / "debug_model.toml"
    toml.write_text(text, encoding="utf-8")
    (tmp_path / "migrated").mkdir()
    registry = migrated(toml, tmp_path / "migrated", function="llama3_debugmodel")
    assert "context_parallel_degree=2" in registry.read_text(encoding="utf-8")
    steps = ["--training.steps", "10"]
    toml_run, code_run = (
        run.check()
        for run in titan_trains(
            [
                Launch(
                    ["--job.config_file", str(toml), *SMALL, *SEED, *steps],
                    dump_folder=tmp_path / "toml",
                    legacy=True,
                    nproc=2,
                ),
                Launch(
                    [
                        "--registry",
                        str(registry),
                        "--config",
                        "llama3_debugmodel",
                        *SMALL,
                        *SEED,
                        *steps,
                    ],
                    dump_folder=tmp_path / "registry",
                    nproc=2,
                ),
            ]
        )
    )
    for run in (toml_run, code_run):
        assert "world size 2 (CP 2)" in run.stderr
        assert "context_parallel_rotate_method = 'alltoall' has no effect" in run.stderr
    assert len(toml_run.losses) == 10
    assert loss_bits(toml_run.losses) == loss_bits(code_run.losses)
    assert toml_run.losses[-1] < toml_run.losses[0] - 0.5


@pytest.mark.slow
def test_a_cp_run_resumed_from_its_checkpoint_ends_bit_for_bit_as_the_straight_run(tmp_path):
    args = ["--job.config_file", str(DEBUG_TOML), *SMALL, *SEED, "--training.steps", "4"]
    args += ["--checkpoint.enable", "--checkpoint.interval", "2"]
    args += ["--parallelism.context_parallel_degree", "2"]
    (straight,) = titan_trains([Launch(args, dump_folder=tmp_path / "a", legacy=True, nproc=2)])
    straight.check()
    (tmp_path / "b" / "checkpoint").mkdir(parents=True)
    shutil.copytree(
        tmp_path / "a" / "checkpoint" / "step-2", tmp_path / "b" / "checkpoint" / "step-2"
    )
    (resumed,) = titan_trains([Launch(args, dump_folder=tmp_path / "b", legacy=True, nproc=2)])
    resumed.check()
    assert "loaded checkpoint from" in resumed.stderr
    assert len(straight.losses) == 4 and len(resumed.losses) == 2
    assert loss_bits(resumed.losses) == loss_bits(straight.losses[2:])


@pytest.mark.slow
def test_titan_train_under_cp_and_ep_matches_one_process_and_resumes_bit_for_bit(tmp_path):
    """The small qwen3 MoE (2 layers of 8 experts, top 2) in float32, 4 steps with a DCP
    checkpoint every 2: under CP 2 × EP 2 (the experts split over the CP ranks, each routing its
    own head-tail tokens) on the same batches as one process, then resumed from its own step-2
    checkpoint. Measured: losses within 6.1e-8 relative of one process's, the saved weights
    within 1.9e-6 (tolerances 1e-5 and 1e-4 absolute), the load-balancing biases equal; the
    resumed run ends bit for bit where the straight one does."""
    from tests.test_expert_parallel import small_moe_args
    from tests.test_qwen3_train import dcp_tensors

    args = small_moe_args(tmp_path)
    epcp = [*args, "--parallelism.context_parallel_degree", "2"]
    epcp += ["--parallelism.expert_parallel_degree", "2"]
    one, straight = (
        run.check()
        for run in titan_trains(
            [
                Launch(args, dump_folder=tmp_path / "one"),
                Launch(epcp, dump_folder=tmp_path / "epcp", nproc=2),
            ]
        )
    )
    assert "world size 2 (CP 2, EP 2)" in straight.stderr
    assert len(straight.losses) == 4
    assert straight.losses == pytest.approx(one.losses, rel=1e-5)
    want = dcp_tensors(one.dump_folder / "checkpoint" / "step-4")
    got = dcp_tensors(straight.dump_folder / "checkpoint" / "step-4")
    # The last checkpoint holds the model's weights (and each rank's random state).
    weights = [key for key in want if not key.startswith("rng.")]
    assert len(weights) > 50 and set(weights) <= set(got)
    worst = max((got[key] - want[key]).abs().max().item() for key in weights)
    assert worst <= 1e-4, worst
    experts = [key for key in weights if key.endswith("moe.experts.w1")]
    biases = [key for key in weights if key.endswith("moe.expert_bias")]
    assert len(experts) == len(biases) == 2
    assert all(got[key].shape[0] == 8 for key in experts)  # the EP shards saved whole
    assert all(torch.equal(got[key], want[key]) for key in biases)

    (tmp_path / "resumed" / "checkpoint").mkdir(parents=True)
    shutil.copytree(
        tmp_path / "epcp" / "checkpoint" / "step-2", tmp_path / "resumed" / "checkpoint" / "step-2"
    )
    (resumed,) = titan_trains([Launch(epcp, dump_folder=tmp_path / "resumed", nproc=2)])
    resumed.check()
    assert "loaded checkpoint from" in resumed.stderr
    assert loss_bits(resumed.losses) == loss_bits(straight.losses[2:])
    final = dcp_tensors(resumed.dump_folder / "checkpoint" / "step-4")
    assert final.keys() == got.keys()
    assert [key for key in got if not torch.equal(got[key], final[key])] == []

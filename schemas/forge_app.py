"""What a TorchForge app config holds besides the legacy JobConfig sections, era by era.

Forge apps come in two layouts. The RL apps (``apps/rl``, ``apps/grpo``, ``.meta/mast``) keep the
sections under ``trainer:``, beside the app's own blocks (``policy``, ``services``, ``actors``,
...). The SFT recipe (``apps/sft/main.py``, ``apps/sft_v2/main.py``) keeps them at the top level:
it pops ``processes`` and merges everything else into ``ForgeJobConfig``, whose engine reads only
its own sections. Inside ``trainer:`` sit, besides the sections, the arguments of Forge's trainer
actor and, in early apps, the options of Forge's process spawner; none of them is a JobConfig
setting, and titan reports them as what they are instead of as unknown sections.

Read from meta-pytorch/torchforge's first-parent history, 2025-07-23 (bf099cfc) to 2025-11-15
(6e77f0b3): every app YAML, ``src/forge/types.py`` (ServiceConfig, ProcessConfig),
``src/forge/actors/trainer.py`` and ``trainer/titan.py`` (RLTrainer, TitanTrainer), the trainer
actor of ``apps/grpo/main.py``, and torchtitan's ``experiments/forge/job_config.py``. Pure data
and small pure functions over plain values: the YAML reader (``titan.schemas.yaml_source``) places
the findings.
"""

from __future__ import annotations

from typing import Any, Literal

from titan.schemas._frozen import Frozen, _set

TRAINER = "trainer"
"""The key of an RL app that holds the legacy sections."""

ENGINE_SECTIONS = frozenset(
    {
        "job",
        "model",
        "optimizer",
        "lr_scheduler",
        "training",
        "parallelism",
        "checkpoint",
        "activation_checkpoint",
        "compile",
        "float8",
        "quantize",
        "comm",
        "memory_estimation",
    }
)
"""The sections of torchtitan's ``ForgeJobConfig`` in any era (2e6ab377, 2025-07-22: model to
comm with float8; 08b8b244, 2025-08-20: compile; 8a2686c4, 2025-09-30: quantize for float8;
0cfbd0b3, 2025-10-02: job and memory_estimation): a top-level mapping named so marks the SFT
recipe's layout."""

APP_BLOCKS = frozenset(
    {
        "processes",
        "metric_logging",
        "dataset",
        "dataset_val",
        "services",
        "actors",
        "provisioner",
        "policy",
        "ref_model",
        "replay_buffer",
        "reward_actor",
        "compute_advantages",
    }
)
"""Top-level blocks Forge's apps give their recipe and actors, never the engine: the SFT
recipe's ``processes`` (popped before the merge, d44bb20c on), ``dataset``/``dataset_val``
(5a3807eb to 2025-10-13) and ``metric_logging`` (0c67e40f, 2025-10-22 on), and the RL apps'
actor and spawner blocks."""

METRIC_LOGGER_KEYS = frozenset({"logger", "freq"})
"""Keys of the SFT recipe's ``metrics:`` block (f8d04466, 2025-08-26, to 2025-10-13), which it
passed to Forge's ``get_metric_logger``; JobConfig's [metrics] never had them."""


SettingKind = Literal["argument", "block", "section"]
"""What a Forge setting is: an argument of an actor, a block of spawner options, or a legacy
section that Forge's engine never reads."""


class AppSetting(Frozen):
    """One key beside the legacy sections that is Forge's own: what it is, and what to do."""

    __slots__ = ("kind", "owner", "meaning", "setting")
    __match_args__ = ()

    kind: SettingKind
    """Whether it is an actor's argument, a spawner block or a section the engine never reads."""
    owner: str
    """Whose it is, with the Forge commits and days it lived."""
    meaning: str
    """What the value does, in the user's words."""
    setting: str
    """The JobConfig key that says the same for a torchtitan trainer (``""``: none)."""

    def __init__(
        self, *, owner: str, meaning: str, setting: str = "", kind: SettingKind = "argument"
    ) -> None:
        _set(self, "kind", kind)
        _set(self, "owner", owner)
        _set(self, "meaning", meaning)
        _set(self, "setting", setting)


_HF_ACTOR = (
    "Forge's Hugging Face GRPO trainer actor (`Trainer` in apps/grpo/main.py, 98856ab8 "
    "2025-09-05 to d55de5b8 2025-09-18; tests/sandbox/toy_rl keeps one)"
)
_TITAN_ACTOR = "Forge's torchtitan trainer actor (RLTrainer, TitanTrainer from 2025-11-07)"

ACTOR_ARGUMENTS: dict[str, AppSetting] = {
    "model_name": AppSetting(
        owner=_HF_ACTOR,
        meaning="the Hugging Face model it loads with transformers",
        setting="model.hf_assets_path",
    ),
    "learning_rate": AppSetting(
        owner=_HF_ACTOR, meaning="its AdamW learning rate", setting="optimizer.lr"
    ),
    "beta": AppSetting(owner=_HF_ACTOR, meaning="the KL coefficient of its GRPO loss"),
    "epsilon": AppSetting(owner=_HF_ACTOR, meaning="the clipping range of its GRPO loss"),
    "device": AppSetting(owner=_HF_ACTOR, meaning="the device it trains on"),
    "dp_rank": AppSetting(owner=_HF_ACTOR, meaning="the replay buffer shard it trains on"),
    "state_dict_key": AppSetting(
        owner="Forge's trainer actors (the Hugging Face one from a6ca5917, 2025-09-12; the "
        "torchtitan one from 9aa6cbc9, 2025-09-15)",
        meaning="the name it publishes the weights under for the generator",
    ),
    "loss": AppSetting(
        owner=f"{_TITAN_ACTOR} (cfd96777, 2025-09-15 on)",
        meaning="the loss function the app passes in",
    ),
    "use_dcp": AppSetting(
        owner=f"{_TITAN_ACTOR} (ea3075b3, 2025-09-22 on)",
        meaning="whether the weights reach the generator as a DCP checkpoint",
    ),
    "dcp_path": AppSetting(
        owner=f"{_TITAN_ACTOR} (5f19d68c, 2025-09-26 on)",
        meaning="the folder of those weight checkpoints",
    ),
    "use_vllm_builtin_load": AppSetting(
        owner=f"{_TITAN_ACTOR} (5f19d68c 2025-09-26 to 41215d39 2025-10-10)",
        meaning="whether the generator loads the pushed weights with vLLM's load_weights",
    ),
    "vllm_tp_DEPRECATED": AppSetting(
        owner=f"{_TITAN_ACTOR} (5f19d68c 2025-09-26 to 41215d39 2025-10-10)",
        meaning="the generator's tensor-parallel degree, for the weight push",
    ),
}
"""Arguments of Forge's trainer actors that an app writes in its ``trainer:`` block."""

SPAWNER_BLOCKS: dict[str, AppSetting] = {
    "service": AppSetting(
        kind="block",
        owner="Forge's service spawner (ServiceConfig; apps/grpo 2bcf56c4 2025-09-09 to "
        "13002155 2025-09-16, when the blocks moved to the top-level `services:`)",
        meaning="how many processes, hosts and replicas run the trainer (procs_per_replica, "
        "hosts_per_replica, num_replicas, with_gpus)",
    ),
    "processes": AppSetting(
        kind="block",
        owner="Forge's process spawner (ProcessConfig; apps/rl 13fd9f1e 2025-08-27 to "
        "69c6b1d7 2025-09-08)",
        meaning="the scheduler, hosts and processes that run the trainer (scheduler, "
        "num_hosts, num_procs, num_gpus, with_gpus)",
    ),
}
"""Blocks of a ``trainer:`` that hold Forge's spawner options for the trainer actor."""

UNREAD_SECTIONS: dict[str, AppSetting] = {
    "validation": AppSetting(
        kind="section",
        owner="ForgeJobConfig has none; the SFT recipe ran its own validation loop from it, "
        "apps/sft/main.py 5a3807eb 2025-08-21 to 93cb0db0 2025-10-13",
        meaning="how often (never when freq is not positive) and how many steps it validated "
        "on `dataset_val`",
        setting="validation",
    ),
}
"""Legacy sections an SFT app writes at the top level that ForgeJobConfig does not have, and
who read them instead; any other such section was merged along and read by nothing."""

UNREAD = AppSetting(
    kind="section",
    owner="ForgeJobConfig has none; the SFT recipe merges it along",
    meaning="no part of the run reads it",
)
"""A legacy section beside an SFT app's sections that nothing in Forge reads."""


def layout(app: Any) -> Literal["trainer", "top"] | None:
    """Where an app keeps the legacy sections: under ``trainer:`` (the RL apps), at the top level
    (the SFT recipe, which merges them into ForgeJobConfig), or nowhere."""
    if not isinstance(app, dict):
        return None
    if TRAINER in app:
        return "trainer"
    if any(isinstance(app.get(name), dict) for name in ENGINE_SECTIONS):
        return "top"
    return None


def app_level(name: Any, value: Any, *, sections: frozenset[str]) -> bool:
    """Whether a top-level key of the SFT layout is the app's own, not a legacy section: one of
    Forge's blocks, Forge's metric logger block, or a plain value other keys refer to
    (``model_name``) that the merge carries along and the engine never reads. ``sections`` are
    the names of the legacy schema's sections, which stay for the checker whatever they hold."""
    if name == "metrics" and isinstance(value, dict):
        return bool(METRIC_LOGGER_KEYS & set(value))
    if name in sections or name in ENGINE_SECTIONS:
        return False
    return name in APP_BLOCKS or not isinstance(value, dict)


def forge_setting(
    name: Any, value: Any, *, where: str, sections: frozenset[str]
) -> AppSetting | None:
    """What a key beside the legacy sections is when it is Forge's own, or ``None`` for a key
    the checker must see. ``where`` is the layout: in a ``trainer:`` block, the actor's
    arguments and spawner blocks; at the top level of an SFT app, the legacy ``sections``
    ForgeJobConfig does not have (the app's plain blocks never get here: :func:`app_level`;
    an unknown name stays for the checker, which may know it as a misspelling)."""
    if not isinstance(name, str):
        return None
    if where == "top":
        if name not in sections or name in ENGINE_SECTIONS or not isinstance(value, dict):
            return None
        return UNREAD_SECTIONS.get(name, UNREAD)
    if name in SPAWNER_BLOCKS and isinstance(value, dict):
        return SPAWNER_BLOCKS[name]
    return ACTOR_ARGUMENTS.get(name)


def setting_message(name: str, found: AppSetting) -> tuple[str, str]:
    """The message and hint of a finding about a Forge setting beside the legacy sections."""
    what = {
        "argument": f"an argument of {found.owner}, not a JobConfig setting",
        "block": f"a block of {found.owner}, not a JobConfig section",
        "section": f"a section Forge's engine never reads ({found.owner})",
    }[found.kind]
    message = f"`{name}` is {what}: {found.meaning}; titan neither checks nor carries it"
    if found.kind == "block":
        hint = (
            "nothing to change for Forge; a titan-train run takes its processes from torchrun "
            "(--nnodes, --nproc-per-node)"
        )
    elif found.kind == "section":
        hint = (
            f"nothing to change for Forge; titan-migrate leaves `{found.setting or name}` out, "
            "so write what a titan-train run should have in the registry function"
        )
    elif found.setting:
        hint = f"nothing to change for Forge; a JobConfig says this with `{found.setting}`"
    else:
        hint = "nothing to change for Forge; a titan-train run has no such setting"
    return message, hint

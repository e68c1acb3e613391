"""GRPO on single-digit addition: a tiny llama3 policy learns ``a+b=`` from a verifiable reward.

Usage::

    python examples/rl/grpo_arithmetic.py --out DIR [--steps 200] [--group-size 16] [--seed 0]

Each step, the controller

1. draws ``--prompts`` prompts ``"a+b="`` (``a + b <= 9``, answers uniform over the digits:
   ``balanced_prompts``) and samples ``--group-size`` completions of one token for each from
   the *pushed* weights (``SnapshotSampler``: a model of its own, loaded from the newest
   snapshot, temperature sampling in plain torch);
2. scores each completion 1 when it is the sum's digit, else 0;
3. turns the rewards into group-relative advantages ``(r - mean) / (std + 1e-4)`` per prompt;
4. runs ``PolicyTrainer.forward_backward`` (the GRPO clipped loss, with the sampler's
   log-probabilities) and ``optim_step``, then ``push_model_state_dict`` into ``DIR/weights``,
   which the sampler reads before the next step.

No supervised warm-start: the answer is one token of a 14-token character vocabulary, so the
random-init policy already answers right about 1 time in 14, and a group of 16 holds a correct
answer about 70% of the time. Those groups carry the whole learning signal, so the reward curve
shows reinforcement learning alone. A group that scores all 0 teaches nothing, which is why
groups of 16 and 32 prompts per step: with groups of 8 and 16 prompts, a policy that happened
to favour one digit early grew surer of it (the groups of the other sums rarely held the one
correct sample that would push it down) and some seeds collapsed onto always answering it.

The policy is llama3's debug model shrunk to 2 layers of width 64 (133 thousand parameters),
over a character-level tokenizer written into ``DIR/tokenizer`` and read through titan's
Hugging Face tokenizer class. ``DIR`` must be new or empty; the run writes ``rewards.csv``
(step, mean reward, loss, policy version that sampled, gradient norm) and
``reward_curve.png`` there. On one CPU thread a step takes about 0.1 s of CPU (the snapshot
written and read back each step adds disk time).

The printed loss is about 0 at every step, as it should be: the samples are on-policy (ratio
1), so the loss is minus the mean advantage, which is 0 within each group; its gradient is not.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from typing import Any

VOCAB = ("<|end_of_text|>", "<unk>", *"0123456789+=")
"""Every token of the character-level tokenizer; the end-of-text token is the model's eos."""
PROMPTS = tuple(f"{a}+{b}=" for a in range(10) for b in range(10) if a + b <= 9)
"""The 55 prompts whose answer is one digit."""
ADVANTAGE_EPS = 1e-4


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line; argparse exits with status 2 and a message on a bad flag."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="a new or empty folder for the outputs")
    parser.add_argument("--steps", type=positive, default=200, help="optimizer steps")
    parser.add_argument("--group-size", type=at_least_two, default=16, help="samples per prompt")
    parser.add_argument("--prompts", type=positive, default=32, help="prompts per step")
    parser.add_argument("--seed", type=int, default=0, help="seeds init, prompts and sampling")
    parser.add_argument("--lr", type=above_zero, default=3e-3, help="peak learning rate")
    parser.add_argument("--temperature", type=above_zero, default=1.0, help="sampling temperature")
    return parser.parse_args(argv)


def positive(text: str) -> int:
    """An int >= 1 (for argparse)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def above_zero(text: str) -> float:
    """A finite float > 0 (for argparse)."""
    value = float(text)
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number above 0, not {text}")
    return value


def at_least_two(text: str) -> int:
    """An int >= 2: a group of one has no spread to compare against (for argparse)."""
    value = int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"a group needs at least 2 samples, not {value}")
    return value


def write_tokenizer(folder: str) -> None:
    """A character-level ``tokenizer.json`` over ``VOCAB`` (a BPE without merges: one token
    per character, ``<unk>`` for any other)."""
    from tokenizers import Tokenizer, decoders, models

    tokenizer = Tokenizer(
        models.BPE(vocab={t: i for i, t in enumerate(VOCAB)}, merges=[], unk_token="<unk>")
    )
    tokenizer.add_special_tokens([VOCAB[0]])
    tokenizer.decoder = decoders.Fuse()
    os.makedirs(folder)
    tokenizer.save(os.path.join(folder, "tokenizer.json"))


def policy_config(out: str, *, steps: int, seed: int, lr: float) -> Any:
    """The ``PolicyTrainer.Config``: llama3's debug registry with the model shrunk to the
    character vocabulary, float32 throughout (the sampler reads float32 snapshots, so its
    log-probabilities match the trainer's), no checkpoints, no validation."""
    from titan.models.llama3.config_registry import llama3_debugmodel
    from titan.rl import PolicyTrainer

    base = llama3_debugmodel()
    model = base.model_spec.model
    model.dim, model.n_layers, model.vocab_size = 64, 2, len(VOCAB)
    model.layer.attention.n_heads = 4
    base.hf_assets_path = os.path.join(out, "tokenizer")
    base.dump_folder = os.path.join(out, "run")
    base.debug.seed = seed
    base.training.steps = steps
    base.training.seq_len = 8  # the sequences are 5 tokens; only the unused data loader reads it
    base.training.local_batch_size = 1
    base.training.mixed_precision_param = "float32"
    base.optimizer.lr = lr
    base.lr_scheduler.warmup_steps = 2
    base.lr_scheduler.decay_ratio = None
    base.lr_scheduler.min_lr_factor = 0.1
    base.checkpoint.enable = False
    base.validator.enable = False
    return PolicyTrainer.config_of(
        base, clip_eps=0.2, loss_mean="token", generator_dtype="float32", keep_snapshots=2
    )


def group_advantages(rewards: Any, group_size: int) -> Any:
    """``(r - mean) / (std + 1e-4)`` within each consecutive group of ``group_size``
    rewards (a group whose rewards are all equal gets 0: it says nothing about which answer
    is better)."""
    groups = rewards.view(-1, group_size)
    mean, std = groups.mean(dim=1, keepdim=True), groups.std(dim=1, keepdim=True)
    return ((groups - mean) / (std + ADVANTAGE_EPS)).view(-1)


def balanced_prompts(chooser: random.Random, count: int) -> list[str]:
    """``count`` prompts whose answers are uniform over the ten digits: a sum first, then a
    prompt of that sum. Drawn uniformly from ``PROMPTS`` instead, 9 would be the answer of 10
    prompts in 55 and 0 of one; the policy would collapse onto always answering 9 (reward
    0.18) before it learns to read the operands, and the groups of other sums would then all
    score 0 and teach nothing."""
    prompts = []
    for _ in range(count):
        total = chooser.randint(0, 9)
        first = chooser.randint(0, total)
        prompts.append(f"{first}+{total - first}=")
    return prompts


def score(tokenizer: Any, prompts: list[str], completion: Any) -> Any:
    """1.0 for each completion that is the digit of its prompt's sum, else 0.0."""
    import torch

    answers = [str(int(p[0]) + int(p[2])) for p in prompts]
    texts = [tokenizer.decode(row.tolist()) for row in completion]
    return torch.tensor([float(t == a) for t, a in zip(texts, answers, strict=True)])


def train(args: argparse.Namespace, rows: list[dict], log=print) -> None:
    """Run the GRPO loop of the module's docstring, appending one row per finished step to
    ``rows``."""
    import torch
    from snapshot_sampler import SnapshotSampler

    from titan.components.tokenizer import HuggingFaceTokenizer
    from titan.rl import policy_microbatch

    # One thread: the model is too small to gain from more, and on a busy machine the
    # threads of each tiny matmul wait on one another (tens of times slower).
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    write_tokenizer(os.path.join(args.out, "tokenizer"))
    tokenizer = HuggingFaceTokenizer.Config().build(
        tokenizer_path=os.path.join(args.out, "tokenizer")
    )
    config = policy_config(args.out, steps=args.steps, seed=args.seed, lr=args.lr)
    weights = os.path.join(args.out, "weights")
    chooser = random.Random(args.seed)
    with config.build() as trainer:
        params = sum(p.numel() for p in trainer.parts.model.parameters())
        log(f"policy: llama3, {params:,} parameters; {len(PROMPTS)} prompts; seed {args.seed}")
        trainer.push_model_state_dict(weights)  # v0: the initial weights
        sampler = SnapshotSampler(config, weights, seed=args.seed)
        for step in range(1, args.steps + 1):
            version = sampler.refresh()
            prompts = balanced_prompts(chooser, args.prompts)
            repeated = [p for p in prompts for _ in range(args.group_size)]
            ids = torch.tensor(
                [tokenizer.encode(p, add_bos=False, add_eos=False) for p in repeated]
            )
            samples = sampler.sample(ids, new_tokens=1, temperature=args.temperature)
            rewards = score(tokenizer, repeated, samples.completion)
            advantages = group_advantages(rewards, args.group_size)
            batch = _policy_batch(samples, advantages, policy_microbatch)
            metrics = trainer.forward_backward([batch])
            update = trainer.optim_step()
            trainer.push_model_state_dict(weights)
            row = {
                "step": step,
                "mean_reward": significant(rewards.mean()),
                "loss": significant(metrics.loss),
                "policy_version": samples.version,
                "grad_norm": significant(update.metrics["grad_norm"]),
            }
            rows.append(row)
            log(
                f"step {step:4d}  mean reward {row['mean_reward']:.3f}  loss {row['loss']:+.2e}"
                f"  grad norm {row['grad_norm']:.2e}  sampled by policy v{version}"
            )


def significant(value: Any) -> float:
    """``value`` (a number or one-element tensor) to 6 significant digits, for the CSV."""
    return float(f"{float(value):.6g}") + 0.0  # + 0.0: no "-0.0" in the CSV


def _policy_batch(samples: Any, advantages: Any, policy_microbatch: Any) -> Any:
    """The GRPO micro-batch of ``samples``: inputs are every token but the last, labels the
    next token; only the completion's labels count, and they carry the sampler's
    log-probabilities (for the clipped ratio) and the sequence's advantage."""
    import torch

    tokens = samples.tokens
    inputs, labels = tokens[:, :-1], tokens[:, 1:].clone()
    new = samples.completion.shape[1]
    mask = torch.zeros_like(labels, dtype=torch.bool)
    mask[:, -new:] = True
    labels[~mask] = -100
    logprobs = torch.zeros(labels.shape, dtype=torch.float32)
    logprobs[:, -new:] = samples.logprobs
    return policy_microbatch(
        token_ids=inputs,
        labels=labels,
        generator_logprobs=logprobs,
        advantages=advantages,
        loss_mask=mask,
    )


def main(argv: list[str] | None = None) -> int:
    """Run, then write ``rewards.csv`` and ``reward_curve.png``; returns the exit status (0;
    1 when the run failed, 2 for bad flags or output folder, 130 when interrupted). An
    interrupted or failed run still writes the steps it finished."""
    args = parse_args(argv)
    if os.path.lexists(args.out) and (not os.path.isdir(args.out) or os.listdir(args.out)):
        print(
            f"error: --out {args.out} exists and is not an empty folder; give a new folder "
            "(the run never writes over files it did not make)",
            file=sys.stderr,
        )
        return 2
    os.makedirs(args.out, exist_ok=True)
    started = time.perf_counter()
    rows: list[dict] = []
    status = 0
    try:
        train(args, rows)
    except KeyboardInterrupt:
        print(f"interrupted after {len(rows)} step(s)", file=sys.stderr)
        status = 130
    except (OSError, ValueError, RuntimeError) as error:  # titan's refusals are among these
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
        status = 1
    if rows:
        report(args, rows, wall=time.perf_counter() - started)
    return status


def report(args: argparse.Namespace, rows: list[dict], *, wall: float) -> None:
    """Write ``rewards.csv`` and ``reward_curve.png`` and print the first and last tenth's
    mean reward."""
    from reward_plot import plot_rewards, write_csv

    csv_path = os.path.join(args.out, "rewards.csv")
    png_path = os.path.join(args.out, "reward_curve.png")
    write_csv(csv_path, rows)
    rewards = [row["mean_reward"] for row in rows]
    title = f"GRPO, single-digit addition: mean reward per step (seed {args.seed})"
    plot_rewards(png_path, rewards, title=title)
    tenth = max(1, len(rewards) // 10)
    first, last = sum(rewards[:tenth]) / tenth, sum(rewards[-tenth:]) / tenth
    print(
        f"done: {len(rows)} steps in {wall:.1f} s; mean reward {first:.3f} over the first "
        f"{tenth} step(s), {last:.3f} over the last {tenth}; wrote {csv_path} and {png_path}"
    )


if __name__ == "__main__":
    sys.exit(main())

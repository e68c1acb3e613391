"""The reward curve of a run: ``rewards.csv`` and a PNG drawn with pillow (no plotting
library needed)."""

from __future__ import annotations

import csv
from collections.abc import Sequence

from PIL import Image, ImageDraw

CSV_FIELDS = ("step", "mean_reward", "loss", "policy_version", "grad_norm")
"""One row per step: the step, its samples' mean reward, its loss, the policy version that
sampled them and the gradient norm of its update."""
SIZE = (720, 420)
"""Width and height of the plot in pixels."""
MARGIN = (60, 20, 20, 40)
"""Left, top, right and bottom margins around the plotting area, in pixels."""
COLORS = {
    "background": (255, 255, 255),
    "axes": (60, 60, 60),
    "grid": (225, 225, 225),
    "per_step": (170, 190, 230),
    "average": (200, 40, 40),
}


def write_csv(path: str, rows: Sequence[dict]) -> None:
    """``rows`` (dicts of ``CSV_FIELDS``) as a CSV file at ``path``; a new file only."""
    with open(path, "x", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_FIELDS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def moving_average(values: Sequence[float], window: int) -> list[float]:
    """The mean of each value and up to ``window - 1`` values before it."""
    out, total = [], 0.0
    for index, value in enumerate(values):
        total += value
        if index >= window:
            total -= values[index - window]
        out.append(total / min(index + 1, window))
    return out


def plot_rewards(path: str, rewards: Sequence[float], *, title: str) -> None:
    """Draw the mean reward per step (light) and its moving average (dark red) against the
    step, the reward axis from 0 to 1, into a new PNG at ``path``."""
    image = Image.new("RGB", SIZE, COLORS["background"])
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = MARGIN[0], MARGIN[1], SIZE[0] - MARGIN[2], SIZE[1] - MARGIN[3]
    steps = max(len(rewards), 2)

    def point(index: int, value: float) -> tuple[float, float]:
        """Pixel of step ``index + 1`` at reward ``value``."""
        x = left + (right - left) * index / (steps - 1)
        y = bottom - (bottom - top) * min(max(value, 0.0), 1.0)
        return x, y

    for tick in range(6):  # reward gridlines and labels at 0, 0.2, ..., 1
        value = tick / 5
        y = point(0, value)[1]
        draw.line([(left, y), (right, y)], fill=COLORS["grid"])
        draw.text((8, y - 6), f"{value:.1f}", fill=COLORS["axes"])
    draw.line([(left, top), (left, bottom), (right, bottom)], fill=COLORS["axes"], width=2)
    for index in sorted({0, (steps - 1) // 2, steps - 1}):
        x = point(index, 0.0)[0]
        draw.text((x - 8, bottom + 6), str(index + 1), fill=COLORS["axes"])
    window = max(2, len(rewards) // 20)
    draw.text((left + 8, top + 2), title, fill=COLORS["axes"])
    draw.text((left + 8, top + 16), "per step", fill=COLORS["per_step"])
    draw.text((left + 70, top + 16), f"moving mean over {window} steps", fill=COLORS["average"])
    draw.text((left + (right - left) * 0.75, bottom + 6), "step", fill=COLORS["axes"])
    for values, color, width in (
        (rewards, COLORS["per_step"], 1),
        (moving_average(rewards, window), COLORS["average"], 3),
    ):
        points = [point(i, v) for i, v in enumerate(values)]
        if len(points) > 1:
            draw.line(points, fill=color, width=width)
    with open(path, "xb") as handle:  # a new file only: never overwrite what is there
        image.save(handle, format="PNG")


__all__ = ["CSV_FIELDS", "SIZE", "moving_average", "plot_rewards", "write_csv"]

"""One Flux training sample from one image-caption group, as torchtitan v0.2.2 prepared it.

The image: too small a side (below ``img_size``) and it is skipped; otherwise the short side is
resized to ``img_size`` (PIL's default filter for the stored mode), a square of ``img_size`` is cut
at a random offset along the long side, converted to RGB and scaled to ``[-1, 1]`` as a float
``[3, img_size, img_size]`` tensor. The caption goes through the T5 and the CLIP tokenizer; then
each of the two token lists is replaced by the empty caption's tokens with probability
``classifier_free_guidance_prob``, independently, so the model also learns without text.

Every random choice of a sample comes from ``sample_rng(seed, epoch, index)``: the same sample
of the same pass looks the same whichever rank reads it and whenever a run resumes.
"""

from __future__ import annotations

import dataclasses
import io
import math
import random
import tarfile
from typing import Any

from titan.models.flux.image_sources import CAPTION_EXTENSION, Group, OutsideFolder
from titan.models.flux.tokenizer import FluxTokenizers

SKIP_REASONS = {
    "too_small": "the image is smaller than img_size on a side",
    "bad_image": "the image cannot be decoded",
    "bad_caption": "the caption is not UTF-8 text",
    "no_image": "the caption has no image beside it",
    "no_caption": "the image has no .txt caption beside it",
    "unreadable_file": "a file of the sample cannot be read",
    "outside_folder": "a file of the sample is a link to a file outside the dataset folder",
    "unreadable_shard": "a shard is not a tar archive or breaks off (the rest of it is skipped)",
}
"""Why a sample can be skipped -> what the loader's report says about it."""


class SkippedSample(Exception):  # noqa: N818 (a signal, not a failure)
    """The group is no usable sample; ``reason`` is a key of ``SKIP_REASONS``."""

    def __init__(self, reason: str, detail: str) -> None:
        """``reason``: a ``SKIP_REASONS`` key; ``detail``: which file and what is wrong."""
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


@dataclasses.dataclass
class FluxSample:
    """A prepared sample: image tensor, both token lists and the caption."""

    image: Any
    """The image, ``[3, img_size, img_size]`` float32 in [-1, 1]."""
    t5_tokens: list[int]
    """T5 token ids, ``max_t5_encoding_len`` of them (the empty caption's when dropped)."""
    clip_tokens: list[int]
    """CLIP token ids, 77 of them (the empty caption's when dropped)."""
    prompt: str
    """The caption as read, kept for validation images."""


def sample_rng(*, seed: int, epoch: int, index: int) -> random.Random:
    """The random source of sample ``index`` in pass ``epoch``; strings seed through SHA-512, so
    the draws are the same in every process and Python version."""
    return random.Random(f"flux-sample:{seed}:{epoch}:{index}")


def preprocess_image(image: Any, *, size: int, rng: random.Random) -> Any | None:
    """``image`` as a ``[3, size, size]`` float tensor in ``[-1, 1]``; None when too small."""
    import numpy as np
    import torch

    width, height = image.size
    if width < size or height < size:
        return None
    if width >= height:
        new_width = math.ceil(size / height * width)
        image = image.resize((new_width, size))
        left = rng.randint(0, new_width - size)
        image = image.crop((left, 0, left + size, size))
    else:
        new_height = math.ceil(size / width * height)
        image = image.resize((size, new_height))
        top = rng.randint(0, new_height - size)
        image = image.crop((0, top, size, top + size))
    # Grey-scale, palette, RGBA and CMYK files all become RGB (after the resize, as v0.2.2).
    if image.mode != "RGB":
        image = image.convert("RGB")
    # The same float32 arithmetic as torch's (bit for bit) without torch's thread pool, which
    # costs ~100x more for one small image on a busy host.
    pixels = np.asarray(image).transpose(2, 0, 1).astype(np.float32, order="C")
    return torch.from_numpy(pixels / 255.0 * 2.0 - 1.0)


def prepare_sample(
    group: Group,
    *,
    tokenizers: FluxTokenizers,
    empty_tokens: tuple[list[int], list[int]],
    size: int,
    dropout_prob: float,
    rng: random.Random,
) -> FluxSample:
    """The sample of ``group``; ``SkippedSample`` when it cannot be one."""
    extension = group.image_extension()
    if extension is None:
        raise SkippedSample("no_image", f"{group.origin} has a caption but no image")
    if CAPTION_EXTENSION not in group.files:
        raise SkippedSample("no_caption", f"{group.origin}.{extension} has no .txt caption")
    try:
        image_bytes, caption_bytes = group.read(extension), group.read(CAPTION_EXTENSION)
    except OutsideFolder as error:
        raise SkippedSample("outside_folder", str(error)) from None
    except (OSError, tarfile.TarError) as error:
        raise SkippedSample("unreadable_file", f"{group.origin}: {error}") from None
    try:
        caption = caption_bytes.decode("utf-8")
    except UnicodeDecodeError as error:
        raise SkippedSample("bad_caption", f"{group.origin}.txt: {error}") from None
    image = _decode(image_bytes, origin=f"{group.origin}.{extension}")
    pixels = preprocess_image(image, size=size, rng=rng)
    if pixels is None:
        raise SkippedSample(
            "too_small", f"{group.origin}.{extension} is {image.size[0]}x{image.size[1]}"
        )
    t5_tokens, clip_tokens = tokenizers.t5.encode(caption), tokenizers.clip.encode(caption)
    # Two independent draws, T5 first, as v0.2.2 (no draw at all when the setting is 0).
    if dropout_prob > 0.0:
        if rng.random() < dropout_prob:
            t5_tokens = list(empty_tokens[0])
        if rng.random() < dropout_prob:
            clip_tokens = list(empty_tokens[1])
    return FluxSample(pixels, t5_tokens, clip_tokens, caption)


def _decode(data: bytes, *, origin: str) -> Any:
    """The decoded PIL image of ``data``; ``SkippedSample`` when it is damaged."""
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data))
        image.load()
    # PIL's decoders raise OSError, ValueError, SyntaxError, struct.error or a decompression-bomb
    # error for damaged files; any of them means this one image is unusable.
    except Exception as error:  # noqa: BLE001
        raise SkippedSample("bad_image", f"{origin}: {error}") from None
    return image

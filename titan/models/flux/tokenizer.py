"""The T5 and CLIP tokenizers of Flux, read from local folders only.

Each turns a caption into exactly ``max_length`` token ids: the T5 one into
``encoder.max_t5_encoding_len`` ids, the CLIP one into 77 (the length CLIP-L was trained with),
padding short captions and cutting long ones. Two kinds, as torchtitan v0.2.2 had them:

- the pretrained tokenizers saved beside the encoders (``encoder.t5_encoder``,
  ``encoder.clip_encoder``), read with ``transformers`` from a folder or from the Hugging Face
  cache, never from the network (``local_files_only``);
- in ``encoder.test_mode``, titan's own tokenizer from ``hf_assets_path`` (``tests/assets/tokenizer``
  for the debug config) for both, framed by its begin/end-of-text ids and padded with id 0.

This module imports ``transformers`` and ``tokenizers`` only when a tokenizer is built.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Protocol

from titan.components.local_paths import existing_path
from titan.models.flux.configs import Encoder

CLIP_MAX_LENGTH = 77
"""Token length of every CLIP-L text input."""
TEST_PAD_ID = 0
"""The id test-mode tokens are padded with, as in torchtitan v0.2.2."""
# "owner/name" (or "name") that is not a local path may be a model in the Hugging Face cache.
HUB_NAME = re.compile(r"[\w.-]+(/[\w.-]+)?")


class EncoderPathError(FileNotFoundError):
    """An encoder or tokenizer setting names nothing titan can read without a download."""


class CaptionTokenizer(Protocol):
    """Turns a caption into exactly ``max_length`` token ids."""

    max_length: int
    vocab_size: int

    def encode(self, text: str) -> list[int]:
        """``max_length`` ids of ``text``: padded or cut."""
        ...


@dataclasses.dataclass(frozen=True)
class FluxTokenizers:
    """The two tokenizers a Flux sample needs, and the tokens of an empty caption for each."""

    t5: CaptionTokenizer
    """Tokenizer of the T5 captions."""
    clip: CaptionTokenizer
    """Tokenizer of the CLIP captions."""

    def empty_t5(self) -> list[int]:
        """The T5 tokens of the empty caption (what guidance dropout substitutes)."""
        return self.t5.encode("")

    def empty_clip(self) -> list[int]:
        """The CLIP tokens of the empty caption."""
        return self.clip.encode("")


def pad_or_cut(ids: list[int], *, length: int, pad_id: int) -> list[int]:
    """``ids`` padded with ``pad_id`` or cut to exactly ``length``."""
    return (ids + [pad_id] * (length - len(ids)))[:length]


class TestModeTokenizer:
    """titan's own tokenizer (``tokenizer.json`` in ``hf_assets_path``), padded to a fixed length."""

    def __init__(self, *, path: str, max_length: int) -> None:
        """Read ``tokenizer.json`` from ``path`` (``hf_assets_path``)."""
        from titan.components.tokenizer import HuggingFaceTokenizer, TokenizerNotFoundError

        try:
            self._tokenizer = HuggingFaceTokenizer(
                config=HuggingFaceTokenizer.Config(), tokenizer_path=path
            )
        except TokenizerNotFoundError as error:
            raise EncoderPathError(
                f"encoder.test_mode reads its tokenizer from hf_assets_path: {error}"
            ) from None
        self.max_length = max_length
        self.vocab_size = self._tokenizer.vocab_size
        self.eos_id = self._tokenizer.eos_id

    def encode(self, text: str) -> list[int]:
        """Begin-of-text, the caption's ids, end-of-text; padded with 0 or cut."""
        ids = self._tokenizer.encode(text, add_bos=True, add_eos=True)
        return pad_or_cut(ids, length=self.max_length, pad_id=TEST_PAD_ID)


class PretrainedTokenizer:
    """A pretrained T5 or CLIP tokenizer read by ``transformers`` from a local folder or cache."""

    def __init__(self, *, name_or_path: str, key: str, max_length: int) -> None:
        """Read the tokenizer of setting ``key`` (value ``name_or_path``) without a download."""
        from transformers import AutoTokenizer

        location = resolve_local(name_or_path, key=key)
        self._tokenizer = load_locally(
            AutoTokenizer.from_pretrained, location, key=key, what="tokenizer"
        )
        self.max_length = max_length
        self.vocab_size = len(self._tokenizer)
        self.eos_id = self._tokenizer.eos_token_id
        if self._tokenizer.pad_token_id is None:
            raise EncoderPathError(
                f"the tokenizer at {key} = {name_or_path!r} has no padding token, so captions "
                "cannot be padded to a fixed length; give the folder of a T5 or CLIP tokenizer"
            )

    def encode(self, text: str) -> list[int]:
        """The caption's ids with the tokenizer's own special tokens, padded or cut."""
        encoded = self._tokenizer(
            text, truncation=True, max_length=self.max_length, padding="max_length"
        )
        return list(encoded["input_ids"])


def resolve_local(name_or_path: str, *, key: str) -> str:
    """A local folder for ``name_or_path``, or a Hub-style name to look up in the cache only."""
    found = existing_path(name_or_path)
    if found is not None:
        if not found.is_dir():
            raise EncoderPathError(
                f"{key} = {name_or_path!r} is a file ({found}); give the folder that holds the "
                "model's config.json and weights (as save_pretrained writes it)"
            )
        return str(found)
    if HUB_NAME.fullmatch(name_or_path) and not name_or_path.startswith("."):
        return name_or_path
    raise EncoderPathError(
        f"{key} = {name_or_path!r} does not exist ({existing_path_hint(name_or_path)}); set {key} "
        "to a local folder written by save_pretrained"
    )


def existing_path_hint(path: str) -> str:
    """The absolute path a relative setting was looked for at, for messages."""
    return str(Path(path).expanduser().resolve())


def load_locally(loader: Any, location: str, *, key: str, what: str, **kwargs: Any) -> Any:
    """``loader(location, local_files_only=True)``: never the network; any failure is an
    ``EncoderPathError`` naming ``key``."""
    try:
        return loader(location, local_files_only=True, **kwargs)
    # transformers raises OSError for missing files, and ValueError, KeyError, JSON or
    # safetensors errors for unusable ones; the user's folder is at fault in every case.
    except Exception as error:  # noqa: BLE001
        detail = " ".join(str(error).split())[:300]
        if existing_path(location) is None:
            raise EncoderPathError(
                f"{key} = {location!r} is neither a local folder nor a model in the Hugging Face "
                f"cache, and titan never downloads; fetch it once (e.g. `hf download {location} "
                f"--local-dir DIR`) and set {key} to DIR; for a smoke run without pretrained "
                "encoders set encoder.test_mode (legacy TOML: training.test_mode)"
            ) from None
        raise EncoderPathError(
            f"cannot read the {what} of {key} = {location!r}: {detail}; give a folder written "
            "by save_pretrained"
        ) from None


def build_flux_tokenizers(encoder: Encoder, *, hf_assets_path: str | None) -> FluxTokenizers:
    """The T5 and CLIP tokenizers ``encoder`` describes (titan's test tokenizer in test mode)."""
    t5_length = encoder.max_t5_encoding_len
    if t5_length < 1:
        raise ValueError(f"encoder.max_t5_encoding_len must be at least 1, not {t5_length}")
    if encoder.test_mode:
        if not hf_assets_path:
            raise EncoderPathError(
                "encoder.test_mode reads its tokenizer from hf_assets_path, which is not set; "
                "set hf_assets_path to a folder with tokenizer.json, e.g. tests/assets/tokenizer"
            )
        path = str(existing_path(hf_assets_path) or hf_assets_path)
        return FluxTokenizers(
            t5=TestModeTokenizer(path=path, max_length=t5_length),
            clip=TestModeTokenizer(path=path, max_length=CLIP_MAX_LENGTH),
        )
    return FluxTokenizers(
        t5=PretrainedTokenizer(
            name_or_path=encoder.t5_encoder, key="encoder.t5_encoder", max_length=t5_length
        ),
        clip=PretrainedTokenizer(
            name_or_path=encoder.clip_encoder,
            key="encoder.clip_encoder",
            max_length=CLIP_MAX_LENGTH,
        ),
    )

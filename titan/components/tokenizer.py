"""Tokenizers read from the Hugging Face assets folder."""

from __future__ import annotations

import dataclasses
from typing import Any

from titan.components._pending import not_yet
from titan.config.configurable import Configurable


class BaseTokenizer(Configurable):
    """Turns text into token ids and back."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(Configurable.Config):
        """Base of tokenizer configs."""


class HuggingFaceTokenizer(BaseTokenizer):
    """The ``tokenizer.json`` tokenizer found in ``hf_assets_path``."""

    @dataclasses.dataclass(kw_only=True, slots=True)
    class Config(BaseTokenizer.Config):
        """No options: the trainer passes ``tokenizer_path=hf_assets_path`` when it builds it."""

    def __init__(self, *, config: Config, **runtime: Any) -> None:
        raise not_yet("HuggingFaceTokenizer")

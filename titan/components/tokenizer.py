"""Tokenizers read from the Hugging Face assets folder."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from titan.components import asset_files
from titan.config.configurable import Configurable

# Tried in order when tokenizer_config.json does not name the token (Llama 3, Llama 2, GPT-2).
KNOWN_BOS_TOKENS = ("<|begin_of_text|>", "<s>", "<|startoftext|>")
KNOWN_EOS_TOKENS = ("<|end_of_text|>", "</s>", "<|endoftext|>", "<|eot_id|>")


class TokenizerNotFoundError(FileNotFoundError):
    """The tokenizer files are not where ``hf_assets_path`` says."""


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

    def __init__(self, *, config: Config, tokenizer_path: str) -> None:
        from tokenizers import Tokenizer

        self.config = config
        self.path = Path(tokenizer_path)
        tokenizer_file = self.path / "tokenizer.json"
        found = asset_files.kind(tokenizer_file)
        if found not in (asset_files.FILE, asset_files.MISSING):  # a FIFO would block the read
            raise asset_files.AssetFileError(
                f"{tokenizer_file} is {found}, not a file; hint: point hf_assets_path at a "
                "folder with Hugging Face's tokenizer.json"
            )
        if found == asset_files.MISSING:
            where = "folder does not exist" if not self.path.is_dir() else "has no tokenizer.json"
            raise TokenizerNotFoundError(
                f"no tokenizer at {str(self.path)!r} ({self.path.resolve()}): the {where}. "
                "Set hf_assets_path "
                "(legacy TOML: model.hf_assets_path, or model.tokenizer_path) to a folder with "
                "Hugging Face's tokenizer.json, e.g. ./tests/assets/tokenizer"
            )
        try:
            self._tokenizer = Tokenizer.from_file(str(tokenizer_file))
        except Exception as error:  # tokenizers raises a bare Exception for a file it cannot read
            raise ValueError(
                f"{tokenizer_file} is not a tokenizer.json the Hugging Face tokenizers library can "
                f"read ({error}); hint: point hf_assets_path at a folder with a valid one"
            ) from None
        # Text that happens to contain "<|end_of_text|>" is encoded as ordinary bytes, so a
        # document can never forge a special token (and decode(encode(text)) gives it back).
        self._tokenizer.encode_special_tokens = True
        special = _special_tokens(self.path / "tokenizer_config.json")
        self.bos_token = self._find_token(special.get("bos_token"), KNOWN_BOS_TOKENS)
        self.eos_token = self._find_token(special.get("eos_token"), KNOWN_EOS_TOKENS)
        # None when the tokenizer has no such token (GPT-2 has no begin-of-text).
        self.bos_id: int | None = self._tokenizer.token_to_id(self.bos_token or "")
        self.eos_id: int | None = self._tokenizer.token_to_id(self.eos_token or "")

    @property
    def vocab_size(self) -> int:
        """Number of token ids, special tokens included."""
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, *, add_bos: bool = True, add_eos: bool = True) -> list[int]:
        """Token ids of ``text``, framed by the begin/end-of-text ids the tokenizer has."""
        # add_special_tokens=False: a post-processor in tokenizer.json (Llama 3 has one) would
        # add a second BOS; the framing is decided here instead.
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids
        if add_bos and self.bos_id is not None:
            ids.insert(0, self.bos_id)
        if add_eos and self.eos_id is not None:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: list[int], *, skip_special_tokens: bool = True) -> str:
        """The text of ``ids``; special tokens are left out unless asked for."""
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def _find_token(self, configured: str | None, known: tuple[str, ...]) -> str | None:
        candidates = (configured,) if configured is not None else known
        for token in candidates:
            if token is not None and self._tokenizer.token_to_id(token) is not None:
                return token
        if configured is not None:
            raise ValueError(
                f"{self.path / 'tokenizer_config.json'} names the special token {configured!r}, "
                f"which is not in {self.path / 'tokenizer.json'}"
            )
        return None


def _special_tokens(config_file: Path) -> dict[str, str]:
    """``bos_token``/``eos_token`` of a tokenizer_config.json; empty when there is no file."""
    settings = asset_files.read_json(config_file, what="the tokenizer's special tokens")
    if settings is None:
        return {}
    if not isinstance(settings, dict):
        raise asset_files.AssetFileError(
            f"{config_file} holds {type(settings).__name__} JSON, not an object of settings"
        )
    found = {}
    for key in ("bos_token", "eos_token"):
        value = settings.get(key)
        # transformers writes either the token or an AddedToken dict with its "content".
        if isinstance(value, dict):
            value = value.get("content")
        if isinstance(value, str):
            found[key] = value
    return found

"""Flux's frozen text encoders: T5 gives the token sequence, CLIP the pooled caption vector.

``build_text_encoders`` reads the pretrained encoders from ``encoder.t5_encoder`` and
``encoder.clip_encoder`` (local folders, or models already in the Hugging Face cache; never the
network). In ``encoder.test_mode`` it builds tiny randomly initialised ones instead, one layer
each, as wide as the Flux model expects (T5 ``context_in_dim``, CLIP ``vec_in_dim``) and with the
test tokenizer's vocabulary; their weights come from a fixed seed, so every run builds the same.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from titan.models.flux.configs import Encoder
from titan.models.flux.tokenizer import (
    CLIP_MAX_LENGTH,
    TEST_PAD_ID,
    CaptionTokenizer,
    EncoderPathError,
    FluxTokenizers,
    load_locally,
    resolve_local,
)

TEST_ENCODER_SEED = 0
"""Seed of the tiny test encoders' weights (the global random state is left as it was)."""


class FrozenTextEncoder(nn.Module):
    """A ``transformers`` text encoder in eval mode without gradients, returning one output.

    ``output`` is ``"last_hidden_state"`` (T5: ``[batch, tokens, width]``) or
    ``"pooler_output"`` (CLIP: ``[batch, width]``).
    """

    def __init__(self, hf_module: nn.Module, *, output: str) -> None:
        """Freeze ``hf_module`` and return its ``output`` from ``forward``."""
        super().__init__()
        self.hf_module = hf_module.eval().requires_grad_(False)
        self.output = output
        self.eval()
        # FSDP flattens parameters and needs each one contiguous; some checkpoints are not.
        for parameter in self.hf_module.parameters():
            if not parameter.is_contiguous():
                parameter.data = parameter.data.contiguous()

    def train(self, mode: bool = True) -> FrozenTextEncoder:
        """Stay in eval mode: a trainer's ``model.train()`` must not switch dropout on here."""
        return super().train(False)

    @property
    def width(self) -> int:
        """Width of each output vector."""
        config = self.hf_module.config
        return int(getattr(config, "d_model", None) or config.hidden_size)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """Encodings of ``tokens`` (``[batch, length]`` ids), on the encoder's device."""
        device = next(self.hf_module.parameters()).device
        outputs = self.hf_module(input_ids=tokens.to(device), attention_mask=None)
        return outputs[self.output]


@dataclasses.dataclass(frozen=True)
class TextEncoders:
    """The two frozen encoders of a Flux run."""

    t5: FrozenTextEncoder
    """The T5 encoder: one sequence of encodings per caption."""
    clip: FrozenTextEncoder
    """The CLIP encoder: one pooled encoding per caption."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class EncoderRole:
    """What one of the two encoders is: its setting, its class, its output, its expected width."""

    key: str
    """The setting that names the encoder, for messages (``encoder.t5_encoder``)."""
    model_class: str
    """The ``transformers`` class that loads it."""
    output: str
    """The output the Flux model reads: the sequence or the pooled encoding."""
    width_name: str
    """The Flux model setting its output width must equal."""


T5_ROLE = EncoderRole(
    key="encoder.t5_encoder",
    model_class="T5EncoderModel",
    output="last_hidden_state",
    width_name="context_in_dim",
)
CLIP_ROLE = EncoderRole(
    key="encoder.clip_encoder",
    model_class="CLIPTextModel",
    output="pooler_output",
    width_name="vec_in_dim",
)


def tiny_t5(*, width: int, vocab_size: int) -> nn.Module:
    """A one-layer ``T5EncoderModel`` whose outputs are ``width`` wide."""
    from transformers import T5Config, T5EncoderModel

    config = T5Config(
        vocab_size=vocab_size,
        d_model=width,
        d_kv=8,
        d_ff=32,
        num_layers=1,
        num_heads=2,
        feed_forward_proj="gated-gelu",
        pad_token_id=TEST_PAD_ID,
        dropout_rate=0.0,
    )
    return T5EncoderModel(config)


def tiny_clip(*, width: int, vocab_size: int, eos_id: int | None) -> nn.Module:
    """A one-layer ``CLIPTextModel`` whose pooled output is ``width`` wide."""
    from transformers import CLIPTextConfig, CLIPTextModel

    config = CLIPTextConfig(
        vocab_size=vocab_size,
        hidden_size=width,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=next(h for h in (4, 2, 1) if width % h == 0),
        max_position_embeddings=CLIP_MAX_LENGTH,
        pad_token_id=TEST_PAD_ID,
        # CLIP pools the hidden state at the first end-of-text token.
        eos_token_id=eos_id if eos_id is not None else 1,
        bos_token_id=0,
    )
    return CLIPTextModel(config)


def build_text_encoders(
    encoder: Encoder,
    *,
    tokenizers: FluxTokenizers,
    context_in_dim: int,
    vec_in_dim: int,
) -> TextEncoders:
    """The frozen T5 and CLIP encoders ``encoder`` describes, checked against the model's widths."""
    if encoder.test_mode:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(TEST_ENCODER_SEED)
            t5 = tiny_t5(width=context_in_dim, vocab_size=tokenizers.t5.vocab_size)
            clip = tiny_clip(
                width=vec_in_dim,
                vocab_size=tokenizers.clip.vocab_size,
                eos_id=getattr(tokenizers.clip, "eos_id", None),
            )
        return TextEncoders(
            t5=FrozenTextEncoder(t5, output=T5_ROLE.output),
            clip=FrozenTextEncoder(clip, output=CLIP_ROLE.output),
        )
    widths = {"context_in_dim": context_in_dim, "vec_in_dim": vec_in_dim}
    return TextEncoders(
        t5=_pretrained(
            encoder.t5_encoder,
            role=T5_ROLE,
            width=widths[T5_ROLE.width_name],
            tokenizer=tokenizers.t5,
        ),  # fmt: skip
        clip=_pretrained(
            encoder.clip_encoder,
            role=CLIP_ROLE,
            width=widths[CLIP_ROLE.width_name],
            tokenizer=tokenizers.clip,
        ),  # fmt: skip
    )


def _pretrained(
    name_or_path: str, *, role: EncoderRole, width: int, tokenizer: CaptionTokenizer
) -> FrozenTextEncoder:
    """The pretrained encoder at ``name_or_path``, checked against the width and vocabulary
    it must serve."""
    import transformers

    model_class: Any = getattr(transformers, role.model_class)
    location = resolve_local(name_or_path, key=role.key)
    module = load_locally(model_class.from_pretrained, location, key=role.key, what="encoder")
    encoder = FrozenTextEncoder(module, output=role.output)
    if encoder.width != width:
        raise EncoderPathError(
            f"{role.key} = {name_or_path!r} encodes {encoder.width}-wide vectors but the Flux "
            f"model's {role.width_name} is {width}; give the encoder the model was built for"
        )
    vocab = int(module.config.vocab_size)
    if tokenizer.vocab_size > vocab:
        raise EncoderPathError(
            f"the tokenizer of {role.key} = {name_or_path!r} has {tokenizer.vocab_size} ids but "
            f"its encoder only {vocab}; the folder mixes a tokenizer and an encoder that do "
            "not belong together"
        )
    return encoder

"""Config classes shared by titan's decoder families: rope, attention, feed-forward, MoE, decoder.

Every class here is the torch-free description of an ``nn.Module``: its ``Config`` names the
implementation with ``_owner_path`` (``titan.models.common.model:<Class>``, or
``attention_model`` for rope and attention; ``titan.models.<family>.model:<Class>`` for a
family's own), imported only when built.
"""

from titan.models.common.attention import Attention, BaseAttention
from titan.models.common.decoder import Decoder, TransformerBlock
from titan.models.common.feed_forward import FeedForward
from titan.models.common.moe import MoE
from titan.models.common.rope import LlamaRoPE, RoPE

__all__ = [
    "Attention",
    "BaseAttention",
    "Decoder",
    "FeedForward",
    "LlamaRoPE",
    "MoE",
    "RoPE",
    "TransformerBlock",
]

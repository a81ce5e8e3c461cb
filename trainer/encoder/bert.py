"""A BERT encoder's forward pass in plain torch, over a safetensors state dict.

The pretrained sentence encoders taas ships (trainer.encoder.registry) are BERT models: token,
position and segment embeddings, then post-LayerNorm transformer layers of self-attention and
a GELU feed-forward block. This is that forward pass and nothing else (no dropout, no heads, no
training-time options), written against the tensor names of Hugging Face's ``BertModel`` so
that its ``model.safetensors`` loads as it is. Doing it here, not through ``transformers``,
saves its import (seconds, docs/model.md) and keeps the encoder a few hundred kilobytes of
code that this project owns and tests against the reference implementation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class BertConfig:
    """The shape of a BERT model (the fields of its ``config.json`` that the forward reads)."""

    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int
    type_vocab_size: int
    layer_norm_eps: float

    @classmethod
    def from_json(cls, values: dict[str, object]) -> BertConfig:
        """The fields named here from a Hugging Face ``config.json``; a model that is not a
        post-LayerNorm BERT with GELU and absolute positions raises ValueError."""
        if values.get("hidden_act", "gelu") != "gelu" or values.get(
            "position_embedding_type", "absolute"
        ) != ("absolute"):
            raise ValueError("only BERT with GELU and absolute position embeddings is supported")
        return cls(
            vocab_size=int(values["vocab_size"]),  # type: ignore[call-overload]
            hidden_size=int(values["hidden_size"]),  # type: ignore[call-overload]
            num_hidden_layers=int(values["num_hidden_layers"]),  # type: ignore[call-overload]
            num_attention_heads=int(values["num_attention_heads"]),  # type: ignore[call-overload]
            intermediate_size=int(values["intermediate_size"]),  # type: ignore[call-overload]
            max_position_embeddings=int(values["max_position_embeddings"]),  # type: ignore[call-overload]
            type_vocab_size=int(values["type_vocab_size"]),  # type: ignore[call-overload]
            layer_norm_eps=float(values["layer_norm_eps"]),  # type: ignore[arg-type]
        )


class _Layer(nn.Module):
    """One transformer layer: self-attention then feed-forward, each added and LayerNormed."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        width, eps = config.hidden_size, config.layer_norm_eps
        self.heads = config.num_attention_heads
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.attention_out = nn.Linear(width, width)
        self.attention_norm = nn.LayerNorm(width, eps=eps)
        self.intermediate = nn.Linear(width, config.intermediate_size)
        self.output = nn.Linear(config.intermediate_size, width)
        self.output_norm = nn.LayerNorm(width, eps=eps)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``hidden``: batch x tokens x width; ``mask``: an additive attention bias
        (batch x 1 x 1 x tokens, 0 for a token, -inf-like for padding)."""
        batch, tokens, width = hidden.shape
        head = width // self.heads

        def split(x: torch.Tensor) -> torch.Tensor:
            return x.view(batch, tokens, self.heads, head).transpose(1, 2)

        attended = F.scaled_dot_product_attention(
            split(self.query(hidden)), split(self.key(hidden)), split(self.value(hidden)), attn_mask=mask
        )
        attended = attended.transpose(1, 2).reshape(batch, tokens, width)
        hidden = self.attention_norm(hidden + self.attention_out(attended))
        return self.output_norm(hidden + self.output(F.gelu(self.intermediate(hidden))))


class BertEncoder(nn.Module):
    """BERT's embeddings and transformer layers: token ids in, each token's last hidden state out."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        width = config.hidden_size
        self.word_embeddings = nn.Embedding(config.vocab_size, width)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, width)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width)
        self.embedding_norm = nn.LayerNorm(width, eps=config.layer_norm_eps)
        self.layers = nn.ModuleList(_Layer(config) for _ in range(config.num_hidden_layers))

    def forward(
        self, ids: torch.Tensor, attention: torch.Tensor, layers: Sequence[int]
    ) -> list[torch.Tensor]:
        """The hidden states (each batch x tokens x width) after each of ``layers`` (1 is the
        first transformer layer's output, ``num_hidden_layers`` the last) of token ``ids``
        (batch x tokens, int64), ``attention`` 1 for a real token and 0 for padding (same
        shape). The forward stops at the deepest layer asked for."""
        positions = torch.arange(ids.shape[1], device=ids.device)
        hidden = self.word_embeddings(ids) + self.position_embeddings(positions)
        hidden = self.embedding_norm(hidden + self.token_type_embeddings.weight[0])
        # padding gets a large negative bias, not -inf: a row of padding only never occurs
        # (every text has [CLS] and [SEP]), and -inf would turn a mistake into NaNs
        bias = (1.0 - attention[:, None, None, :].to(hidden.dtype)) * torch.finfo(hidden.dtype).min
        wanted: dict[int, torch.Tensor] = {}
        for depth, layer in enumerate(self.layers[: max(layers)], start=1):
            hidden = layer(hidden, bias)
            if depth in layers:
                wanted[depth] = hidden
        return [wanted[depth] for depth in layers]

    def load_hugging_face(self, state: dict[str, torch.Tensor]) -> None:
        """Copy the weights of a Hugging Face ``BertModel`` state dict (its safetensors names,
        with or without the ``bert.`` prefix); a missing or misshapen tensor raises ValueError."""
        state = {name.removeprefix("bert."): tensor for name, tensor in state.items()}
        own = self.state_dict()
        missing = [name for name in own if _hf_name(name) not in state]
        if missing:
            raise ValueError(f"the weights lack {len(missing)} tensors, e.g. {_hf_name(missing[0])}")
        with torch.no_grad():
            for name, tensor in own.items():
                source = state[_hf_name(name)]
                if source.shape != tensor.shape:
                    raise ValueError(
                        f"{_hf_name(name)}: shape {tuple(source.shape)}, expected {tuple(tensor.shape)}"
                    )
                tensor.copy_(source)


_RENAMES = {
    "word_embeddings": "embeddings.word_embeddings",
    "position_embeddings": "embeddings.position_embeddings",
    "token_type_embeddings": "embeddings.token_type_embeddings",
    "embedding_norm": "embeddings.LayerNorm",
    "query": "attention.self.query",
    "key": "attention.self.key",
    "value": "attention.self.value",
    "attention_out": "attention.output.dense",
    "attention_norm": "attention.output.LayerNorm",
    "intermediate": "intermediate.dense",
    "output": "output.dense",
    "output_norm": "output.LayerNorm",
}


def _hf_name(name: str) -> str:
    """The Hugging Face name of one of BertEncoder's state-dict keys."""
    parts = name.split(".")
    if parts[0] == "layers":  # layers.3.query.weight -> encoder.layer.3.attention.self.query.weight
        return f"encoder.layer.{parts[1]}.{_RENAMES[parts[2]]}.{parts[3]}"
    return f"{_RENAMES[parts[0]]}.{parts[1]}"


def mean_pool(hidden: torch.Tensor, attention: torch.Tensor) -> torch.Tensor:
    """The mean of each text's real tokens' hidden states (batch x width), as sentence-transformers'
    mean pooling: padding does not count."""
    weights = attention.unsqueeze(-1).to(hidden.dtype)
    return (hidden * weights).sum(1) / weights.sum(1).clamp_min(1e-9)

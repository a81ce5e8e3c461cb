"""The classifier: a bag of hashed n-gram embeddings feeding a linear softmax layer, and for
an encoder model a direct linear path from the sentence embedding to the classes."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a TextClassifier: embedding rows, embedding width, number of classes, and the
    direct path's width (the sentence embedding's, the last ``direct`` rows of the table; 0:
    none) and the scale its input is read at."""

    rows: int
    dim: int
    classes: int
    direct: int = 0
    direct_scale: float = 0.0

    def as_dict(self) -> dict[str, int | float]:
        """JSON-safe dict of every field."""
        return asdict(self)


def bag_index(offsets: torch.Tensor, count: int) -> torch.Tensor:
    """The bag each of ``count`` flat entries belongs to (EmbeddingBag's layout)."""
    lengths = torch.diff(offsets, append=offsets.new_full((1,), count))
    return torch.repeat_interleave(
        torch.arange(len(offsets), device=offsets.device), lengths, output_size=count
    )


def sentence_matrix(
    ids: torch.Tensor, weights: torch.Tensor, bags: torch.Tensor, batch: int, first_row: int, width: int
) -> torch.Tensor:
    """The bags' sentence entries as a dense (batch x width) matrix: the weight of each entry
    of row ``first_row + j`` at column ``j`` of its bag (``bags``: bag_index). Every entry is
    written, the n-grams' with weight 0 (a fixed shape for a CUDA graph)."""
    at = bags * width + (ids - first_row).clamp_(min=0)
    values = weights * (ids >= first_row)
    return weights.new_zeros(batch * width).index_add_(0, at, values).view(batch, width)


class TextClassifier(nn.Module):
    """Sum of TF-IDF-weighted n-gram embeddings (an EmbeddingBag), then a linear layer.

    The embedding gives sparse gradients: an update touches only the rows of the n-grams in
    its mini-batch, so a parameter server can push and pull just those rows. With the
    L2-normalised TF-IDF weights of trainer.features, the whole model is a rank-``dim``
    factorisation of a linear classifier over TF-IDF features.

    ``direct``: an encoder model also reads its sentence embedding (the bag's entries of the
    last ``direct`` rows, trainer.sentence_features) times ``direct_scale`` through a full-rank
    linear map to the classes (``direct.weight``, classes x direct, starting at zero), beside
    the factorised path: the rank-64 hidden layer is narrower than a linear classifier over the
    embedding needs on 175 classes (docs/experiments/encoder.md).
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        embedding_init: float,
        output_init: float,
        generator: torch.Generator | None = None,
    ) -> None:
        """Weights uniform in ±embedding_init and ±output_init (0: zeros), the bias and the
        direct path zero."""
        super().__init__()
        self.config = config
        self.embedding = nn.EmbeddingBag(config.rows, config.dim, mode="sum", sparse=True)
        self.output = nn.Linear(config.dim, config.classes)
        self.direct = nn.Linear(config.direct, config.classes, bias=False) if config.direct else None
        with torch.no_grad():
            for weight, bound in ((self.embedding.weight, embedding_init), (self.output.weight, output_init)):
                if bound:
                    weight.uniform_(-bound, bound, generator=generator)
                else:
                    weight.zero_()
            self.output.bias.zero_()
            if self.direct is not None:
                self.direct.weight.zero_()

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Logits (batch x classes) for bags given in EmbeddingBag's flat layout."""
        return logits_of(
            ids,
            offsets,
            weights,
            self.embedding.weight,
            self.output.weight,
            self.output.bias,
            None if self.direct is None else self.direct.weight,
            self.config.direct_scale,
        )


def logits_of(
    ids: torch.Tensor,
    offsets: torch.Tensor,
    weights: torch.Tensor,
    table: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    direct: torch.Tensor | None,
    direct_scale: float,
) -> torch.Tensor:
    """A TextClassifier's logits from its parameters as plain tensors (the functional form
    the learners and serving call on detached tensors)."""
    hidden = F.embedding_bag(ids, table, offsets, mode="sum", per_sample_weights=weights)
    logits = F.linear(hidden, weight, bias)
    if direct is not None:
        width = direct.shape[1]
        sentence = sentence_matrix(
            ids, weights, bag_index(offsets, ids.numel()), len(offsets), table.shape[0] - width, width
        )
        logits.addmm_(sentence, direct.t(), alpha=direct_scale)
    return logits

"""The classifier: a bag of hashed n-gram embeddings feeding a linear softmax layer."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a TextClassifier: embedding rows, embedding width, number of classes."""

    rows: int
    dim: int
    classes: int

    def as_dict(self) -> dict[str, int]:
        """JSON-safe dict of every field."""
        return asdict(self)


class TextClassifier(nn.Module):
    """Sum of TF-IDF-weighted n-gram embeddings (an EmbeddingBag), then a linear layer.

    The embedding gives sparse gradients: an update touches only the rows of the n-grams in
    its mini-batch, so a parameter server can push and pull just those rows. With the
    L2-normalised TF-IDF weights of trainer.features, the whole model is a rank-``dim``
    factorisation of a linear classifier over TF-IDF features.
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        embedding_init: float,
        output_init: float,
        generator: torch.Generator | None = None,
    ) -> None:
        """Weights uniform in ±embedding_init and ±output_init (0: zeros), the bias zero."""
        super().__init__()
        self.config = config
        self.embedding = nn.EmbeddingBag(config.rows, config.dim, mode="sum", sparse=True)
        self.output = nn.Linear(config.dim, config.classes)
        with torch.no_grad():
            for weight, bound in ((self.embedding.weight, embedding_init), (self.output.weight, output_init)):
                if bound:
                    weight.uniform_(-bound, bound, generator=generator)
                else:
                    weight.zero_()
            self.output.bias.zero_()

    def forward(self, ids: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """Logits (batch x classes) for bags given in EmbeddingBag's flat layout."""
        return self.output(self.embedding(ids, offsets, per_sample_weights=weights))

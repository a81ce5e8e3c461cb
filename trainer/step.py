"""One learner step, split at the parameter-server seams.

``compute_gradient`` is pure (weights and a batch in, loss and gradients out) and
``apply_update`` is the only place weights change, so K learners can compute gradients
while one server applies them; ``DataCursor`` is a learner's place in its data.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from trainer.features import Bags
from trainer.inference import bag_tensors
from trainer.model import TextClassifier


@dataclass
class DataCursor:
    """Where a learner is in its data: epoch (1-based), permutation seed, position in the epoch."""

    epoch: int
    seed: int
    position: int = 0

    def order(self, rows: int) -> np.ndarray:
        """This epoch's permutation of the learner's rows."""
        return np.random.default_rng([self.seed, self.epoch]).permutation(rows)

    def as_dict(self) -> dict[str, int]:
        """Plain dict for a checkpoint."""
        return asdict(self)


@dataclass(frozen=True)
class Batch:
    """A mini-batch as model inputs: bag ids, offsets, weights and target class ids."""

    ids: torch.Tensor
    offsets: torch.Tensor
    weights: torch.Tensor
    targets: torch.Tensor

    @classmethod
    def of(cls, bags: Bags, targets: np.ndarray) -> Batch:
        """Batch from bags and their integer targets."""
        return cls(*bag_tensors(bags), torch.from_numpy(targets))


def compute_gradient(model: TextClassifier, batch: Batch) -> tuple[float, list[torch.Tensor]]:
    """Mean cross-entropy of ``batch`` and its gradient for each of ``model.parameters()``.

    Pure: reads the weights, changes nothing (no ``.grad`` is written). The embedding's
    gradient is a sparse tensor holding only the rows the batch touched.
    """
    logits = model(batch.ids, batch.offsets, batch.weights)
    loss = F.cross_entropy(logits, batch.targets)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return float(loss.detach()), list(grads)


class Optimizer:
    """Adam for the model: SparseAdam on the embedding rows (lazy: only touched rows move),
    Adam on the dense output layer."""

    def __init__(self, model: TextClassifier, learning_rate: float) -> None:
        self.params = list(model.parameters())
        self.sparse = torch.optim.SparseAdam([model.embedding.weight], lr=learning_rate)
        self.dense = torch.optim.Adam(list(model.output.parameters()), lr=learning_rate)

    def state_dict(self) -> dict[str, Any]:
        """Both optimizers' state for a checkpoint."""
        return {"sparse": self.sparse.state_dict(), "dense": self.dense.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the state written by state_dict()."""
        self.sparse.load_state_dict(state["sparse"])
        self.dense.load_state_dict(state["dense"])


def apply_update(optimizer: Optimizer, grads: list[torch.Tensor]) -> None:
    """Apply one gradient (as returned by compute_gradient) to the weights: the only write."""
    for param, grad in zip(optimizer.params, grads, strict=True):
        param.grad = grad
    optimizer.sparse.step()
    optimizer.dense.step()
    for param in optimizer.params:
        param.grad = None

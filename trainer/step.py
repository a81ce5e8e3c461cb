"""One learner step of the production model, split at the parameter-server seams.

``TextClassifierTask`` is what a learner needs to compute a gradient against the shared
parameters: *pull* gathers just the embedding rows a mini-batch touched (a small local copy;
the dense output layer is read in place through a zero-copy view), *compute* runs forward
and backward on that working set and returns a ``Gradient`` holding those rows' gradients
(sparse push) and the dense layer's. Nothing here writes a parameter: only the server's
apply role does. ``DataCursor`` is a learner's place in its data.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from trainer.features import Bags
from trainer.inference import bag_tensors
from trainer.model import TextClassifier, bag_index, sentence_matrix
from trainer.ps.applier import Gradient


@dataclass
class DataCursor:
    """Where a learner is in its data: epoch (1-based), permutation seed, position in its shard."""

    epoch: int
    seed: int
    position: int = 0

    def order(self, rows: int) -> np.ndarray:
        """This epoch's permutation of all rows (the same for every learner)."""
        return np.random.default_rng([self.seed, self.epoch]).permutation(rows)

    def shard(self, rows: int, rank: int, learners: int) -> np.ndarray:
        """Learner ``rank``'s rows of this epoch: every ``learners``-th of the permutation."""
        return self.order(rows)[rank::learners]

    def as_dict(self) -> dict[str, int]:
        """Plain dict for a checkpoint."""
        return asdict(self)


def shard_lengths(rows: int, learners: int) -> tuple[int, ...]:
    """Each learner's rows in an epoch: every ``learners``-th row (:meth:`DataCursor.shard`)."""
    return tuple(len(range(rank, rows, learners)) for rank in range(learners))


def epoch_updates(rows: int, learners: int, batch_size: int) -> int:
    """The updates one epoch makes: each learner's ceil(shard / batch). K learners may make up
    to K - 1 more than ceil(rows / batch): the progress reports counted past their total
    (22,520 of 22,500)."""
    return sum(math.ceil(shard / batch_size) for shard in shard_lengths(rows, learners))


@dataclass(frozen=True)
class Batch:
    """A mini-batch as model inputs: bag ids, offsets, weights and targets (class ids, or for a
    multi-label model a multi-hot uint8 matrix, batch x classes)."""

    ids: torch.Tensor
    offsets: torch.Tensor
    weights: torch.Tensor
    targets: torch.Tensor

    @classmethod
    def of(cls, bags: Bags, targets: np.ndarray) -> Batch:
        """Batch from bags and their targets."""
        return cls(*bag_tensors(bags), torch.from_numpy(targets))

    def __len__(self) -> int:
        return len(self.targets)

    def to(self, device: torch.device) -> Batch:
        """The same batch on ``device`` (CUDA learners)."""
        return Batch(
            *(t.to(device, non_blocking=True) for t in (self.ids, self.offsets, self.weights, self.targets))
        )


def model_parameters(model: TextClassifier) -> list[tuple[torch.Tensor, bool]]:
    """The model's parameters in server order, each with whether it is pushed by rows."""
    params = [(model.embedding.weight, True), (model.output.weight, False), (model.output.bias, False)]
    return params + ([(model.direct.weight, False)] if model.direct is not None else [])


def multi_label_loss(logits: torch.Tensor, multi_hot: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy summed over classes and averaged over examples: each class's
    sigmoid gets the gradient a one-vs-rest logistic regression would (the mean over classes
    would divide an SGD step by the number of classes; Adam's step does not depend on the scale)."""
    targets = multi_hot.to(logits.dtype)
    return F.binary_cross_entropy_with_logits(logits, targets, reduction="sum") / len(targets)


class TextClassifierTask:
    """Gradients of the TextClassifier against parameters held by a ParameterServer.

    The pull is zero-copy: the forward reads the touched embedding rows and the dense layer in
    place, through views of the server's tensors (in shared memory, gathering rows into a
    local copy first measured 1.1-2x slower per step: the same cache misses, plus a copy). The
    push is sparse: the embedding's gradient is just the touched rows. ``unique_rows``
    coalesces them (sorted unique rows, duplicates summed), which a lazy per-row optimizer
    (Adam) needs; a linear one (SGD) applies duplicates with one ``index_add_`` and skips it.

    The gradient is written out in closed form, not by autograd: the model is one embedding
    bag and one linear layer, so the gradient at the logits (``softmax - one-hot`` times each
    example's share of the loss; multi-label: ``sigmoid - multi-hot`` over the batch size)
    gives the output layer's by one product and each id's row by its bag's gradient times the
    id's weight (and an encoder model's direct path's by one product with the bags' sentence
    values). Autograd's graph, engine and sparse tensor cost a third of a step's compute
    on the small batches a service trains with (benchmarks/step_bench.py, docs/benchmarks.md);
    trainer.ps.graph.sgd_step writes the same gradient fused with its apply on CUDA.

    ``multi_label``: one sigmoid per class, trained with ``multi_label_loss`` against multi-hot
    targets; otherwise a softmax trained with cross-entropy against class ids, each example
    weighed by its class's entry of ``class_weights`` when given (HParams.class_balance).
    ``direct_scale``: the direct path's input scale, for a model that has one (a fourth
    parameter, ModelConfig.direct). ``sentence_width``: an encoder model's sentence rows, the
    table's last rows, which every text's bag holds once each (trainer.sentence_features): their
    gradient is summed over the batch by one (width x batch) by (batch x dim) product and
    pushed as ``width`` rows; row by row it was 768 rows a text, most of what a step scattered
    and the server applied (a fifth to a quarter of an encoder job's training time,
    docs/benchmarks.md).
    """

    def __init__(
        self,
        unique_rows: bool = True,
        multi_label: bool = False,
        class_weights: torch.Tensor | None = None,
        direct_scale: float = 0.0,
        sentence_width: int = 0,
    ) -> None:
        self.unique_rows = unique_rows
        self.multi_label = multi_label
        self.class_weights = class_weights
        self.direct_scale = direct_scale
        self.sentence_width = sentence_width

    def attach(self, params: list[torch.Tensor]) -> None:
        """Bind to the server's tensors (read in place: the pull is Hogwild's, docs/parameter-server.md)."""
        self.table, *self.dense = params
        if len(self.dense) > 2 and self.dense[2].shape[1] != self.sentence_width:
            raise ValueError(
                f"a direct path of {self.dense[2].shape[1]} values over {self.sentence_width} sentence rows"
            )
        if self.class_weights is not None:
            self.class_weights = self.class_weights.to(self.table.device)

    def pull(self, batch: Batch) -> tuple[None, int]:
        """Nothing to copy: the forward reads the rows in place (0 bytes moved)."""
        return None, 0

    @torch.no_grad()
    def compute(self, pulled: None, batch: Batch) -> tuple[float, Gradient]:
        """Mean (binary) cross-entropy of ``batch`` and its gradient in push form."""
        weight, bias, *direct = self.dense
        ids, offsets, id_weights = batch.ids, batch.offsets, batch.weights
        count, width = ids.numel(), self.sentence_width
        first = self.table.shape[0] - width  # the sentence rows' first
        hidden = F.embedding_bag(ids, self.table, offsets, mode="sum", per_sample_weights=id_weights)
        logits = F.linear(hidden, weight, bias)
        if width:
            bags = bag_index(offsets, count)
            sentence = sentence_matrix(ids, id_weights, bags, len(batch), first, width)
            if direct:
                logits.addmm_(sentence, direct[0].t(), alpha=self.direct_scale)
        if self.multi_label:
            loss = multi_label_loss(logits, batch.targets)
            grad = torch.sigmoid(logits).sub_(batch.targets.to(logits.dtype)).div_(len(batch))
        else:
            targets = batch.targets
            log_p = torch.log_softmax(logits, 1)
            loss = F.nll_loss(log_p, targets, weight=self.class_weights)
            if self.class_weights is None:
                shares = torch.full((len(batch), 1), 1.0 / len(batch), device=logits.device)
            else:
                weights = self.class_weights.index_select(0, targets)
                shares = weights.div_(weights.sum()).unsqueeze_(1)
            # softmax x share, less the share at the target: (softmax - one-hot) x share
            grad = log_p.exp_().mul_(shares).scatter_add_(1, targets.unsqueeze(1), shares.neg())
        weight_grad, bias_grad = grad.t() @ hidden, grad.sum(0)
        dense_grads = [weight_grad, bias_grad]
        if direct:
            dense_grads.append(torch.mm(grad.t(), sentence).mul_(self.direct_scale))
        grad_hidden = grad @ weight
        # each id's row: its bag's gradient at the hidden layer times the id's weight
        if width:  # the n-grams' row by row, the sentence rows' summed over the batch at once
            ngrams = torch.nonzero(ids < first).squeeze_(1)  # once: a mask indexes by nonzero each time
            rows_grad = torch.cat(
                (
                    grad_hidden.index_select(0, bags.index_select(0, ngrams)).mul_(
                        id_weights.index_select(0, ngrams).unsqueeze_(1)
                    ),
                    sentence.t() @ grad_hidden,
                )
            )
            sentence_rows = torch.arange(first, first + width, device=ids.device)
            ids = torch.cat((ids.index_select(0, ngrams), sentence_rows))
        else:
            lengths = torch.diff(offsets, append=offsets.new_full((1,), count))
            rows_grad = grad_hidden.repeat_interleave(lengths, 0, output_size=count).mul_(
                id_weights.unsqueeze(1)
            )
        if self.unique_rows:
            coalesced = torch.sparse_coo_tensor(
                ids.unsqueeze(0), rows_grad, self.table.shape, check_invariants=False
            ).coalesce()
            ids, rows_grad = coalesced.indices()[0], coalesced.values()
        return float(loss), Gradient(ids, [rows_grad, *dense_grads])

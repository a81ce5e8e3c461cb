"""The CUDA learner as CUDA graphs: one learner whose mini-batches replay 16 at a time.

At the batches a service uses, an eager GPU step is some twenty kernel launches and a read
of the loss, and the GPU idles between them (../shared/PERFORMANCE.md: one process replaying
its step as a CUDA graph beats eight processes sharing the GPU; trainer.ps.cuda's streams
reach a tenth to a quarter of it). ``GraphPool`` captures ``STEPS_PER_GRAPH`` consecutive
steps of one learner (forward, gradient and SGD apply of each, in order) as one graph and
replays it chunk after chunk: one launch for sixteen gradients. Each gradient is applied
once, right after it is computed, against the version before it (staleness 0), the K = 1
loop's arithmetic: a model trained here matches one trained on the CPU up to the order of
float additions (tests/trainer/test_ps_graph.py).

What a graph asks for, and how it is met:

* **Fixed shapes and addresses.** ``pack_chunk`` lays a chunk's mini-batches out on the host
  in fixed-size rows: the ids padded to one of four widths per doubling by repeating the
  step's own ids (weight 0: they add nothing), the rows padded to the batch size (no share
  of the loss), each row's share of the loss and of the update (the learning rate, with its
  plateau cuts, included) already in the data. The chunk is copied into the captured input
  buffers; one graph per padded width, captured the first time it occurs (a handful per job).
* **Nothing of data-dependent size.** ``sgd_step`` writes the gradient in closed form rather
  than through autograd (the model is one embedding bag and one linear layer): fewer kernels,
  and the table's gradient is each id's row of the bag gradient, one ``index_add_``.
* **No host synchronisation inside.** Each step writes its loss into a device buffer; after a
  replay the buffer is copied back asynchronously, and the host reads it once the chunk's
  event has completed, with up to ``RING`` chunks in flight, so packing the next chunks
  overlaps the GPU's work.
* **No branch on the loss.** A non-finite loss is found when its chunk's losses come back,
  after its gradient and those queued behind it have landed: the round ends there and the
  session fails with NonFiniteLoss as on the CPU, from parameters that are then discarded
  (the checkpoint on disk predates them; nothing saves them).

The counters move when a chunk's event completes: every step then counts as pushed,
applied on the direct path, at staleness 0, and the learner's cursor moves to the chunk's
end. Compute and apply share one replay, so their times are not split. SGD only: Adam
keeps the stream learners (trainer.ps.cuda). docs/benchmarks.md has the figures.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F

from trainer.features import Bags
from trainer.model import sentence_matrix
from trainer.ps import counters as C
from trainer.ps.learner import ShardData
from trainer.ps.pool import RoundResult, _collect, _losses_tensor
from trainer.ps.server import ParameterServer

STEPS_PER_GRAPH = 16  # mini-batches per replay
RING = 4  # chunks in flight: packed and queued ahead of the GPU
_MIN_WIDTH = 16  # the smallest padded id count of a step


@dataclass
class PackedChunk:
    """Up to STEPS_PER_GRAPH mini-batches in fixed-size rows, one row per step.

    ``ints`` (steps, 2W + 2B): the step's ids (W, padded by repeating them), the row each id
    belongs to (W), EmbeddingBag offsets (B; padded rows start at the step's end, so their
    bags are empty), class targets (B). ``floats`` (steps, W + 3B [+ B * classes]): each id's
    weight (W; 0 for padding), each row's share of the step's loss (B; 0 for padding), its
    rate: that share times -learning rate (B), the rate negated (B), and for multi-label data
    the multi-hot targets. Steps past ``steps`` are empty (every weight 0).
    """

    ints: np.ndarray
    floats: np.ndarray
    width: int  # W
    steps: int  # real steps
    ends: np.ndarray  # the shard position after each real step
    samples: np.ndarray  # rows of each real step
    ids: np.ndarray  # real ids of each real step


def padded_width(ids: int) -> int:
    """The width a step of ``ids`` ids is padded to: the smallest of 16, 20, 24, 28, 32, 40,
    48, 56, 64, 80, ... (four sizes per doubling) that holds it. Padding costs GPU work and
    each width a graph of its own; this keeps the padding under a quarter with a handful of
    graphs per job."""
    if ids <= _MIN_WIDTH:
        return _MIN_WIDTH
    shift = (ids - 1).bit_length() - 3
    return -(-ids >> shift) << shift


def pack_chunk(
    bags: Bags,
    targets: np.ndarray,
    shard: np.ndarray,
    start: int,
    batch: int,
    lr: float,
    class_weights: np.ndarray | None,
    steps: int = STEPS_PER_GRAPH,
) -> PackedChunk:
    """The mini-batches ``shard[start:]`` cuts next (``batch`` rows each, the last one of the
    shard possibly fewer), up to ``steps`` of them, packed for a graph that applies them at
    learning rate ``lr``.

    ``targets``: class ids, or a multi-hot (rows, classes) matrix for multi-label data.
    ``class_weights``: single-label data's weight per class (HParams.class_balance; None:
    all 1); a step's loss is its rows' weighted mean, as ``F.cross_entropy(weight=...)``.
    Multi-label rows weigh alike (the loss is a mean over rows).
    """
    chosen = shard[start : start + steps * batch]
    rows = len(chosen)
    real_steps = -(-rows // batch)
    step_of_row, slot_of_row = np.divmod(np.arange(rows), batch)
    picked = bags.select(chosen)
    lengths = np.diff(np.append(picked.offsets, len(picked.ids)))
    step_ids = np.bincount(step_of_row, weights=lengths, minlength=steps).astype(np.int64)
    width = padded_width(int(step_ids.max()))
    bounds = np.concatenate(([0], np.cumsum(step_ids)))  # a step's ids are one run of picked's
    slot_of_id = np.repeat(slot_of_row, lengths)

    multi_label = targets.ndim == 2
    classes = targets.shape[1] if multi_label else 0
    ints = np.zeros((steps, 2 * width + 2 * batch), dtype=np.int64)
    floats = np.zeros((steps, width + 3 * batch + batch * classes), dtype=np.float32)
    cycle = np.arange(width)
    for step in range(real_steps):
        run = slice(bounds[step], bounds[step + 1])
        if count := int(step_ids[step]):
            # the padding repeats the step's own ids (weight 0: they add nothing), so the padded
            # adds go to rows the step touches anyway, not all to row 0 as contending atomics
            np.take(picked.ids[run], cycle % count, out=ints[step, :width])
        ints[step, width : width + count] = slot_of_id[run]
        floats[step, :count] = picked.weights[run]
    offsets = ints[:, 2 * width : 2 * width + batch]
    offsets[:] = step_ids[:, None]
    offsets[step_of_row, slot_of_row] = picked.offsets - bounds[step_of_row]
    chosen_targets = targets[chosen]
    if multi_label:
        columns = width + 3 * batch + slot_of_row[:, None] * classes + np.arange(classes)
        floats[step_of_row[:, None], columns] = chosen_targets
        weight = np.ones(rows, dtype=np.float64)
    else:
        ints[step_of_row, 2 * width + batch + slot_of_row] = chosen_targets
        weight = np.ones(rows) if class_weights is None else class_weights[chosen_targets].astype(np.float64)
    share = weight / np.bincount(step_of_row, weights=weight, minlength=steps)[step_of_row]
    floats[step_of_row, width + slot_of_row] = share
    floats[step_of_row, width + batch + slot_of_row] = -lr * share
    floats[step_of_row, width + 2 * batch + slot_of_row] = lr * share  # negated here, not a kernel a step
    samples = np.bincount(step_of_row, minlength=steps)[:real_steps]
    return PackedChunk(
        ints=ints,
        floats=floats,
        width=width,
        steps=real_steps,
        ends=start + np.cumsum(samples),
        samples=samples,
        ids=step_ids[:real_steps],
    )


@dataclass(frozen=True)
class Products:
    """How ``sgd_step`` writes its two dense products (the logits, and the gradient at the
    hidden layer): as they read, or ``swapped``: the transpose of the product of the
    transposes (the same numbers). cuBLAS picks its kernel by the operands' layout and shape,
    and for some shapes its pick for one layout is several times slower than for the other:
    on an H200 (torch 2.11), ``grad @ weight`` at 16 x 150 by 150 x 128 took 51.7 us where the
    swapped product took 6.5 us, and the logits at batch 64 14.4 us against 7.4 us. The pool
    times both forms of each on the job's own shapes once (``Products.fastest``)."""

    swap_logits: bool = False
    swap_hidden: bool = False

    def logits(self, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """``hidden @ weight.T + bias``."""
        if self.swap_logits:
            return torch.addmm(bias.unsqueeze(1), weight, hidden.t()).t()
        return torch.addmm(bias, hidden, weight.t())

    def hidden_grad(self, grad: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """``grad @ weight``."""
        return torch.mm(weight.t(), grad.t()).t() if self.swap_hidden else grad @ weight

    @classmethod
    def fastest(cls, batch: int, classes: int, dim: int, device: torch.device) -> Products:
        """The faster form of each product for these shapes, each timed inside a CUDA graph
        (what the chunks replay) on stand-in operands."""
        hidden, grad = torch.randn(batch, dim, device=device), torch.randn(batch, classes, device=device)
        weight, bias = torch.randn(classes, dim, device=device), torch.randn(classes, device=device)
        plain, swapped = cls(), cls(swap_logits=True, swap_hidden=True)
        logits = [_graph_us(partial(p.logits, hidden, weight, bias), device) for p in (plain, swapped)]
        hiddens = [_graph_us(partial(p.hidden_grad, grad, weight), device) for p in (plain, swapped)]
        return cls(swap_logits=logits[1] < logits[0], swap_hidden=hiddens[1] < hiddens[0])


def _captured(
    warm_up: Callable[[], object],
    program: Callable[[], object],
    after: torch.cuda.Stream,
    device: torch.device,
) -> torch.cuda.CUDAGraph:
    """``program`` captured as a CUDA graph, after ``warm_up`` ran once on a side stream that
    follows ``after`` (as torch.cuda.graph asks: cuBLAS's workspace and kernel choice, lazy
    initialisation), ``after`` then waiting for it."""
    side = torch.cuda.Stream(device=device)
    side.wait_stream(after)
    with torch.cuda.stream(side):
        warm_up()
    after.wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        program()
    return graph


def _graph_us(product: Callable[[], torch.Tensor], device: torch.device, reps: int = 50) -> float:
    """Microseconds per call of ``product`` replayed as a CUDA graph of ``reps`` calls."""

    def repeated() -> None:
        for _ in range(reps):
            product()

    graph = _captured(product, repeated, torch.cuda.current_stream(device), device)
    graph.replay()  # once untimed: the first replay uploads the graph
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / reps


def sgd_step(
    params: list[torch.Tensor],
    ints: torch.Tensor,
    floats: torch.Tensor,
    width: int,
    batch: int,
    loss_out: torch.Tensor,
    products: Products = Products(),
    direct_scale: float = 0.0,
) -> None:
    """One packed mini-batch (a row of a PackedChunk): forward, gradient, SGD apply in place.

    ``params``: the TextClassifier's embedding table, output weight and output bias, and its
    direct path's weight if it has one (read at ``direct_scale``, trainer.model). The
    gradient is written out by hand rather than by autograd: the model is one embedding bag
    and one linear layer, and its gradient in closed form takes fewer kernels than autograd
    launches (the launches are what a step at these batches costs), with
    nothing of data-dependent size that a graph could not hold. Each row's gradient at the
    logits is ``softmax - one-hot`` (multi-label: ``sigmoid - multi-hot``) times its rate
    (its share of the loss times -lr), so what follows is the update itself: the output
    layer moves by one fused multiply-add each, and each id's table row by its bag's
    gradient times the id's weight, added by one ``index_add_`` (duplicates summed). Writes
    the loss (the rows' weighted mean) into ``loss_out``, a 0-d view. ``products``: how to
    write the two dense products (``Products``)."""
    table, weight, bias, *direct = params
    ids, bag = ints[:width], ints[width : 2 * width]
    offsets = ints[2 * width : 2 * width + batch]
    id_weights, shares = floats[:width], floats[width : width + batch]
    rates = floats[width + batch : width + 2 * batch].unsqueeze(1)
    hidden = F.embedding_bag(ids, table, offsets, mode="sum", per_sample_weights=id_weights)
    logits = products.logits(hidden, weight, bias)
    if direct:
        sentence = sentence_matrix(
            ids, id_weights, bag, batch, table.shape[0] - direct[0].shape[1], direct[0].shape[1]
        )
        logits = logits.addmm(sentence, direct[0].t(), alpha=direct_scale)
    if floats.numel() > width + 3 * batch:  # multi-label: the multi-hot targets follow
        hot = floats[width + 3 * batch :].view(batch, -1)
        per_row = F.binary_cross_entropy_with_logits(logits, hot, reduction="none").sum(1)
        grad = torch.sigmoid(logits).sub_(hot).mul_(rates)
    else:
        targets = ints[2 * width + batch :].unsqueeze(1)
        log_p = torch.log_softmax(logits, 1)
        per_row = F.nll_loss(log_p, targets.squeeze(1), reduction="none")
        # softmax x rate, less the rate at the target: (softmax - one-hot) x rate
        grad = (
            log_p.exp_()
            .mul_(rates)
            .scatter_add_(1, targets, floats[width + 2 * batch : width + 3 * batch].unsqueeze(1))
        )
    torch.dot(per_row, shares, out=loss_out)
    grad_hidden = products.hidden_grad(grad, weight)
    weight.addmm_(grad.t(), hidden)
    bias.add_(grad.sum(0))
    if direct:
        direct[0].addmm_(grad.t(), sentence, alpha=direct_scale)
    table.index_add_(0, ids, grad_hidden.index_select(0, bag).mul_(id_weights.unsqueeze(1)))


@dataclass
class _Graph:
    """One captured chunk program and its input and loss buffers (one padded width)."""

    graph: torch.cuda.CUDAGraph
    ints: torch.Tensor
    floats: torch.Tensor
    losses: torch.Tensor


@dataclass
class _Staging:
    """Pinned host buffers of one chunk in flight, and the event after its last use of them."""

    ints: torch.Tensor
    floats: torch.Tensor
    losses: torch.Tensor
    event: torch.cuda.Event


@dataclass
class _InFlight:
    chunk: PackedChunk
    staging: _Staging


class GraphPool:
    """K = 1 on CUDA under SGD: the learner's mini-batches replayed as CUDA graphs (see module)."""

    learners = 1

    def __init__(
        self,
        ps: ParameterServer,
        data: ShardData,
        batch_size: int,
        seed: int,
        device: torch.device,
        class_weights: torch.Tensor | None = None,
        direct_scale: float = 0.0,
    ) -> None:
        if ps.opt.kind != "sgd" or ps.counters.learners != 1:
            raise ValueError("GraphPool runs one SGD learner")
        self.ps, self.batch_size, self.seed, self.device = ps, batch_size, seed, device
        table, weight = ps.params[:2]
        self.params = [p.data for p in ps.params]
        self.direct_scale = direct_scale
        ps.handles.extra["losses"] = _losses_tensor(1, shared=False)
        self.losses = ps.handles.extra["losses"].numpy()
        self.bags, self.targets = data.bags(), data.targets.numpy()
        self.class_weights = None if class_weights is None else class_weights.cpu().double().numpy()
        self.stream = torch.cuda.Stream(device=device)
        self.graphs: dict[int, _Graph] = {}
        self.products = Products.fastest(batch_size, weight.shape[0], table.shape[1], device)
        self.staging = [self._staging(0, 0) for _ in range(RING)]
        self.launched = 0
        dense = sum(p.numel() * p.element_size() for p in ps.params[1:])
        self._bytes = (dense, 8 + table.shape[1] * table.element_size())  # per step, per id

    def run_round(
        self, epoch: int, positions: list[int], ends: list[int], tick: Callable[[], bool]
    ) -> RoundResult:
        """Replay chunks from ``positions[0]`` until ``ends[0]`` (the last chunk cut short
        there), ``tick()`` asks to park, or a loss comes back non-finite; then wait for the GPU."""
        from trainer.step import DataCursor

        whole = DataCursor(epoch=epoch, seed=self.seed).shard(len(self.targets), 0, 1)
        shard = whole[: ends[0]]
        self.ps.counters.learner(0)[C.CURSOR] = positions[0]
        position, queue, failed = positions[0], deque[_InFlight](), False
        self.stream.wait_stream(torch.cuda.current_stream(self.device))  # e.g. a restore's copies
        with torch.cuda.stream(self.stream):
            lr = self.ps.opt.rate(int(self.ps.server[C.LR_CUTS]))
            while position < len(shard):
                chunk = pack_chunk(
                    self.bags, self.targets, shard, position, self.batch_size, lr, self.class_weights
                )
                if len(queue) == RING and (failed := self._harvest(queue.popleft())):
                    break
                queue.append(self._launch(chunk))
                position = int(chunk.ends[-1])
                while queue and queue[0].staging.event.query() and not failed:
                    failed = self._harvest(queue.popleft())
                if failed or tick():
                    break
            for item in queue:
                if failed:
                    item.staging.event.synchronize()  # landed after the failure: not counted
                else:
                    failed = self._harvest(item)
        self.stream.synchronize()
        return _collect(self.ps, self.losses, [len(whole)])

    def _launch(self, chunk: PackedChunk) -> _InFlight:
        """Queue a chunk on the learner's stream: its inputs, the replay, its losses back."""
        graph = self.graphs.get(chunk.width) or self._capture(chunk.width, chunk.floats.shape[1])
        staging = self.staging[self.launched % RING]
        self.launched += 1
        if staging.ints.numel() < chunk.ints.size or staging.floats.numel() < chunk.floats.size:
            staging = self.staging[(self.launched - 1) % RING] = self._staging(
                chunk.ints.size * 2, chunk.floats.size * 2
            )
        ints = staging.ints[: chunk.ints.size]
        floats = staging.floats[: chunk.floats.size]
        ints.numpy()[:] = chunk.ints.reshape(-1)
        floats.numpy()[:] = chunk.floats.reshape(-1)
        graph.ints.copy_(ints.view(graph.ints.shape), non_blocking=True)
        graph.floats.copy_(floats.view(graph.floats.shape), non_blocking=True)
        graph.graph.replay()
        staging.losses.copy_(graph.losses, non_blocking=True)
        staging.event.record(self.stream)
        return _InFlight(chunk, staging)

    def _harvest(self, item: _InFlight) -> bool:
        """Count a chunk's steps once the GPU is done with it; True if a loss was not finite."""
        item.staging.event.synchronize()
        chunk = item.chunk
        losses = item.staging.losses.numpy()[: chunk.steps].astype(np.float64)
        finite = np.isfinite(losses)
        good = chunk.steps if finite.all() else int(np.argmin(finite))
        server, mine = self.ps.server, self.ps.counters.learner(0)
        server[C.VERSION] += good
        server[C.APPLIED] += good
        server[C.DIRECT] += good
        server[C.HIST] += good  # staleness 0
        server[C.BYTES_APPLIED] += good * self._bytes[0] + int(chunk.ids[:good].sum()) * self._bytes[1]
        mine[C.STEPS] += min(good + 1, chunk.steps)
        mine[C.SAMPLES] += int(chunk.samples[:good].sum())
        if good:
            mine[C.CURSOR] = int(chunk.ends[good - 1])
        self.losses[0, 0] += losses[:good].sum()
        self.losses[0, 1] += good
        if good < chunk.steps:
            self.losses[0] = (losses[good], -1)  # as run_shard leaves a non-finite loss
            return True
        return False

    def _capture(self, width: int, float_width: int) -> _Graph:
        """Capture the chunk program for ids padded to ``width``.

        Warmed up first on a side stream, as torch.cuda.graph asks, with the zeroed input
        buffers: every loss weight 0, so every gradient is 0 and the parameters do not move.
        """
        ints = torch.zeros(
            (STEPS_PER_GRAPH, 2 * width + 2 * self.batch_size), dtype=torch.int64, device=self.device
        )
        floats = torch.zeros((STEPS_PER_GRAPH, float_width), device=self.device)
        losses = torch.zeros(STEPS_PER_GRAPH, device=self.device)

        def program() -> None:
            for step in range(STEPS_PER_GRAPH):
                sgd_step(
                    self.params,
                    ints[step],
                    floats[step],
                    width,
                    self.batch_size,
                    losses[step],
                    self.products,
                    self.direct_scale,
                )

        graph = _captured(program, program, self.stream, self.device)
        self.graphs[width] = _Graph(graph, ints, floats, losses)
        return self.graphs[width]

    def _staging(self, ints: int, floats: int) -> _Staging:
        return _Staging(
            torch.empty(ints, dtype=torch.int64, pin_memory=ints > 0),
            torch.empty(floats, dtype=torch.float32, pin_memory=floats > 0),
            torch.empty(STEPS_PER_GRAPH, dtype=torch.float32, pin_memory=True),
            torch.cuda.Event(),
        )

    def close(self) -> None:
        """Nothing runs between rounds; nothing to stop."""

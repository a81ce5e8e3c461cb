"""One GPU: taas's parameter server (learners as CUDA streams) against one process's loop and
its CUDA-graph replay, ../shared/PERFORMANCE.md's bar for the engine on CUDA.

    python benchmarks/ps_cuda_bench.py [--json] [--learners 4] [--seconds 2] [--batches 1,16,256]
                                       [--models sparse,dense] [--modes single,graph,ps,ps-graph]

The models and synthetic batches are ps_bench.py's (``sparse``: the production TextClassifier,
EmbeddingBag 1 M x 128 -> 150 classes, bags of 24 ids; ``dense``: the MLP 1024-2048-2048-150),
plain SGD at ps_bench's learning rate, every batch already in device memory:

* ``single``  one stream, a plain loop: forward, backward, SGD step (the sparse model's rows
              by one ``index_add_``, as in ../shared/PERFORMANCE.md);
* ``graph``   the same step captured once as a CUDA graph, then replayed after copying the
              next batch into the captured inputs;
* ``ps``      K learner threads, each on its own stream, on a ParameterServer whose tensors
              are in device memory: what the engine runs on CUDA (trainer.ps.cuda), every
              gradient applied exactly once (the engine's path under Adam);
* ``ps-graph`` what the engine runs on CUDA under SGD (trainer.ps.graph): one learner whose
              mini-batches replay 16 at a time as CUDA graphs, the sparse model only (the
              production TextClassifier), fed like a training job: a shard of rows in host
              memory (bags of 24 ids), each chunk packed on the host and copied in, every
              gradient applied exactly once, checked at the end.

Each mode warms up, then runs for ``--seconds``; samples/s counts the steps finished in that
window (the device synchronised at both ends). Without CUDA it says so and exits 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ps_bench import (  # noqa: E402
    IDS_PER_EXAMPLE,
    LR,
    SPARSE,
    build_model,
    learner_task,
    make_batches,
    server_params,
)

from trainer.features import Bags  # noqa: E402
from trainer.ps import counters as C  # noqa: E402
from trainer.ps.graph import GraphPool  # noqa: E402
from trainer.ps.learner import Learner, ShardData  # noqa: E402
from trainer.ps.optimizer import OptimizerConfig  # noqa: E402
from trainer.ps.server import ParameterServer  # noqa: E402
from trainer.step import Batch  # noqa: E402

_WARMUP_STEPS = 20
_CHECK_EVERY = 16  # steps between looks at the clock (a look costs a host call)


def _sgd_step(kind: str, params: list[torch.Tensor], b: Batch) -> None:
    """One forward, backward and SGD update of ``params`` in place, on the current stream.

    Functional, so that it captures into a CUDA graph: the sparse model's embedding gradient
    is its touched rows (each id's share of its bag's gradient), added by one ``index_add_``."""
    if kind == "sparse":
        table, weight, bias = params
        bags = F.embedding_bag(b.ids, table.detach(), b.offsets, mode="sum", per_sample_weights=b.weights)
        bags.requires_grad_(True)  # a leaf: the table's gradient is its rows, made below
        loss = F.cross_entropy(F.linear(bags, weight, bias), b.targets)
        grad_bags, grad_weight, grad_bias = torch.autograd.grad(loss, [bags, weight, bias])
        per_bag = b.ids.numel() // b.targets.numel()  # equal bags (ps_bench's batches)
        rows = grad_bags.repeat_interleave(per_bag, dim=0) * b.weights.unsqueeze(1)
        with torch.no_grad():
            table.index_add_(0, b.ids, rows, alpha=-LR)
            weight.add_(grad_weight, alpha=-LR)
            bias.add_(grad_bias, alpha=-LR)
        return
    x = b.weights
    for i in range(0, len(params), 2):
        x = F.linear(x, params[i], params[i + 1])
        if i + 2 < len(params):
            x = F.relu(x)
    grads = torch.autograd.grad(F.cross_entropy(x, b.targets), params)
    with torch.no_grad():
        torch._foreach_add_(params, grads, alpha=-LR)


def _params(kind: str, device: torch.device) -> list[torch.Tensor]:
    model = build_model(kind, 0)
    return [p.detach().to(device).requires_grad_(True) for p in model.parameters()]


def _tensors(b: Batch) -> tuple[torch.Tensor, ...]:
    """A batch's tensors, in the order Batch takes them."""
    return b.ids, b.offsets, b.weights, b.targets


def _timed(step: Callable[[int], None], seconds: float, device: torch.device) -> float:
    """Steps per second of ``step(i)`` over ``seconds``, the device synchronised at both ends."""
    for i in range(_WARMUP_STEPS):
        step(i)
    torch.cuda.synchronize(device)
    start, steps = time.perf_counter(), 0
    while time.perf_counter() - start < seconds:
        for _ in range(_CHECK_EVERY):
            step(steps)
            steps += 1
    torch.cuda.synchronize(device)
    return steps / (time.perf_counter() - start)


def run_single(kind: str, batches: list[Batch], seconds: float, device: torch.device) -> float:
    """Steps/s of the plain loop."""
    params = _params(kind, device)
    return _timed(lambda i: _sgd_step(kind, params, batches[i % len(batches)]), seconds, device)


def run_graph(kind: str, batches: list[Batch], seconds: float, device: torch.device) -> float:
    """Steps/s of the step captured as a CUDA graph and replayed, each replay on a new batch."""
    params = _params(kind, device)
    static = Batch(*(t.clone() for t in _tensors(batches[0])))
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm-up before capture, as torch.cuda.graph asks
        for _ in range(3):
            _sgd_step(kind, params, static)
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _sgd_step(kind, params, static)

    def step(i: int) -> None:
        for target, source in zip(_tensors(static), _tensors(batches[i % len(batches)]), strict=True):
            target.copy_(source, non_blocking=True)
        graph.replay()

    return _timed(step, seconds, device)


def run_ps(
    kind: str, batch: int, pools: list[list[Batch]], seconds: float, device: torch.device
) -> tuple[float, dict[str, Any]]:
    """Steps/s of K learner threads, each on its own stream, pushing to a device-resident PS."""
    params = server_params(kind, build_model(kind, 0))
    k = len(pools)
    ps = ParameterServer.create(
        params, OptimizerConfig(kind="sgd", lr=LR), k, batch * IDS_PER_EXAMPLE, shared=False, device=device
    )
    learners = [Learner(ps, learner_task(kind), r) for r in range(k)]
    streams = [torch.cuda.Stream(device) for _ in range(k)]
    counts = [0] * k
    ready, go, stop = threading.Barrier(k + 1, timeout=120), threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def learner(rank: int) -> None:
        try:
            with torch.cuda.stream(streams[rank]):
                pool = pools[rank]
                for i in range(_WARMUP_STEPS):
                    learners[rank].step(pool[i % len(pool)], batch, 0)
                streams[rank].synchronize()
                ready.wait()
                go.wait()
                i = 0
                while not stop.is_set():
                    learners[rank].step(pool[i % len(pool)], batch, 0)
                    i += 1
                    counts[rank] = i
                streams[rank].synchronize()
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
            ready.abort()

    threads = [threading.Thread(target=learner, args=(r,), daemon=True) for r in range(k)]
    for thread in threads:
        thread.start()
    try:
        ready.wait()  # every learner warmed up
    except threading.BrokenBarrierError as broken:
        raise RuntimeError(f"ps/{kind}/{batch}: a learner failed") from (errors[0] if errors else broken)
    torch.cuda.synchronize(device)
    start = time.perf_counter()
    go.set()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"ps/{kind}/{batch}: a learner failed") from errors[0]
    ps.drain()
    stats = ps.stats()
    assert stats.applied == stats.pushed, stats  # exactly once on CUDA too
    assert stats.pushed == k * _WARMUP_STEPS + sum(counts), (stats.pushed, counts)
    return sum(counts) / elapsed, {"apply_busy": round(stats.apply_s / max(elapsed, 1e-9), 3)}


def run_ps_graph(batch: int, seconds: float, device: torch.device) -> float:
    """Steps/s of the graph learner on the sparse model: rounds over a synthetic shard (as
    many rows as 64 steps, at least 4,096) until ``seconds`` have passed, after a warm-up
    round that captures its graphs."""
    rows = max(4096, 64 * batch)
    gen = np.random.default_rng(batch)
    bags = Bags(
        gen.integers(0, SPARSE.rows, rows * IDS_PER_EXAMPLE),
        np.full(rows * IDS_PER_EXAMPLE, 1.0 / IDS_PER_EXAMPLE, dtype=np.float32),
        np.arange(0, rows * IDS_PER_EXAMPLE, IDS_PER_EXAMPLE),
    )
    data = ShardData.of(bags, gen.integers(0, SPARSE.classes, rows), shared=False)
    ps = ParameterServer.create(
        server_params("sparse", build_model("sparse", 0)),
        OptimizerConfig(kind="sgd", lr=LR),
        1,
        batch * IDS_PER_EXAMPLE,
        shared=False,
        device=device,
    )
    pool = GraphPool(ps, data, batch, seed=0, device=device)

    def until(deadline: float) -> Callable[[], bool]:
        return lambda: time.perf_counter() >= deadline

    epoch, positions = 1, [0]
    warm = pool.run_round(epoch, positions, [len(data.targets)], until(time.perf_counter() + 0.2))
    epoch, positions = (epoch + 1, [0]) if warm.done[0] else (epoch, warm.positions)
    steps = ps.version()
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        result = pool.run_round(epoch, positions, [len(data.targets)], until(deadline))
        epoch, positions = (epoch + 1, [0]) if result.done[0] else (epoch, result.positions)
    elapsed = time.perf_counter() - start
    stats = ps.stats()
    assert stats.applied == stats.pushed == ps.version() == ps.counters.learner(0)[C.STEPS], stats
    return (ps.version() - steps) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--learners", type=int, default=4, help="K streams for ps (the engine's default: 4)")
    parser.add_argument("--seconds", type=float, default=2.0, help="measured seconds per mode")
    parser.add_argument("--batches", default="1,16,256")
    parser.add_argument("--models", default="sparse,dense")
    parser.add_argument("--modes", default="single,graph,ps,ps-graph")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("ps_cuda_bench: no CUDA device here", file=sys.stderr)
        sys.exit(2)
    device = torch.device("cuda")
    results = []
    for kind in args.models.split(","):
        for batch in [int(b) for b in args.batches.split(",")]:
            pools = [[b.to(device) for b in make_batches(kind, batch, 100 + r)] for r in range(args.learners)]
            for mode in args.modes.split(","):
                extra: dict[str, Any] = {}
                if mode == "ps-graph" and kind != "sparse":
                    continue  # the graph learner trains the production model only
                if mode == "single":
                    rate = run_single(kind, pools[0], args.seconds, device)
                elif mode == "graph":
                    rate = run_graph(kind, pools[0], args.seconds, device)
                elif mode == "ps":
                    rate, extra = run_ps(kind, batch, pools, args.seconds, device)
                elif mode == "ps-graph":
                    rate = run_ps_graph(batch, args.seconds, device)
                else:
                    parser.error(f"unknown mode {mode!r}")
                row = {"model": kind, "mode": mode, "batch": batch, "samples_per_s": round(rate * batch, 1)}
                results.append(row | extra)
                if not args.json:
                    print(f"{kind:<7}{batch:>5} {mode:<7}{rate * batch:>14,.0f} samples/s", file=sys.stderr)
    report = {"device": torch.cuda.get_device_name(device), "learners": args.learners, "results": results}
    print(json.dumps(report) if args.json else json.dumps(report, indent=1))


if __name__ == "__main__":
    main()

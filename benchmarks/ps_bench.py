"""Scale-up on one machine: taas's parameter server against the ways a PyTorch user scales up.

    python benchmarks/ps_bench.py [--json] [--learners K] [--seconds S] [--batches 1,4,16,64]
                                  [--models sparse,dense] [--modes single,ps,hogwild,ddp,bounded]
                                  [--staleness-bound B]

Models (../shared/PERFORMANCE.md): ``sparse`` = the production TextClassifier (EmbeddingBag
1 M x 128 -> linear, 150 classes) on synthetic bags of 24 ids; ``dense`` = an MLP
1024-2048-2048-150 (6.6 M parameters, GaDei's regime) on random inputs. Every mode runs the
same model, the same synthetic batches and plain SGD (lr 0.01), one torch thread per process:

* ``single``  one process, plain loop (forward, backward, optimizer.step), no PS;
* ``ps``      K learner processes on taas's parameter server (trainer.ps), exactly-once applies;
* ``bounded`` the same with the staleness bound ``--staleness-bound`` (default 0: learners
              wait until no gradient is staler than it; not in the default modes);
* ``ps:S``    (and ``bounded:S``) the PS with S stripes (trainer.ps.stripes; 0: every gradient
              applied whole under the apply role); plain ``ps`` takes the engine's default
              for K (``default_stripes``); ``ps:S:R:M`` lands at most R rows in one call across
              a run of stripes, joining only stripes with at least M of the gradient's rows
              (defaults ``RUN_MAX_ROWS`` and ``JOIN_MIN_ROWS``; R = 0: each stripe alone);
* ``hogwild`` K processes on ``model.share_memory()`` parameters, lock-free, PyTorch's Hogwild;
* ``ddp``     K processes, DistributedDataParallel on gloo.

Each mode's processes are spawned, warm up for a fraction of a second, then run for
``--seconds``; samples/s counts every process's examples over that window. The report adds
the machine's memory-copy bandwidth (one thread, a torch copy of the dense model's size)
and the PS's achieved bandwidth on the dense model while it moves data: (gradient bytes
copied into slots + gradient bytes applied to the parameters) / (seconds copying into slots +
seconds applying). (Learners read parameters in place, so pulls move no bytes.)
For ``ps`` and ``bounded`` it also reports ``apply_busy``: the share of the measured window in
which the server's one apply role was held. Without stripes every gradient is applied under
that role, so it is the PS's ceiling: at a busy share b, the same model and batch cannot go
past about samples_per_s / b however many learners push, and with learners as fast as alone
b grows with K; with stripes the role only orders gradients (docs/benchmarks.md).
With --json it prints one JSON object; without, a table with the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from trainer.hparams import DEFAULT_HPARAMS  # noqa: E402
from trainer.model import ModelConfig, TextClassifier  # noqa: E402
from trainer.ps.applier import Gradient  # noqa: E402
from trainer.ps.learner import Learner  # noqa: E402
from trainer.ps.optimizer import OptimizerConfig  # noqa: E402
from trainer.ps.server import ParameterServer  # noqa: E402
from trainer.ps.stripes import JOIN_MIN_ROWS, RUN_MAX_ROWS, default_stripes  # noqa: E402
from trainer.step import Batch, TextClassifierTask, model_parameters  # noqa: E402

SPARSE = ModelConfig(rows=1_000_000, dim=128, classes=150)
IDS_PER_EXAMPLE = 24
DENSE_SIZES = (1024, 2048, 2048, 150)
LR = 0.01
_POOL = 32  # distinct batches per process, cycled
_WARMUP_S = 0.5

# control words shared with workers
_GO, _STOP_AT, _FIELDS = 0, 1, 2


def build_model(kind: str, seed: int) -> nn.Module:
    """The benchmark model ``kind`` with seeded weights."""
    generator = torch.Generator().manual_seed(seed)
    if kind == "sparse":
        return TextClassifier(
            SPARSE,
            embedding_init=DEFAULT_HPARAMS.embedding_init,
            output_init=DEFAULT_HPARAMS.output_init,
            generator=generator,
        )
    torch.manual_seed(seed)
    a, b, c, d = DENSE_SIZES
    return nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, c), nn.ReLU(), nn.Linear(c, d))


def make_batches(kind: str, batch: int, seed: int) -> list[Batch]:
    """A pool of synthetic batches (sparse: bags of 24 ids; dense: ids unused, inputs in weights)."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(_POOL):
        targets = torch.randint(0, 150, (batch,), generator=gen)
        if kind == "sparse":
            ids = torch.randint(0, SPARSE.rows, (batch * IDS_PER_EXAMPLE,), generator=gen)
            offsets = torch.arange(0, batch * IDS_PER_EXAMPLE, IDS_PER_EXAMPLE)
            weights = torch.full((batch * IDS_PER_EXAMPLE,), 1.0 / IDS_PER_EXAMPLE)
        else:
            ids, offsets = torch.zeros(0, dtype=torch.int64), torch.zeros(0, dtype=torch.int64)
            weights = torch.randn((batch, DENSE_SIZES[0]), generator=gen)
        out.append(Batch(ids, offsets, weights, targets))
    return out


def _forward(kind: str, model: nn.Module, b: Batch) -> torch.Tensor:
    logits = model(b.ids, b.offsets, b.weights) if kind == "sparse" else model(b.weights)
    return F.cross_entropy(logits, b.targets)


class DenseTask:
    """The MLP's gradient against the server's tensors: dense pull is a zero-copy view."""

    def attach(self, params: list[torch.Tensor]) -> None:
        self.model = build_model("dense", 0)
        for param, shared in zip(self.model.parameters(), params, strict=True):
            param.data = shared  # the module reads the shared tensors in place

    def pull(self, batch: Batch) -> tuple[None, int]:
        return None, 0

    def compute(self, pulled: None, batch: Batch) -> tuple[float, Gradient]:
        loss = _forward("dense", self.model, batch)
        grads = torch.autograd.grad(loss, list(self.model.parameters()))
        return float(loss.detach()), Gradient(torch.zeros(0, dtype=torch.int64), list(grads))


def server_params(kind: str, model: nn.Module) -> list[tuple[torch.Tensor, bool]]:
    """The model's parameters in server order, each with whether it is pushed by rows."""
    if kind == "sparse":
        return model_parameters(model)  # type: ignore[arg-type]  # build_model's TextClassifier
    return [(p, False) for p in model.parameters()]


def learner_task(kind: str) -> TextClassifierTask | DenseTask:
    """The gradient task a PS learner of model ``kind`` runs (SGD: rows need not be unique)."""
    return TextClassifierTask(unique_rows=False) if kind == "sparse" else DenseTask()


def _worker(
    mode: str,
    kind: str,
    batch: int,
    rank: int,
    k: int,
    shared: Any,
    ctl: torch.Tensor,
    counts: torch.Tensor,
    port: int,
) -> None:
    torch.set_num_threads(1)
    torch.manual_seed(1 + rank)
    batches = make_batches(kind, batch, 100 + rank)
    ctl_view, counts_view = ctl.numpy(), counts.numpy()
    if mode in ("ps", "bounded"):
        ps = ParameterServer(shared)
        learner = Learner(ps, learner_task(kind), rank)

        def step(b: Batch) -> None:
            learner.step(b, batch, 0)
    else:
        if mode == "ddp":
            import torch.distributed as dist
            from torch.nn.parallel import DistributedDataParallel

            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=k)
            model: nn.Module = DistributedDataParallel(build_model(kind, 0))
        else:
            model = shared  # hogwild: the shared module; single: a private one
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)

        def step(b: Batch) -> None:
            optimizer.zero_grad(set_to_none=True)
            _forward(kind, model, b).backward()
            optimizer.step()

    step(batches[0])  # first-call costs out of the measurement
    counts_view[rank, 1] = 1  # ready
    while not ctl_view[_GO]:
        time.sleep(0.001)
    steps = 0
    while steps < ctl_view[_STOP_AT]:
        step(batches[steps % _POOL])
        steps += 1
        counts_view[rank, 0] += batch
    if mode == "ddp":
        import torch.distributed as dist

        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_mode(
    mode: str, kind: str, batch: int, k: int, seconds: float, bound: int = 0
) -> tuple[float, dict[str, Any] | None]:
    """samples/s of one mode (and the PS's counters for ps and bounded)."""
    mode, _, layout = mode.partition(":")
    stripes, run_rows, join_min = (layout.split(":") + ["", "", ""])[:3]
    ctx = mp.get_context("spawn")
    procs = 1 if mode == "single" else k
    ctl = torch.zeros(_FIELDS, dtype=torch.int64).share_memory_()
    ctl[_STOP_AT] = 1 << 62
    counts = torch.zeros((procs, 2), dtype=torch.int64).share_memory_()
    shared: Any = None
    ps = None
    if mode in ("ps", "bounded"):
        model = build_model(kind, 0)
        params = server_params(kind, model)
        opt = OptimizerConfig(kind="sgd", lr=LR, staleness_bound=bound if mode == "bounded" else None)
        ps = ParameterServer.create(
            params,
            opt,
            procs,
            batch * IDS_PER_EXAMPLE,
            shared=True,
            stripes=int(stripes) if stripes else default_stripes(procs),
            run_rows=int(run_rows) if run_rows else RUN_MAX_ROWS,
            join_min=int(join_min) if join_min else JOIN_MIN_ROWS,
        )
        del model
        shared = ps.handles
    elif mode in ("single", "hogwild"):
        shared = build_model(kind, 0)
        if mode == "hogwild":
            shared.share_memory()
    port = _free_port()
    workers = [
        ctx.Process(
            target=_worker, args=(mode, kind, batch, r, procs, shared, ctl, counts, port), daemon=True
        )
        for r in range(procs)
    ]
    for w in workers:
        w.start()
    view = counts.numpy()
    deadline = time.monotonic() + 120
    while not view[:, 1].all():
        if time.monotonic() > deadline or any(w.exitcode not in (None, 0) for w in workers):
            raise RuntimeError(f"{mode}/{kind}/{batch}: workers failed to start")
        time.sleep(0.01)
    ctl[_GO] = 1
    time.sleep(_WARMUP_S)
    c0, t0, a0 = int(view[:, 0].sum()), time.perf_counter(), _apply_s(ps)
    time.sleep(seconds)
    # At least one step in the window: on a loaded machine a learner may not be scheduled for
    # the whole of a short window, and a rate of 0 would only say the machine was busy.
    deadline = time.monotonic() + 120
    while int(view[:, 0].sum()) == c0 and time.monotonic() < deadline:
        time.sleep(0.001)
    c1, t1, a1 = int(view[:, 0].sum()), time.perf_counter(), _apply_s(ps)
    # Stop every process at the same step count, so DDP's collectives all complete.
    ctl[_STOP_AT] = int(view[:, 0].max()) // batch + 3
    for w in workers:
        w.join(timeout=120)
        if w.exitcode != 0:
            raise RuntimeError(f"{mode}/{kind}/{batch}: a worker exited with {w.exitcode}")
    stats = None
    if ps is not None:
        # As the engine's supervisor does at every round end: a last push published after the
        # last holder's drain read the slots is still READY (docs/parameter-server.md).
        ps.drain()
        st = ps.stats()
        assert st.applied == st.pushed, st  # exactly once, in every bench run too
        stats = {**st.as_dict(), "apply_busy": (a1 - a0) / (t1 - t0)}
    return (c1 - c0) / (t1 - t0), stats


def _per_step_us(stats: dict[str, Any]) -> dict[str, float]:
    """Microseconds per applied gradient, summed over learners, of compute, push (role wait,
    slot copy or apply, landing) and, of push, landing (striped servers), whole run."""
    steps = max(int(stats["applied"]), 1)
    return {key: round(stats[f"{key}_s"] / steps * 1e6, 1) for key in ("compute", "push", "land")}


def _apply_s(ps: ParameterServer | None) -> float:
    """Seconds the server's apply role has spent applying so far (0 without a server)."""
    return ps.stats().apply_s if ps is not None else 0.0


def memcpy_bandwidth(nbytes: int, repeats: int = 30) -> float:
    """Bytes/s of a one-thread torch copy of ``nbytes``."""
    src = torch.randn(nbytes // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    start = time.perf_counter()
    for _ in range(repeats):
        dst.copy_(src)
    return nbytes * repeats / (time.perf_counter() - start)


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if not a or not b else f"{a / b:.2f}"


def _table(report: dict[str, Any]) -> str:
    rows: dict[tuple[str, int], dict[str, float]] = {}
    for r in report["results"]:
        rows.setdefault((r["model"], r["batch"]), {})[r["mode"]] = r["samples_per_s"]
        if r["mode"] == "ps" and "apply_busy" in r:
            rows[(r["model"], r["batch"])]["busy"] = r["apply_busy"]
    header = (
        f"{'model':<7}{'batch':>6}{'single':>11}{'ps':>11}{'hogwild':>11}{'ddp':>11}{'bounded':>11}"
        f"{'ps/single':>11}{'ps/hogwild':>11}{'ps/ddp':>8}{'bounded/ps':>12}{'ps busy':>9}"
    )
    lines = [
        f"K = {report['learners']} learners, bound {report['staleness_bound']}",
        header,
        "-" * len(header),
    ]
    for (model, batch), m in rows.items():
        cells = "".join(f"{m.get(x, 0):>11,.0f}" for x in ("single", "ps", "hogwild", "ddp", "bounded"))
        ps = m.get("ps")
        lines.append(
            f"{model:<7}{batch:>6}{cells}{_ratio(ps, m.get('single')):>11}"
            f"{_ratio(ps, m.get('hogwild')):>11}{_ratio(ps, m.get('ddp')):>8}"
            f"{_ratio(m.get('bounded'), ps):>12}"
            f"{m['busy'] if 'busy' in m else '-':>9}"
        )
    for r in report["results"]:  # ps:S, the PS with S stripes, beside the same run's Hogwild
        if ":" in r["mode"]:
            hogwild = rows[(r["model"], r["batch"])].get("hogwild")
            lines.append(
                f"{r['model']:<7}{r['batch']:>6}  {r['mode']:<10}{r['samples_per_s']:>11,.0f} samples/s"
                f"  /hogwild {_ratio(r['samples_per_s'], hogwild)}  busy {r.get('apply_busy', '-')}"
            )
    memcpy, psbw = report["memcpy_bytes_per_s"], report["ps_dense_bytes_per_s"]
    lines.append(
        f"memcpy {memcpy / 1e9:.2f} GB/s; PS on the dense model {(psbw or 0) / 1e9:.2f} GB/s "
        f"({_ratio(psbw, memcpy)} x memcpy)"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--learners", type=int, default=len(os.sched_getaffinity(0)), help="K (default: cores)"
    )
    parser.add_argument("--seconds", type=float, default=2.0, help="measured seconds per mode")
    parser.add_argument("--batches", default="1,4,16,64")
    parser.add_argument("--models", default="sparse,dense")
    parser.add_argument("--modes", default="single,ps,hogwild,ddp")
    parser.add_argument("--staleness-bound", type=int, default=0, help="the bounded mode's bound (default 0)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each configuration N times (modes interleaved), keep the best",
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    results, bytes_moved, busy_s = [], 0, 0.0
    for kind in args.models.split(","):
        for batch in [int(b) for b in args.batches.split(",")]:
            best: dict[str, float] = {}
            busy: dict[str, float] = {}  # the apply role's busy share in the best run of a mode
            per_step: dict[str, dict[str, float]] = {}  # where a learner's step went, same run
            for _ in range(args.repeat):
                for mode in args.modes.split(","):
                    rate, stats = run_mode(
                        mode, kind, batch, args.learners, args.seconds, args.staleness_bound
                    )
                    if mode not in best or rate > best[mode]:
                        best[mode] = rate
                        if stats is not None:
                            busy[mode] = stats["apply_busy"]
                            per_step[mode] = _per_step_us(stats)
                    if not args.json:
                        print(f"{kind:<7}{batch:>4} {mode:<8}{rate:>12,.0f} samples/s", file=sys.stderr)
                    if stats is not None and mode.startswith("bounded") and args.staleness_bound < 4:
                        # histogram buckets 0-3 are exact staleness values: none past the bound
                        assert not any(stats["staleness_histogram"][args.staleness_bound + 1 :]), stats
                    if stats is not None and mode.startswith("ps") and kind == "dense":
                        bytes_moved += stats["bytes_pushed"] + stats["bytes_applied"]
                        busy_s += stats["copy_s"] + stats["apply_s"] + stats["land_s"]
            results += [
                {"model": kind, "mode": mode, "batch": batch, "samples_per_s": round(rate, 1)}
                | (
                    {"apply_busy": round(busy[mode], 3), "per_step_us": per_step[mode]}
                    if mode in busy
                    else {}
                )
                for mode, rate in best.items()
            ]
    dense_bytes = sum(p.numel() * 4 for p in build_model("dense", 0).parameters())
    report = {
        "learners": args.learners,
        "staleness_bound": args.staleness_bound,
        "results": results,
        "memcpy_bytes_per_s": round(memcpy_bandwidth(dense_bytes)),
        "ps_dense_bytes_per_s": round(bytes_moved / busy_s) if busy_s else None,
    }
    print(json.dumps(report) if args.json else _table(report))


if __name__ == "__main__":
    main()

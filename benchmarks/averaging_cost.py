"""What epoch iterate averaging costs in training time: the same job with and without it.

    python benchmarks/averaging_cost.py                              # the chaos scenarios' job
    python benchmarks/averaging_cost.py ../shared/data/snips --no-chaos --repeats 3

One JSON line per workload, side by side: wall seconds of ``trainer.train`` with
DEFAULT_HPARAMS (``average_snapshots`` 8) and with ``average_snapshots=0`` (the last
iterate), the median of ``--repeats`` runs taken in alternation, their ratio, and each run's
epochs (with a validation split, the mean may stop training at another epoch than the last
iterate would). ``averaging_s`` is the supervisor's own time in the averaging
(``IterateSum``: the snapshots' sum, the mean swapped in and the last iterate back, the
validation in between left out), and ``averaging_share`` its share of the averaged run's
seconds: the cost itself, whatever the epochs. Each snapshot adds the whole parameter table,
so a wide table (many distinct n-grams) with short epochs is where it shows. The default
workload is ``benchmarks/chaos.long_csv``: 900 random long texts, no validation split, 53
epochs of 57 updates at K = 1, trained without cross-fitting as the chaos platform does.
A dataset folder's workload is its train.csv with the default hparams.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.chaos import long_csv  # noqa: E402
from trainer import LabelledData, read_labelled_csv, train  # noqa: E402
from trainer.averaging import IterateSum  # noqa: E402
from trainer.hparams import DEFAULT_HPARAMS, HParams  # noqa: E402


@contextmanager
def _timed_averaging() -> Iterator[list[float]]:
    """Count the seconds spent in IterateSum (not in the block that mean_in holds the mean for)."""
    spent = [0.0]
    add, mean_in = IterateSum.add, IterateSum.mean_in

    def timed_add(self: IterateSum, params: Any) -> None:
        started = time.perf_counter()
        add(self, params)
        spent[0] += time.perf_counter() - started

    @contextmanager
    def timed_mean_in(self: IterateSum, params: Any, keep: Any) -> Iterator[None]:
        started = time.perf_counter()
        held = mean_in(self, params, keep)
        held.__enter__()
        spent[0] += time.perf_counter() - started
        try:
            yield
        finally:
            started = time.perf_counter()
            held.__exit__(*sys.exc_info())
            spent[0] += time.perf_counter() - started

    IterateSum.add, IterateSum.mean_in = timed_add, timed_mean_in  # type: ignore[method-assign]
    try:
        yield spent
    finally:
        IterateSum.add, IterateSum.mean_in = add, mean_in  # type: ignore[method-assign]


def _run(data: LabelledData, hparams: HParams, learners: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="taas-avg-") as tmp, _timed_averaging() as spent:
        started = time.perf_counter()
        result = train(
            data, workdir=Path(tmp) / "work", out_dir=Path(tmp) / "model", hparams=hparams, learners=learners
        )
        seconds = time.perf_counter() - started
    return {"train_s": seconds, "epochs": result.epochs, "averaging_s": spent[0]}


def compare(name: str, data: LabelledData, base: HParams, repeats: int, learners: int) -> dict[str, object]:
    """Median wall seconds with averaging (``base``) and without, alternating the order."""
    variants = {"averaged": base, "last_iterate": dataclasses.replace(base, average_snapshots=0)}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
    for repeat in range(repeats):
        order = list(variants) if repeat % 2 == 0 else list(reversed(variants))
        for key in order:
            runs[key].append(_run(data, variants[key], learners))
    row: dict[str, object] = {"workload": name, "learners": learners, "repeats": repeats}
    for key, results in runs.items():
        row[key] = {
            "train_s": round(statistics.median(r["train_s"] for r in results), 2),
            "epochs": [int(r["epochs"]) for r in results],
            "averaging_s": round(statistics.median(r["averaging_s"] for r in results), 3),
        }
    averaged, last = runs["averaged"], runs["last_iterate"]
    row["ratio_train_s"] = round(
        statistics.median(r["train_s"] for r in averaged) / statistics.median(r["train_s"] for r in last), 3
    )
    row["averaging_share"] = round(statistics.median(r["averaging_s"] / r["train_s"] for r in averaged), 3)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("datasets", nargs="*", type=Path, help="folders with a train.csv (default: none)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each variant (default 3)")
    parser.add_argument("--learners", type=int, default=1, help="K (default 1)")
    parser.add_argument("--no-chaos", action="store_true", help="skip the chaos scenarios' long-text job")
    args = parser.parse_args()
    workloads: list[tuple[str, LabelledData, HParams]] = []
    if not args.no_chaos:
        texts, labels = zip(*csv.reader(StringIO(long_csv())), strict=True)
        chaos = LabelledData(list(texts), list(labels))
        workloads.append(("chaos.long_csv", chaos, dataclasses.replace(DEFAULT_HPARAMS, cross_fit_folds=0)))
    for folder in args.datasets:
        workloads.append((folder.name, read_labelled_csv(folder / "train.csv"), DEFAULT_HPARAMS))
    for name, data, hparams in workloads:
        row = compare(name, data, hparams, args.repeats, args.learners)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

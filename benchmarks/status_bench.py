"""The bytes of a classifier's status reply, uncompressed and gzipped, by its class count.

    python benchmarks/status_bench.py                      # 30, 500 and 3,000 classes
    python benchmarks/status_bench.py --classes 3000 --rows-per-class 5

A status reply carries the serving version's metrics (``trainer.evaluate``'s report: one
``per_class`` entry a class, a confusion matrix of at most 100 classes). For each class count
this builds that report for held-out rows 90 % right (``--rows-per-class`` a class), renders
it as the API does (compact JSON), and gzips it at level 1, at the API's level
(``service.api.compression.LEVEL``) and at 9. One JSON line per class count: the bytes, each
level's bytes, ratio to the uncompressed reply and median milliseconds.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from service.api.compression import LEVEL  # noqa: E402
from trainer.evaluate import classification_report  # noqa: E402


def _report(classes: int, rows_per_class: int) -> bytes:
    draw = random.Random(0)
    labels = [f"intent_{i:04d}_{draw.choice(['billing', 'weather', 'travel'])}" for i in range(classes)]
    true = [label for label in labels for _ in range(rows_per_class)]
    predicted = [t if draw.random() < 0.9 else draw.choice(labels) for t in true]
    metrics = classification_report(true, predicted)
    return json.dumps({"status": "Available", "metrics": metrics}, separators=(",", ":")).encode()


def _gzip(body: bytes, level: int, repeats: int) -> tuple[int, float]:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        packed = zlib.compress(body, level, wbits=16 + zlib.MAX_WBITS)
        times.append((time.perf_counter() - started) * 1000)
    return len(packed), statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, nargs="+", default=[30, 500, 3000])
    parser.add_argument("--rows-per-class", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    for classes in args.classes:
        body = _report(classes, args.rows_per_class)
        line: dict[str, object] = {"classes": classes, "bytes": len(body)}
        for name, level in (("level1", 1), (f"level{LEVEL}_api", LEVEL), ("level9", 9)):
            size, ms = _gzip(body, level, args.repeats)
            line[name] = {"bytes": size, "ratio": round(size / len(body), 4), "ms": round(ms, 3)}
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()

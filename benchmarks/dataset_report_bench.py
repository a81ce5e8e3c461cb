"""What the dataset report adds to an upload: ``report_of_csv`` on real data sets.

    python benchmarks/dataset_report_bench.py [--rows 15000] [--rounds 3]

For each shared data set (snips: 7 classes; acid: 175 classes) its train and test rows, up to
``--rows`` of them, are written as a canonical CSV (``text,label``), then
:func:`service.catalogue.dataset_report.report_of_csv` (what ``POST /v1/datasets`` runs after
validation: reading the CSV and every finding) is timed, best of ``--rounds``. Prints one JSON
object: per data set its rows, classes, seconds, and the probe's held-out accuracy and top pair.
"""

from __future__ import annotations

import argparse
import csv
import json
import tempfile
import time
from pathlib import Path

from service.catalogue.dataset_report import report_of_csv

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SETS = ("snips", "acid")


def _canonical(name: str, rows: int, dest: Path) -> Path:
    """The set's train then test rows, at most ``rows``, as a canonical CSV at ``dest``."""
    found: list[list[str]] = []
    for part in ("train.csv", "test.csv"):
        with open(DATA / name / part, encoding="utf-8", newline="") as f:
            reader = csv.reader(f)
            next(reader)
            found.extend(row[:2] for row in reader)
    with open(dest, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["text", "label"])
        writer.writerows(found[:rows])
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=15_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in SETS:
            path = _canonical(name, args.rows, Path(folder) / f"{name}.csv")
            times = []
            for _ in range(args.rounds):
                start = time.perf_counter()
                report = report_of_csv(path)
                times.append(time.perf_counter() - start)
            probe = report["confusable_classes"]
            results[name] = {
                "rows": report["rows"],
                "classes": report["classes"],
                "seconds": round(min(times), 3),
                "probe_rows": probe["rows_evaluated"],
                "probe_accuracy": probe["accuracy"],
                "top_pair": probe["pairs"][0] if probe["pairs"] else None,
                "warnings": report["warnings"],
            }
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

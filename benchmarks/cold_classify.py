"""A cold classifier's first classify with the sentence encoder resident, and the API's memory.

    python benchmarks/cold_classify.py [--json] [--classifiers N]

Starts the platform as a user would (``taas up`` in a temp folder, one worker: chaos.platform),
trains ``--classifiers`` English classifiers (the sentence encoder and n-grams) on
chaos.short_csv, and then classifies one text on each in turn, three times over:

* ``first_ms``: the first call of the API process, on the first classifier: the encoder and that
  classifier's model are read from disk;
* ``cold_ms``: each other classifier's first call, the encoder resident (its model alone loads),
  the median and the largest;
* ``warm_ms``: the same calls again, every model cached (the median);
* ``api_rss_bytes``: the API process's resident memory after it started (``started``), after the
  first call (``encoder``) and after the last (``models``), from /proc.

Prints one JSON object with ``--json``, else a readable line per figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from benchmarks import chaos  # noqa: E402

TEXT = "is the cinema open on sunday"


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def _classify_ms(client: httpx.Client, classifier_id: str) -> float:
    started = time.perf_counter()
    reply = client.post(f"/v1/classifiers/{classifier_id}/classify", json={"text": TEXT})
    reply.raise_for_status()
    return (time.perf_counter() - started) * 1000


def measure(folder: Path, classifiers: int) -> dict[str, object]:
    """The figures of the module docstring, from one platform in ``folder``."""
    with chaos.platform(folder, "embedded") as up:
        _, client = up.tenant()
        ids = [chaos.create_classifier(client, chaos.short_csv(), f"cold-{i}") for i in range(classifiers)]
        for classifier_id in ids:
            final = chaos.wait_final(client, classifier_id)
            if final["status"] != "Available":
                raise RuntimeError(f"classifier {classifier_id} ended {final['status']}")
        (api,) = up.pids("api")
        started = _rss(api)
        first = _classify_ms(client, ids[0])
        with_encoder = _rss(api)
        cold = [_classify_ms(client, classifier_id) for classifier_id in ids[1:]]
        warm = [_classify_ms(client, classifier_id) for classifier_id in ids]
        return {
            "classifiers": classifiers,
            "first_ms": round(first, 1),
            "cold_ms": {"median": round(statistics.median(cold), 1), "max": round(max(cold), 1)},
            "warm_ms": {"median": round(statistics.median(warm), 1)},
            "api_rss_bytes": {"started": started, "encoder": with_encoder, "models": _rss(api)},
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object")
    parser.add_argument("--classifiers", type=int, default=6, help="English classifiers to train (2 or more)")
    args = parser.parse_args()
    if args.classifiers < 2:
        parser.error(f"--classifiers {args.classifiers}: at least 2 (one warms the encoder)")
    with tempfile.TemporaryDirectory(prefix="taas-cold-") as folder:
        result = measure(Path(folder), args.classifiers)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()

"""Fair-scheduling benchmark: how long a tenant's single job waits behind another tenant's backlog.

    python benchmarks/fair_bench.py [--json] [--backlog 50] [--workers 2] [--yield-modes off,on]

Starts the platform (``taas up`` on a free port, ``--workers`` training workers), lifts tenant
A's quotas through the admin API, has A create ``--backlog`` classifiers in a burst, then has
B create one. It polls every job until it starts training (``progress.state`` leaves
``queued``) and until it is Available, and reports, per tenant, the wait from create to start
and the job durations (start to Available). Fair dispatch means B's wait is at most about one
job duration; first-come-first-served makes B wait for A's whole backlog. ``--yield-modes``
runs the platform once per mode, side by side: ``off`` (``TAAS_YIELD_TO_FAIRER=false``: B
waits for the first of A's running jobs to end) and ``on`` (A's newest running job gives its
slot to B at once, and resumes later from its checkpoint); the report adds B's wait in median
job durations for each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from benchmarks.serve_bench import embedded_up  # noqa: E402

NLC_CSV = "".join(
    f"{text} {i},{label}\n"
    for i in range(6)
    for text, label in (
        ("what is the weather like", "weather"),
        ("will it rain tomorrow", "weather"),
        ("play some music", "music"),
        ("turn the volume up", "music"),
        ("book a table for two", "food"),
        ("order a pizza", "food"),
    )
)


def _tenant(client: httpx.Client, admin: dict[str, str], name: str, jobs: int) -> dict[str, str]:
    reply = client.post("/v1/admin/tenants", json={"name": name}, headers=admin)
    reply.raise_for_status()
    tenant = reply.json()
    quotas = {"classifiers": jobs + 10, "training_jobs": jobs + 10}
    client.patch(
        f"/v1/admin/tenants/{tenant['tenant_id']}/quotas", json=quotas, headers=admin
    ).raise_for_status()
    return {"Authorization": f"Bearer {tenant['api_key']}"}


def _create(client: httpx.Client, headers: dict[str, str], name: str) -> tuple[str, float]:
    meta = json.dumps({"language": "en", "name": name})
    reply = client.post(
        "/v1/classifiers",
        files={"training_metadata": (None, meta, "application/json"), "training_data": (None, NLC_CSV)},
        headers=headers,
    )
    reply.raise_for_status()
    return reply.json()["classifier_id"], time.monotonic()


def run(backlog: int, workers: int, yield_to_fairer: bool) -> dict[str, object]:
    """Measure one run; returns per-tenant waits and job durations (seconds)."""
    with tempfile.TemporaryDirectory(prefix="fair-bench-") as tmp:
        fairer = str(yield_to_fairer).lower()
        with embedded_up(Path(tmp), workers, TAAS_YIELD_TO_FAIRER=fairer) as (base, admin_key, _):
            with httpx.Client(base_url=base, timeout=60) as client:
                admin = {"Authorization": f"Bearer {admin_key}"}
                a, b = _tenant(client, admin, "tenant-a", backlog), _tenant(client, admin, "tenant-b", 1)
                jobs = [("A", *_create(client, a, f"a{i}"), a) for i in range(backlog)]
                jobs.append(("B", *_create(client, b, "b0"), b))
                started: dict[str, float] = {}
                done: dict[str, float] = {}
                deadline = time.monotonic() + 60 * 30
                while len(done) < len(jobs) and time.monotonic() < deadline:
                    for _, cid, _, headers in jobs:
                        if cid in done:
                            continue
                        body = client.get(f"/v1/classifiers/{cid}", headers=headers).json()
                        now = time.monotonic()
                        if body["progress"]["state"] != "queued":
                            started.setdefault(cid, now)
                        if body["status"] in ("Available", "Failed"):
                            done[cid] = now
                    time.sleep(0.2)
    waits: dict[str, list[float]] = {"A": [], "B": []}
    durations = []
    for tenant, cid, created, _ in jobs:
        if cid in started:
            waits[tenant].append(started[cid] - created)
        if cid in started and cid in done:
            durations.append(done[cid] - started[cid])
    job_median = statistics.median(durations) if durations else None
    return {
        "yield": yield_to_fairer,
        "job_seconds_median": round(job_median, 2) if job_median else None,
        "b_wait_in_jobs": round(waits["B"][0] / job_median, 2) if waits["B"] and job_median else None,
        "wait_seconds": {
            t: {"median": round(statistics.median(w), 2), "max": round(max(w), 2)}
            for t, w in waits.items()
            if w
        },
        "unfinished": len(jobs) - len(done),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--backlog", type=int, default=50, help="jobs tenant A queues first")
    parser.add_argument("--workers", type=int, default=2, help="training workers (slots)")
    parser.add_argument("--yield-modes", default="off,on", help="TAAS_YIELD_TO_FAIRER of each run")
    args = parser.parse_args()
    if not set(args.yield_modes.split(",")) <= {"off", "on"}:
        parser.error(f"--yield-modes takes off and on, not {args.yield_modes!r}")
    runs = [run(args.backlog, args.workers, mode == "on") for mode in args.yield_modes.split(",")]
    report = {"backlog": args.backlog, "workers": args.workers, "runs": runs}
    print(json.dumps(report) if args.json else json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

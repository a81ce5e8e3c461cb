"""The dashboard's overview and the Prometheus scrape on a busy platform, each read cold and warm.

    python benchmarks/ops_bench.py                 # 3,000 jobs finished within the hour
    python benchmarks/ops_bench.py --jobs 300 --points 240

Builds a migrated SQLite database in a temporary folder holding ``--jobs`` succeeded jobs, each
updated within the last hour with a full training history (``--points`` points, the most the
trainer keeps) and its timeline (queued, claimed, a checkpoint a minute, done), and times
``service.ops.views.overview`` and a scrape of ``/metrics``'s platform series. *Cold* reads
with a fresh ``observe.ProgressDigests`` (every job's progress read and walked, as every read
did before the digests were kept) and, for the overview, a fresh
``state_history.ActiveHistory`` (the hour's timeline walked); *warm* reads with the ones the
previous read filled (what each 2-second poll and each scrape costs while no job changes).
One JSON line per read: median milliseconds of each, their ratio, and the scrape's bytes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from alembic import command  # noqa: E402
from alembic.config import Config  # noqa: E402
from prometheus_client import generate_latest  # noqa: E402
from sqlalchemy import create_engine  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from service.core.db import session_factory  # noqa: E402
from service.core.models import Classifier, JobEvent, JobState, Tenant, TrainingJob, utcnow  # noqa: E402
from service.ops import observe, state_history, views  # noqa: E402
from service.ops.metrics import Metrics  # noqa: E402
from service.training.history import HISTORY_KEY  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _migrated(folder: Path) -> str:
    url = f"sqlite:///{folder / 'taas.db'}"
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", url)
    config.attributes["configure_logger"] = False
    command.upgrade(config, "head")
    return url


def _fill(session: Session, jobs: int, points: int) -> None:
    now = utcnow()
    tenant = Tenant(name="busy")
    session.add(tenant)
    session.flush()
    for i in range(jobs):
        classifier = Classifier(tenant_id=tenant.id, name=f"c{i}", language="en", status="Available")
        session.add(classifier)
        session.flush()
        ended = now - timedelta(seconds=3500 * i / jobs)
        start = ended.timestamp() - points
        history = [
            {"t": start + p, "step": 10 * p, "epoch": 1, "loss": 1.0 / (1 + p), "samples_per_second": 3000.0}
            for p in range(points)
        ]
        ps = {"version": 10 * points, "pushed": 10 * points, "applied": 10 * points}
        progress = {
            "phase": "done",
            "samples_per_second": 3000.0,
            "ps": {**ps, "staleness_histogram": [1] * 7},
        }
        job = TrainingJob(
            classifier_id=classifier.id,
            tenant_id=tenant.id,
            state=JobState.SUCCEEDED.value,
            checkpoint_dir=f"ckpt/{i}",
            progress={**progress, HISTORY_KEY: history},
            updated_at=ended,
        )
        session.add(job)
        session.flush()
        began = ended - timedelta(seconds=points)
        timeline = [("queued", began - timedelta(seconds=30)), ("claimed", began)]
        timeline += [("checkpoint", began + timedelta(seconds=s)) for s in range(60, points, 60)]
        session.add_all(
            JobEvent(job_id=job.id, kind=kind, epoch=1, at=at) for kind, at in [*timeline, ("done", ended)]
        )
    session.commit()


def _median_ms(read: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        read()  # type: ignore[operator]
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--points", type=int, default=240)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        sessions = session_factory(create_engine(_migrated(Path(folder))))
        with sessions() as session:
            _fill(session, args.jobs, args.points)
        warm = (observe.ProgressDigests(), state_history.ActiveHistory())

        def overview(kept: tuple[observe.ProgressDigests, state_history.ActiveHistory]) -> None:
            with sessions() as session:
                views.overview(session, None, *kept, now=utcnow())

        metrics = Metrics()
        metrics.watch_platform(sessions, None)
        scrape_bytes = len(generate_latest(metrics.registry))  # fills the scrape's own digests
        overview(warm)
        for name, cold_read, warm_read in (
            (
                "overview",
                lambda: overview((observe.ProgressDigests(), state_history.ActiveHistory())),
                lambda: overview(warm),
            ),
            ("scrape", lambda: _cold_scrape(metrics), lambda: generate_latest(metrics.registry)),
        ):
            cold_ms, warm_ms = _median_ms(cold_read, args.repeats), _median_ms(warm_read, args.repeats)
            line = {
                "read": name,
                "jobs": args.jobs,
                "points": args.points,
                "cold_ms": cold_ms,
                "warm_ms": warm_ms,
            }
            line["cold_over_warm"] = round(cold_ms / warm_ms, 1)
            if name == "scrape":
                line["bytes"] = scrape_bytes
            print(json.dumps(line), flush=True)


def _cold_scrape(metrics: Metrics) -> None:
    metrics._platform.digests = observe.ProgressDigests()
    generate_latest(metrics.registry)


if __name__ == "__main__":
    main()

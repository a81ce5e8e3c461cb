"""Fair dispatch: a tenant's single job is not starved by another tenant's backlog.

Each test gets a database of its own (dispatch looks at every tenant's jobs), migrated by
Alembic, on SQLite and on PostgreSQL; jobs are claimed and finished through ``service.jobs``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.orm import Session

from service import jobs
from service.db import make_engine, session_factory
from service.jobs import JobLease
from service.models import Classifier, Tenant, utcnow
from service.scheduling import next_fair_job
from service.settings import Settings
from tests.conftest import PG_SERVER_URL, _postgres_unreachable, migrate

LEASE = timedelta(seconds=60)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Session]:
    """A session on a freshly migrated database of this test's own."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'fair.db'}"
        cleanup = None
    else:
        if reason := _postgres_unreachable():
            pytest.skip(reason)
        schema = f"f_{uuid.uuid4().hex[:12]}"
        admin = create_engine(PG_SERVER_URL)
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = f"{PG_SERVER_URL}?options=-csearch_path%3D{schema}"

        def cleanup() -> None:
            with admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
            admin.dispose()

    migrate(url)
    engine = make_engine(Settings(database_url=url, data_dir=tmp_path))
    with session_factory(engine)() as session:
        yield session
    engine.dispose()
    if cleanup:
        cleanup()


def _queue(session: Session, tenant: str, count: int, at: datetime) -> list[str]:
    if session.get(Tenant, tenant) is None:
        session.add(Tenant(id=tenant, name=tenant, created_at=at))
        session.flush()
    ids = []
    for i in range(count):
        classifier = Classifier(
            tenant_id=tenant, name=f"{tenant}{i}", language="en", created_at=at, updated_at=at
        )
        session.add(classifier)
        session.flush()
        ids.append(
            jobs.create_job(session, classifier, checkpoint_dir="x", now=at + timedelta(milliseconds=i)).id
        )
    session.commit()
    return ids


def _take(session: Session, now: datetime, cap: int | None = None) -> JobLease | None:
    job_id = next_fair_job(session, now=now, running_cap=cap)
    return None if job_id is None else jobs.claim_job(session, job_id, "w", now=now, lease=LEASE)


def _owner(session: Session, lease: JobLease) -> str:
    return session.execute(
        text("SELECT tenant_id FROM training_jobs WHERE id = :j"), {"j": lease.job_id}
    ).scalar_one()


def test_a_single_job_starts_at_the_first_free_slot_behind_a_backlog_of_50(db: Session) -> None:
    t0 = utcnow()
    _queue(db, "A", 50, t0)
    slots = [_take(db, t0), _take(db, t0)]  # two workers take A's first two jobs
    _queue(db, "B", 1, t0 + timedelta(seconds=1))  # B's one job arrives behind A's 48 queued

    # when the first slot frees (one job duration later), B is next
    first = slots[0]
    assert first is not None
    jobs.finish_job(db, first, model_dir="m", metrics={}, now=t0 + timedelta(seconds=10))
    nxt = _take(db, t0 + timedelta(seconds=10))

    assert nxt is not None and _owner(db, nxt) == "B"
    rest = _take(db, t0 + timedelta(seconds=11))  # the next free slot: only A is left
    assert rest is not None and _owner(db, rest) == "A"


def test_simulated_waits_with_two_slots_and_unit_jobs(db: Session) -> None:
    # A queues 50, then B 1; two workers; every job takes 1 time unit.
    t0 = utcnow()
    _queue(db, "A", 50, t0)
    _queue(db, "B", 1, t0 + timedelta(milliseconds=500))
    running: list[tuple[JobLease, int]] = []
    started: dict[str, list[int]] = {"A": [], "B": []}
    for tick in range(60):
        now = t0 + timedelta(seconds=tick + 1)
        for lease, began in [r for r in running if r[1] + 1 <= tick]:
            jobs.finish_job(db, lease, model_dir="m", metrics={}, now=now)
            running.remove((lease, began))
        while len(running) < 2 and (lease := _take(db, now)) is not None:
            running.append((lease, tick))
            started[_owner(db, lease)].append(tick)

    assert started["B"] == [0]  # B started in the first round, not after A's 50
    assert len(started["A"]) == 50


def test_expired_leases_are_claimable_and_do_not_count_as_running(db: Session) -> None:
    t0 = utcnow()
    [a1, a2] = _queue(db, "A", 2, t0)
    stale = _take(db, t0)
    assert stale is not None and stale.job_id == a1

    later = t0 + LEASE + timedelta(seconds=1)  # a1's worker died: its lease expired
    assert next_fair_job(db, now=later, running_cap=1) == a1  # oldest first, and A runs nothing


def test_a_tenant_at_its_running_cap_is_skipped(db: Session) -> None:
    t0 = utcnow()
    _queue(db, "A", 3, t0)
    assert _take(db, t0, cap=1) is not None

    assert next_fair_job(db, now=t0, running_cap=1) is None
    assert next_fair_job(db, now=t0, running_cap=2) is not None
    _queue(db, "B", 1, t0 + timedelta(seconds=1))
    b = next_fair_job(db, now=t0, running_cap=1)
    assert (
        b is not None
        and db.execute(text("SELECT tenant_id FROM training_jobs WHERE id = :j"), {"j": b}).scalar_one()
        == "B"
    )


def test_nothing_claimable_is_none(db: Session) -> None:
    assert next_fair_job(db, now=utcnow()) is None

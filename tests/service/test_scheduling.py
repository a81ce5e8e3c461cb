"""Fair dispatch: a tenant's single job is not starved by another tenant's backlog.

Each test gets a database of its own (dispatch looks at every tenant's jobs), migrated by
Alembic, on SQLite and on PostgreSQL; jobs are reserved, claimed and finished through
``service.training.scheduling`` and ``service.training.jobs``.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event, text
from sqlalchemy.orm import Session, sessionmaker

from service.core.db import make_engine, session_factory
from service.core.models import Classifier, Tenant, utcnow
from service.core.settings import Settings
from service.training import job_views, jobs, leases
from service.training.jobs import BackOff, JobLease
from service.training.scheduling import next_fair_job, reserve_fair_job, should_yield
from tests.conftest import migrated_database

LEASE = timedelta(seconds=60)


@pytest.fixture(params=["sqlite", "postgresql"])
def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[sessionmaker[Session]]:
    """Sessions on a freshly migrated database of this test's own."""
    with migrated_database(request.param, tmp_path) as url:
        engine = make_engine(Settings(database_url=url, data_dir=tmp_path))
        yield session_factory(engine)
        engine.dispose()


@pytest.fixture
def db(sessions: sessionmaker[Session]) -> Iterator[Session]:
    """One session on this test's own database."""
    with sessions() as session:
        yield session


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
            jobs.create_job(
                session,
                classifier,
                version=1,
                dataset_id=None,
                checkpoint_dir="x",
                now=at + timedelta(milliseconds=i),
            ).id
        )
    session.commit()
    return ids


def _take(session: Session, now: datetime, worker: str = "w") -> JobLease | None:
    """What a worker does with a wake-up message: reserve the fairest job, then claim it."""
    job_id = reserve_fair_job(session, worker, now=now, hold=LEASE)
    return None if job_id is None else leases.claim_job(session, job_id, worker, now=now, lease=LEASE)


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
    leases.finish_job(db, first, model_dir="m", metrics={}, now=t0 + timedelta(seconds=10))
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
            leases.finish_job(db, lease, model_dir="m", metrics={}, now=now)
            running.remove((lease, began))
        while len(running) < 2 and (lease := _take(db, now)) is not None:
            running.append((lease, tick))
            started[_owner(db, lease)].append(tick)

    assert started["B"] == [0]  # B started in the first round, not after A's 50
    assert len(started["A"]) == 50


def test_expired_leases_hold_no_slot_and_their_jobs_wait_for_the_reconciler(db: Session) -> None:
    t0 = utcnow()
    [b1, b2] = _queue(db, "B", 2, t0)
    [a1, a2] = _queue(db, "A", 2, t0)
    assert leases.claim_job(db, b1, "wb", now=t0, lease=timedelta(minutes=10)) is not None
    assert leases.claim_job(db, a1, "wa", now=t0 + timedelta(seconds=1), lease=LEASE) is not None
    assert next_fair_job(db, now=t0 + timedelta(seconds=2)) == b2  # one slot each: B started first

    later = t0 + LEASE + timedelta(seconds=2)  # a1's worker died: its lease expired
    assert next_fair_job(db, now=later) == a2  # A holds no live slot now; a1 is not claimable
    backoff = BackOff(base_seconds=5, max_seconds=60)
    assert jobs.requeue_expired(db, a1, max_attempts=3, backoff=backoff, now=later) == "retry"
    assert next_fair_job(db, now=later) == a2  # a1 is backing off
    assert next_fair_job(db, now=later + timedelta(seconds=5)) == a1  # then it is A's oldest


def test_a_reserved_job_is_claimed_only_by_its_reserver_until_the_hold_lapses(db: Session) -> None:
    t0 = utcnow()
    [a1] = _queue(db, "A", 1, t0)
    assert reserve_fair_job(db, "w1", now=t0, hold=timedelta(seconds=5)) == a1
    assert reserve_fair_job(db, "w2", now=t0, hold=LEASE) is None  # nothing else to take
    assert leases.claim_job(db, a1, "w2", now=t0, lease=LEASE) is None  # a stray message for a1
    assert job_views.jobs_to_send(db, now=t0 + timedelta(hours=1), grace=timedelta(0), in_queue=[]) == [a1]

    lapsed = t0 + timedelta(seconds=6)  # w1 died between its reservation and its claim
    assert reserve_fair_job(db, "w2", now=lapsed, hold=LEASE) == a1
    lease = leases.claim_job(db, a1, "w2", now=lapsed, lease=LEASE)
    assert lease is not None and leases.claim_job(db, a1, "w1", now=lapsed, lease=LEASE) is None


def test_cancel_clears_a_reservation(db: Session) -> None:
    t0 = utcnow()
    [a1] = _queue(db, "A", 1, t0)
    assert reserve_fair_job(db, "w1", now=t0, hold=LEASE) == a1
    classifier_id = db.execute(
        text("SELECT classifier_id FROM training_jobs WHERE id = :j"), {"j": a1}
    ).scalar_one()
    assert jobs.cancel_job(db, classifier_id, now=t0)
    assert leases.claim_job(db, a1, "w1", now=t0, lease=LEASE) is None
    assert jobs.resume_jobs(db, classifier_id, [a1], now=t0) == [a1]
    assert reserve_fair_job(db, "w2", now=t0, hold=LEASE) == a1  # resumed: free for anyone


def test_racing_workers_reserve_every_job_exactly_once(sessions: sessionmaker[Session]) -> None:
    t0 = utcnow()
    with sessions() as session:
        queued = _queue(session, "A", 12, t0) + _queue(session, "B", 12, t0)
    taken: list[tuple[str, str]] = []
    start = threading.Barrier(4)

    def worker(name: str) -> None:
        with sessions() as session:
            start.wait()
            while (job_id := reserve_fair_job(session, name, now=t0, hold=LEASE)) is not None:
                assert leases.claim_job(session, job_id, name, now=t0, lease=LEASE) is not None
                taken.append((name, job_id))

    threads = [threading.Thread(target=worker, args=(f"w{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    counts = Counter(job_id for _, job_id in taken)
    assert sorted(counts) == sorted(queued) and set(counts.values()) == {1}


def test_nothing_claimable_is_none(db: Session) -> None:
    assert next_fair_job(db, now=utcnow()) is None
    assert reserve_fair_job(db, "w", now=utcnow(), hold=LEASE) is None


@pytest.mark.parametrize("sessions", ["sqlite"], indirect=True)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    backlogs=st.lists(st.integers(min_value=1, max_value=8), min_size=1, max_size=5),
    slots=st.integers(min_value=1, max_value=4),
)
def test_every_tenants_first_job_starts_in_its_turn_and_every_job_runs_once(
    db: Session, backlogs: list[int], slots: int
) -> None:
    """Tenants queue backlogs (in order, all at once); ``slots`` workers run unit-length jobs.

    Tenant i's first job starts by round i // slots, whatever the backlogs ahead of it, and
    every job starts exactly once.
    """
    t0 = utcnow()
    run = uuid.uuid4().hex[:6]  # examples share the database; each drains its own jobs
    tenants = [f"{run}-{i}" for i in range(len(backlogs))]
    for i, (tenant, count) in enumerate(zip(tenants, backlogs, strict=True)):
        _queue(db, tenant, count, t0 + timedelta(milliseconds=10 * i))
    first: dict[str, int] = {}
    started: Counter[str] = Counter()
    running: list[JobLease] = []
    for tick in range(sum(backlogs) + 1):
        now = t0 + timedelta(seconds=tick + 1)
        for lease in running:
            assert leases.finish_job(db, lease, model_dir="m", metrics={}, now=now)
        running = []
        while len(running) < slots and (lease := _take(db, now, f"w{len(running)}")) is not None:
            running.append(lease)
            started[lease.job_id] += 1
            first.setdefault(_owner(db, lease), tick)

    assert sum(started.values()) == sum(backlogs) and set(started.values()) == {1}
    for i, tenant in enumerate(tenants):
        assert first[tenant] <= i // slots


def test_a_message_spent_on_another_job_covers_the_job_it_named(db: Session) -> None:
    t0 = utcnow()
    [a1, a2, a3] = _queue(db, "A", 3, t0)
    first = _take(db, t0)  # a1's message: a1
    [b1] = _queue(db, "B", 1, t0 + timedelta(seconds=1))
    fairer = _take(db, t0 + timedelta(seconds=2))  # a2's message: B's job goes first
    assert (first and first.job_id, fairer and fairer.job_id) == (a1, b1)

    later, grace = t0 + timedelta(minutes=1), timedelta(seconds=10)
    # b1's message still waits and stands for a2, whose own message was spent on b1
    assert job_views.jobs_to_send(db, now=later, grace=grace, in_queue=[a3, b1]) == []
    assert job_views.jobs_to_send(db, now=later, grace=grace, in_queue=[b1, b1]) == []
    # messages lost with Redis: re-sent for the jobs left uncovered (spares cover the oldest)
    assert job_views.jobs_to_send(db, now=later, grace=grace, in_queue=[b1]) == [a3]
    assert job_views.jobs_to_send(db, now=later, grace=grace, in_queue=[a3]) == [a2]
    assert job_views.jobs_to_send(db, now=later, grace=grace, in_queue=[]) == [a2, a3]


def _training(session: Session, tenant: str, count: int, at: datetime) -> list[JobLease]:
    """``count`` jobs of ``tenant`` claimed by workers of their own, one second apart."""
    held = []
    for i, job_id in enumerate(_queue(session, tenant, count, at)):
        lease = leases.claim_job(
            session, job_id, f"{tenant}-w{i}", now=at + timedelta(seconds=i), lease=LEASE
        )
        assert lease is not None
        held.append(lease)
    return held


def _yields(db: Session, *held: JobLease | None, now: datetime) -> tuple[bool, ...]:
    return tuple(lease is not None and should_yield(db, lease.job_id, now=now) for lease in held)


def test_a_tenant_holding_every_slot_yields_its_newest_to_a_tenant_that_waits(db: Session) -> None:
    t0 = utcnow()
    older, newest = _training(db, "A", 2, t0)  # A holds both slots
    now = t0 + timedelta(seconds=5)
    assert _yields(db, older, newest, now=now) == (False, False)  # nobody waits
    [waiting] = _queue(db, "B", 1, now)
    assert _yields(db, older, newest, now=now) == (False, True)  # A's newest gives way

    assert leases.release_job(db, newest, now=now, why="to a tenant holding fewer slots")
    taken = _take(db, now)
    assert taken is not None and taken.job_id == waiting  # the freed slot goes to B
    # one slot each now: nobody yields, whoever waits
    _queue(db, "C", 1, now)
    assert not any(_yields(db, older, taken, now=now))


def test_nothing_yields_with_one_slot_or_a_reserved_waiter(db: Session) -> None:
    t0 = utcnow()
    [only] = _training(db, "A", 1, t0)
    now = t0 + timedelta(seconds=5)
    [b_job] = _queue(db, "B", 1, now)
    assert not should_yield(db, only.job_id, now=now)  # one slot: B waits for it to end
    [newest] = _training(db, "A", 1, now)
    assert leases.reserve_job(db, b_job, "w-b", now=now, hold=LEASE)  # a free worker took B's job
    assert not should_yield(db, newest.job_id, now=now)  # B holds a slot already: 1 against 2


def test_an_older_job_does_not_yield_on_a_count_made_before_the_newest_one_yielded(
    sessions: sessionmaker[Session], db: Session
) -> None:
    """A's two jobs hold both slots and B waits: the newest yields. Its release commits while
    the older one's check is under way, after that check counted A's slots (two) and before
    it looked for A's newest job (now the older one itself). A check reading each fact at its
    own moment found a tenant holding two, whose newest job it was, and a tenant waiting with
    none: the older job yielded too, and A held no slot at all (the worker test's rare two
    yields). One snapshot sees either both jobs training (not the newest) or one (nothing to
    give back)."""
    t0 = utcnow()
    older, newest = _training(db, "A", 2, t0)
    now = t0 + timedelta(seconds=5)
    _queue(db, "B", 1, now)
    assert _yields(db, older, newest, now=now) == (False, True)

    fired, released = threading.Event(), list[bool]()

    def release_between_statements(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        # after the check's first statement that counts slots: the newest job's release lands
        # (its own statements come back here, on the same engine: hence the event set first)
        if not fired.is_set() and "count(" in statement.lower():
            fired.set()
            with sessions() as other:
                why = "to a tenant holding fewer slots"
                released.append(leases.release_job(other, newest, now=now, why=why))

    engine = db.get_bind()
    event.listen(engine, "after_cursor_execute", release_between_statements)
    try:
        older_yields = should_yield(db, older.job_id, now=now)
    finally:
        event.remove(engine, "after_cursor_execute", release_between_statements)

    assert released == [True]  # the release did land while the check ran
    assert not older_yields  # A holds one slot now, B none: a gap of one, nothing to give back
    assert _yields(db, older, now=now) == (False,)

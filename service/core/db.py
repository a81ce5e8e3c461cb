"""Engine and session factory for the system-of-record database (SQLite or PostgreSQL)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from service.core.settings import Settings

_SQLITE_BUSY_TIMEOUT_MS = 30_000
POOL_CONNECTIONS = 15  # SQLAlchemy's default pool: 5 kept, 10 more on demand
POOL_TIMEOUT_S = 30.0  # how long a request waits for one before its 503


def make_engine(settings: Settings) -> Engine:
    """An engine for ``settings.resolved_database_url()``.

    SQLite gets WAL journaling (readers never block the writer), enforced foreign keys and a
    busy timeout so that concurrent writers (API and workers) queue instead of failing. A
    statement's error never shows its parameters (``hide_parameters``): they hold tenants'
    secrets (a webhook secret) and data, and the unexpected-error handler logs the error.
    """
    url = settings.resolved_database_url()
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True, hide_parameters=True, **_POOL)
    engine = create_engine(
        url, connect_args={"check_same_thread": False, "timeout": 30}, hide_parameters=True, **_POOL
    )
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine


ENGINES_KEPT = 4  # databases a process keeps an engine for (a worker has one; tests many)
_engines: OrderedDict[str, Engine] = OrderedDict()
_engines_lock = threading.Lock()


def shared_engine(settings: Settings) -> Engine:
    """This process's engine for ``settings``' database: made on first use, then reused.

    For the work a process does over and over (a worker's job claims and trainings). An engine
    made and disposed per job left its dialect alive in SQLAlchemy's statement caches, one more
    each job (135 in a worker after 50 minutes of training), and opened a new connection
    every time. The least recently used of more than :data:`ENGINES_KEPT` databases is
    disposed; its checked-out connections stay usable and close when returned.
    """
    url = settings.resolved_database_url()
    with _engines_lock:
        engine = _engines.pop(url, None) or make_engine(settings)
        _engines[url] = engine
        evicted = [_engines.popitem(last=False)[1] for _ in range(len(_engines) - ENGINES_KEPT)]
    for old in evicted:
        old.dispose()
    return engine


def _forget_engines_in_child() -> None:
    # a forked child must not use its parent's pooled connections (SQLAlchemy's advice for
    # fork: dispose(close=False) drops them without closing the parent's sockets); and the lock
    # may have been held by a parent thread at the fork
    global _engines_lock
    _engines_lock = threading.Lock()
    for engine in _engines.values():
        engine.dispose(close=False)
    _engines.clear()


os.register_at_fork(after_in_child=_forget_engines_in_child)


_POOL: dict[str, Any] = {
    "pool_size": 5,
    "max_overflow": POOL_CONNECTIONS - 5,
    "pool_timeout": POOL_TIMEOUT_S,
}


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions bound to ``engine``; objects stay readable after commit."""
    return sessionmaker(engine, expire_on_commit=False)


def hold_write_lock(session: Session) -> None:
    """On SQLite, make the session's transaction hold the database's write lock from now until
    it ends; elsewhere do nothing.

    SQLite has no row locks (it ignores ``SELECT ... FOR UPDATE``), so a check that its own
    transaction then acts on (a quota, a version's status) is serialised with other writers by
    taking the one write lock before the check: ``BEGIN IMMEDIATE`` (waiting up to the busy
    timeout) when no transaction is open yet. The driver opens one only before its first
    write, which took the lock already. On PostgreSQL the callers lock the rows they read.
    """
    if session.get_bind().dialect.name != "sqlite":
        return
    driver = session.connection().connection.driver_connection
    if driver is not None and not driver.in_transaction:
        driver.execute("BEGIN IMMEDIATE")


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute(f"PRAGMA busy_timeout={_SQLITE_BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
    # SQLite's own lower() folds ASCII only ('Émile' stayed 'Émile'), so the dashboard's search by
    # name "in any case" missed every non-ASCII capital there; PostgreSQL's folds them all
    dbapi_connection.create_function("lower", 1, _lower, deterministic=True)


def _lower(value: Any) -> Any:
    # each character on its own, as PostgreSQL's: Python's lower() makes a capital sigma at a
    # word's end 'ς' and elsewhere 'σ', and the search 'ΟΔΟΣ' did not find the tenant 'ΟΔΟΣΑ'
    return value.replace("Σ", "σ").lower() if isinstance(value, str) else value

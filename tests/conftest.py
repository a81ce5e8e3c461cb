"""Shared fixtures for every test folder (service, workers, e2e).

Databases are real: each database-backed test runs twice, on SQLite (a file in a temp dir) and on
PostgreSQL (``postgresql+psycopg://postgres@127.0.0.1:5432/test``, in a schema made for the test
session; skipped, with the reason, when the server cannot be reached), unless its module is
marked ``dialect_neutral`` (then on SQLite alone). The
schema is built by running the Alembic migrations, never by ``create_all``. Tests isolate
themselves by making their own tenants (:func:`tenant_factory`), so no cleanup is needed.

Fixtures
--------
``database_url``       migrated database URL, parametrised ``[sqlite, postgresql]`` (session scope).
                       The PostgreSQL URL carries its schema (``?options=-csearch_path=...``), so a
                       subprocess given the URL sees the same tables. A test marked
                       ``dialect_neutral`` (a whole module, as ``pytestmark``) runs on SQLite
                       alone: its behaviour does not differ by database (no locking, compare-and-set,
                       text the databases fold or refuse differently, or SQL of one dialect).
``settings_factory``   ``settings_factory(**overrides) -> Settings`` on this test's temp dirs and
                       ``database_url``, admin key :data:`ADMIN_KEY`, secrets key
                       :data:`SECRETS_KEY`, metrics token :data:`METRICS_TOKEN`
                       (:data:`METRICS_HEADERS` scrape /metrics), Redis db 15
                       (of this worker's range: :func:`redis_test_url`).
``settings``           ``settings_factory()``.
``engine``             SQLAlchemy engine for ``settings`` (disposed after the test).
``session``            a Session on ``engine`` (closed after the test).
``store``              the ArtifactStore of ``settings``.
``app`` / ``client``   ``create_app(settings)`` and a TestClient with the lifespan running.
``admin_headers``      headers carrying the admin key.
``tenant_factory``     ``tenant_factory(name=None) -> TenantHandle`` (id, name, api_key, headers),
                       created through the admin API of ``client``.
``tenant``             one fresh tenant.
``postgres_database``  a brand-new, empty PostgreSQL database for one test (dropped after it);
                       its SQLAlchemy URL. Skipped, with the reason, when the server is down.
``wait_until``         ``wait_until(predicate, timeout=10.0, interval=0.05, message="")``: polls
                       until ``predicate()`` is truthy and returns its value; fails the test at
                       the deadline. Never sleep bare in a test.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import pytest
import redis
from alembic import command
from alembic.config import Config
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, func, select, text
from sqlalchemy.orm import Session

from benchmarks.chaos import create_database, drop_database
from service.app import create_app
from service.core.db import make_engine, session_factory
from service.core.models import Classifier, Dataset, TrainingJob
from service.core.settings import Settings
from service.storage.store import ArtifactStore

REPO_ROOT = Path(__file__).resolve().parents[1]
PG_SERVER_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
# The tests use Redis databases 10-15 of the machine's server (127.0.0.1:6379; TAAS_TEST_REDIS names
# another, host:port, so that two checkouts' runs on one machine never flush each other's keys).
# Under pytest-xdist (`make test` runs two processes) each worker process takes its own six: gw0
# 10-15, gw1 4-9.
REDIS_SERVER = os.environ.get("TAAS_TEST_REDIS", "127.0.0.1:6379")
REDIS_DATABASES = 16  # Redis's default
REDIS_DATABASES_PER_WORKER = 6
REDIS_WORKERS = REDIS_DATABASES // REDIS_DATABASES_PER_WORKER


def _too_many_workers(asked: str) -> pytest.UsageError:
    return pytest.UsageError(
        f"the tests need {REDIS_DATABASES_PER_WORKER} of Redis's {REDIS_DATABASES} databases per process: "
        f"run at most {REDIS_WORKERS} xdist workers (-n {REDIS_WORKERS}), not {asked}"
    )


def redis_test_url(db: int) -> str:
    """The machine's Redis at database ``db`` (10-15), moved into this test process's own range,
    so that two xdist workers never flush or consume each other's keys and queues."""
    assert REDIS_DATABASES - REDIS_DATABASES_PER_WORKER <= db < REDIS_DATABASES, f"not one of 10-15: {db}"
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker.removeprefix("gw"))
    if index >= REDIS_WORKERS:
        raise _too_many_workers(worker)
    return f"redis://{REDIS_SERVER}/{db - REDIS_DATABASES_PER_WORKER * index}"


REDIS_TEST_URL = redis_test_url(15)
ADMIN_KEY = "test-admin-key-0123456789abcdefghijklmn"
SECRETS_KEY = "test-secrets-key-0123456789abcdefghijk"  # seals webhook secrets (service.core.sealing)
METRICS_TOKEN = "test-metrics-token-0123456789abcdefghij"
METRICS_HEADERS = {"Authorization": f"Bearer {METRICS_TOKEN}"}  # a scrape of GET /metrics

T = TypeVar("T")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every end-to-end test starts `taas up` (seconds before its first request): it is slow.

    The slow tests run first (each group in its collected order): pytest-xdist hands out tests in
    that order, so the minute-long ones start while there is still work for the other process,
    and the suite ends on short tests instead of on one process finishing a long one alone."""
    for item in items:
        if item.get_closest_marker("e2e") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A ``dialect_neutral`` test takes ``database_url`` on SQLite alone (the session's database)."""
    if "database_url" in metafunc.fixturenames and metafunc.definition.get_closest_marker("dialect_neutral"):
        metafunc.definition.add_marker(
            pytest.mark.parametrize("database_url", ["sqlite"], indirect=True, scope="session")
        )


def pytest_configure(config: pytest.Config) -> None:
    """Refuse more xdist workers than the Redis databases allow, before any starts."""
    workers = getattr(config.option, "numprocesses", None)
    if isinstance(workers, int) and workers > REDIS_WORKERS:
        raise _too_many_workers(f"-n {workers}")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per core, at most as many as the Redis databases allow."""
    return max(1, min(os.cpu_count() or 1, REDIS_WORKERS))


def migrate(url: str) -> None:
    """Bring the database at ``url`` to the newest Alembic revision (``alembic upgrade head``)."""
    config = Config(str(REPO_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(REPO_ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logger"] = False
    command.upgrade(config, "head")


def _postgres_unreachable() -> str | None:
    try:
        psycopg.connect(PG_SERVER_URL.replace("+psycopg", ""), connect_timeout=3).close()
    except psycopg.Error as exc:
        return f"PostgreSQL at 127.0.0.1:5432 is unreachable: {exc}"
    return None


def fresh_postgres_database(prefix: str) -> Iterator[str]:
    """Create an empty PostgreSQL database named ``<prefix>_<random>``, yield its SQLAlchemy URL,
    drop it afterwards (skips the test when the server is unreachable)."""
    try:
        url = create_database(prefix)
    except psycopg.Error as exc:
        pytest.skip(f"PostgreSQL at 127.0.0.1:5432 is unreachable: {exc}")
    try:
        yield url
    finally:
        drop_database(url)


@contextmanager
def empty_redis_db(url: str) -> Iterator[redis.Redis]:
    """A client on the Redis database ``url``, emptied before and after (skips the test when the
    server is unreachable)."""
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        client.flushdb()
    except redis.ConnectionError as error:
        pytest.skip(f"Redis at {REDIS_SERVER} is unreachable: {error}")
    try:
        yield client
    finally:
        client.flushdb()
        client.close()


@pytest.fixture
def postgres_database() -> Iterator[str]:
    """A fresh PostgreSQL database for one test (dropped afterwards); its SQLAlchemy URL."""
    yield from fresh_postgres_database("taas_test")


@contextmanager
def migrated_database(kind: str, folder: Path) -> Iterator[str]:
    """The URL of a freshly migrated database (``kind``: ``sqlite``, a file in ``folder``, or
    ``postgresql``, a schema of its own in the test database, dropped afterwards); skips when
    PostgreSQL is unreachable. The PostgreSQL URL carries its schema, so subprocesses see it."""
    if kind == "sqlite":
        url = f"sqlite:///{folder / 'taas.db'}"
        migrate(url)
        yield url
        return
    if reason := _postgres_unreachable():
        pytest.skip(reason)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_SERVER_URL)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        url = f"{PG_SERVER_URL}?options=-csearch_path%3D{schema}"
        migrate(url)
        yield url
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture(scope="session", params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A migrated database for this test session, on each backend in turn."""
    with migrated_database(request.param, tmp_path_factory.mktemp("db")) as url:
        yield url


@pytest.fixture
def settings_factory(tmp_path: Path, database_url: str) -> Callable[..., Settings]:
    """Build Settings on this test's temp dirs and database; keyword arguments override fields."""

    def build(**overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "data_dir": tmp_path / "var",
            "artifacts_dir": tmp_path / "artifacts",
            "database_url": database_url,
            "redis_url": REDIS_TEST_URL,
            "admin_key": ADMIN_KEY,
            "secrets_key": SECRETS_KEY,
            "metrics_token": METRICS_TOKEN,
            # tiny data sets: no held-out fold models (~6x the training time; tests/trainer has them)
            "cross_fit_folds": 0,
        }
        values.update(overrides)
        return Settings(**values)

    return build


@pytest.fixture
def settings(settings_factory: Callable[..., Settings]) -> Settings:
    """Default test settings (see :func:`settings_factory`)."""
    return settings_factory()


@pytest.fixture
def engine(settings: Settings) -> Iterator[Engine]:
    """An engine on the test database."""
    eng = make_engine(settings)
    yield eng
    eng.dispose()


@pytest.fixture
def session(engine: Engine) -> Iterator[Session]:
    """A session on the test database."""
    with session_factory(engine)() as s:
        yield s


@pytest.fixture
def store(settings: Settings) -> ArtifactStore:
    """The artifact store of the test settings."""
    return ArtifactStore(settings.resolved_artifacts_dir())


@pytest.fixture
def app(settings: Settings) -> FastAPI:
    """The API application built on the test settings."""
    return create_app(settings)


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    """A TestClient with the app's lifespan running (engine, model cache)."""
    with TestClient(app) as c:
        yield c


@pytest.fixture
def admin_headers() -> dict[str, str]:
    """Headers that authenticate as the administrator."""
    return {"Authorization": f"Bearer {ADMIN_KEY}"}


@dataclass(frozen=True)
class TenantHandle:
    """A tenant made for one test, with its (only) API key."""

    id: str
    name: str
    api_key: str

    @property
    def headers(self) -> dict[str, str]:
        """Headers that authenticate as this tenant."""
        return {"Authorization": f"Bearer {self.api_key}"}


@pytest.fixture
def tenant_factory(client: TestClient, admin_headers: dict[str, str]) -> Callable[..., TenantHandle]:
    """Create tenants through the admin API: ``tenant_factory(name=None) -> TenantHandle``."""

    def create(name: str | None = None) -> TenantHandle:
        name = name or f"tenant-{uuid.uuid4().hex[:10]}"
        reply = client.post("/v1/admin/tenants", json={"name": name}, headers=admin_headers)
        assert reply.status_code == 201, reply.text
        body = reply.json()
        return TenantHandle(id=body["tenant_id"], name=body["name"], api_key=body["api_key"])

    return create


@pytest.fixture
def tenant(tenant_factory: Callable[..., TenantHandle]) -> TenantHandle:
    """One fresh tenant."""
    return tenant_factory()


def _wait_until(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.05, message: str = ""
) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"condition not met within {timeout}s: {message or predicate}")
        time.sleep(interval)


@pytest.fixture
def wait_until() -> Callable[..., Any]:
    """Poll a predicate until it holds or a deadline passes (see the module docstring)."""
    return _wait_until


@pytest.fixture
def nothing_left_behind(session: Session, settings: Settings) -> Callable[[str], None]:
    """``nothing_left_behind(tenant_id)`` asserts the tenant has no rows and the store no files."""

    def check(tenant_id: str) -> None:
        session.expire_all()
        for model in (Dataset, Classifier, TrainingJob):
            count = session.scalar(
                select(func.count()).select_from(model).where(model.tenant_id == tenant_id)
            )
            assert count == 0, f"{model.__tablename__} has {count} row(s) left"
        root: Path = settings.resolved_artifacts_dir()
        files = [p for p in root.rglob("*") if p.is_file()] if root.exists() else []
        assert files == [], f"files left behind: {files}"

    return check

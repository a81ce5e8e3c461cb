"""Alembic is the only schema path: on a fresh SQLite file and a fresh PostgreSQL database,
``upgrade head`` builds exactly what ``service.core.models`` declares (autogenerate finds no
difference), and upgrade -> downgrade base -> upgrade round-trips.

Whatever the head is gets tested: the chain is read from ``migrations/versions``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.engine import make_url

from service.core.models import Base
from service.core.sealing import KeyRing, NoSecretsKey
from tests.conftest import SECRETS_KEY, fresh_postgres_database

REPO_ROOT = Path(__file__).resolve().parents[2]


def _config(url: str) -> Config:
    config = Config(str(REPO_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(REPO_ROOT / "migrations"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logger"] = False
    return config


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a brand-new, empty database: a SQLite file, or a PostgreSQL database made for
    this test (random name) and dropped afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'fresh.db'}"
        return
    yield from fresh_postgres_database("taas_mig")


def _diff(url: str) -> list[object]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            return list(compare_metadata(context, Base.metadata))
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def _schema(url: str) -> dict[str, tuple[list[tuple[str, str, bool]], list[str]]]:
    """Each application table's columns (name, type, nullable) and index names (alembic_version
    left out): a revision may change only a column's type or whether it may be NULL."""
    engine = create_engine(url)
    try:
        inspector = inspect(engine)
        return {
            table: (
                sorted(
                    (column["name"], str(column["type"]), bool(column["nullable"]))
                    for column in inspector.get_columns(table)
                ),
                sorted(str(index["name"]) for index in inspector.get_indexes(table)),
            )
            for table in inspector.get_table_names()
            if table != "alembic_version"
        }
    finally:
        engine.dispose()


def _revision(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def test_one_linear_chain_to_one_head() -> None:
    script = ScriptDirectory.from_config(_config("sqlite://"))
    heads = script.get_heads()
    assert len(heads) == 1, f"the revisions branch: heads {heads} (re-point a down_revision)"
    chain = list(script.walk_revisions("base", "heads"))
    assert chain[-1].down_revision is None, "the oldest revision must start from base"


def test_models_and_migration_head_agree(fresh_url: str) -> None:
    command.upgrade(_config(fresh_url), "head")
    head = ScriptDirectory.from_config(_config(fresh_url)).get_current_head()
    assert _revision(fresh_url) == head
    diff = _diff(fresh_url)
    assert diff == [], (
        f"service.core.models and the Alembic head ({head}) disagree on "
        f"{make_url(fresh_url).get_backend_name()}: {diff} (write a revision for the model change)"
    )
    assert set(Base.metadata.tables) <= _tables(fresh_url)


def test_upgrade_downgrade_upgrade_round_trip(fresh_url: str) -> None:
    config = _config(fresh_url)
    command.upgrade(config, "head")
    at_head = _schema(fresh_url)
    command.downgrade(config, "base")
    assert _schema(fresh_url) == {}, "downgrade base left tables behind"
    assert _revision(fresh_url) is None
    command.upgrade(config, "head")
    assert _schema(fresh_url) == at_head
    assert _diff(fresh_url) == []


def test_every_step_downgrades_one_revision_at_a_time(fresh_url: str) -> None:
    """Each revision's downgrade undoes exactly its upgrade: walk up one step, down one step,
    up again, through the whole chain."""
    config = _config(fresh_url)
    script = ScriptDirectory.from_config(config)
    revisions = [rev.revision for rev in reversed(list(script.walk_revisions("base", "heads")))]
    previous = _schema(fresh_url)
    for revision in revisions:
        command.upgrade(config, revision)
        schema = _schema(fresh_url)
        assert schema != previous, f"revision {revision} changes nothing"
        command.downgrade(config, "-1")
        assert _schema(fresh_url) == previous, f"downgrade of {revision} is not its upgrade's inverse"
        command.upgrade(config, revision)
        assert _schema(fresh_url) == schema
        previous = schema
    assert _diff(fresh_url) == []


def test_0005_makes_every_existing_classifier_its_own_version_1(fresh_url: str) -> None:
    """Data written before versions existed: each classifier becomes version 1 (its dataset,
    status, model and metrics), serving when Available, and its jobs train version 1."""
    config = _config(fresh_url)
    command.upgrade(config, "0004")
    engine = create_engine(fresh_url)
    at = "2026-01-01 12:00:00"
    try:
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO tenants (id, name, created_at, webhook_secret) "
                    "VALUES ('t', 't', :at, 'whsec_x')"
                ),
                {"at": at},
            )
            for cid, status, model_dir in (("ready", "Available", "m/ready"), ("busy", "Training", None)):
                conn.execute(
                    text(
                        "INSERT INTO classifiers (id, tenant_id, name, language, status, status_description, "
                        "model_dir, metrics, created_at, updated_at) "
                        "VALUES (:id, 't', :id, 'en', :status, 'd', :model_dir, :metrics, :at, :at)"
                    ),
                    {
                        "id": cid,
                        "status": status,
                        "model_dir": model_dir,
                        "metrics": '{"accuracy": 0.9}' if model_dir else None,
                        "at": at,
                    },
                )
                conn.execute(
                    text(
                        "INSERT INTO training_jobs (id, classifier_id, tenant_id, state, attempts, epoch, "
                        "checkpoint_dir, failures, created_at, updated_at) "
                        "VALUES (:job, :id, 't', 'queued', 0, 0, 'c', 0, :at, :at)"
                    ),
                    {"job": f"job-{cid}", "id": cid, "at": at},
                )
        command.upgrade(config, "0005")
        with engine.connect() as conn:
            versions = conn.execute(
                text(
                    "SELECT classifier_id, number, status, model_dir, metrics FROM classifier_versions "
                    "ORDER BY classifier_id"
                )
            ).all()
            views = conn.execute(
                text("SELECT id, serving_version, latest_version, promote FROM classifiers ORDER BY id")
            ).all()
            jobs = conn.execute(
                text("SELECT classifier_id, version FROM training_jobs ORDER BY classifier_id")
            ).all()
    finally:
        engine.dispose()
    assert [(v.classifier_id, v.number, v.status, v.model_dir) for v in versions] == [
        ("busy", 1, "Training", None),
        ("ready", 1, "Available", "m/ready"),
    ]
    metrics = versions[1].metrics
    assert (metrics if isinstance(metrics, dict) else json.loads(metrics)) == {"accuracy": 0.9}
    assert [tuple(v) for v in views] == [("busy", None, 1, "auto"), ("ready", 1, 1, "auto")]
    assert [tuple(j) for j in jobs] == [("busy", 1), ("ready", 1)]


def test_0007_seals_every_plain_text_webhook_secret_and_without_a_key_changes_nothing(fresh_url: str) -> None:
    """Secrets an older release stored in plain text: sealed by the upgrade, in its transaction,
    with the key ``taas migrate`` passes; with no key the upgrade stops, saying what to set,
    before it changes anything. The downgrade gives them back in plain text."""
    config = _config(fresh_url)
    command.upgrade(config, "0006")
    engine = create_engine(fresh_url)
    plain = {"a": "whsec_alpha", "b": "whsec_beta"}
    try:
        with engine.begin() as conn:
            for tenant_id, secret in plain.items():
                conn.execute(
                    text(
                        "INSERT INTO tenants (id, name, created_at, webhook_secret) "
                        "VALUES (:id, :id, '2026-01-01 12:00:00', :secret)"
                    ),
                    {"id": tenant_id, "secret": secret},
                )

        def no_key() -> KeyRing:
            raise NoSecretsKey("no key to seal secrets with: set TAAS_SECRETS_KEY")

        config.attributes["key_ring"] = no_key
        with pytest.raises(NoSecretsKey, match="set TAAS_SECRETS_KEY"):
            command.upgrade(config, "0007")
        assert _revision(fresh_url) == "0006"
        assert _stored(engine) == plain

        config.attributes["key_ring"] = lambda: KeyRing(SECRETS_KEY)
        command.upgrade(config, "0007")
        sealed = _stored(engine)
        assert all(value.startswith("taas1:") for value in sealed.values()), sealed
        ring = KeyRing(SECRETS_KEY)
        assert {t: ring.open(v, place=f"tenants.webhook_secret:{t}") for t, v in sealed.items()} == plain

        command.downgrade(config, "0006")
        assert _stored(engine) == plain
    finally:
        engine.dispose()


def _stored(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT id, webhook_secret FROM tenants ORDER BY id")).all())  # type: ignore[arg-type]


@pytest.fixture
def fresh_postgres_url() -> Iterator[str]:
    """A brand-new, empty PostgreSQL database for this test, dropped afterwards."""
    yield from fresh_postgres_database("taas_mig")


def test_migrations_started_at_once_on_a_new_postgresql_database_all_succeed(
    fresh_postgres_url: str, tmp_path: Path
) -> None:
    # replicas that each run `taas migrate` at start-up: the upgrades take turns (an advisory
    # lock); two at once on an empty database collided on its first tables
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAAS_")}
    env.update(TAAS_DATABASE_URL=fresh_postgres_url, TAAS_DATA_DIR=str(tmp_path))
    taas = str(Path(sys.executable).with_name("taas"))
    runs = [
        subprocess.Popen(
            [taas, "migrate"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outcomes = [(run.wait(timeout=120), run.stderr.read() if run.stderr else "") for run in runs]

    assert outcomes == [(0, "")] * 3
    assert _diff(fresh_postgres_url) == []

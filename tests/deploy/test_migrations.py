"""Alembic is the only schema path: on a fresh SQLite file and a fresh PostgreSQL database,
``upgrade head`` builds exactly what ``service.models`` declares (autogenerate finds no
difference), and upgrade -> downgrade base -> upgrade round-trips.

Whatever the head is gets tested: the chain is read from ``migrations/versions``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect
from sqlalchemy.engine import make_url

from service.models import Base
from tests.conftest import fresh_postgres_database

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


def _schema(url: str) -> dict[str, tuple[list[str], list[str]]]:
    """Each application table's columns and index names (alembic_version left out)."""
    engine = create_engine(url)
    try:
        inspector = inspect(engine)
        return {
            table: (
                sorted(column["name"] for column in inspector.get_columns(table)),
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
        f"service.models and the Alembic head ({head}) disagree on {make_url(fresh_url).get_backend_name()}: "
        f"{diff} (write a revision for the model change)"
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

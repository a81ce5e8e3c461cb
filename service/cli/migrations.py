"""The database schema from the command line: ``taas migrate`` (``alembic upgrade head``, one
migration at a time on PostgreSQL) and the check every server command makes before it starts,
that the schema is the newest this release knows."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, make_url, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from service.cli.output import fail
from service.core.sealing import SealingError, key_ring
from service.core.settings import Settings

MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


_MIGRATION_LOCK = 0x7461_6173_6D69_6772  # pg_advisory_lock's key for `taas migrate` ("taasmigr")


def alembic_config(settings: Settings) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", settings.resolved_database_url().replace("%", "%%"))
    return config


def upgrade(settings: Settings) -> None:
    """Run ``alembic upgrade head`` on the settings' database; exits with a one-line error.

    On PostgreSQL under an advisory lock: migrations started at once (a deployment's replicas
    each running ``taas migrate``) run one after another, and the later ones find the schema
    up to date, where two concurrent upgrades of a new database collide on its first tables.
    """
    config = alembic_config(settings)
    config.attributes["key_ring"] = lambda: key_ring(settings)  # 0007 seals plain-text secrets
    engine = create_engine(settings.resolved_database_url(), poolclass=NullPool)
    try:
        _refuse_a_newer_schema(config, engine)
        if engine.dialect.name != "postgresql":
            command.upgrade(config, "head")
            return
        with engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _MIGRATION_LOCK})
            connection.commit()  # a session's advisory lock outlives the transaction
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
            connection.commit()
    except SQLAlchemyError as error:
        fail(f"cannot migrate the database: {str(error).splitlines()[0]}")
    except SealingError as error:
        fail(
            "cannot migrate the database: its webhook secrets are in plain text and must be sealed, "
            f"but {error}"
        )
    finally:
        engine.dispose()


def require_migrated(settings: Settings) -> None:
    """Exit with a one-line error unless the database's schema is the newest: an API on an
    older one (or none) would answer every request with a 500."""
    head = ScriptDirectory.from_config(alembic_config(settings)).get_current_head()
    url = make_url(settings.resolved_database_url())
    if url.get_backend_name() == "sqlite" and url.database and not Path(url.database).exists():
        missing = f"{url.database} does not exist"
        fail(f"the database schema is at nothing ({missing}), not {head}: run `taas migrate` first")
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            current = MigrationContext.configure(connection).get_current_revision()
    except SQLAlchemyError as error:
        fail(f"cannot read the database ({str(error).splitlines()[0]}): if it is new, run `taas migrate`")
    finally:
        engine.dispose()
    if current != head:
        _refuse_a_newer_schema(alembic_config(settings), engine)
        fail(f"the database schema is at {current or 'nothing'}, not {head}: run `taas migrate` first")


def _refuse_a_newer_schema(config: Config, engine: Engine) -> None:
    """Exit with a one-line error when the database's schema revision is unknown to this release:
    a newer release migrated it (alembic's traceback, or "run `taas migrate`", said nothing of that)."""
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    scripts = ScriptDirectory.from_config(config)
    if current is not None and current not in {script.revision for script in scripts.walk_revisions()}:
        fail(
            f"the database schema is at {current}, which this release does not know (its newest is "
            f"{scripts.get_current_head()}): a newer release migrated it; run that release, or restore "
            "a backup taken before the upgrade"
        )

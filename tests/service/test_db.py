"""service.core.db.hold_write_lock: on SQLite, which ignores SELECT ... FOR UPDATE, a transaction that
checks and then acts (a quota, a version's status) holds the database's write lock from the
check to its end, so no other writer comes between."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from service.core.db import hold_write_lock, make_engine, session_factory
from service.core.settings import Settings


def test_a_second_sqlite_writer_waits_until_the_holder_ends(tmp_path: Path) -> None:
    engine = make_engine(Settings(database_url=f"sqlite:///{tmp_path / 'lock.db'}", data_dir=tmp_path))
    sessions = session_factory(engine)
    with sessions() as setup:
        setup.execute(text("CREATE TABLE counter (n INTEGER)"))
        setup.execute(text("INSERT INTO counter VALUES (0)"))
        setup.commit()

    holder = sessions()
    hold_write_lock(holder)
    assert holder.execute(text("SELECT n FROM counter")).scalar_one() == 0  # the check

    # a plain connection that does not wait: the lock is taken now, not at the holder's first write
    other = sqlite3.connect(tmp_path / "lock.db", timeout=0)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        other.execute("BEGIN IMMEDIATE")
    other.close()

    order: list[str] = []

    def second_checker() -> None:
        with sessions() as session:
            hold_write_lock(session)  # waits (busy timeout) for the holder's commit
            order.append(f"second saw {session.execute(text('SELECT n FROM counter')).scalar_one()}")
            session.commit()

    waiting = threading.Thread(target=second_checker)
    waiting.start()
    time.sleep(0.3)
    holder.execute(text("UPDATE counter SET n = 1"))  # acting on the check
    order.append("holder committed")
    holder.commit()
    holder.close()
    waiting.join(10)

    assert order == ["holder committed", "second saw 1"]


def test_a_failed_statement_does_not_show_its_parameters(settings_factory: Callable[..., Settings]) -> None:
    # the unexpected-error handler logs the exception: a bound webhook secret must not be in it
    engine = make_engine(settings_factory())
    with session_factory(engine)() as session, pytest.raises(DBAPIError) as failed:
        session.execute(
            text("INSERT INTO no_such_table (secret) VALUES (:secret)"), {"secret": "whsec_hidden"}
        )

    assert "whsec_hidden" not in str(failed.value)
    assert "parameters hidden" in str(failed.value)
    engine.dispose()


@pytest.mark.parametrize("folder", ["run?2", "100%41", "run#2"])
def test_the_embedded_database_is_in_a_data_dir_whose_name_a_url_would_read_otherwise(
    tmp_path: Path, folder: str
) -> None:
    """In ``run?2`` the database was ``run`` beside it (the rest taken for a query), shared by
    every ``run?N``; in ``100%41`` it was sought in ``100A``."""
    data_dir = tmp_path / folder
    data_dir.mkdir()
    engine = make_engine(Settings(data_dir=data_dir))
    try:
        with engine.begin() as connection:
            connection.execute(text("CREATE TABLE probe (n INTEGER)"))
    finally:
        engine.dispose()

    assert (data_dir / "taas.db").is_file()
    assert [path.name for path in tmp_path.iterdir()] == [folder]

"""What ``/readyz`` asks: whether the database, Redis and the artifact store answer, each within
:data:`PROBE_SECONDS`, all at once. A probe that fails is logged with its reason; the reply
says only which failed (the probe is open to anyone who can reach the port)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial

import anyio
import redis
from anyio import to_thread
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker
from starlette.datastructures import State

from service.storage.store import ArtifactStore

log = logging.getLogger(__name__)
PROBE_SECONDS = 2.0


async def check(state: State) -> dict[str, bool]:
    """Each dependency of the app whose ``state`` is given, and whether it answered."""
    probes: dict[str, Callable[[], None]] = {
        "database": partial(_database, state.sessions),
        "redis": partial(_redis, state.redis),
        "store": partial(_store, state.store),
    }
    answered: dict[str, bool] = {}
    async with anyio.create_task_group() as group:
        for name, probe in probes.items():
            group.start_soon(_probe, name, probe, answered)
    return {name: answered.get(name, False) for name in probes}


async def _probe(name: str, probe: Callable[[], None], answered: dict[str, bool]) -> None:
    with anyio.move_on_after(PROBE_SECONDS):
        try:
            await to_thread.run_sync(probe, abandon_on_cancel=True)
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready", and is logged
            log.warning("readiness: %s does not answer: %s", name, exc)
            answered[name] = False
            return
        answered[name] = True
        return
    log.warning("readiness: %s did not answer within %g s", name, PROBE_SECONDS)


def _database(sessions: sessionmaker[Session]) -> None:
    with sessions() as session:
        session.execute(text("SELECT 1"))


def _redis(client: redis.Redis | None) -> None:
    if client is None:
        raise RuntimeError("no Redis is configured (TAAS_REDIS_URL)")
    client.ping()


def _store(store: ArtifactStore) -> None:
    store.check()
    if store.remote is not None:
        store.remote.check()

#!/bin/sh
# Wait (bounded: TAAS_WAIT_SECONDS, default 60) until what the TAAS_* settings name answers — the
# database, Redis when TAAS_REDIS_URL is set, the artifact store (the folder is writable, or the
# S3 bucket of TAAS_ARTIFACTS_URL is reachable) — then run the container's command.
set -eu

python - <<'PY'
import os
import sys
import time

import redis
from sqlalchemy import create_engine, text

from service.storage.store import open_backend
from service.core.settings import get_settings

settings = get_settings()
deadline = time.monotonic() + float(os.environ.get("TAAS_WAIT_SECONDS", "60"))


def wait(name, check):
    while True:
        try:
            check()
            return
        except Exception as error:  # noqa: BLE001 - any failure means "not yet"
            if time.monotonic() > deadline:
                sys.exit(f"entrypoint: {name} is not reachable: {error}")
            time.sleep(1)


def database():
    engine = create_engine(settings.resolved_database_url())
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    finally:
        engine.dispose()


wait("the database", database)
if settings.redis_url:
    wait("Redis", lambda: redis.Redis.from_url(settings.redis_url, socket_connect_timeout=2).ping())
wait("the artifact store", lambda: open_backend(settings).check())
PY

exec "$@"

"""Tenants' webhook secrets at rest: stored only sealed under the operator's key, bound to their
tenant, and resealed under a new key by a rotation (``taas reseal``).

Before, the secrets were stored in plain text: a database dump, a backup or any local account
that could read the SQLite file could forge any tenant's webhooks."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import inspect, text
from sqlalchemy.orm import Session

from service.app import create_app
from service.core.db import make_engine, session_factory
from service.core.sealing import KeyRing, SealingError
from service.core.settings import Settings
from service.webhooks import secrets
from tests.conftest import ADMIN_KEY, SECRETS_KEY, TenantHandle, migrated_database

NEW_KEY = "rotated-secrets-key-abcdefghijklmnopqrstuvwxyz"
ADMIN_HEADERS = {"Authorization": f"Bearer {ADMIN_KEY}"}


def _secret(client: TestClient, tenant: Any) -> str:
    reply = client.get("/v1/webhook_secret", headers=tenant.headers)
    assert reply.status_code == 200, reply.text
    return str(reply.json()["secret"])


def _stored(session: Session, tenant_id: str) -> str:
    session.commit()
    return str(
        session.execute(text("SELECT webhook_secret FROM tenants WHERE id = :t"), {"t": tenant_id}).scalar()
    )


def test_webhook_secrets_are_stored_only_sealed(
    client: TestClient, tenant_factory: Callable[..., Any], session: Session
) -> None:
    alice = tenant_factory()
    first = _secret(client, alice)
    rotated = client.post("/v1/webhook_secret", headers=alice.headers).json()["secret"]

    assert first.startswith("whsec_") and rotated != first
    assert _secret(client, alice) == rotated
    sealed = _stored(session, alice.id)
    assert sealed.startswith("taas1:")
    assert KeyRing(SECRETS_KEY).open(sealed, place=secrets.place(alice.id)) == rotated
    for table in inspect(session.get_bind()).get_table_names():
        for row in session.execute(text(f"SELECT * FROM {table}")):  # noqa: S608 - table names from the schema
            for value in row:
                assert rotated[6:] not in str(value) and first[6:] not in str(value), table


def test_a_sealed_secret_copied_into_another_tenants_row_does_not_open(
    client: TestClient, tenant_factory: Callable[..., Any], session: Session
) -> None:
    """Whoever can write the database but not read the key cannot make taas sign another
    tenant's webhooks with a secret it knows."""
    alice, mallory = tenant_factory(), tenant_factory()
    alices = _secret(client, alice)
    _secret(client, mallory)
    session.execute(
        text("UPDATE tenants SET webhook_secret = :s WHERE id = :t"),
        {"s": _stored(session, mallory.id), "t": alice.id},
    )
    session.commit()

    refused = client.get("/v1/webhook_secret", headers=alice.headers)

    assert refused.status_code == 503, refused.text
    assert refused.json()["description"].startswith(
        "the webhook secret cannot be read or written; reference "
    )
    assert alices != _secret(client, mallory)


def test_a_secret_without_the_operators_key_is_a_503_and_is_not_shown(
    client: TestClient, tenant: Any, settings_factory: Callable[..., Settings]
) -> None:
    sealed_with_ours = _secret(client, tenant)
    with TestClient(create_app(settings_factory(secrets_key=NEW_KEY))) as other_key:
        reply = other_key.get("/v1/webhook_secret", headers=tenant.headers)

    assert reply.status_code == 503, reply.text
    assert sealed_with_ours not in reply.text


def test_a_key_rotation_reseals_every_secret_and_the_old_key_is_then_not_needed(
    settings_factory: Callable[..., Settings], database_url: str, tmp_path: Path
) -> None:
    kind = "postgresql" if database_url.startswith("postgresql") else "sqlite"
    with migrated_database(kind, tmp_path) as fresh:  # reseal takes every tenant of the database
        settings = settings_factory(database_url=fresh)
        with TestClient(create_app(settings)) as client:
            tenants = [_tenant(client) for _ in range(3)]
            before = [_secret(client, t) for t in tenants]
        engine = make_engine(settings)
        with session_factory(engine)() as session:
            session.execute(  # plain text, as a replica of an older release may write during an upgrade
                text("UPDATE tenants SET webhook_secret = 'whsec_from-an-older-replica' WHERE id = :t"),
                {"t": tenants[2].id},
            )
            session.commit()
        before[2] = "whsec_from-an-older-replica"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("TAAS_")},
            "TAAS_DATABASE_URL": fresh,
            "TAAS_DATA_DIR": str(tmp_path / "reseal"),
            "TAAS_SECRETS_KEY": NEW_KEY,
        }
        taas = str(Path(sys.executable).with_name("taas"))

        without_old = subprocess.run([taas, "reseal"], env=env, capture_output=True, text=True, timeout=120)
        with_old = {**env, "TAAS_SECRETS_OLD_KEYS": f"{SECRETS_KEY}, another-old-key-0123456789abcdefghij"}
        done = subprocess.run([taas, "reseal"], env=with_old, capture_output=True, text=True, timeout=120)

        assert without_old.returncode == 1, without_old.stdout
        assert "add the key that sealed it to TAAS_SECRETS_OLD_KEYS" in without_old.stderr, without_old.stderr
        assert done.returncode == 0, done.stderr
        assert f"sealed anew under key {KeyRing(NEW_KEY).key_id}" in done.stdout
        with session_factory(engine)() as session:
            assert all(KeyRing(NEW_KEY).is_current(_stored(session, t.id)) for t in tenants)
        engine.dispose()
        with TestClient(create_app(settings_factory(database_url=fresh, secrets_key=NEW_KEY))) as after:
            assert [_secret(after, t) for t in tenants] == before


def _tenant(client: TestClient) -> TenantHandle:
    reply = client.post(
        "/v1/admin/tenants", json={"name": f"t-{uuid.uuid4().hex[:8]}"}, headers=ADMIN_HEADERS
    )
    assert reply.status_code == 201, reply.text
    body = reply.json()
    return TenantHandle(body["tenant_id"], body["name"], body["api_key"])


def test_a_ring_opens_what_its_former_keys_sealed_and_seals_with_its_current_one() -> None:
    old, new = KeyRing(SECRETS_KEY), KeyRing(NEW_KEY, (SECRETS_KEY,))
    sealed = old.seal("whsec_x", place="tenants.webhook_secret:a")

    assert new.open(sealed, place="tenants.webhook_secret:a") == "whsec_x"
    assert not new.is_current(sealed) and new.is_current(new.seal("whsec_x", place="p"))
    for wrong in ("tenants.webhook_secret:b",):
        try:
            new.open(sealed, place=wrong)
        except SealingError as error:
            assert "altered or moved" in str(error)
        else:
            raise AssertionError("a seal moved to another place opened")

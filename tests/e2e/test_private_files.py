"""What `taas up` leaves on disk and in its children's environments after a tenant's whole
round (dataset, training, classify, bundle, webhook secret): every file and folder in the data
dir is its user's alone, no secret is there in plain text, and only the API holds the admin key.

Before, the SQLite database, the stored datasets and the embedded Redis's files were created
0644 (any account on the host read every tenant's data and the webhook secrets in the
database), and every child, training and webhook workers included, had the admin key in its
environment."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_platform import create_classifier, wait_available
from tests.processes import command_line

pytestmark = pytest.mark.e2e

LABELLED = b"text,label\nwill it rain in oslo,weather\nbook a flight to lima,flights\n"


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.decode(errors="replace").partition("=")[::2] for item in raw.split(b"\0") if item)


def _role(pid: int) -> str:
    line = command_line(pid)
    for marker, role in (
        ("redis-server", "redis"),
        ("uvicorn", "api"),
        ("workers.reconciler", "reconciler"),
        ("workers.webhook_worker", "webhooks"),
        ("-m workers", "worker"),
    ):
        if marker in line:
            return role
    return "other"  # the trainer's fork server and learners, Celery's own children


def test_everything_taas_up_writes_is_private_and_only_the_api_holds_the_admin_key(
    platform_factory: Callable[..., Any], intents_nlc: Path, wait_until: Callable[..., Any]
) -> None:
    platform = platform_factory(workers=1)
    platform.start()
    with platform.client(platform.create_tenant()) as client:
        assert (
            client.post("/v1/datasets", content=LABELLED, headers={"Content-Type": "text/csv"}).status_code
            == 201
        )
        classifier_id = create_classifier(client, intents_nlc, "intents")
        wait_available(client, classifier_id, wait_until)
        assert (
            client.post(f"/v1/classifiers/{classifier_id}/classify", json={"text": "rain?"}).status_code
            == 200
        )
        assert client.get(f"/v1/classifiers/{classifier_id}/bundle").status_code == 200
        secret = client.get("/v1/webhook_secret").json()["secret"]
    environments = {pid: (_role(pid), _environ(pid)) for pid in platform.process_tree()}
    assert platform.stop() == 0

    holders = sorted({role for role, env in environments.values() if "TAAS_ADMIN_KEY" in env})
    assert holders == ["api"], holders
    assert {"api", "worker", "webhooks", "reconciler", "redis"} <= {r for r, _ in environments.values()}
    shared = []
    for path in [platform.data_dir, *platform.data_dir.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        if mode & 0o077:
            shared.append(f"{oct(mode)} {path.relative_to(platform.data_dir)}")
        if path.is_file() and not path.is_symlink():
            assert secret.encode() not in path.read_bytes(), f"the webhook secret in plain text in {path}"
    assert shared == [], "readable by other accounts:\n" + "\n".join(shared)
    written = [p for p in platform.data_dir.rglob("*") if p.is_file()]  # what the walk covered
    assert {".db", ".csv", ".aof", ".json"} <= {p.suffix for p in written}
    assert {"admin.key", "secrets.key", "redis.log"} <= {p.name for p in written}
    assert os.stat(platform.data_dir / "redis").st_mode & 0o777 == 0o700

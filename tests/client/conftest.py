"""Fixtures for the client command tests.

``taas``  ``taas(*args, input=None) -> Result``: runs the ``taas`` command in-process (typer's
          CliRunner), ``input`` as its stdin, with its config file in this test's temp dir
          (``XDG_CONFIG_HOME``).
``live``  ``Live``: the API of this test's ``settings`` on a socket (uvicorn in a thread), its
          URL and a fresh tenant on it, and ``available(name)``, a classifier of that tenant
          made Available (the job state machine driven directly, with ``tiny_model``): for the
          commands' tests that need no worker. Fast; ``embedded_platform`` is `taas up`.
``embedded_platform``, ``intents_nlc``: `taas up` and a small NLC training set, from
          ``tests/e2e/conftest.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from click.testing import Result
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from service.app import create_app
from service.cli.commands import cli
from service.core.settings import Settings
from service.storage.store import ArtifactStore
from tests.conftest import ADMIN_KEY
from tests.e2e.conftest import embedded_platform, intents_nlc, platform_factory  # noqa: F401  (fixtures)
from tests.service.conftest import tiny_model  # noqa: F401  (a fixture)
from tests.service.helpers import make_available, nlc_files, serving_in_thread


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home


@pytest.fixture
def taas(config_home: Path) -> Callable[..., Result]:
    runner = CliRunner()

    def run(*args: str, input: str | None = None) -> Result:
        return runner.invoke(cli, list(args), input=input)

    return run


@dataclass
class Live:
    """The API on a socket, a tenant of it and a way to make that tenant's classifiers."""

    url: str
    tenant_id: str
    key: str
    session: Session
    store: ArtifactStore
    model: Path

    def create(self, name: str) -> str:
        """A new classifier named ``name`` (Training); its id."""
        reply = httpx.post(
            f"{self.url}/v1/classifiers",
            files=nlc_files(metadata={"name": name, "language": "en"}),
            headers={"X-API-Key": self.key},
        )
        return str(reply.raise_for_status().json()["classifier_id"])

    def available(self, name: str) -> str:
        """A new classifier named ``name``, Available; its id."""
        return make_available(self.session, self.store, self.tenant_id, self.create(name), self.model)


@pytest.fixture
def live(settings: Settings, session: Session, store: ArtifactStore, tiny_model: Path) -> Iterator[Live]:  # noqa: F811
    with serving_in_thread(create_app(settings)) as port:
        url = f"http://127.0.0.1:{port}"
        made = httpx.post(
            f"{url}/v1/admin/tenants",
            json={"name": f"cli-{uuid.uuid4().hex[:10]}"},
            headers={"X-API-Key": ADMIN_KEY},
        )
        tenant = made.raise_for_status().json()
        yield Live(url, tenant["tenant_id"], tenant["api_key"], session, store, tiny_model)

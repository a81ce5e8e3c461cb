"""The examples of docs/api.md and docs/cli.md marked ``<!-- example -->`` run as written.

They run in order against the API on a socket (SQLite), beside a thread that runs each queued
evaluation as a worker's ``taas.evaluate`` task does, with the variables the docs use: ``$TAAS``
(its URL), ``$KEY`` (a tenant's key), ``$ID`` (that tenant's ``Available`` classifier named
``weather``), ``$DS`` (its dataset), ``$TID`` (the tenant) and ``$ADMIN`` (the admin key); the
``taas`` command logged in as the tenant, and ``curl`` failing on a ``4xx`` or ``5xx``
(``--fail-with-body``), so that an example that no longer works fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine, select

from service.app import create_app
from service.core.db import make_engine, session_factory
from service.core.models import Evaluation
from service.core.settings import Settings
from service.storage.store import ArtifactStore
from tests.conftest import ADMIN_KEY, REDIS_TEST_URL, REPO_ROOT, SECRETS_KEY, migrated_database
from tests.service.conftest import tiny_model  # noqa: F401  (a fixture)
from tests.service.helpers import make_available, nlc_files, serving_in_thread
from workers.evaluation_run import run_evaluation

pytestmark = pytest.mark.slow
DOCS = ("docs/api.md", "docs/cli.md")
EXAMPLE = re.compile(r"<!-- example -->\n```(sh|python)\n(.*?)\n```", re.DOTALL)
# curl as the examples show it, but failing on an error reply (what the reader would notice)
SHELL_PRELUDE = 'curl() { command curl --fail-with-body -sS "$@"; }\n'


def _examples() -> list[tuple[str, str, str]]:
    found = []
    for doc in DOCS:
        text = (REPO_ROOT / doc).read_text()
        for number, match in enumerate(EXAMPLE.finditer(text), start=1):
            found.append((f"{doc}#{number}", match[1], match[2]))
    return found


def test_every_doc_names_its_examples() -> None:
    examples = _examples()
    assert {name.split("#")[0] for name, _, _ in examples} == set(DOCS)
    assert len(examples) >= 7


@pytest.fixture
def variables(tmp_path: Path, tiny_model: Path) -> Iterator[dict[str, str]]:  # noqa: F811
    """The environment of the examples, around a running API."""
    with migrated_database("sqlite", tmp_path) as database_url:
        settings = Settings(
            _env_file=None,
            data_dir=tmp_path / "var",
            database_url=database_url,
            redis_url=REDIS_TEST_URL,
            admin_key=ADMIN_KEY,
            secrets_key=SECRETS_KEY,
            cross_fit_folds=0,
        )
        engine = make_engine(settings)
        with (
            serving_in_thread(create_app(settings)) as port,
            session_factory(engine)() as session,
            _evaluating(settings, engine),
        ):
            url = f"http://127.0.0.1:{port}"
            admin = {"X-API-Key": ADMIN_KEY}
            tenant = httpx.post(f"{url}/v1/admin/tenants", json={"name": "docs"}, headers=admin).json()
            key = {"X-API-Key": tenant["api_key"]}
            created = httpx.post(
                f"{url}/v1/classifiers",
                files=nlc_files(metadata={"name": "weather", "language": "en"}),
                headers=key,
            ).json()
            store = ArtifactStore(settings.resolved_artifacts_dir())
            make_available(session, store, tenant["tenant_id"], created["classifier_id"], tiny_model)
            dataset = httpx.post(
                f"{url}/v1/datasets?name=weather-data",
                content=b"text,label\nhow hot is it,temperature\nis it raining,conditions\n",
                headers={**key, "Content-Type": "text/csv"},
            ).json()
            yield {
                **os.environ,
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
                "XDG_CONFIG_HOME": str(tmp_path / "config"),
                "TAAS": url,
                "KEY": tenant["api_key"],
                "ADMIN": ADMIN_KEY,
                "TID": tenant["tenant_id"],
                "ID": created["classifier_id"],
                "DS": dataset["dataset_id"],
            }
        engine.dispose()


@contextmanager
def _evaluating(settings: Settings, engine: Engine) -> Iterator[None]:
    """Run every queued evaluation (the workers' part) until the block ends."""
    stop = threading.Event()

    def work() -> None:
        while not stop.wait(0.1):
            with session_factory(engine)() as session:
                queued = session.scalars(select(Evaluation.id).where(Evaluation.state == "queued")).all()
            for evaluation_id in queued:
                run_evaluation(evaluation_id, settings)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def test_the_docs_examples_run_as_written(variables: dict[str, str], tmp_path: Path) -> None:
    login = subprocess.run(
        ["taas", "login", variables["TAAS"], variables["KEY"]], env=variables, capture_output=True, text=True
    )
    assert login.returncode == 0, login.stderr
    failures = []
    for name, language, code in _examples():
        if language == "python":
            command = [sys.executable, "-c", code]
        else:
            command = ["bash", "-euo", "pipefail", "-c", SHELL_PRELUDE + code]
        run = subprocess.run(
            command, env=variables, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )
        if run.returncode != 0:
            failures.append(
                f"{name} exited {run.returncode}:\n{code}\n--- stdout\n{run.stdout}--- stderr\n{run.stderr}"
            )
    assert not failures, "\n\n".join(failures)

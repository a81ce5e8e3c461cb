"""Fixtures for the deployment checks: a real S3-compatible server (moto in server mode, a
subprocess on a free loopback port), fake AWS credentials for it, and a node's settings on it."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from service.core.settings import Settings

# Fake credentials for the local S3 server, given the standard AWS way (environment variables).
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "taas-test",
    "AWS_SECRET_ACCESS_KEY": "taas-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a moto S3 server running as a subprocess for this test session."""
    pytest.importorskip("moto", reason="moto[server] is a dev dependency")
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    for _attempt in range(3):
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **S3_ENV},
            )
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        else:
            proc.kill()
            proc.wait()
            continue  # the port was taken in between, or the server did not come up: try again
        try:
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return
    pytest.fail(f"the moto S3 server did not start; its log: {log.read_text()[-2000:]}")


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The fake AWS credentials, set in this process's environment for the test."""
    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return S3_ENV


@pytest.fixture
def s3_bucket(s3_endpoint: str, aws_env: dict[str, str]) -> str:
    """A fresh bucket on the local S3 server."""
    import boto3

    name = f"taas-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=name)
    return name


@pytest.fixture
def s3_node_settings(
    settings_factory: Callable[..., Settings], s3_endpoint: str, s3_bucket: str
) -> Callable[..., Settings]:
    """``s3_node_settings(**overrides)``: a node's settings whose artifact store is the test
    bucket (no broker)."""

    def make(**overrides: Any) -> Settings:
        return settings_factory(
            redis_url=None,
            artifacts_url=f"s3://{s3_bucket}/taas",
            s3_endpoint_url=s3_endpoint,
            s3_addressing_style="path",
            **overrides,
        )

    return make

"""Fixtures for the client command tests.

``taas``  ``taas(*args, input=None) -> Result``: runs the ``taas`` command in-process (typer's
          CliRunner), ``input`` as its stdin, with its config file in this test's temp dir
          (``XDG_CONFIG_HOME``).
``embedded_platform``, ``intents_nlc``: `taas up` and a small NLC training set, from
          ``tests/e2e/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from typer.testing import CliRunner

from service.cli.commands import cli
from tests.e2e.conftest import embedded_platform, intents_nlc, platform_factory  # noqa: F401  (fixtures)


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

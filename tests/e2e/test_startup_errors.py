"""The platform's own commands refuse a bad start in one line and exit status 1 (2 for a bad
option), before anything runs: a TAAS_* setting that does not parse, a port out of range, an
API or a background process on a database that was never migrated, an API without a Redis,
a worker told to change what taas fixes, an external Redis that does not answer."""

from __future__ import annotations

import contextlib
import http.server
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.chaos import free_port

TAAS = str(Path(sys.executable).with_name("taas"))


def _run(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TAAS_")}
    environment.update(TAAS_DATA_DIR=str(tmp_path / "var"), **env)
    return subprocess.run(
        [TAAS, *args], env=environment, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("command", "variable", "value", "named"),
    [
        ("up", "TAAS_LEARNERS", "-1", "TAAS_LEARNERS: Input should be greater than or equal to 0"),
        ("migrate", "TAAS_DEVICE", "tpu", "TAAS_DEVICE: Input should be 'auto', 'cpu' or 'cuda'"),
        ("api", "TAAS_LEASE_SECONDS", "soon", "TAAS_LEASE_SECONDS: Input should be a valid integer"),
    ],
)
def test_a_setting_that_does_not_parse_is_one_line_naming_it(
    tmp_path: Path, command: str, variable: str, value: str, named: str
) -> None:
    result = _run(command, tmp_path=tmp_path, **{variable: value})

    assert result.returncode == 1
    assert result.stderr.startswith(f"error: bad setting: {named}") and result.stderr.count("\n") == 1


@pytest.mark.parametrize("command", ["up", "api", "worker"])
def test_an_admin_key_short_enough_to_guess_is_refused(tmp_path: Path, command: str) -> None:
    """Nothing counts wrong guesses of the admin key, so it must be long enough that guessing
    is hopeless; an operator's `TAAS_ADMIN_KEY=secret` was taken as it was."""
    result = _run(command, tmp_path=tmp_path, TAAS_ADMIN_KEY="s3cret-admin\n")

    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(
        "error: bad setting: TAAS_ADMIN_KEY: Value error, the admin key is 12 characters; "
        "it must be at least 32"
    )
    assert "s3cret" not in result.stderr  # the key itself is never printed


def test_a_short_key_in_the_admin_key_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "admin.key").write_text("letmein\n")

    result = _run("up", "--port", str(free_port()), tmp_path=tmp_path)

    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "admin.key: the admin key is 7 characters; it must be at least 32" in result.stderr
    assert result.stderr.rstrip().endswith("or delete the file to generate a new admin key")


@pytest.mark.parametrize("command", ["up", "api"])
def test_a_port_out_of_range_is_refused(tmp_path: Path, command: str) -> None:
    result = _run(command, "--port", "99999", tmp_path=tmp_path)

    assert result.returncode == 2 and "65535" in result.stderr


def test_the_api_refuses_a_database_that_was_never_migrated(tmp_path: Path) -> None:
    (tmp_path / "var").mkdir()

    result = _run("api", "--port", str(free_port()), tmp_path=tmp_path, TAAS_ADMIN_KEY="k" * 32)

    assert result.returncode == 1
    assert (
        result.stderr.startswith("error: the database schema is at nothing")
        and "taas migrate" in result.stderr
    )
    assert ", not 00" in result.stderr  # the newest revision, as for an old schema (running.md)
    assert not (tmp_path / "var" / "taas.db").exists()  # refused without leaving an empty database


def test_the_api_refuses_to_start_without_a_redis_to_queue_trainings_on(tmp_path: Path) -> None:
    assert _run("migrate", tmp_path=tmp_path).returncode == 0

    result = _run("api", "--port", str(free_port()), tmp_path=tmp_path, TAAS_ADMIN_KEY="k" * 32)

    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: TAAS_REDIS_URL is not set")


@pytest.mark.parametrize("command", ["up", "migrate", "api"])
def test_a_database_a_newer_release_migrated_is_refused_in_one_line(tmp_path: Path, command: str) -> None:
    """`up` and `migrate` printed alembic's 270-line traceback; `api` said "run `taas migrate`"."""
    assert _run("migrate", tmp_path=tmp_path).returncode == 0
    with sqlite3.connect(tmp_path / "var" / "taas.db") as db:
        db.execute("UPDATE alembic_version SET version_num = '0099'")

    result = (
        _run(
            command,
            "--port",
            str(free_port()),
            tmp_path=tmp_path,
            TAAS_ADMIN_KEY="k" * 32,
            TAAS_REDIS_URL="redis://127.0.0.1:6379/0",
        )
        if command != "migrate"
        else _run(command, tmp_path=tmp_path)
    )

    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: the database schema is at 0099, which this release does not know")


@pytest.mark.parametrize("command", ["worker", "reconcile", "webhooks"])
def test_the_background_processes_refuse_a_database_that_was_never_migrated(
    tmp_path: Path, command: str
) -> None:
    result = _run(command, tmp_path=tmp_path, TAAS_REDIS_URL="redis://127.0.0.1:6379/0")

    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: ") and "taas migrate" in result.stderr


@pytest.mark.parametrize("option", ["--pool=prefork", "--concurrency", "-c2", "-Q", "--hostname=x"])
def test_a_worker_refuses_options_that_would_change_what_taas_fixes(tmp_path: Path, option: str) -> None:
    assert _run("migrate", tmp_path=tmp_path).returncode == 0

    result = _run("worker", option, "2", tmp_path=tmp_path, TAAS_REDIS_URL="redis://127.0.0.1:6379/0")

    assert result.returncode == 1
    assert (
        result.stderr
        == f"error: {option}: taas sets the pool, concurrency, queues and hostname of a worker\n"
    )


def test_a_data_dir_that_is_a_file_is_named_as_such(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")

    result = _run("up", "--port", str(free_port()), "--data-dir", str(tmp_path / "afile"), tmp_path=tmp_path)

    assert result.returncode == 1
    assert result.stderr == f"error: data dir {tmp_path / 'afile'} is not a directory\n"


def test_up_refuses_an_external_redis_that_does_not_answer(tmp_path: Path) -> None:
    url = f"redis://:secret@127.0.0.1:{free_port()}/0"  # nothing listens there

    result = _run("up", "--port", str(free_port()), tmp_path=tmp_path, TAAS_REDIS_URL=url)

    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: cannot reach Redis at redis://127.0.0.1:")
    assert "secret" not in result.stderr


@pytest.mark.slow
def test_up_does_not_take_a_server_that_took_its_port_after_the_check_for_its_api(tmp_path: Path) -> None:
    """The port is free when `up` checks it; a server that took it before the API bound it (another
    `taas up` on another data dir, started at the same moment) answered for the API, and `up`
    said it was up, printing its admin key for that server, while its own API could not bind."""
    port = free_port()
    squatter = http.server.HTTPServer(
        ("127.0.0.1", port), http.server.BaseHTTPRequestHandler, bind_and_activate=False
    )
    squatter.allow_reuse_address = True  # bound, not yet listening: `up`'s check passes
    squatter.server_bind()
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TAAS_")}
    up = subprocess.Popen(
        [TAAS, "up", "--port", str(port), "--data-dir", str(tmp_path / "var"), "--workers", "0"],
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert up.stdout is not None
        for line in up.stdout:
            if line.startswith("started api"):
                break
        squatter.server_activate()  # listening before the API has imported itself
        threading.Thread(target=squatter.serve_forever, daemon=True).start()

        output, _ = up.communicate(timeout=120)
    finally:
        squatter.shutdown()
        squatter.server_close()
        if up.poll() is None:
            up.terminate()
            up.wait(timeout=90)

    assert up.returncode == 1, output
    assert "taas is up" not in output and "admin key" not in output
    assert "error: api exited with status" in output


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs, filled to the last byte (root only; skipped where it cannot be mounted)."""
    mount = tmp_path / "small"
    mount.mkdir()
    if (
        os.geteuid() != 0
        or subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True
        ).returncode
    ):
        pytest.skip("a tmpfs cannot be mounted here (it needs root)")
    try:
        with open(mount / "filler", "wb") as filler:
            with contextlib.suppress(OSError):
                while True:
                    filler.write(bytes(1 << 16))
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_data_dir_on_a_full_disk_is_refused_in_one_line(tmp_path: Path, full_disk: Path) -> None:
    """An empty probe file fitted a full disk: `up` then died on its first write with a
    traceback and left an empty admin.key, which refused every later start."""
    result = _run("up", "--port", str(free_port()), "--data-dir", str(full_disk / "var"), tmp_path=tmp_path)

    assert result.returncode == 1 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: data dir {full_disk / 'var'} is full")
    assert not (full_disk / "var" / "admin.key").exists()

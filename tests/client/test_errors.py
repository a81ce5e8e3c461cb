"""Client failures are one readable line on stderr and exit status 1."""

from __future__ import annotations

import socket
from collections.abc import Callable

from click.testing import Result


def test_commands_before_login_say_how_to_log_in(taas: Callable[..., Result]) -> None:
    result = taas("classifiers", "list")

    assert result.exit_code == 1
    assert result.stderr == "error: not logged in: run `taas login URL KEY` first\n"


def test_login_to_nothing_listening_is_one_line(taas: Callable[..., Result]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: the connection is refused

        result = taas("login", f"http://127.0.0.1:{port}", "some-key")

    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: cannot reach http://127.0.0.1:{port}:")
    assert result.stderr.count("\n") == 1


def test_training_from_a_missing_file_is_one_line(taas: Callable[..., Result], tmp_path: object) -> None:
    result = taas("train", "/no/such/file.csv", "--name", "x")

    assert result.exit_code == 1 and result.stderr.startswith("error: cannot read /no/such/file.csv")

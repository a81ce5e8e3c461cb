"""Every command's ``--help`` shows each option's and argument's help text whole.

typer renders help through Rich, whose markup takes ``[...]`` for a style tag: a help text
written ``"Data folder [default: ./var]."`` printed as ``"Data folder ."``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from service.cli.commands import cli


def _commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Each command under ``command`` with the words that name it (typer ships its own click)."""
    yield path, command
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _commands(sub, (*path, name))


_ALL = list(_commands(typer.main.get_command(cli)))


@pytest.mark.parametrize(("path", "command"), _ALL, ids=[" ".join(path) or "taas" for path, _ in _ALL])
def test_help_shows_every_parameters_text_whole(path: tuple[str, ...], command: Any) -> None:
    # Wide enough that Rich wraps no line, so each text is one run of the output.
    result = CliRunner().invoke(cli, [*path, "--help"], env={"COLUMNS": "400"})

    assert result.exit_code == 0, result.output
    for param in command.params:
        text = getattr(param, "help", None)
        if text:
            assert text in result.output, f"{' '.join(path)} {param.name}: {text!r} is not in its --help"


def test_the_walk_sees_the_nested_commands() -> None:
    assert ("datasets", "upload") in [path for path, _ in _ALL]


# The commands whose --json prints a list the client builds (docs/cli.md), not a server reply:
# classify (one result per text, online or offline, where there is no server) and the listings.
_LISTS = [("classify",), ("classifiers", "list"), ("datasets", "list"), ("tenants", "list")]


@pytest.mark.parametrize("path", _LISTS, ids=[" ".join(path) for path in _LISTS])
def test_json_help_of_a_listing_says_it_prints_a_list_not_the_servers_reply(path: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*path, "--help"], env={"COLUMNS": "400"})

    assert result.exit_code == 0, result.output
    assert "server's JSON reply" not in result.output
    assert "JSON list" in result.output

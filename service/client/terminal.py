"""What every client command shares: the consoles it prints on, its ``--json`` and ``--wait``
options and its classifier argument, the API of the saved login, a table whose ids are never
shortened, the line an empty listing prints, and one line on stderr, exit status 1, for any
failure."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from service.client import config
from service.client.api import Api
from service.client.errors import ClientError

P = ParamSpec("P")
R = TypeVar("R")

JSON_OPTION = typer.Option(False, "--json", help="Print the server's JSON reply (for scripts).")
# classify and the listings print a list the client builds: classify's has one result per text
# (online or offline, where there is no server), a listing's every item (docs/cli.md)
JSON_LIST_OPTION = typer.Option(False, "--json", help="Print a JSON list instead of a table (for scripts).")

WAIT_OPTION = typer.Option(False, "--wait", help="Follow the training to its end; exit 1 unless Available.")
CLASSIFIER_ARGUMENT = typer.Argument(
    ..., metavar="CLASSIFIER", help="A classifier's id, a unique start of its id, or its name."
)

# soft_wrap: a line is printed whole (a failure is one line on stderr, however long); tables
# still fit the terminal
# markup=False: names and texts are the users' and printed as written ("[/x]" was a MarkupError
# after the server had acted, a new tenant's key never shown)
out = Console(soft_wrap=True, markup=False)
err = Console(stderr=True, soft_wrap=True, markup=False)


def one_line_errors(command: Callable[P, R]) -> Callable[P, R]:
    """``command``, its ClientError told as one line on stderr with exit status 1."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ClientError as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(1) from None

    return run


def logged_in_api() -> Api:
    """The API of the platform and key that ``taas login`` saved."""
    login = config.load()
    return Api(login.url, login.key)


def print_json(value: object) -> None:
    """``value`` as indented JSON on stdout (``--json``)."""
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


def nothing_here(message: str) -> None:
    """What an empty listing prints instead of an empty table (which read as a command that did
    nothing): ``message``, which says how to make the first one."""
    out.print(message, highlight=False)


def new_table(*columns: str) -> Table:
    """A table whose id columns are never shortened: they are what the other commands take."""
    table = Table()
    for name in columns:
        table.add_column(name, no_wrap=name == "id", min_width=36 if name == "id" else None)
    return table

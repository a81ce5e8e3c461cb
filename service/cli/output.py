"""What the ``taas`` commands say on stderr: a supervisor's line that must never stop it
(:func:`tell`), and a failure, one line and exit status 1, never a traceback (:func:`fail`)."""

from __future__ import annotations

from typing import NoReturn

import typer


def tell(message: str) -> None:
    """A supervisor's line on stderr. It goes on supervising when the line cannot be written:
    with stderr in a file on a full disk, the OSError of a child's exit line ended `taas up`,
    and every process with it."""
    try:
        typer.echo(message, err=True)
    except OSError:
        pass


def fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)

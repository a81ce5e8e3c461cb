"""The ``taas`` command: the platform's own commands (``commands``: ``up``, ``api``, ``worker``,
``webhooks``, ``reconcile``, ``migrate``), the supervisor of ``taas up``'s children
(``supervisor``), the checks a server makes before it starts (``preflight``, ``migrations``) and
its one-line errors (``output``), with the client commands of ``service.client`` mounted beside
them. This module is the console script's entry point, and stays light:

Loading the CLI takes a second or so of imports (SQLAlchemy, Alembic, httpx, Typer); a Ctrl-C
then raised KeyboardInterrupt in whatever module was loading and printed its traceback. Here it
ends the command quietly with 130, the shell's status for a Ctrl-C. Once loaded, the command
handles Ctrl-C itself (``taas up`` stops its children in order).
"""

from __future__ import annotations

import sys


def main() -> None:
    """Load the CLI and run it."""
    try:
        from service.cli.commands import main as run
    except KeyboardInterrupt:
        sys.exit(130)
    run()

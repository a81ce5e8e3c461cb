"""The ``taas`` client commands (login, datasets, train, classify, classifiers, tenants).

They talk to a platform over HTTP only (httpx), like any other client: an import-linter
contract keeps this package away from the database, the server and the trainer, so it could
move to a distribution of its own unchanged. They live beside ``service.cli`` because they are
subcommands of the same ``taas`` command.
"""

from __future__ import annotations

from service.client.commands import register

__all__ = ["register"]

"""The taas client: a typed Python client of the HTTP API (:class:`Api`, replies typed in
``service.client.models``) and, built on it, the ``taas`` client commands (``commands``: login,
datasets, train, classify, shell, classifiers, tenants).

It talks to a platform over HTTP only (httpx), like any other client: an import-linter contract
keeps this package away from the database, the server and the trainer (but for the offline
classify of a bundle), so it could move to a distribution of its own unchanged. The commands
live beside ``service.cli`` because they are subcommands of the same ``taas`` command.
"""

from __future__ import annotations

from service.client.api import Api
from service.client.errors import ClientError

__all__ = ["Api", "ClientError"]

"""The one error of the client: a failure the user can read in one line."""

from __future__ import annotations


class ClientError(Exception):
    """A failure the user can read in one line (a command prints it and exits 1); ``status`` is
    the HTTP status when the server answered."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

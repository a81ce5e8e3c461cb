"""The API paths the client sends, each id one percent-encoded segment."""

from __future__ import annotations

from urllib.parse import quote

from service.client.errors import ClientError


def segments(*parts: str | int) -> str:
    """The API path ``/v1/<part>/<part>…``, each part percent-encoded: an id given on the
    command line is one segment, so ``../datasets/ID`` cannot reach another resource. A part
    of ``.`` or ``..`` is refused: encoding leaves dots as they are, and the URL's dot segments
    would be resolved (``tenants revoke TID ..`` sent ``DELETE /v1/admin/tenants/TID``)."""
    for part in map(str, parts):
        if part in {"", ".", ".."}:
            raise ClientError(f"{part!r} is not an id" if part else "an id cannot be empty")
    return "/v1/" + "/".join(quote(str(part), safe="") for part in parts)

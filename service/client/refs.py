"""A classifier or dataset named on the command line by its id, a unique start of its id, or
its name: :func:`resolve` finds the one it means, or says why there is none."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from service.client.errors import ClientError

SHOWN_CANDIDATES = 10  # candidates an ambiguity names before "and N more"


def is_full_id(ref: str) -> bool:
    """Whether ``ref`` is a whole id (a UUID as the API writes them): it is taken as it is, and
    the listing is not read."""
    try:
        return str(uuid.UUID(ref)) == ref.lower()
    except ValueError:
        return False


def resolve(kind: str, ref: str, found: Iterable[tuple[str, str]]) -> str:
    """The id, among ``found`` (each an ``(id, name)``), of the one ``kind`` whose name is
    ``ref`` or whose id starts with it. ClientError when none is (a 404, as the API says of an
    unknown id) or several are (naming each, so that the caller can pick one by its id)."""
    if not ref.strip():
        raise ClientError(f"a {kind} id or name cannot be blank")
    prefix = ref.lower()
    matches = {item_id: name for item_id, name in found if name == ref or item_id.startswith(prefix)}
    if len(matches) == 1:
        return next(iter(matches))
    if not matches:
        raise ClientError(f"404 Not Found: no {kind} is named {ref!r} or has an id that starts with it", 404)
    shown = [f"{item_id} ({name})" for item_id, name in sorted(matches.items())[:SHOWN_CANDIDATES]]
    more = len(matches) - len(shown)
    raise ClientError(
        f"{ref!r} could be any of {len(matches)} {kind}s: {', '.join(shown)}"
        + (f" and {more} more" if more else "")
        + "; give more of the id"
    )

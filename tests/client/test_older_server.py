"""The client against a server from before a reply gained a field: an HTTP server answering
as such a server did."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

from service.client.api import Api
from tests.client.local_server import serving

# GET /v1/admin/tenants before the dashboard's paging: every tenant, no "pages", no name filter
UNPAGED = {
    "tenants": [
        {"tenant_id": "t-1", "name": "acme", "created": "2026-11-20T10:00:00Z", "keys": []},
        {"tenant_id": "t-2", "name": "Globex", "created": "2026-11-21T10:00:00Z", "keys": []},
    ]
}


class _Unpaged(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = json.dumps(UNPAGED).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        """Quiet."""


def test_tenants_of_a_server_from_before_paging_are_listed_and_filtered_here() -> None:
    """The listing read a "pages" key those servers do not send: a KeyError's traceback."""
    with serving(_Unpaged) as url, Api(url, "admin-key") as api:
        assert [t["name"] for t in api.all_tenants()] == ["acme", "Globex"]
        assert [t["name"] for t in api.all_tenants("GLOB")] == ["Globex"]
        assert api.all_tenants("nobody") == []

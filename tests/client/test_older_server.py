"""The client against a server from before a reply gained a field: an HTTP server answering
as such a server did."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from service.client.api import Api

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


@pytest.fixture
def unpaged_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Unpaged)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_tenants_of_a_server_from_before_paging_are_listed_and_filtered_here(unpaged_server: str) -> None:
    """The listing read a "pages" key those servers do not send: a KeyError's traceback."""
    with Api(unpaged_server, "admin-key") as api:
        assert [t["name"] for t in api.all_tenants()] == ["acme", "Globex"]
        assert [t["name"] for t in api.all_tenants("GLOB")] == ["Globex"]
        assert api.all_tenants("nobody") == []

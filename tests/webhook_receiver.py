"""A real webhook receiver for tests: a threaded ``http.server`` on 127.0.0.1 that records every
request and answers from a script (``Receiver(answers=[503, 503])``: 503 twice, then 200),
optionally doing something first (``on_request``); with ``tls`` an https receiver on the address
``localhost`` resolves to first, which records the name each client asked for (SNI).
:func:`issue_certificate` makes a private CA and a server certificate for it."""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Received:
    """One request as the receiver saw it, and the status it answered."""

    path: str
    headers: dict[str, str]
    body: bytes
    answered: int

    @property
    def event(self) -> dict[str, Any]:
        """The JSON body."""
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


class Receiver:
    """Records requests; answers each with the next status of ``answers``, then 200, after
    calling ``on_request``."""

    def __init__(
        self,
        answers: list[int] | None = None,
        on_request: Callable[[], None] | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.answers = list(answers or [])
        self.received: list[Received] = []
        self.server_names: list[str | None] = []  # the SNI of each TLS handshake
        self.tls = tls
        self._lock = threading.Lock()
        receiver = self

        class _Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if on_request is not None:
                    on_request()
                with receiver._lock:
                    status = receiver.answers.pop(0) if receiver.answers else 200
                    receiver.received.append(Received(self.path, dict(self.headers), body, status))
                self.send_response(status)
                if 300 <= status < 400:
                    self.send_header("Location", "http://127.0.0.1:9/elsewhere")
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"not now" if status >= 300 else b"ok")

            def log_message(self, *_: object) -> None:
                pass

        if tls is None:
            self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
            return
        tls.sni_callback = lambda _socket, name, _context: self.server_names.append(name)
        family, _, _, _, address = socket.getaddrinfo("localhost", 0, type=socket.SOCK_STREAM)[0]
        server_class = type("_Server", (ThreadingHTTPServer,), {"address_family": family})
        self.server = server_class(address[:2], _Handler, bind_and_activate=False)
        self.server.server_bind()
        self.server.server_activate()
        self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)

    @property
    def url(self) -> str:
        """The URL to register as a callback."""
        port = self.server.server_address[1]
        if self.tls is not None:
            return f"https://localhost:{port}/hooks/taas"
        return f"http://127.0.0.1:{port}/hooks/taas"

    def accepted(self) -> list[Received]:
        """The requests it answered with a 2xx."""
        with self._lock:
            return [r for r in self.received if 200 <= r.answered < 300]

    def all(self) -> list[Received]:
        """Every request so far."""
        with self._lock:
            return list(self.received)


@contextmanager
def running_receiver(
    answers: list[int] | None = None,
    on_request: Callable[[], None] | None = None,
    tls: ssl.SSLContext | None = None,
) -> Iterator[Receiver]:
    """A started :class:`Receiver`, shut down afterwards."""
    receiver = Receiver(answers, on_request, tls)
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
        thread.join(timeout=5)


def issue_certificate(folder: Path, dns_name: str) -> tuple[Path, ssl.SSLContext]:
    """A fresh private CA (its PEM file, returned) and a server TLS context whose certificate,
    signed by it, is valid for ``dns_name`` only."""
    now = datetime.now(UTC)

    def name(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    def sign(
        subject: str,
        key: ec.EllipticCurvePrivateKey,
        issuer: str,
        issuer_key: ec.EllipticCurvePrivateKey,
        *,
        ca: bool,
    ) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(name(issuer))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(dns_name)]), critical=False
            )
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_cert = sign("taas test CA", ca_key, "taas test CA", ca_key, ca=True)
    server_cert = sign(dns_name, server_key, "taas test CA", ca_key, ca=False)
    ca_file, cert_file, key_file = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return ca_file, context

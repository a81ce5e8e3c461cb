"""Hostile headers, fuzzed (hypothesis, in-process), beside the schemathesis run that fuzzes
bodies and parameters from the schema: ``Range`` and ``If-Range``, content types and their
parameters, content and transfer codings, ``Content-Length`` that lies, ``Accept-Encoding``,
``Origin`` and ``Sec-Fetch-Site``, broken credentials, with bodies as sent, gzipped, cut short
or replaced by noise, against the routes that read bodies or stage files (bundle exports and
imports, uploads, classify, the admin API, the webhook secret).

Every reply must be below 500, and no error may be logged as unexpected (one raised once a
reply has begun keeps the reply's status); after every request the staging folder must be empty (a
refused range left a whole bundle there until the hourly sweep) and nothing may have been
written outside the artifact store (the test's folder and the process's temporary folder).
Bounded and reproducible: a fixed number of examples, derandomised, no example database.
"""

from __future__ import annotations

import base64
import gzip
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hypothesis
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given
from hypothesis import strategies as st

from service.app import create_app
from service.core.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.security.conftest import LABELLED, Estate

pytestmark = pytest.mark.slow

EXAMPLES = 400
BOUNDARY = "fuzz0boundary"
_NLC = "will it rain,weather\nbook a flight,flights\nhot today?,weather\nfly me to rome,flights\n"


def _multipart(parts: dict[str, tuple[str | None, bytes, str]]) -> bytes:
    body = b""
    for name, (filename, data, kind) in parts.items():
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        body += f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\nContent-Type: {kind}\r\n\r\n".encode()
        body += data + b"\r\n"
    return body + f"--{BOUNDARY}--\r\n".encode()


def _operations(estate: Estate, bundle: bytes) -> list[tuple[str, str, bytes, str | None, bool]]:
    """(method, path, body, its content type, whether the admin key is the caller's)."""
    cid, did = estate.classifier["classifier_id"], estate.dataset["dataset_id"]
    nlc = _multipart(
        {
            "training_data": ("train.csv", _NLC.encode(), "text/csv"),
            "training_metadata": (None, b'{"name": "fuzz", "language": "en"}', "application/json"),
        }
    )
    multipart = f"multipart/form-data; boundary={BOUNDARY}"
    return [
        ("GET", f"/v1/classifiers/{cid}/bundle", b"", None, False),
        ("GET", f"/v1/classifiers/{cid}/versions/1/bundle", b"", None, False),
        ("HEAD", f"/v1/classifiers/{cid}/bundle", b"", None, False),
        ("POST", "/v1/classifiers/import", bundle, "application/gzip", False),
        (
            "POST",
            "/v1/classifiers/import",
            _multipart({"bundle": ("m.taas", bundle, "application/gzip")}),
            multipart,
            False,
        ),
        ("POST", "/v1/datasets?name=fuzz", LABELLED.encode(), "text/csv", False),
        ("POST", "/v1/classifiers", nlc, multipart, False),
        ("POST", f"/v1/classifiers/{cid}/versions", nlc, multipart, False),
        (
            "POST",
            f"/v1/classifiers/{cid}/classify",
            b'{"text": "is it going to rain"}',
            "application/json",
            False,
        ),
        (
            "POST",
            f"/v1/classifiers/{cid}/classify_collection",
            b'{"collection": [{"text": "rain"}]}',
            "application/json",
            False,
        ),
        ("GET", f"/v1/classifiers/{cid}/classify?text=rain", b"", None, False),
        ("GET", f"/v1/datasets/{did}", b"", None, False),
        ("GET", "/v1/webhook_secret", b"", None, False),
        ("POST", "/v1/webhook_secret", b"", None, False),
        ("POST", "/v1/admin/tenants", b'{"name": "fuzzed"}', "application/json", True),
        (
            "PATCH",
            f"/v1/admin/tenants/{estate.tenant.id}/quotas",
            b'{"classifiers": 100}',
            "application/json",
            True,
        ),
    ]


_TOKEN = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=40
)
_NUMBER = st.one_of(st.integers(-5, 20_000), st.integers(0, 2**70)).map(str)
RANGES = st.one_of(
    st.sampled_from(
        [
            "bytes=abc",
            "bytes=99999999-",
            "bytes=-0",
            "bytes=0-0",
            "bytes=5-1",
            "bytes=-1",
            "bytes=0-",
            "bytes=0-1,0-1,0-1",
            "bytes=" + ",".join(f"{i}-{i}" for i in range(200)),
            "bytes=1-2, 3-4 ,5-6",
            "items=0-5",
            "bytes",
            "",
        ]
    ),
    st.tuples(_NUMBER, _NUMBER).map(lambda r: f"bytes={r[0]}-{r[1]}"),
    st.lists(st.tuples(_NUMBER, _NUMBER), min_size=1, max_size=8).map(
        lambda rs: "bytes=" + ",".join(f"{a}-{b}" for a, b in rs)
    ),
    _TOKEN.map(lambda t: "bytes=" + t),
)
CONTENT_TYPES = st.one_of(
    st.sampled_from(
        [
            "application/json",
            "application/json; charset=latin-1",
            "application/vnd.api+json",
            "text/plain",
            "text/plain; charset=utf-16",
            "application/x-www-form-urlencoded",
            "multipart/form-data",
            f"multipart/form-data; boundary={BOUNDARY}",
            'multipart/form-data; boundary="' + "b" * 300 + '"',
            "multipart/form-data; boundary=",
            "multipart/mixed; boundary=x",
            "text/csv",
            "text/csv; charset=utf-16",
            "application/x-ndjson",
            "application/gzip",
            "application/octet-stream",
            "*/*",
            ";;;",
            "application/",
            "/json",
        ]
    ),
    _TOKEN,
)
ENCODINGS = st.one_of(
    st.sampled_from(
        ["gzip", "x-gzip", "identity", "br", "deflate", "gzip, gzip", "GZIP", "compress", " gzip "]
    ),
    _TOKEN,
)
LENGTHS = st.one_of(st.sampled_from(["0", "-1", "abc", " 5", "1e3", "99999999999999999999999"]), _NUMBER)
ACCEPT_ENCODINGS = st.one_of(
    st.sampled_from(["gzip", "br", "*", "gzip;q=0", "identity;q=0, *;q=0", "x"]), _TOKEN
)
ORIGINS = st.sampled_from(["https://evil.example", "null", "http://testserver", "http://testserver:1"])
FETCH_SITES = st.sampled_from(["cross-site", "same-site", "same-origin", "none", "bogus"])


@st.composite
def _requests(
    draw: st.DrawFn, operations: list[tuple[str, str, bytes, str | None, bool]], keys: tuple[str, str]
) -> dict[str, Any]:
    method, path, body, kind, admin = draw(st.sampled_from(operations))
    key = keys[1] if admin else keys[0]
    headers: dict[str, str | bytes] = {}
    auth = draw(st.sampled_from(["bearer"] * 6 + ["basic", "x-api-key", "none", "garbage"]))
    if auth == "bearer":
        headers["Authorization"] = f"Bearer {key}"
    elif auth == "basic":
        headers["Authorization"] = "Basic " + base64.b64encode(f"apikey:{key}".encode()).decode()
    elif auth == "x-api-key":
        headers["X-API-Key"] = key
    elif auth == "garbage":
        headers["Authorization"] = draw(_TOKEN)
    if kind is not None:
        headers["Content-Type"] = kind
    if draw(st.booleans()):
        headers["Content-Type"] = draw(CONTENT_TYPES)
    shape = draw(st.sampled_from(["as-is"] * 4 + ["gzip", "cut-gzip", "noise", "empty", "doubled"]))
    if shape == "gzip":
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    elif shape == "cut-gzip":
        body, headers["Content-Encoding"] = gzip.compress(body)[: max(1, len(body) // 3)], "gzip"
    elif shape == "noise":
        body = draw(st.binary(max_size=2048))
    elif shape == "empty":
        body = b""
    elif shape == "doubled":
        body = body * 2
    for name, strategy in (
        ("Range", RANGES),
        ("If-Range", st.one_of(_TOKEN, st.just('"x"'))),
        ("Content-Encoding", ENCODINGS),
        ("Content-Length", LENGTHS),
        ("Transfer-Encoding", st.sampled_from(["chunked", "gzip, chunked", "x"])),
        ("Accept-Encoding", ACCEPT_ENCODINGS),
        ("Origin", ORIGINS),
        ("Sec-Fetch-Site", FETCH_SITES),
    ):
        if draw(st.integers(0, 3)) == 0:
            headers[name] = draw(strategy)
    # as a client would send them: bytes, whatever they hold (HTTP headers are Latin-1)
    raw = {name: v if isinstance(v, bytes) else v.encode("latin-1") for name, v in headers.items()}
    return {"method": method, "url": path, "content": body, "headers": raw}


def _outside_the_store(root: Path, store: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file() and store not in p.parents}


def test_hostile_headers_get_no_5xx_and_leave_nothing_in_staging_or_outside_the_store(
    settings_factory: Callable[..., Settings],
    client: TestClient,
    estate_factory: Callable[[], Estate],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    estate = estate_factory()
    cid = estate.classifier["classifier_id"]
    bundle = client.get(f"/v1/classifiers/{cid}/bundle", headers=estate.tenant.headers).content
    system_temp = tmp_path / "system-temp"  # where Python's temporary files would go
    system_temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(system_temp))
    # small limits: the fuzzer reaches them with small bodies
    settings = settings_factory(max_upload_bytes=64 * 1024, max_json_bytes=4 * 1024, body_idle_seconds=5)
    store = settings.resolved_artifacts_dir()
    staging = store / "tmp"
    before = _outside_the_store(tmp_path, store)
    operations = _operations(estate, bundle)
    seen: set[int] = set()

    with TestClient(create_app(settings), raise_server_exceptions=False) as fuzzed:

        @hypothesis.settings(
            max_examples=EXAMPLES,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(request=_requests(operations, (estate.tenant.api_key, ADMIN_KEY)))
        def one(request: dict[str, Any]) -> None:
            caplog.clear()
            reply = fuzzed.request(**request)
            seen.add(reply.status_code)
            described = f"{request['method']} {request['url']} {request['headers']!r}: {reply.status_code}"
            assert reply.status_code < 500, f"{described} {reply.text[:300]}"
            # a 500 raised once a reply had begun leaves its status as it was: the log tells
            unexpected = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
            assert unexpected == [], f"{described}: {unexpected}"
            left = sorted(staging.iterdir()) if staging.exists() else []
            assert left == [], f"{described} left {left} in staging"
            written = _outside_the_store(tmp_path, store) - before
            assert written == set(), f"{described} wrote {written} outside the store"

        one()

    assert {200, 400, 403, 415} <= seen, seen  # the fuzzer reached the routes, not only refusals

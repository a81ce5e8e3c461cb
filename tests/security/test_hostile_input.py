"""Hostile input: every malformed or malicious request gets a clear 4xx in the NLC body, leaves
nothing half-written, and the service keeps serving."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.core.models import Classifier
from service.core.settings import Settings
from tests.conftest import ADMIN_KEY
from tests.service.helpers import NLC_CSV, nlc_files

UPLOAD_LIMIT = 256 * 1024
JSON_LIMIT = 64 * 1024


@pytest.fixture
def settings(settings_factory: Callable[..., Settings]) -> Settings:
    """Small body limits, so that "too big" is cheap to send."""
    return settings_factory(max_upload_bytes=UPLOAD_LIMIT, max_json_bytes=JSON_LIMIT)


@pytest.fixture(autouse=True)
def still_serving(client: TestClient) -> Iterator[None]:
    """After each test the service still answers an ordinary request."""
    yield
    reply = client.get("/v1/admin/tenants", headers={"Authorization": f"Bearer {ADMIN_KEY}"})
    assert reply.status_code == 200


def _nlc_error(reply: httpx.Response, status: int, *fragments: str) -> None:
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert set(body) == {"code", "error", "description"} and body["code"] == status
    for fragment in fragments:
        assert fragment in body["description"], body["description"]


def _create(
    client: TestClient, tenant: Any, csv: str | bytes = NLC_CSV, metadata: Any = None
) -> httpx.Response:
    return client.post("/v1/classifiers", files=nlc_files(csv, metadata), headers=tenant.headers)


# --- bodies: size and shape ------------------------------------------------------------------


def test_huge_multipart_body_is_413_naming_the_limit(
    client: TestClient, tenant: Any, nothing_left_behind: Callable[[str], None]
) -> None:
    huge = "text,label\n" * (UPLOAD_LIMIT // 10)

    _nlc_error(_create(client, tenant, huge), 413, f"limit of {UPLOAD_LIMIT} bytes")
    nothing_left_behind(tenant.id)


def test_huge_streamed_body_without_length_is_413_while_it_arrives(
    client: TestClient, tenant: Any, nothing_left_behind: Callable[[str], None]
) -> None:
    def chunks() -> Iterator[bytes]:
        yield b"text,label\n"
        for _ in range(64):
            yield b"spam spam spam,eggs\n" * 1024

    reply = client.post(
        "/v1/datasets", content=chunks(), headers={**tenant.headers, "Content-Type": "text/csv"}
    )

    _nlc_error(reply, 413, f"limit of {UPLOAD_LIMIT} bytes")
    nothing_left_behind(tenant.id)


def test_thousands_of_tiny_parts_are_400(
    client: TestClient, tenant: Any, nothing_left_behind: Callable[[str], None]
) -> None:
    boundary = "b0undary"
    parts = "".join(
        f'--{boundary}\r\nContent-Disposition: form-data; name="p{i}"\r\n\r\nx\r\n' for i in range(3000)
    )
    body = (parts + f"--{boundary}--\r\n").encode()

    reply = client.post(
        "/v1/classifiers",
        content=body,
        headers={**tenant.headers, "Content-Type": f"multipart/form-data; boundary={boundary}"},
    )

    _nlc_error(reply, 400, "more than 16 multipart parts")
    nothing_left_behind(tenant.id)


@pytest.mark.parametrize(
    "body",
    [b"--x\r\nContent-Disposition: form-data\r\n\r\nunterminated", b"not multipart at all", b""],
    ids=["unterminated", "garbage", "empty"],
)
def test_malformed_multipart_is_400(
    client: TestClient, tenant: Any, nothing_left_behind: Callable[[str], None], body: bytes
) -> None:
    reply = client.post(
        "/v1/classifiers",
        content=body,
        headers={**tenant.headers, "Content-Type": "multipart/form-data; boundary=x"},
    )

    assert reply.status_code == 400, reply.text
    nothing_left_behind(tenant.id)


def _nlc_create_body(boundary: str) -> bytes:
    """An NLC create (metadata, then training data) as one multipart body."""
    return (
        f'--{boundary}\r\nContent-Disposition: form-data; name="training_metadata"\r\n\r\n'
        '{"language": "en", "name": "cut"}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="training_data"; filename="t.csv"\r\n\r\n'
        f"{NLC_CSV}\r\n--{boundary}--\r\n"
    ).encode()


@pytest.mark.parametrize(
    ("boundary", "cut", "problem"),
    [("x", 0, None), ("x", 10, "cut short"), ("x", 15, "cut short"), ("b" * 257, 0, "Boundary length 257")],
    ids=["whole", "no-closing-boundary", "cut-in-a-row", "boundary-too-long"],
)
def test_a_multipart_body_cut_short_or_with_a_long_boundary_is_400(
    client: TestClient,
    tenant: Any,
    nothing_left_behind: Callable[[str], None],
    boundary: str,
    cut: int,
    problem: str | None,
) -> None:
    """A body that ends before its closing boundary lost its end in transit: its last row
    (here cut inside a class name) must not train a class the client never sent."""
    body = _nlc_create_body(boundary)
    reply = client.post(
        "/v1/classifiers",
        content=body[: len(body) - cut],
        headers={**tenant.headers, "Content-Type": f"multipart/form-data; boundary={boundary}"},
    )

    if problem is None:
        assert reply.status_code == 200, reply.text
        return
    _nlc_error(reply, 400, problem)
    nothing_left_behind(tenant.id)


def test_a_10_mb_single_field_is_refused(client: TestClient, tenant: Any, available_id: str) -> None:
    ten_mb = "a" * (10 * 1024 * 1024)

    _nlc_error(
        client.post(
            f"/v1/classifiers/{available_id}/classify", json={"text": ten_mb}, headers=tenant.headers
        ),
        413,
        f"limit of {JSON_LIMIT} bytes",
    )
    _nlc_error(_create(client, tenant, metadata={"language": "en", "name": ten_mb}), 413)
    _nlc_error(
        client.post(
            "/v1/admin/tenants", json={"name": ten_mb}, headers={"Authorization": f"Bearer {ADMIN_KEY}"}
        ),
        413,
    )


def test_a_metadata_part_over_the_field_limit_is_400(
    client: TestClient, tenant: Any, nothing_left_behind: Callable[[str], None]
) -> None:
    reply = _create(client, tenant, metadata={"language": "en", "name": "n" * (100 * 1024)})

    _nlc_error(reply, 400, "training_metadata", "65536 bytes")
    nothing_left_behind(tenant.id)


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


# JSON that Python's parser refuses past the syntax: nesting past its recursion limit, and an
# integer of more digits than int() converts (4,300: a ValueError, not a JSONDecodeError)
REFUSED_JSON = {"nested": _deep(20_000), "huge-int": "1" * 5_000}


@pytest.mark.parametrize("payload", list(REFUSED_JSON))
@pytest.mark.parametrize("where", ["classify", "json-create", "admin", "metadata", "jsonl-row"])
def test_json_the_parser_refuses_is_400(
    client: TestClient,
    tenant: Any,
    available_id: str,
    where: str,
    payload: str,
) -> None:
    value = REFUSED_JSON[payload]
    json_headers = {**tenant.headers, "Content-Type": "application/json"}
    if where == "classify":
        reply = client.post(
            f"/v1/classifiers/{available_id}/classify", content=f'{{"text": {value}}}', headers=json_headers
        )
    elif where == "json-create":
        reply = client.post(
            "/v1/classifiers",
            content=f'{{"name": "n", "dataset_id": "d", "n": {value}}}',
            headers=json_headers,
        )
    elif where == "admin":
        reply = client.post(
            "/v1/admin/tenants",
            content=f'{{"name": {value}}}',
            headers={"Authorization": f"Bearer {ADMIN_KEY}", "Content-Type": "application/json"},
        )
    elif where == "metadata":
        metadata = f'{{"language": "en", "name": "n", "n": {value}}}'
        reply = client.post(
            "/v1/classifiers",
            files={
                "training_metadata": (None, metadata, "application/json"),
                "training_data": (None, NLC_CSV),
            },
            headers=tenant.headers,
        )
    else:
        body = '{"text": "a", "label": "x"}\n{"text": "b", "label": "y", "n": ' + value + "}\n"
        reply = client.post(
            "/v1/datasets", content=body, headers={**tenant.headers, "Content-Type": "application/x-ndjson"}
        )
    assert reply.status_code == 400, reply.text
    assert reply.json()["code"] == 400
    if where == "jsonl-row":
        assert reply.json()["description"].startswith("row 2:")


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("nlc", b"text" + b"," * (UPLOAD_LIMIT - 1024) + b"\n"),
        ("dataset", b"text,label\n" + b"a," * ((UPLOAD_LIMIT - 1024) // 2) + b"\n"),
        ("dataset", b'{"text": "a", "label": [' + b'"",' * ((UPLOAD_LIMIT - 1024) // 3) + b'""]}\n'),
    ],
    ids=["nlc-csv", "header-csv", "jsonl"],
)
def test_a_row_of_countless_empty_fields_is_400_before_it_is_parsed(
    client: TestClient, tenant: Any, nothing_left_behind: Callable[[str], None], route: str, body: bytes
) -> None:
    """At 32 MB such a row took 1.5 GB and 23 s to build; its comma count refuses it first."""
    if route == "nlc":
        reply = _create(client, tenant, body)
    else:
        headers = {**tenant.headers, "content-type": "text/csv"}
        reply = client.post("/v1/datasets", content=body, headers=headers)

    _nlc_error(reply, 400, "commas in one row", "(max_classes)")
    nothing_left_behind(tenant.id)


# --- encodings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ("café,food\nhello,greeting\n".encode("latin-1"), "row 1: not valid UTF-8"),
        ("naïve,a\nfine,b\n".encode() + "über,c\n".encode("latin-1"), "row 3: not valid UTF-8"),
        ("hello,a\nworld,b\n".encode("utf-16"), "the data looks like UTF-16 or UTF-32"),
        ("hello,a\nworld,b\n".encode("utf-16-be"), "the data looks like UTF-16 or UTF-32"),
        ("hello,a\nworld,b\n".encode("utf-32"), "the data looks like UTF-16 or UTF-32"),
        (b"ok,a\nok too,b\n\xff\xfe\xfa,c\n", "row 3: not valid UTF-8"),
    ],
    ids=["latin-1", "mixed-utf8-then-latin1", "utf-16", "utf-16-be-no-bom", "utf-32", "invalid-bytes"],
)
def test_training_data_that_is_not_utf8_is_400_naming_the_row(
    client: TestClient, tenant: Any, nothing_left_behind: Callable[[str], None], data: bytes, said: str
) -> None:
    reply = _create(client, tenant, data)

    assert reply.status_code == 400, reply.text
    assert reply.json()["description"].startswith(said)
    nothing_left_behind(tenant.id)


@pytest.mark.parametrize(
    "text", ["\ud800 lone surrogate", "bad \udcff byte"], ids=["high-surrogate", "escaped-byte"]
)
def test_unencodable_text_is_400_everywhere(
    client: TestClient, tenant: Any, available_id: str, text: str, nothing_left_behind: Callable[[str], None]
) -> None:
    escaped = json.dumps({"text": text})  # json.dumps writes the surrogate as a \\u escape

    classify = client.post(
        f"/v1/classifiers/{available_id}/classify",
        content=escaped,
        headers={**tenant.headers, "Content-Type": "application/json"},
    )
    dataset = client.post(
        "/v1/datasets",
        content=json.dumps({"text": text, "label": "x"}) + "\n" + json.dumps({"text": "b", "label": "y"}),
        headers={**tenant.headers, "Content-Type": "application/x-ndjson"},
    )
    named = client.post(
        f"/v1/datasets?name={text.encode('utf-8', 'surrogatepass').hex()}", headers=tenant.headers
    )

    _nlc_error(classify, 400, "unpaired surrogate")
    _nlc_error(dataset, 400, "row 1:", "UTF-8")
    assert named.status_code == 400


def test_json_bodies_that_are_not_utf8_are_400(client: TestClient, tenant: Any, available_id: str) -> None:
    latin1 = '{"text": "caf\xe9"}'.encode("latin-1")
    json_headers = {**tenant.headers, "Content-Type": "application/json"}

    classify = client.post(f"/v1/classifiers/{available_id}/classify", content=latin1, headers=json_headers)
    create = client.post("/v1/classifiers", content=latin1, headers=json_headers)
    metadata = client.post(
        "/v1/classifiers",
        files={
            "training_metadata": (None, '{"name": "caf\xe9"}'.encode("latin-1")),
            "training_data": (None, NLC_CSV),
        },
        headers=tenant.headers,
    )

    for reply in (classify, create, metadata):
        assert reply.status_code == 400 and reply.json()["code"] == 400, reply.text
    _nlc_error(classify, 400, "body: not UTF-8 at byte offset 13")


def test_malformed_json_is_400_saying_where(client: TestClient, tenant: Any, available_id: str) -> None:
    classify = client.post(
        f"/v1/classifiers/{available_id}/classify",
        content='{"text": "a",}',
        headers={**tenant.headers, "Content-Type": "application/json"},
    )
    admin = client.post(
        "/v1/admin/tenants",
        content="{",
        headers={"Authorization": f"Bearer {ADMIN_KEY}", "Content-Type": "application/json"},
    )

    _nlc_error(classify, 400, "body: not valid JSON at offset 13: ")
    _nlc_error(admin, 400, "body: not valid JSON at offset 1: ")


def test_an_echoed_lone_surrogate_is_shown_escaped_not_a_500(
    client: TestClient, tenant: Any, available_id: str
) -> None:
    json_headers = {**tenant.headers, "Content-Type": "application/json"}

    create = client.post(
        "/v1/classifiers", content='{"name": "x", "dataset_id": "\\ud800"}', headers=json_headers
    )
    version = client.post(
        f"/v1/classifiers/{available_id}/versions", content='{"dataset_id": "\\udfff"}', headers=json_headers
    )

    _nlc_error(create, 404, "dataset '\\ud800' not found")
    _nlc_error(version, 404, "dataset '\\udfff' not found")


@pytest.mark.parametrize(
    "url",
    ["http://1.1.1.1\x00/", "https://example.com/a b", "http://exa\tmple.com/"],
    ids=["nul", "space", "tab"],
)
def test_callback_urls_with_spaces_or_control_characters_are_400(
    client: TestClient, tenant: Any, nothing_left_behind: Callable[[str], None], url: str
) -> None:
    reply = _create(client, tenant, metadata={"language": "en", "name": "x", "callback_url": url})

    _nlc_error(reply, 400, "training_metadata.callback_url: must not contain spaces or control characters")
    nothing_left_behind(tenant.id)


@pytest.mark.parametrize("route", ["/v1/classifiers", "/v1/datasets"])
def test_a_part_sent_twice_is_400_and_leaves_no_spooled_copy(
    client: TestClient, tenant: Any, nothing_left_behind: Callable[[str], None], route: str
) -> None:
    metadata = ("training_metadata", (None, '{"language": "en", "name": "x"}', "application/json"))
    data = [("training_data", (f"{i}.csv", NLC_CSV, "text/csv")) for i in range(2)]

    reply = client.post(route, files=[metadata, *data], headers=tenant.headers)

    _nlc_error(reply, 400, "multipart part 'training_data' appears twice")
    nothing_left_behind(tenant.id)


# --- what the data says ----------------------------------------------------------------------


def test_csv_formula_cells_are_stored_verbatim_and_returned_inert(
    client: TestClient, tenant: Any, available_id: str, settings: Settings
) -> None:
    formula = "=cmd|' /C calc'!A0"
    csv = f'"{formula}",=HYPERLINK("http://evil")\n"+SUM(1,2)",@label\nplain text,-2+3\n'

    created = _create(client, tenant, csv)
    classified = client.post(
        f"/v1/classifiers/{available_id}/classify", json={"text": formula}, headers=tenant.headers
    )

    assert created.status_code == 200, created.text
    assert classified.status_code == 200 and classified.headers["content-type"] == "application/json"
    assert classified.json()["text"] == formula  # a JSON string, never a spreadsheet cell
    stored = list(settings.resolved_artifacts_dir().rglob("*.csv"))
    assert any(formula in p.read_text("utf-8") for p in stored)


@pytest.mark.parametrize(
    "name",
    ["../../../../etc/passwd", "..\\..\\windows\\system32", "/absolute/path", "name/with/slashes", "CON"],
)
def test_path_like_names_are_only_names(
    client: TestClient, tenant: Any, name: str, settings: Settings
) -> None:
    dataset = client.post(
        "/v1/datasets",
        params={"name": name},
        content="text,label\na,x\nb,y\n",
        headers={**tenant.headers, "Content-Type": "text/csv"},
    )
    created = _create(client, tenant, metadata={"language": "en", "name": name})

    assert dataset.status_code == 201 and dataset.json()["name"] == name
    assert created.status_code == 200 and created.json()["name"] == name
    root = settings.resolved_artifacts_dir()
    for path in (p for p in root.rglob("*") if p.is_file()):
        assert path.resolve().is_relative_to(root / "tenants" / tenant.id), path


def test_names_over_the_limit_or_with_control_or_reordering_characters_are_400(
    client: TestClient, tenant: Any, nothing_left_behind: Callable[[str], None]
) -> None:
    # U+202E shows "report\u202efdp.exe" as "reportexe.pdf" wherever the name is displayed
    for name in ("n" * 257, "a\x00b", "tab\tseparated\x07bell", "report\u202efdp.exe"):
        reply = client.post(
            "/v1/datasets",
            params={"name": name},
            content="text,label\na,x\nb,y\n",
            headers={**tenant.headers, "Content-Type": "text/csv"},
        )
        _nlc_error(reply, 400, "name")
        _nlc_error(_create(client, tenant, metadata={"language": "en", "name": name}), 400, "name")
    nothing_left_behind(tenant.id)


@pytest.mark.parametrize(
    "ident",
    [
        str(uuid.uuid4()),
        "1",
        "%00",
        "..%2F..%2Fetc%2Fpasswd",
        "' OR '1'='1",
        "1; DROP TABLE classifiers; --",
        "分类器",
        "x" * 4000,
        str(uuid.uuid4()).upper(),
    ],
    ids=["guessed-uuid", "short", "nul", "traversal", "or-true", "drop", "unicode", "long", "upper-uuid"],
)
def test_malformed_and_guessed_ids_are_404(
    client: TestClient, tenant: Any, available_id: str, ident: str, session: Session
) -> None:
    for method, path in [
        ("GET", f"/v1/classifiers/{ident}"),
        ("DELETE", f"/v1/classifiers/{ident}"),
        ("POST", f"/v1/classifiers/{ident}/classify"),
        ("POST", f"/v1/classifiers/{ident}/classify_collection"),
        ("GET", f"/v1/datasets/{ident}"),
        ("DELETE", f"/v1/datasets/{ident}"),
    ]:
        body = {"text": "x"} if path.endswith("classify") else {"collection": [{"text": "x"}]}
        reply = client.request(method, path, json=body, headers=tenant.headers)
        assert reply.status_code == 404, (method, path, reply.text)
        assert reply.json()["code"] == 404
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    assert client.get(f"/v1/admin/tenants/{ident}/quotas", headers=admin).status_code == 404
    assert client.delete(f"/v1/admin/tenants/{tenant.id}/keys/{ident}", headers=admin).status_code == 404
    assert (
        session.scalar(select(func.count()).select_from(Classifier).where(Classifier.id == available_id)) == 1
    )


def test_sql_meta_characters_are_just_characters(client: TestClient, tenant: Any, available_id: str) -> None:
    evil = "Robert'); DROP TABLE classifiers;-- \" \\ % _ ; /* */"

    dataset = client.post(
        "/v1/datasets",
        params={"name": evil},
        content=f'text,label\n"{evil.replace(chr(34), chr(34) * 2)}",x\nb,y\n',
        headers={**tenant.headers, "Content-Type": "text/csv"},
    )
    created = _create(client, tenant, metadata={"language": "en", "name": evil})
    classified = client.post(
        f"/v1/classifiers/{available_id}/classify", json={"text": evil}, headers=tenant.headers
    )

    assert dataset.status_code == 201 and dataset.json()["name"] == evil
    assert created.status_code == 200 and created.json()["name"] == evil
    assert classified.status_code == 200 and classified.json()["text"] == evil
    names = {c["name"] for c in client.get("/v1/classifiers", headers=tenant.headers).json()["classifiers"]}
    assert evil in names and len(names) == 2  # the table is still there, with both rows


def test_bad_authorization_headers_are_401(client: TestClient) -> None:
    for headers in (
        {"Authorization": "Basic !!!not-base64"},
        {"Authorization": "Basic " + "QQ==" * 1000},
        {"Authorization": "Digest username=x"},
        {"Authorization": "Bearer " + "k" * 10_000},
        {"X-API-Key": "' OR 1=1 --"},
    ):
        _nlc_error(client.get("/v1/classifiers", headers=headers), 401)


# --- concurrency -----------------------------------------------------------------------------


def test_delete_during_classify_answers_200_or_404_and_removes_everything(
    client: TestClient, tenant: Any, available_id: str, settings: Settings, session: Session
) -> None:
    url = f"/v1/classifiers/{available_id}/classify"
    statuses: list[int] = []
    stop = threading.Event()

    def hammer() -> None:
        while not stop.is_set():
            statuses.append(
                client.post(url, json={"text": "is it raining"}, headers=tenant.headers).status_code
            )

    threads = [threading.Thread(target=hammer) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        while len(statuses) < 20:
            threading.Event().wait(0.01)
        deleted = client.delete(f"/v1/classifiers/{available_id}", headers=tenant.headers)
        after = len(statuses)
        while len(statuses) < after + 20:
            threading.Event().wait(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)

    assert deleted.status_code == 200
    assert set(statuses) <= {200, 404}, set(statuses)
    assert statuses[-1] == 404
    assert client.post(url, json={"text": "x"}, headers=tenant.headers).status_code == 404
    classifier_dir = settings.resolved_artifacts_dir() / "tenants" / tenant.id / "classifiers" / available_id
    assert not classifier_dir.exists()


@pytest.fixture
def available_id(available: str) -> str:
    """The id of an Available classifier of ``tenant`` (under the hostile-input settings)."""
    return available


@pytest.fixture
def available(client: TestClient, tenant: Any, session: Session, settings: Settings, tiny_model: Path) -> str:
    from service.storage.store import ArtifactStore
    from tests.service.helpers import make_available

    created = _create(client, tenant)
    assert created.status_code == 200, created.text
    store = ArtifactStore(settings.resolved_artifacts_dir())
    return make_available(session, store, tenant.id, created.json()["classifier_id"], tiny_model)


@pytest.mark.parametrize(
    ("query", "status"), [("name=caf%C3%A9", 201), ("name=caf%E9", 400), ("na%FFme=x", 400)]
)
def test_a_query_that_is_not_utf8_is_400_naming_the_parameter(
    client: TestClient, tenant: Any, nothing_left_behind: Callable[[str], None], query: str, status: int
) -> None:
    """Percent-escapes decoded to U+FFFD would store a name the client never sent."""
    reply = client.post(
        f"/v1/datasets?{query}",
        content="text,label\nhot?,temperature\nrain?,conditions\n",
        headers={**tenant.headers, "Content-Type": "text/csv"},
    )

    assert reply.status_code == status, reply.text
    if status == 201:
        assert reply.json()["name"] == "café"
        return
    assert "not UTF-8 once percent-decoded" in reply.json()["description"]
    assert reply.json()["description"].startswith(("name:", "na\ufffdme:"))
    nothing_left_behind(tenant.id)

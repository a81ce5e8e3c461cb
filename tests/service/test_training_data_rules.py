"""NLC's training-data rules: each violation is a 400 naming the row and rule, leaving nothing behind."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from service.core.settings import TRAINER_MAX_TEXT_CHARS, Settings
from service.storage.store import ArtifactStore
from trainer.data import MAX_TEXT_CHARS, read_labelled_csv

pytestmark = pytest.mark.dialect_neutral

GOOD = "good text,a\nother text,b\n"


@pytest.fixture
def small_limits(settings_factory: Callable[..., Settings]) -> Settings:
    return settings_factory(max_training_rows=4, max_text_chars=20, max_class_chars=10, max_classes=3)


@pytest.fixture
def client(small_limits: Settings) -> Any:
    from service.app import create_app

    with TestClient(create_app(small_limits)) as c:
        yield c


# small_limits: max_text_chars 20 + max_classes 3 + 32 for columns and keys
_WIDE = "more than 55 commas in one row; a row holds one text (max_text_chars) and its classes (max_classes)"
_PAIRS = "more than 4 training rows (max_training_rows; a text with several classes counts once per class)"


@pytest.mark.parametrize(
    ("csv", "expected"),
    [
        (GOOD.encode() + b"bad \xff\xfe text,a\n", "row 3: not valid UTF-8"),
        (
            "one,a\ntwo,a\nthree,a\n",
            "training data has 1 distinct class(es); at least 2 are required (min_classes)",
        ),
        ("a,x\n" + "b" * 21 + ",y\n", "row 2: text has 21 characters; the limit is 20 (max_text_chars)"),
        (
            "a,x\nb,y\nc,x\nd,y\ne,x\n",
            "row 5: " + _PAIRS,
        ),
        (
            "a,x,y\nb,y,x\nc,x\n",
            "row 3: " + _PAIRS,
        ),
        ("a,x\n  ,y\n", "row 2: text is empty"),
        ("a,x\nb, \n", "row 2: class is empty"),
        ("a,x\nb,y\nc,z\nd,w\n", "row 4: more than 3 distinct classes (max_classes)"),
        ("a,x\nb,abcdefghijk\n", "row 2: class has 11 characters; the limit is 10 (max_class_chars)"),
        ("a,x\njust text\n", "row 2: a row needs a text and at least one class"),
        (
            "Text,Label\na,x\nb,y\n",
            "row 1: looks like a header (text,label), and NLC training data has none: leave it out, "
            "or upload the file as a dataset (POST /v1/datasets), which reads it",
        ),
        (
            "text,label,source\na,x,web\nb,y,app\n",
            "row 1: looks like a header (text,label), and NLC training data has none: leave it out, "
            "or upload the file as a dataset (POST /v1/datasets), which reads it",
        ),
        (
            "\n\ntext,label\na,x\nb,y\n",
            "row 3: looks like a header (text,label), and NLC training data has none: leave it out, "
            "or upload the file as a dataset (POST /v1/datasets), which reads it",
        ),
        ('a,x\nb,"y\nz"\n', "row 2: class must not contain control characters (a tab or a line end, say)"),
        ("a,x\nb,y\u2028z\n", "row 2: class must not contain control characters (a tab or a line end, say)"),
        ("a,x\nb,y\tz\n", "row 2: class must not contain control characters (a tab or a line end, say)"),
        ("", "training data has no rows"),
        (
            "a,x\n\u200b\u2060,y\n",
            "row 2: text has no visible character (only zero-width or format characters)",
        ),
        ("a,x\nb,\u200b\n", "row 2: class has no visible character (only zero-width or format characters)"),
        (
            "a,x\nb,\u202egnp.exe\n",
            "row 2: class must not contain bidirectional embeddings, overrides or isolates"
            " (U+202A-U+202E, U+2066-U+2069)",
        ),
        (
            "a,caf\u00e9\nb,cafe\u0301\n",
            "row 2: class 'cafe\\u0301' reads as class 'caf\\xe9' of row 1 but is coded differently"
            " (Unicode NFC and NFD, say): write both alike",
        ),
        ("a,x\nb" + "," * 56 + "y\n", "row 2: " + _WIDE),
        # a quoted line end joins lines into one row: its commas are counted together
        ("a,x\nb" + "," * 30 + '"q\nr"' + "," * 30 + "y\n", "row 2: " + _WIDE),
    ],
    ids=[
        "invalid-utf8",
        "one-class",
        "text-too-long",
        "too-many-rows",
        "too-many-text-class-pairs",
        "empty-text",
        "empty-class",
        "too-many-classes",
        "class-too-long",
        "missing-class",
        "header",
        "header-with-more-columns",
        "header-after-blank-lines",
        "line-end-in-class",
        "line-separator-in-class",
        "tab-in-class",
        "empty-file",
        "invisible-text",
        "invisible-class",
        "bidi-override-in-class",
        "class-twice-nfc-and-nfd",
        "too-many-commas",
        "too-many-commas-over-two-lines",
    ],
)
def test_bad_training_data_is_400_naming_row_and_rule(
    client: TestClient,
    tenant: Any,
    create_classifier: Callable[..., httpx.Response],
    nothing_left_behind: Callable[[str], None],
    csv: str | bytes,
    expected: str,
) -> None:
    reply = create_classifier(tenant, csv=csv)

    assert reply.status_code == 400, reply.text
    assert reply.json() == {"code": 400, "error": "Bad Request", "description": expected}
    nothing_left_behind(tenant.id)


def test_the_widest_row_the_rules_allow_is_not_too_wide(
    client: TestClient, tenant: Any, create_classifier: Callable[..., httpx.Response]
) -> None:
    """A text of max_text_chars commas with max_classes classes: the comma limit refuses only
    rows that break another rule too."""
    reply = create_classifier(tenant, csv='"' + "," * 20 + '",x,y,z\nb,x\n')

    assert reply.status_code == 200, reply.text


def test_scripts_that_need_joiners_and_marks_are_accepted(
    client: TestClient, tenant: Any, create_classifier: Callable[..., httpx.Response]
) -> None:
    """Zero-width joiners (Persian, emoji) and direction marks are part of real text and names;
    only text made of nothing else, and reordering controls in a class, are refused."""
    persian = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645,\u200f\u0641\u0627\u0631\u0633\u06cc\n"
    emoji = "\U0001f468\u200d\U0001f469,\U0001f46a\n"
    csv = persian + emoji

    reply = create_classifier(tenant, csv=csv)

    assert reply.status_code == 200, reply.text


def test_bom_is_accepted(
    client: TestClient, tenant: Any, create_classifier: Callable[..., httpx.Response]
) -> None:
    reply = create_classifier(tenant, csv="\ufeff" + GOOD)

    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize(
    ("metadata", "field"),
    [
        ({"name": "x"}, "training_metadata.language"),
        ({"language": "english!", "name": "x"}, "training_metadata.language"),
        ([1], "training_metadata"),
        ({"language": "en", "name": "   "}, "training_metadata.name: is blank"),  # "no visible character"
    ],
)
def test_bad_metadata_is_400_and_leaves_nothing(
    client: TestClient,
    tenant: Any,
    create_classifier: Callable[..., httpx.Response],
    nothing_left_behind: Callable[[str], None],
    metadata: object,
    field: str,
) -> None:
    reply = create_classifier(tenant, metadata=metadata)

    assert reply.status_code == 400
    assert reply.json()["description"].startswith(field)
    nothing_left_behind(tenant.id)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"words,label\na,b\n", 'row 1: the header must name the columns "text" and "label"'),
        (
            b'{"text": "a", "label": "x"}\n{"text": "b"}\n',
            'row 2: needs a string "text" and a string (or list) "label"',
        ),
        (b'{"text": "a", "label": "x"}\nnot json\n', "row 2: not a JSON object (Expecting value)"),
        (b'{"text": "a", "label": [' + b'"x",' * 56 + b'"y"]}\n', "row 1: " + _WIDE),
        (b"text,label\na,x\nb," + b"y," * 56 + b"\n", "row 3: " + _WIDE),
        (
            b'\n[{"text": "a", "label": "x"}]\n',
            'row 2: a JSON array is not read: send JSON Lines (one {"text": ..., "label": ...} '
            "object a line) or CSV with a text,label header",
        ),
        (b"", "training data has no rows"),
        (b"\n \n", "training data has no rows"),
        (  # no byte-order mark: "the header must name the columns" before
            "text,label\nhot,t\n".encode("utf-16-le"),
            "the data looks like UTF-16 or UTF-32 (a NUL byte between characters): send it as UTF-8",
        ),
        (  # Python's own message, naming sys.set_int_max_str_digits(), before
            b'{"text": "a", "label": "x", "n": ' + b"1" * 5000 + b"}\n",
            "row 1: holds a number of over 4,300 digits",
        ),
        (  # "malformed CSV (field larger than field limit (131072))" before
            b"text,label\n" + b"a" * 140_000 + b",x\n",
            "row 2: a field has over 131,072 characters, far past a text's limit (max_text_chars)",
        ),
    ],
    ids=[
        "header",
        "jsonl-no-label",
        "jsonl-not-json",
        "jsonl-too-wide",
        "csv-too-wide",
        "json-array",
        "empty",
        "blank",
        "utf-16-without-bom",
        "huge-number",
        "huge-field",
    ],
)
def test_bad_dataset_upload_is_400_and_leaves_nothing(
    client: TestClient, tenant: Any, nothing_left_behind: Callable[[str], None], body: bytes, expected: str
) -> None:
    reply = client.post("/v1/datasets", content=body, headers={**tenant.headers, "content-type": "text/csv"})

    assert reply.status_code == 400
    assert reply.json()["description"] == expected
    nothing_left_behind(tenant.id)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        (
            {"training_data": ("a.csv", b"text,label\nhot,t\ncold,c\n"), "file": ("b.csv", b"text,label\n")},
            "training_data: send the data once: a 'training_data' and a 'file' part came",
        ),
        (  # it was stored as the name "\ufffd\ufffdname"
            {"training_data": ("a.csv", b"text,label\nhot,t\ncold,c\n"), "name": (None, b"\xff\xfename")},
            "name: is not valid UTF-8",
        ),
    ],
    ids=["two-data-parts", "name-not-utf-8"],
)
def test_an_ambiguous_multipart_dataset_is_400_and_leaves_nothing(
    client: TestClient,
    tenant: Any,
    nothing_left_behind: Callable[[str], None],
    files: dict[str, Any],
    expected: str,
) -> None:
    reply = client.post("/v1/datasets", files=files, headers=tenant.headers)

    assert reply.status_code == 400
    assert reply.json()["description"] == expected
    nothing_left_behind(tenant.id)


@pytest.mark.parametrize("path", ["/v1/classifiers", "/v1/classifiers/{id}/versions"])
def test_a_training_body_neither_multipart_nor_json_is_refused_naming_both(
    client: TestClient,
    tenant: Any,
    create_classifier: Callable[..., httpx.Response],
    nothing_left_behind: Callable[[str], None],
    path: str,
) -> None:
    """A CSV body was spooled whole, then refused for lacking the 'training_metadata' part."""
    if "{id}" in path:
        path = path.format(id=create_classifier(tenant, csv=GOOD).json()["classifier_id"])
    before = client.get("/v1/classifiers", headers=tenant.headers).json()

    reply = client.post(path, content=GOOD, headers={**tenant.headers, "content-type": "text/csv"})

    assert reply.status_code == 400
    said = reply.json()["description"]
    assert said.startswith("Content-Type: 'text/csv' is not taken here: send multipart/form-data")
    assert "application/json" in said and "POST /v1/datasets" in said
    assert client.get("/v1/classifiers", headers=tenant.headers).json() == before


@pytest.mark.parametrize(
    "leading", [b"", b"\n", b"  \r\n\n"], ids=["first-line", "after-a-blank", "after-blanks"]
)
def test_jsonl_dataset_is_stored_as_canonical_csv(
    client: TestClient, tenant: Any, store: Any, leading: bytes
) -> None:
    body = leading + b'{"text": "hot", "label": "t"}\n\n{"text": "rain", "label": ["c", "w"]}\n'

    reply = client.post(
        "/v1/datasets?name=j",
        content=body,
        headers={**tenant.headers, "content-type": "application/x-ndjson"},
    )

    assert reply.status_code == 201, reply.text
    assert (reply.json()["rows"], reply.json()["classes"]) == (3, 3)
    [stored] = list(store.root.rglob("*.csv"))
    assert stored.read_text() == "text,label\nhot,t\nrain,c\nrain,w\n"


@pytest.mark.parametrize("declared_length", [True, False], ids=["content-length", "chunked"])
def test_oversized_body_is_413_and_leaves_nothing(
    settings_factory: Callable[..., Settings],
    tenant: Any,
    nothing_left_behind: Callable[[str], None],
    declared_length: bool,
) -> None:
    from service.app import create_app

    csv = GOOD * 200  # about 4 KB
    body = nlc_body(csv)
    content: Any = body if declared_length else iter([body[i : i + 512] for i in range(0, len(body), 512)])
    with TestClient(create_app(settings_factory(max_upload_bytes=1000))) as small:
        reply = small.post(
            "/v1/classifiers",
            content=content,
            headers={**tenant.headers, "content-type": f"multipart/form-data; boundary={BOUNDARY}"},
        )

    assert reply.status_code == 413
    assert reply.json() == {
        "code": 413,
        "error": "Payload Too Large",
        "description": "request body exceeds the limit of 1000 bytes",
    }
    nothing_left_behind(tenant.id)


BOUNDARY = "taasboundary"


def nlc_body(csv: str) -> bytes:
    """A hand-built NLC multipart body (so a test can stream it)."""
    parts = [
        ("training_metadata", '{"language": "en", "name": "big"}'),
        ("training_data", csv),
    ]
    out = "".join(
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
        for name, value in parts
    )
    return (out + f"--{BOUNDARY}--\r\n").encode()


def test_a_carriage_return_inside_a_text_reaches_the_trainer_intact(
    client: TestClient, tenant: Any, store: Any
) -> None:
    body = b'{"text": "first line\\rsecond", "label": "a"}\n{"text": "other", "label": "b"}\n'

    reply = client.post(
        "/v1/datasets", content=body, headers={**tenant.headers, "content-type": "application/x-ndjson"}
    )

    assert reply.status_code == 201, reply.text
    [stored] = list(store.root.rglob("*.csv"))
    read = read_labelled_csv(stored)
    assert (read.texts, read.labels) == (["first line\rsecond", "other"], ["a", "b"])


def test_the_text_limit_cannot_be_set_past_the_trainers() -> None:
    """A longer limit let a row through intake that the trainer then refused: the job failed."""
    assert TRAINER_MAX_TEXT_CHARS == MAX_TEXT_CHARS
    with pytest.raises(ValidationError, match="max_text_chars"):
        Settings(max_text_chars=MAX_TEXT_CHARS + 1)


@pytest.mark.parametrize(
    ("route", "full_from"),
    [("dataset", 0), ("nlc", 0), ("dataset", 1)],
    ids=["raw", "multipart", "conversion"],
)
def test_an_upload_onto_a_full_disk_is_503_and_leaves_nothing(
    client: TestClient,
    tenant: Any,
    create_classifier: Callable[..., httpx.Response],
    nothing_left_behind: Callable[[str], None],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    route: str,
    full_from: int,
) -> None:
    """Staging files on a full disk: the spooled body (``full_from`` 0) or the converted CSV (1)
    is written to /dev/full, whose writes fail with ENOSPC as a full disk's do. Both were 500s."""
    real_temp_path = ArtifactStore.temp_path
    calls = 0

    def staging(store: ArtifactStore, suffix: str = "", owner: str | None = None) -> Path:
        nonlocal calls
        calls += 1
        if calls <= full_from:
            return real_temp_path(store, suffix, owner=owner)
        full = tmp_path / f"full-{calls}{suffix}"
        full.symlink_to("/dev/full")
        return full

    monkeypatch.setattr(ArtifactStore, "temp_path", staging)
    if route == "dataset":
        reply = client.post(
            "/v1/datasets",
            content=b"text,label\na,x\nb,y\n",
            headers={**tenant.headers, "content-type": "text/csv"},
        )
    else:
        reply = create_classifier(tenant)

    assert reply.status_code == 503, reply.text
    assert reply.json()["description"].startswith("the artifact store could not store the upload")
    nothing_left_behind(tenant.id)

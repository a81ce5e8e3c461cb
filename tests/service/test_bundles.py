"""Bundles through the API: a classifier exported by one tenant and imported by another classifies
identically; bad bundles are 400s naming the problem, with nothing left behind."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from service.app import create_app
from service.catalogue import bundles
from service.core.errors import NotFound
from service.core.models import Classifier, ClassifierStatus, ClassifierVersion
from service.core.settings import Settings
from service.storage.store import ArtifactStore
from trainer.bundle import extract_bundle, write_bundle
from trainer.inference import META_FILE, LoadedModel

pytestmark = pytest.mark.dialect_neutral

TEXTS = ["is it going to rain", "how warm is it tomorrow", "snow?"]


def _export(client: TestClient, classifier_id: str, tenant: Any) -> bytes:
    reply = client.get(f"/v1/classifiers/{classifier_id}/bundle", headers=tenant.headers)
    assert reply.status_code == 200, reply.text
    assert reply.headers["content-type"] == "application/gzip"
    return reply.content


def _import(client: TestClient, tenant: Any, bundle: bytes, **fields: str) -> Any:
    files = {"bundle": ("model.taas", bundle, "application/gzip")}
    return client.post("/v1/classifiers/import", files=files, data=fields, headers=tenant.headers)


def _classes(client: TestClient, classifier_id: str, tenant: Any) -> list[list[tuple[str, float]]]:
    body = {"collection": [{"text": t} for t in TEXTS]}
    reply = client.post(
        f"/v1/classifiers/{classifier_id}/classify_collection", json=body, headers=tenant.headers
    )
    assert reply.status_code == 200, reply.text
    return [[(c["class_name"], c["confidence"]) for c in r["classes"]] for r in reply.json()["collection"]]


def test_an_imported_bundle_classifies_as_the_exported_classifier(
    client: TestClient, tenant: Any, tenant_factory: Callable[..., Any], available: str
) -> None:
    other = tenant_factory()
    imported = _import(client, other, _export(client, available, tenant))

    assert imported.status_code == 201, imported.text
    info = imported.json()
    assert info["status"] == "Available" and info["name"] == "weather" and info["language"] == "en"
    assert info["metrics"]["accuracy"] is not None
    theirs, ours = _classes(client, available, tenant), _classes(client, info["classifier_id"], other)
    for a, b in zip(theirs, ours, strict=True):
        assert [n for n, _ in a] == [n for n, _ in b]
        assert [c for _, c in a] == pytest.approx([c for _, c in b], abs=1e-6)
    renamed = _import(client, other, _export(client, available, tenant), name="copy", language="de")
    assert (renamed.json()["name"], renamed.json()["language"]) == ("copy", "de")
    events = client.get(f"/v1/classifiers/{info['classifier_id']}/events", headers=other.headers).json()
    assert [(e["previous_status"], e["status"]) for e in events["status_events"]] == [
        ("Non Existent", "Available")
    ]


def test_a_classifier_still_training_has_no_bundle(
    client: TestClient, tenant: Any, create_classifier: Callable[..., Any]
) -> None:
    cid = create_classifier(tenant).json()["classifier_id"]
    reply = client.get(f"/v1/classifiers/{cid}/bundle", headers=tenant.headers)
    assert reply.status_code == 409
    assert "needs status Available" in reply.json()["description"]


def _tampered(bundle: bytes) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
    weights = bytearray(members["weights.pt"])
    weights[-100] ^= 0x01
    members["weights.pt"] = bytes(weights)
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb") as packed, tarfile.open(fileobj=packed, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def _rebundled(bundle: bytes, *, about: dict[str, Any] | None = None, **meta: Any) -> bytes:
    """The bundle's model with ``meta`` set in its model.json, bundled again (a consistent
    manifest) with ``about``, as another installation could have written it."""
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as tar:
        for member in tar:
            (Path(tmp) / member.name).write_bytes(tar.extractfile(member).read())  # type: ignore[union-attr]
        model_json = Path(tmp) / META_FILE
        model_json.write_text(json.dumps({**json.loads(model_json.read_text()), **meta}))
        out = io.BytesIO()
        write_bundle(Path(tmp), out, about=about if about is not None else {"name": "w", "language": "en"})
    return out.getvalue()


@pytest.mark.parametrize(
    ("spoil", "problem"),
    [
        (_tampered, "weights.pt does not match its SHA-256"),
        (lambda b: _rebundled(b, metrics=[1, 2]), "model.json has metrics that are not a JSON object"),
        (lambda b: b[: len(b) // 2], "not a complete taas bundle"),
        (lambda b: b"not a bundle at all", "not a complete taas bundle"),
        (lambda b: _rebundled(b, labels=["temperature", "cond\titions"]), "class 2: class must not contain"),
        (lambda b: _rebundled(b, labels=["temperature", "c" * 3000]), "model.json: class 2: class has 3000"),
        (lambda b: _rebundled(b, labels=[" temperature", "conditions"]), "class 1 starts or ends with white"),
        (
            lambda b: _rebundled(b, featurizer={"word_ngrams": 100_000}),
            "model files do not fit together: featurizer",
        ),
    ],
    ids=[
        "tampered",
        "metrics",
        "truncated",
        "garbage",
        "tab-in-class",
        "long-class",
        "spaced-class",
        "ngrams",
    ],
)
def test_a_bad_bundle_is_400_naming_the_problem_and_leaves_nothing(
    client: TestClient,
    tenant: Any,
    tenant_factory: Callable[..., Any],
    available: str,
    store: ArtifactStore,
    spoil: Callable[[bytes], bytes],
    problem: str,
) -> None:
    other = tenant_factory()
    reply = _import(client, other, spoil(_export(client, available, tenant)))
    assert reply.status_code == 400
    description = reply.json()["description"]
    assert description.startswith("bundle: ") and problem in description, description
    assert str(store.root) not in description  # named by the bundle's files, not the server's paths
    assert client.get("/v1/classifiers", headers=other.headers).json()["classifiers"] == []
    left = [p for p in (store.root / "tenants" / other.id).rglob("*") if p.is_file()]
    staged = [p for p in (store.root / "tmp").rglob("*") if p.is_file()]
    assert left == staged == [], "files left behind"


@pytest.mark.parametrize("field", ["name", "language"])
def test_an_imported_bundles_fields_that_are_not_utf8_are_400_naming_them(
    client: TestClient,
    tenant: Any,
    tenant_factory: Callable[..., Any],
    available: str,
    store: ArtifactStore,
    field: str,
) -> None:
    """A name of invalid UTF-8 was stored with replacement characters ('caf\ufffd'), where a
    dataset's name part, or a query, is refused."""
    other = tenant_factory()
    files = {
        "bundle": ("model.taas", _export(client, available, tenant), "application/gzip"),
        field: (None, b"caf\xe9"),
    }

    reply = client.post("/v1/classifiers/import", files=files, headers=other.headers)

    assert reply.status_code == 400, reply.text
    assert reply.json()["description"] == f"{field}: is not valid UTF-8 (byte 3)"
    assert client.get("/v1/classifiers", headers=other.headers).json()["classifiers"] == []
    assert [p for p in store.root.rglob("*") if p.is_file() and other.id in str(p)] == []


def test_an_import_needs_a_bundle_a_good_name_and_a_free_classifier_quota(
    client: TestClient,
    tenant: Any,
    tenant_factory: Callable[..., Any],
    admin_headers: dict[str, str],
    available: str,
) -> None:
    other = tenant_factory()
    bundle = _export(client, available, tenant)
    empty = client.post("/v1/classifiers/import", files={"x": ("x", b"1")}, headers=other.headers)
    assert empty.status_code == 400 and "no bundle" in empty.json()["description"]
    assert _import(client, other, bundle, language="xx").status_code == 400
    assert _import(client, other, bundle, name="tab\there").status_code == 400
    client.patch(f"/v1/admin/tenants/{other.id}/quotas", json={"classifiers": 0}, headers=admin_headers)
    refused = _import(client, other, bundle)
    assert refused.status_code == 403 and "classifiers" in refused.json()["description"]


def test_an_unnamed_classifier_exports_and_imports_back(
    client: TestClient, tenant: Any, tenant_factory: Callable[..., Any], available: str
) -> None:
    # NLC's name is optional, so an exporting installation may have none to write
    unnamed = _rebundled(_export(client, available, tenant), about={"name": "", "language": "en"})

    imported = _import(client, tenant_factory(), unnamed)

    assert imported.status_code == 201, imported.text
    assert imported.json()["name"] == ""


def test_a_bundle_over_the_upload_limit_is_413(
    settings_factory: Callable[..., Settings], tenant: Any, available: str, client: TestClient
) -> None:
    bundle = _export(client, available, tenant)
    with TestClient(create_app(settings_factory(max_upload_bytes=len(bundle) // 2))) as small:
        reply = small.post(
            "/v1/classifiers/import",
            content=bundle,
            headers={**tenant.headers, "Content-Type": "application/gzip"},
        )
    assert reply.status_code == 413


def test_a_model_copy_dropped_between_fetch_and_read_is_fetched_again_and_bundled_once(
    tiny_model: Path, tmp_path: Path
) -> None:
    """With a remote store, the node's copy of a model may go (the model-copy sweep, a worker's
    drop) just after an export fetched it: the export fetches it again and rewrites the bundle
    from its start, so the file holds one whole bundle."""
    remote = ArtifactStore(tmp_path / "remote")
    node = ArtifactStore(tmp_path / "node", remote)
    folder = node.model_dir("t", "c", 1) / "epoch-1"
    remote.upload_tree(tiny_model, node.relative(folder))
    real_fetch, fetches = node.fetch, []

    def fetch_then_dropped_once(path: Path, *, folder: bool = False) -> Path:
        fetched = real_fetch(path, folder=folder)
        if not fetches:
            node.drop_local(fetched)
        fetches.append(path)
        return fetched

    node.fetch = fetch_then_dropped_once  # type: ignore[method-assign]
    classifier = Classifier(
        id="c", tenant_id="t", name="weather", language="en", serving_version=1,
        status=ClassifierStatus.AVAILABLE.value, model_dir=node.relative(folder),
    )  # fmt: skip
    bundle = tmp_path / "c.taas"
    with bundle.open("wb") as out:
        out.write(b"left from before")
        bundles.export(node, classifier, out, still_exists=lambda: True)

    assert fetches == [folder, folder]
    extract_bundle(bundle, tmp_path / "extracted")
    exported, original = LoadedModel.load(tmp_path / "extracted"), LoadedModel.load(tiny_model)
    assert exported.classify(TEXTS) == original.classify(TEXTS)


def test_an_export_onto_a_full_disk_is_503_saying_so(
    client: TestClient, tenant: Any, available: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The staging file is /dev/full, whose writes fail with ENOSPC as a full disk's do: the
    export said the model could not be read, and the file's close raised again (a 500)."""
    real_temp_path = ArtifactStore.temp_path

    def staging(store: ArtifactStore, suffix: str = "", owner: str | None = None) -> Path:
        if suffix != ".taas":
            return real_temp_path(store, suffix, owner=owner)
        full = tmp_path / "full.taas"
        full.symlink_to("/dev/full")
        return full

    monkeypatch.setattr(ArtifactStore, "temp_path", staging)
    reply = client.get(f"/v1/classifiers/{available}/bundle", headers=tenant.headers)

    assert reply.status_code == 503, reply.text
    assert reply.json()["description"].startswith(
        "the bundle cannot be staged (is the disk full?); reference "
    )
    assert not (tmp_path / "full.taas").exists()


@pytest.mark.parametrize("pinned", [False, True], ids=["serving", "version-2"])
def test_an_export_whose_model_went_with_its_row_is_404_naming_it(tmp_path: Path, pinned: bool) -> None:
    """A version deleted between its lookup and the read of its model was "classifier '…' not
    found", of a classifier that was still there."""
    store = ArtifactStore(tmp_path / "store")
    classifier = Classifier(
        id="c", tenant_id="t", name="weather", language="en", serving_version=1,
        status=ClassifierStatus.AVAILABLE.value, model_dir="tenants/t/classifiers/c/versions/1/model/epoch-1",
    )  # fmt: skip
    version = ClassifierVersion(
        classifier_id="c", tenant_id="t", number=2, status=ClassifierStatus.AVAILABLE.value,
        model_dir="tenants/t/classifiers/c/versions/2/model/epoch-1",
    )  # fmt: skip

    with pytest.raises(NotFound) as gone, (tmp_path / "out.taas").open("wb") as out:
        bundles.export(store, classifier, out, version if pinned else None, still_exists=lambda: False)

    assert str(gone.value) == ("version '2' not found" if pinned else "classifier 'c' not found")

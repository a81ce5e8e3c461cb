"""Classifier versions through the API: retrain while serving, promote, roll back, pin, delete,
export, quotas; the job state machine moves the versions (``tests.service.helpers.make_available``)."""

from __future__ import annotations

import io
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from service.api import deps
from service.catalogue import classifiers, versions
from service.core.models import Classifier, ClassifierVersion, Dataset, JobState, TrainingJob, utcnow
from service.core.settings import Settings
from service.storage.store import ArtifactStore
from service.training import job_views
from tests.conftest import ADMIN_KEY, TenantHandle
from tests.service.helpers import NLC_CSV, make_available, nlc_files

pytestmark = pytest.mark.dialect_neutral

MORE_CSV = NLC_CSV + "Is it windy?,conditions\nHow warm is the sea?,temperature\n"


@pytest.fixture
def new_version(client: TestClient) -> Callable[..., httpx.Response]:
    """POST a new version of ``cid`` as ``tenant`` (multipart, as an NLC create)."""

    def post(
        tenant: TenantHandle, cid: str, csv: str = MORE_CSV, metadata: object | None = None
    ) -> httpx.Response:
        files: dict[str, Any] = {"training_data": (None, csv, "text/csv")}
        if metadata is not None:
            files["training_metadata"] = nlc_files(metadata=metadata)["training_metadata"]
        return client.post(f"/v1/classifiers/{cid}/versions", files=files, headers=tenant.headers)

    return post


def _classifier(client: TestClient, tenant: TenantHandle, cid: str) -> dict[str, Any]:
    reply = client.get(f"/v1/classifiers/{cid}", headers=tenant.headers)
    assert reply.status_code == 200, reply.text
    return reply.json()


def _classify(client: TestClient, tenant: TenantHandle, cid: str, query: str = "") -> httpx.Response:
    return client.post(
        f"/v1/classifiers/{cid}/classify{query}", json={"text": "is it cold"}, headers=tenant.headers
    )


def _model_dir(session: Session, cid: str) -> str | None:
    session.expire_all()
    classifier = session.get(Classifier, cid)
    assert classifier is not None
    return classifier.model_dir


def test_a_new_classifier_is_its_version_1_and_serves_it_once_available(
    client: TestClient,
    tenant: TenantHandle,
    create_classifier: Callable[..., httpx.Response],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
) -> None:
    cid = create_classifier(tenant).json()["classifier_id"]
    info = _classifier(client, tenant, cid)
    assert (info["status"], info["serving_version"], info["latest_version"], info["promote"]) == (
        "Training",
        None,
        1,
        "auto",
    )
    listed = client.get(f"/v1/classifiers/{cid}/versions", headers=tenant.headers).json()
    assert listed["serving_version"] is None
    assert [(v["version"], v["status"], v["serving"]) for v in listed["versions"]] == [(1, "Training", False)]
    assert listed["versions"][0]["progress"]["state"] == "queued"

    make_available(session, store, tenant.id, cid, tiny_model)
    info = _classifier(client, tenant, cid)
    assert (info["status"], info["serving_version"]) == ("Available", 1)
    one = client.get(f"/v1/classifiers/{cid}/versions/1", headers=tenant.headers).json()
    assert (one["status"], one["serving"], one["metrics"]) == ("Available", True, {"accuracy": 1.0})


def test_retrain_serves_the_old_version_until_the_new_one_is_available_then_rolls_back(
    client: TestClient,
    tenant: TenantHandle,
    available: str,
    new_version: Callable[..., httpx.Response],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
) -> None:
    v1_model = _model_dir(session, available)
    created = new_version(tenant, available)
    assert created.status_code == 201, created.text
    assert (created.json()["version"], created.json()["status"], created.json()["serving"]) == (
        2,
        "Training",
        False,
    )
    # The classifier keeps serving version 1 while version 2 trains: no 409.
    info = _classifier(client, tenant, available)
    assert (info["status"], info["serving_version"], info["latest_version"]) == ("Available", 1, 2)
    assert _classify(client, tenant, available).status_code == 200
    pinned = _classify(client, tenant, available, "?version=2")
    assert pinned.status_code == 409
    assert "version 2" in pinned.json()["description"] and "Training" in pinned.json()["description"]
    assert _classify(client, tenant, available, "?version=3").status_code == 404
    assert _classify(client, tenant, available, "?version=0").status_code == 400

    make_available(session, store, tenant.id, available, tiny_model, version=2)
    info = _classifier(client, tenant, available)
    assert (info["status"], info["serving_version"]) == ("Available", 2)
    v2_model = _model_dir(session, available)
    assert v2_model != v1_model and "/versions/2/" in str(v2_model)
    for query in ("", "?version=1", "?version=2"):
        assert _classify(client, tenant, available, query).status_code == 200, query

    rolled_back = client.post(f"/v1/classifiers/{available}/versions/1/promote", headers=tenant.headers)
    assert rolled_back.status_code == 200, rolled_back.text
    assert rolled_back.json()["serving"] is True
    assert _model_dir(session, available) == v1_model
    assert _classifier(client, tenant, available)["serving_version"] == 1
    events = client.get(f"/v1/classifiers/{available}/events", headers=tenant.headers).json()["status_events"]
    promotions = [(e["version"], e["type"]) for e in events if e["type"] == "classifier.version_promoted"]
    assert promotions == [(1, "classifier.version_promoted"), (2, "classifier.version_promoted")]
    # version 2's Available caused its promote: ordered by `created`, the cause comes first
    v2_available = {
        e["type"]: e["created"] for e in events if (e["version"], e["status"]) == (2, "Available")
    }
    assert v2_available["classifier.status_changed"] < v2_available["classifier.version_promoted"]


def _version_states(client: TestClient, tenant: TenantHandle, cid: str) -> list[tuple[int, str]]:
    listed = client.get(f"/v1/classifiers/{cid}/versions", headers=tenant.headers).json()["versions"]
    return sorted((v["version"], v["status"]) for v in listed)


def _two_versions_cancelled(
    client: TestClient, tenant: TenantHandle, cid: str, new_version: Callable[..., httpx.Response]
) -> str:
    """Versions 2 and 3 of ``cid`` made, then the classifier's training cancelled; its URL."""
    base = f"/v1/classifiers/{cid}"
    assert new_version(tenant, cid).status_code == 201
    assert new_version(tenant, cid).status_code == 201
    assert client.post(f"{base}/cancel", headers=tenant.headers).status_code == 200
    return base


def test_resume_brings_back_every_version_the_cancel_stopped(
    client: TestClient, tenant: TenantHandle, available: str, new_version: Callable[..., httpx.Response]
) -> None:
    base = _two_versions_cancelled(client, tenant, available, new_version)
    assert _version_states(client, tenant, available) == [
        (1, "Available"),
        (2, "Unavailable"),
        (3, "Unavailable"),
    ]
    resumed = client.post(f"{base}/resume", headers=tenant.headers)

    assert resumed.status_code == 200, resumed.text
    assert _version_states(client, tenant, available) == [(1, "Available"), (2, "Training"), (3, "Training")]
    assert client.post(f"{base}/resume", headers=tenant.headers).status_code == 409


def test_a_version_cancelled_before_a_newer_one_was_made_can_still_be_resumed(
    client: TestClient, tenant: TenantHandle, available: str, new_version: Callable[..., httpx.Response]
) -> None:
    base = f"/v1/classifiers/{available}"
    assert new_version(tenant, available).status_code == 201
    assert client.post(f"{base}/cancel", headers=tenant.headers).status_code == 200
    assert new_version(tenant, available).status_code == 201  # version 3 trains; 2 stays cancelled

    resumed = client.post(f"{base}/resume", headers=tenant.headers)

    assert resumed.status_code == 200, resumed.text
    assert _version_states(client, tenant, available) == [(1, "Available"), (2, "Training"), (3, "Training")]


def test_resume_needs_room_for_every_cancelled_version_in_the_training_jobs_quota(
    client: TestClient, tenant: TenantHandle, available: str, new_version: Callable[..., httpx.Response]
) -> None:
    base = _two_versions_cancelled(client, tenant, available, new_version)
    quota = client.patch(
        f"/v1/admin/tenants/{tenant.id}/quotas",
        json={"training_jobs": 1},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    assert quota.status_code == 200, quota.text

    refused = client.post(f"{base}/resume", headers=tenant.headers)

    assert refused.status_code == 403
    assert "the limit is 1, the tenant has 0 and this request adds 2" in refused.json()["description"]
    assert _version_states(client, tenant, available) == [
        (1, "Available"),
        (2, "Unavailable"),
        (3, "Unavailable"),
    ]


def test_manual_promote_keeps_the_serving_version_until_asked(
    client: TestClient,
    tenant: TenantHandle,
    create_classifier: Callable[..., httpx.Response],
    new_version: Callable[..., httpx.Response],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
) -> None:
    cid = create_classifier(tenant, metadata={"language": "en", "name": "w", "promote": "manual"}).json()[
        "classifier_id"
    ]
    make_available(session, store, tenant.id, cid, tiny_model)  # the first one serves regardless
    assert new_version(tenant, cid).status_code == 201
    make_available(session, store, tenant.id, cid, tiny_model, version=2)
    info = _classifier(client, tenant, cid)
    assert (info["promote"], info["serving_version"]) == ("manual", 1)
    assert client.post(f"/v1/classifiers/{cid}/versions/2/promote", headers=tenant.headers).status_code == 200
    assert _classifier(client, tenant, cid)["serving_version"] == 2


def test_only_an_available_version_can_be_promoted(
    client: TestClient, tenant: TenantHandle, available: str, new_version: Callable[..., httpx.Response]
) -> None:
    assert new_version(tenant, available).status_code == 201
    refused = client.post(f"/v1/classifiers/{available}/versions/2/promote", headers=tenant.headers)
    assert refused.status_code == 409
    assert "version 2" in refused.json()["description"]
    missing = client.post(f"/v1/classifiers/{available}/versions/9/promote", headers=tenant.headers)
    assert missing.status_code == 404
    assert _classifier(client, tenant, available)["serving_version"] == 1


def test_deleting_versions(
    client: TestClient,
    tenant: TenantHandle,
    available: str,
    new_version: Callable[..., httpx.Response],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
) -> None:
    serving = client.delete(f"/v1/classifiers/{available}/versions/1", headers=tenant.headers)
    assert serving.status_code == 409
    assert "serves" in serving.json()["description"]

    assert new_version(tenant, available).status_code == 201  # version 2, training
    v2_dataset = session.scalar(
        select(ClassifierVersion.dataset_id).where(
            ClassifierVersion.classifier_id == available, ClassifierVersion.number == 2
        )
    )
    deleted = client.delete(f"/v1/classifiers/{available}/versions/2", headers=tenant.headers)
    assert deleted.status_code == 200, deleted.text
    session.expire_all()
    # Its job is gone with it (a worker holding it finds its next write refused), and its dataset.
    assert (
        session.scalar(
            select(func.count())
            .select_from(TrainingJob)
            .where(TrainingJob.version == 2, TrainingJob.classifier_id == available)
        )
        == 0
    )
    assert session.get(Dataset, v2_dataset) is None
    assert not store.version_dir(tenant.id, available, 2).exists()
    assert _classify(client, tenant, available).status_code == 200

    assert new_version(tenant, available).status_code == 201  # version 3: numbers are not reused
    make_available(session, store, tenant.id, available, tiny_model, version=3)
    client.app.state.invalidations.announce(tenant.id)  # type: ignore[attr-defined]  # as a worker does
    # A classify pinned to version 1 loads its model; deleting the version drops it from the
    # model cache (the serving version's stays).
    assert _classify(client, tenant, available, "?version=1").status_code == 200
    assert _classify(client, tenant, available).status_code == 200
    models = client.app.state.models  # type: ignore[attr-defined]
    assert len(models) == 2
    assert client.delete(f"/v1/classifiers/{available}/versions/1", headers=tenant.headers).status_code == 200
    assert len(models) == 1
    serving_dir = _model_dir(session, available)
    assert serving_dir is not None
    assert models.peek(tenant.id, available, store.resolve(serving_dir)) is not None
    listed = client.get(f"/v1/classifiers/{available}/versions", headers=tenant.headers).json()
    assert [(v["version"], v["serving"]) for v in listed["versions"]] == [(3, True)]
    assert not store.version_dir(tenant.id, available, 1).exists()
    assert client.delete(f"/v1/classifiers/{available}/versions/1", headers=tenant.headers).status_code == 404


def test_a_pinned_classify_racing_its_versions_delete_is_404(
    client: TestClient,
    tenant: TenantHandle,
    available: str,
    new_version: Callable[..., httpx.Response],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The version is found, then deleted (row and files) before its model loads: the check
    after the failed load asked whether the classifier still existed, and answered 503."""
    assert new_version(tenant, available).status_code == 201
    make_available(session, store, tenant.id, available, tiny_model, version=2)
    client.post(f"/v1/classifiers/{available}/versions/1/promote", headers=tenant.headers)
    found_then_deleted = deps._pinned

    def pinned(*args: Any) -> Any:
        target = found_then_deleted(*args)
        session.execute(
            delete(ClassifierVersion).where(
                ClassifierVersion.classifier_id == available, ClassifierVersion.number == 2
            )
        )
        session.commit()
        shutil.rmtree(store.version_dir(tenant.id, available, 2))
        return target

    monkeypatch.setattr(deps, "_pinned", pinned)
    reply = _classify(client, tenant, available, "?version=2")

    assert reply.status_code == 404 and reply.json()["description"] == "version '2' not found"


@pytest.mark.parametrize("path", ["/versions", "/versions/1"])
def test_a_version_read_racing_a_rollback_and_delete_shows_one_moment(
    client: TestClient,
    tenant: TenantHandle,
    available: str,
    new_version: Callable[..., httpx.Response],
    session: Session,
    settings: Settings,
    store: ArtifactStore,
    tiny_model: Path,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    """The route's classifier (serving 2) is read, then version 1 is promoted and 2 deleted
    before the versions are: the listing said ``serving_version`` 2 beside versions without a
    2, none of them serving, and version 1 was said not to serve."""
    assert new_version(tenant, available).status_code == 201
    make_available(session, store, tenant.id, available, tiny_model, version=2)
    found_then_changed = classifiers.get_classifier

    def rolled_back_meanwhile(db: Session, tenant_id: str, classifier_id: str) -> Classifier:
        found = found_then_changed(db, tenant_id, classifier_id)
        other = session.get(Classifier, available)
        assert other is not None
        versions.promote(session, settings, other, 1, now=utcnow())
        session.commit()
        versions.delete_version(session, settings, store, other, 2, now=utcnow())
        session.commit()
        return found

    monkeypatch.setattr(classifiers, "get_classifier", rolled_back_meanwhile)
    reply = client.get(f"/v1/classifiers/{available}{path}", headers=tenant.headers).json()

    if path == "/versions":
        assert reply["serving_version"] == 1
        assert [(v["version"], v["serving"]) for v in reply["versions"]] == [(1, True)]
    else:
        assert (reply["version"], reply["serving"]) == (1, True)


def test_deleting_a_version_1_from_before_versions_removes_its_files(
    client: TestClient,
    tenant: TenantHandle,
    create_classifier: Callable[..., httpx.Response],
    new_version: Callable[..., httpx.Response],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
) -> None:
    """Migration 0005 left a version 1's model and checkpoints in the classifier's folder
    (``model/epoch-N``, ``checkpoints/``), where deleting the version never looked."""
    cid = create_classifier(tenant).json()["classifier_id"]
    legacy = store.classifier_dir(tenant.id, cid)
    shutil.copytree(tiny_model, legacy / "model" / "epoch-1")
    (legacy / "checkpoints").mkdir()
    (legacy / "checkpoints" / "ckpt-00000010.pt").write_bytes(b"state")
    make_available(session, store, tenant.id, cid, tiny_model)
    session.execute(
        update(ClassifierVersion)
        .where(ClassifierVersion.classifier_id == cid)
        .values(model_dir=store.relative(legacy / "model" / "epoch-1"))
    )
    session.commit()
    assert new_version(tenant, cid).status_code == 201
    make_available(session, store, tenant.id, cid, tiny_model, version=2)

    assert client.delete(f"/v1/classifiers/{cid}/versions/1", headers=tenant.headers).status_code == 200

    assert not (legacy / "model").exists() and not (legacy / "checkpoints").exists()
    assert store.version_dir(tenant.id, cid, 2).is_dir()


def test_the_newest_version_cannot_be_deleted_while_none_serves(
    client: TestClient,
    tenant: TenantHandle,
    create_classifier: Callable[..., httpx.Response],
    new_version: Callable[..., httpx.Response],
) -> None:
    cid = create_classifier(tenant).json()["classifier_id"]
    assert client.post(f"/v1/classifiers/{cid}/cancel", headers=tenant.headers).status_code == 200
    assert new_version(tenant, cid).status_code == 201
    # Nothing serves yet, so the classifier shows version 2 (Training); version 1 may go.
    assert _classifier(client, tenant, cid)["status"] == "Training"
    refused = client.delete(f"/v1/classifiers/{cid}/versions/2", headers=tenant.headers)
    assert refused.status_code == 409 and "delete the classifier" in refused.json()["description"]
    assert client.delete(f"/v1/classifiers/{cid}/versions/1", headers=tenant.headers).status_code == 200


def test_each_version_exports_its_own_bundle(
    client: TestClient,
    tenant: TenantHandle,
    available: str,
    new_version: Callable[..., httpx.Response],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
) -> None:
    assert new_version(tenant, available).status_code == 201
    training = client.get(f"/v1/classifiers/{available}/versions/2/bundle", headers=tenant.headers)
    assert training.status_code == 409 and "version 2" in training.json()["description"]
    make_available(session, store, tenant.id, available, tiny_model, version=2)
    for n in (1, 2):
        reply = client.get(f"/v1/classifiers/{available}/versions/{n}/bundle", headers=tenant.headers)
        assert reply.status_code == 200
        with tarfile.open(fileobj=io.BytesIO(reply.content), mode="r:gz") as bundle:
            assert "manifest.json" in bundle.getnames()
            manifest = bundle.extractfile("manifest.json")
            assert manifest is not None and f'"version": {n}' in manifest.read().decode()
    assert list(store.root.glob("tmp/*.taas")) == []


def test_a_version_from_a_stored_dataset_and_bad_requests(
    client: TestClient, tenant: TenantHandle, available: str, new_version: Callable[..., httpx.Response]
) -> None:
    dataset = client.post(
        "/v1/datasets?name=more",
        content="text,label\n" + MORE_CSV,
        headers={**tenant.headers, "Content-Type": "text/csv"},
    )
    assert dataset.status_code in (200, 201), dataset.text
    made = client.post(
        f"/v1/classifiers/{available}/versions",
        json={"dataset_id": dataset.json()["dataset_id"]},
        headers=tenant.headers,
    )
    assert made.status_code == 201, made.text
    assert made.json()["dataset_id"] == dataset.json()["dataset_id"]

    no_data = client.post(
        f"/v1/classifiers/{available}/versions",
        files={"training_metadata": (None, "{}", "application/json")},
        headers=tenant.headers,
    )
    assert no_data.status_code == 400 and "training_data" in no_data.json()["description"]
    unknown = client.post(
        f"/v1/classifiers/{available}/versions", json={"dataset_id": "nope"}, headers=tenant.headers
    )
    assert unknown.status_code == 404
    bad_row = new_version(tenant, available, csv="only one column\n")
    assert bad_row.status_code == 400 and "row 1" in bad_row.json()["description"]
    for field, value in (("mode", "multi_label"), ("promote", "manual"), ("name", "renamed")):
        kept = new_version(tenant, available, metadata={field: value})  # the classifier's, not a version's
        assert kept.status_code == 400 and f"training_metadata.{field}" in kept.json()["description"]
    stray = client.post(
        f"/v1/classifiers/{available}/versions",
        json={"dataset_id": dataset.json()["dataset_id"], "mode": "multi_label"},
        headers=tenant.headers,
    )
    assert stray.status_code == 400 and "mode" in stray.json()["description"]
    listed = client.get(f"/v1/classifiers/{available}/versions", headers=tenant.headers).json()
    assert [v["version"] for v in listed["versions"]] == [1, 2]


def test_the_data_sent_with_a_version_trains_no_other(
    client: TestClient, tenant: TenantHandle, available: str
) -> None:
    """It goes with its version: trained on by another classifier (or version), deleting the
    first took it from under the second, whose training then failed or could not resume."""
    owned = client.get(f"/v1/classifiers/{available}/versions/1", headers=tenant.headers).json()["dataset_id"]
    assert owned is not None
    said = f"dataset_id: dataset {owned} is the training data sent with a classifier's version"

    other = client.post(
        "/v1/classifiers",
        json={"name": "b", "language": "en", "dataset_id": owned},
        headers=tenant.headers,
    )
    again = client.post(
        f"/v1/classifiers/{available}/versions", json={"dataset_id": owned}, headers=tenant.headers
    )

    for refused in (other, again):
        assert refused.status_code == 400 and refused.json()["description"].startswith(said)
    assert [
        c["classifier_id"]
        for c in client.get("/v1/classifiers", headers=tenant.headers).json()["classifiers"]
    ] == [available]
    listed = client.get(f"/v1/classifiers/{available}/versions", headers=tenant.headers).json()
    assert [v["version"] for v in listed["versions"]] == [1]


def test_an_older_version_finishing_late_does_not_undo_a_rollback(
    client: TestClient,
    tenant: TenantHandle,
    available: str,
    new_version: Callable[..., httpx.Response],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
) -> None:
    """Versions 2 and 3 train; 3 serves once Available; the tenant rolls back to 1. Version 2
    finishing then served (it was newer than the serving 1), undoing the tenant's choice."""
    assert new_version(tenant, available).status_code == 201
    assert new_version(tenant, available).status_code == 201
    make_available(session, store, tenant.id, available, tiny_model, version=3)
    assert _classifier(client, tenant, available)["serving_version"] == 3
    assert (
        client.post(f"/v1/classifiers/{available}/versions/1/promote", headers=tenant.headers).status_code
        == 200
    )

    make_available(session, store, tenant.id, available, tiny_model, version=2)

    assert _classifier(client, tenant, available)["serving_version"] == 1
    listed = client.get(f"/v1/classifiers/{available}/versions", headers=tenant.headers).json()
    assert [(v["version"], v["status"], v["serving"]) for v in listed["versions"]] == [
        (1, "Available", True),
        (2, "Available", False),
        (3, "Available", False),
    ]


@pytest.mark.parametrize(
    ("field", "value"), [("promote", ["manual"]), ("promote", "later"), ("mode", "multi"), ("mode", 2)]
)
def test_a_bad_promote_or_mode_is_refused(
    tenant: TenantHandle, create_classifier: Callable[..., httpx.Response], field: str, value: object
) -> None:
    refused = create_classifier(tenant, metadata={"language": "en", "name": "w", field: value})
    assert refused.status_code == 400
    assert f"training_metadata.{field}" in refused.json()["description"]


def test_every_version_trains_in_its_classifiers_mode(
    tenant: TenantHandle,
    create_classifier: Callable[..., httpx.Response],
    new_version: Callable[..., httpx.Response],
    session: Session,
) -> None:
    created = create_classifier(tenant, metadata={"language": "en", "name": "w", "mode": "multi_label"})
    assert created.json()["mode"] == "multi_label"
    cid = created.json()["classifier_id"]
    assert new_version(tenant, cid).status_code == 201
    plain = create_classifier(tenant).json()["classifier_id"]
    session.rollback()
    for classifier_id, multi_label in ((cid, True), (plain, False)):
        for job_id in session.scalars(
            select(TrainingJob.id).where(TrainingJob.classifier_id == classifier_id)
        ):
            context = job_views.job_context(session, job_id)
            assert context is not None and context.multi_label is multi_label


def test_the_versions_quota_counts_every_version(
    client: TestClient,
    tenant: TenantHandle,
    available: str,
    new_version: Callable[..., httpx.Response],
    admin_headers: dict[str, str],
    session: Session,
) -> None:
    limited = client.patch(
        f"/v1/admin/tenants/{tenant.id}/quotas", json={"versions": 1}, headers=admin_headers
    )
    assert limited.status_code == 200, limited.text
    assert limited.json()["usage"]["versions"] == 1
    refused = new_version(tenant, available)
    assert refused.status_code == 403
    assert "versions" in refused.json()["description"]
    session.expire_all()
    assert (
        session.scalar(select(func.count()).select_from(Dataset).where(Dataset.tenant_id == tenant.id)) == 1
    )
    assert (
        session.scalar(
            select(func.count())
            .select_from(TrainingJob)
            .where(TrainingJob.state == JobState.QUEUED.value, TrainingJob.classifier_id == available)
        )
        == 0
    )


def test_another_tenant_sees_no_versions(
    client: TestClient,
    tenant: TenantHandle,
    tenant_factory: Callable[..., TenantHandle],
    available: str,
) -> None:
    other = tenant_factory()
    base = f"/v1/classifiers/{available}/versions"
    for method, path in (
        ("GET", base),
        ("GET", f"{base}/1"),
        ("POST", f"{base}/1/promote"),
        ("DELETE", f"{base}/1"),
        ("GET", f"{base}/1/bundle"),
    ):
        assert client.request(method, path, headers=other.headers).status_code == 404, path
    assert _classify(client, other, available, "?version=1").status_code == 404

"""The dashboard's JSON feed: overview (live workers included), job list filters and pages, tenants
and their keys."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, event
from sqlalchemy.orm import Session

from benchmarks.chaos import free_port
from service.core.db import session_factory
from service.core.errors import NotFound
from service.core.models import Classifier, utcnow
from service.ops import observe, state_history, views
from service.training.worker_registry import WorkerInfo, WorkerRegistry, connect
from tests.conftest import TenantHandle
from tests.ops.conftest import INTENTS_NLC, FinishedJob
from tests.service.helpers import nlc_files


def _listed(client: TestClient, tenant: TenantHandle) -> dict[str, Any]:
    """The tenant as the tenants page lists it (found by its name: pages hold 20)."""
    found = client.get("/ops/api/tenants", params={"name": tenant.name}).json()["tenants"]
    return {t["tenant_id"]: t for t in found}[tenant.id]


def _create(client: TestClient, tenant: TenantHandle, name: str) -> str:
    reply = client.post(
        "/v1/classifiers",
        files=nlc_files(INTENTS_NLC, {"name": name, "language": "en"}),
        headers=tenant.headers,
    )
    assert reply.status_code == 200, reply.text
    return str(reply.json()["classifier_id"])


def test_overview_counts_queued_jobs_and_lists_them_in_the_job_list(
    ops_client: TestClient, tenant_factory: Callable[..., TenantHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: three queued jobs of two tenants (nothing trains them)
    first, second = tenant_factory(), tenant_factory()
    for tenant, name in ((first, "a"), (first, "b"), (second, "c")):
        _create(ops_client, tenant, name)
    monkeypatch.setattr(views, "PAGE_SIZE", 2)
    # when
    overview = ops_client.get("/ops/api/overview").json()
    mine = ops_client.get("/ops/api/jobs", params={"tenant": first.id, "choices": "true"}).json()
    queued = ops_client.get("/ops/api/jobs", params={"tenant": first.id, "state": "queued", "page": 2}).json()
    none = ops_client.get(
        "/ops/api/jobs", params={"tenant": first.id, "since": "2999-01-01T00:00:00Z"}
    ).json()
    # then
    assert overview["queue_depth"] >= 3 and overview["jobs_by_state"]["queued"] >= 3
    assert len(overview["active_history"]) == 60
    assert overview["active_history"][-1]["queued"] == overview["queue_depth"]
    assert (mine["total"], mine["pages"]) == (2, 1)
    assert {j["classifier"] for j in mine["jobs"]} == {"a", "b"} and {j["tenant"] for j in mine["jobs"]} == {
        first.name
    }
    assert (queued["page"], queued["jobs"]) == (2, [])
    assert none["total"] == 0
    # the filters' choices come when asked (the page's first poll), not in every poll
    assert {first.id, second.id} <= {t["tenant_id"] for t in mine["tenants"]} and "queued" in mine["states"]
    assert "tenants" not in queued and "states" not in queued


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "yesterday"}, "since:"),
        ({"until": "0001-01-01T00:00:00+14:00"}, "until:"),  # before the year 1 in UTC
        ({"page": 4 * 10**17}, "query.page:"),
        ({"tenant": "\0"}, "tenant: is not a tenant id"),  # PostgreSQL refused the NUL: was a 500
        ({"state": "\0"}, "state: must be one of queued, "),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(ops_client: TestClient, params: dict[str, Any], field: str) -> None:
    reply = ops_client.get("/ops/api/jobs", params=params)

    assert reply.status_code == 400 and reply.json()["description"].startswith(field)


@pytest.mark.parametrize("job_id", ["no-such-job", "%00"])
def test_unknown_job_is_404(ops_client: TestClient, job_id: str) -> None:
    assert ops_client.get(f"/ops/api/jobs/{job_id}").status_code == 404


def test_a_job_whose_classifier_is_deleted_while_its_detail_is_read_is_404(
    finished_job: FinishedJob, engine: Engine, client: TestClient
) -> None:
    """The detail reads the job, then its classifier and version; a delete committed in between
    (the statements are not one snapshot) made the feed a 500."""
    deleted: list[bool] = []

    with session_factory(engine)() as reading:

        @event.listens_for(reading, "do_orm_execute")
        def delete_once_the_job_is_read(state: Any) -> None:
            if deleted or Classifier not in [m.class_ for m in state.all_mappers]:
                return
            deleted.append(True)
            tenant = finished_job.tenant
            reply = client.delete(f"/v1/classifiers/{finished_job.classifier_id}", headers=tenant.headers)
            assert reply.status_code == 200, reply.text

        with pytest.raises(NotFound):
            views.job_detail(reading, finished_job.job_id)

    assert deleted == [True]


def test_tenants_show_usage_classifiers_and_keys_without_secrets(
    ops_client: TestClient, tenant: TenantHandle
) -> None:
    _create(ops_client, tenant, "mine")

    listed = _listed(ops_client, tenant)

    assert listed["usage"]["classifiers"] == 1 and listed["quotas"]["classifiers"] > 0
    assert [c["name"] for c in listed["classifiers"]] == ["mine"]
    assert tenant.api_key not in str(listed) and listed["keys"][0]["prefix"]


def test_a_tenants_card_lists_its_newest_classifiers_and_counts_them_all(
    ops_client: TestClient, tenant: TenantHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every classifier of each tenant shown: one tenant of 10,000 made a page of 3.5 MB."""
    monkeypatch.setattr(views, "CLASSIFIERS_PER_TENANT", 2)
    for name in ("first", "second", "third"):
        _create(ops_client, tenant, name)

    listed = _listed(ops_client, tenant)

    assert listed["usage"]["classifiers"] == 3
    assert [c["name"] for c in listed["classifiers"]] == ["third", "second"]


def test_the_tenant_list_asks_the_same_queries_for_any_number_of_tenants(
    ops_client: TestClient,
    tenant_factory: Callable[..., TenantHandle],
    admin_headers: dict[str, str],
) -> None:
    """Five queries a tenant took 9 CPU-seconds a poll with 2,000 tenants (every 2 s)."""
    statements: list[str] = []
    engine = ops_client.app.state.sessions.kw["bind"]  # type: ignore[attr-defined]
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    prefix = f"same-queries-{uuid.uuid4().hex[:8]}-"

    def listed() -> tuple[int, dict[str, Any]]:
        statements.clear()
        reply = ops_client.get("/ops/api/tenants", params={"name": prefix}).json()["tenants"]
        return len(statements), {t["tenant_id"]: t for t in reply}

    def make() -> TenantHandle:
        return tenant_factory(f"{prefix}{uuid.uuid4().hex[:8]}")

    first = make()
    _create(ops_client, first, "mine")
    few, _ = listed()
    second = make()
    ops_client.patch(f"/v1/admin/tenants/{second.id}/quotas", json={"classifiers": 7}, headers=admin_headers)
    for _ in range(3):
        make()
    many, tenants = listed()

    assert 0 < many == few
    assert tenants[first.id]["usage"]["classifiers"] == 1 and tenants[first.id]["usage"]["dataset_rows"] > 0
    assert tenants[second.id]["quotas"]["classifiers"] == 7
    assert tenants[second.id]["usage"] == dict.fromkeys(tenants[second.id]["usage"], 0)


def test_tenants_come_a_page_at_a_time_and_found_by_name(
    ops_client: TestClient, tenant_factory: Callable[..., TenantHandle]
) -> None:
    """Every tenant with every classifier was one reply: megabytes with a thousand tenants."""
    prefix = f"Paged-{uuid.uuid4().hex[:8]}-"
    made = [tenant_factory(f"{prefix}{i:02d}") for i in range(views.TENANTS_PER_PAGE + 3)]
    odd = tenant_factory(f"{prefix}100%_off")

    def page(number: int, name: str = prefix.lower()) -> dict[str, Any]:
        reply = ops_client.get("/ops/api/tenants", params={"page": number, "name": name})
        assert reply.status_code == 200, reply.text
        return dict(reply.json())

    first, second = page(1), page(2)
    assert (first["total"], first["pages"], second["page"]) == (len(made) + 1, 2, 2)
    listed = [t["tenant_id"] for t in first["tenants"] + second["tenants"]]
    assert listed == [t.id for t in [*made, odd]]  # oldest first, each once
    assert page(3)["tenants"] == []
    assert [t["tenant_id"] for t in page(1, "100%_")["tenants"]] == [odd.id]  # % and _ as written
    assert page(1, f"{prefix}%")["total"] == 0  # a wildcard, it matched them all
    too_long = ops_client.get("/ops/api/tenants", params={"name": "x" * 257})
    assert too_long.status_code == 400


@pytest.mark.parametrize("name", ["\x00", "a\x00b"])
def test_a_nul_in_the_tenant_search_is_a_400(ops_client: TestClient, tenant: TenantHandle, name: str) -> None:
    """PostgreSQL refused the NUL with a 500; SQLite cut the pattern at it and listed every tenant."""
    reply = ops_client.get("/ops/api/tenants", params={"name": name})
    assert reply.status_code == 400, reply.text
    assert reply.json()["description"].startswith("name:")


def test_the_tenant_search_ignores_case_beyond_ascii(
    ops_client: TestClient, tenant_factory: Callable[..., TenantHandle]
) -> None:
    """SQLite's lower() folds ASCII only: 'émile' did not find 'Émile' there (PostgreSQL did)."""
    made = tenant_factory(f"Émile-Ångström-{uuid.uuid4().hex[:8]}")
    for typed in (made.name.lower(), made.name.upper(), "ÉMILE-ÅNGSTRÖM-" + made.name[-8:]):
        found = ops_client.get("/ops/api/tenants", params={"name": typed}).json()["tenants"]
        assert [t["tenant_id"] for t in found] == [made.id], typed


def test_key_actions_need_the_csrf_header(ops_client: TestClient, tenant: TenantHandle) -> None:
    reply = ops_client.post(f"/ops/api/tenants/{tenant.id}/keys", json={})

    assert reply.status_code == 403


def test_rotating_a_key_with_revoke_others_ends_the_old_key(
    ops_client: TestClient, tenant: TenantHandle, csrf: str
) -> None:
    headers = {"X-CSRF-Token": csrf}

    issued = ops_client.post(
        f"/ops/api/tenants/{tenant.id}/keys", json={"revoke_others": True}, headers=headers
    )

    assert issued.status_code == 201
    new_key = issued.json()["api_key"]
    assert ops_client.get("/v1/classifiers", headers=tenant.headers).status_code == 401
    assert (
        ops_client.get("/v1/classifiers", headers={"Authorization": f"Bearer {new_key}"}).status_code == 200
    )


@pytest.mark.parametrize("where", ["feed", "admin"])
def test_revoke_others_must_be_a_json_boolean(
    ops_client: TestClient, tenant: TenantHandle, csrf: str, admin_headers: dict[str, str], where: str
) -> None:
    """ "yes" and 1 were read as true, and revoked every other key."""
    if where == "feed":
        reply = ops_client.post(
            f"/ops/api/tenants/{tenant.id}/keys",
            json={"revoke_others": "yes"},
            headers={"X-CSRF-Token": csrf},
        )
    else:
        reply = ops_client.post(
            f"/v1/admin/tenants/{tenant.id}/keys", json={"revoke_others": 1}, headers=admin_headers
        )

    assert reply.status_code == 400 and "revoke_others" in reply.json()["description"]
    assert ops_client.get("/v1/classifiers", headers=tenant.headers).status_code == 200  # the key still works


def test_revoking_a_key_stops_it(ops_client: TestClient, tenant: TenantHandle, csrf: str) -> None:
    keys = _listed(ops_client, tenant)["keys"]

    reply = ops_client.post(
        f"/ops/api/tenants/{tenant.id}/keys/{keys[0]['key_id']}/revoke", headers={"X-CSRF-Token": csrf}
    )

    assert reply.status_code == 200
    assert ops_client.get("/v1/classifiers", headers=tenant.headers).status_code == 401


def test_overview_lists_live_workers_idle_or_training_with_their_job(
    ops_client: TestClient, live_worker: Callable[..., WorkerInfo], finished_job: FinishedJob
) -> None:
    idle, busy = live_worker(), live_worker(finished_job.job_id)

    listed = {w["worker"]: w for w in ops_client.get("/ops/api/overview").json()["workers"]}

    assert (listed[idle.worker_id]["state"], listed[idle.worker_id]["job_id"]) == ("idle", None)
    shown = listed[busy.worker_id]
    assert (shown["state"], shown["classifier"]) == ("training", "intents")
    assert shown["job_id"] == busy.job_id == finished_job.job_id
    assert (shown["host"], shown["device"], shown["learners"]) == (busy.host, "cuda:0 Test GPU", 4)
    assert 0 <= shown["heartbeat_age_seconds"] < 60
    assert datetime.fromisoformat(shown["last_heartbeat"]).timestamp() == pytest.approx(busy.last_heartbeat)


def test_overview_says_why_it_lists_no_worker_when_the_registry_is_unreachable(session: Session) -> None:
    down = WorkerRegistry(connect(f"redis://127.0.0.1:{free_port()}/0"))

    found = views.overview(
        session, down, observe.ProgressDigests(), state_history.ActiveHistory(), now=utcnow()
    )

    assert found["workers"] == [] and "registry (Redis) is unreachable" in found["workers_error"]


def test_the_dashboard_deletes_a_tenant_with_everything_it_owns_given_the_csrf_header(
    ops_client: TestClient, tenant: TenantHandle, csrf: str, admin_headers: dict[str, str]
) -> None:
    _create(ops_client, tenant, "doomed")
    path = f"/ops/api/tenants/{tenant.id}/delete"

    forged = ops_client.post(path)
    deleted = ops_client.post(path, headers={"X-CSRF-Token": csrf})
    again = ops_client.post(path, headers={"X-CSRF-Token": csrf})

    assert forged.status_code == 403
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {"tenant_id": tenant.id, "classifiers": 1, "datasets": 1}
    assert again.status_code == 404
    assert ops_client.get("/v1/classifiers", headers=tenant.headers).status_code == 401
    listed = ops_client.get(f"/v1/admin/tenants?name={tenant.name}", headers=admin_headers).json()
    assert listed["total"] == 0

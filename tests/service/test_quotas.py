"""Per-tenant quotas (defaults, admin overrides, enforcement) and the Redis classify rate limiter."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import inspect
from sqlalchemy.orm import Session

from service.catalogue import datasets
from service.core.errors import QuotaExceeded, RateLimited
from service.core.models import Tenant
from service.core.settings import Settings
from service.serving import classifying
from service.tenants import quotas
from service.tenants.ratelimit import RateLimiter
from tests.conftest import REDIS_TEST_URL

LABELLED = "text,label\nhot today?,temperature\nraining?,conditions\ncold tonight?,temperature\n"


def _quotas(client: TestClient, admin: dict[str, str], tenant_id: str, **changes: Any) -> httpx.Response:
    if changes:
        return client.patch(f"/v1/admin/tenants/{tenant_id}/quotas", json=changes, headers=admin)
    return client.get(f"/v1/admin/tenants/{tenant_id}/quotas", headers=admin)


def _refused_for(reply: httpx.Response, quota: str, limit: int) -> None:
    assert reply.status_code == 403, reply.text
    body = reply.json()
    assert body["code"] == 403
    assert f"quota '{quota}' exceeded: the limit is {limit}" in body["description"]


def test_defaults_come_from_settings_and_overrides_replace_them(
    client: TestClient, tenant: Any, admin_headers: dict[str, str], settings: Settings
) -> None:
    before = _quotas(client, admin_headers, tenant.id).json()
    assert before["quotas"] == before["defaults"]
    assert before["defaults"]["classifiers"] == settings.quota_classifiers
    assert before["usage"] == {
        "classifiers": 0,
        "versions": 0,
        "training_jobs": 0,
        "dataset_bytes": 0,
        "dataset_rows": 0,
        "datasets": 0,
    }

    changed = _quotas(client, admin_headers, tenant.id, classifiers=3, classify_rps=7).json()

    assert changed["quotas"]["classifiers"] == 3 and changed["quotas"]["classify_rps"] == 7
    assert changed["overrides"]["classifiers"] == 3 and changed["overrides"]["dataset_rows"] is None
    reset = _quotas(client, admin_headers, tenant.id, classifiers=None).json()
    assert reset["quotas"]["classifiers"] == settings.quota_classifiers
    assert reset["quotas"]["classify_rps"] == 7


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"classifiers": -1}, "classifiers"),
        ({"gpus": 4}, "gpus"),
        ({"dataset_rows": "many"}, "dataset_rows"),
        ({"dataset_rows": "5"}, "dataset_rows"),  # strict: a numeric string is no number
        ({"classifiers": True}, "classifiers"),
        ({"classify_rps": 2**31}, "classify_rps"),
        ({"dataset_bytes": 2**60}, "dataset_bytes"),
    ],
)
def test_bad_quota_override_is_400_naming_the_field(
    client: TestClient, tenant: Any, admin_headers: dict[str, str], body: dict[str, Any], fragment: str
) -> None:
    reply = client.patch(f"/v1/admin/tenants/{tenant.id}/quotas", json=body, headers=admin_headers)

    assert reply.status_code == 400 and fragment in reply.json()["description"]


def test_quota_routes_need_the_admin_key_and_a_real_tenant(
    client: TestClient, tenant: Any, admin_headers: dict[str, str]
) -> None:
    assert _quotas(client, tenant.headers, tenant.id).status_code == 403
    assert _quotas(client, tenant.headers, tenant.id, classifiers=10**6).status_code == 403
    assert _quotas(client, admin_headers, "no-such-tenant").status_code == 404
    assert _quotas(client, admin_headers, "no-such-tenant", classifiers=1).status_code == 404


def test_classifier_quota_refuses_the_next_create_and_keeps_nothing(
    client: TestClient,
    tenant: Any,
    admin_headers: dict[str, str],
    create_classifier: Callable[..., httpx.Response],
    settings: Settings,
) -> None:
    _quotas(client, admin_headers, tenant.id, classifiers=1)
    assert create_classifier(tenant).status_code == 200

    refused = create_classifier(tenant)

    _refused_for(refused, "classifiers", 1)
    assert len(client.get("/v1/classifiers", headers=tenant.headers).json()["classifiers"]) == 1
    staging = settings.resolved_artifacts_dir() / "tmp"
    assert not staging.exists() or list(staging.iterdir()) == []


def test_training_job_quota_counts_queued_jobs(
    client: TestClient,
    tenant: Any,
    admin_headers: dict[str, str],
    create_classifier: Callable[..., httpx.Response],
) -> None:
    _quotas(client, admin_headers, tenant.id, training_jobs=2)
    assert all(create_classifier(tenant).status_code == 200 for _ in range(2))

    _refused_for(create_classifier(tenant), "training_jobs", 2)
    assert _quotas(client, admin_headers, tenant.id).json()["usage"]["training_jobs"] == 2


def test_dataset_quotas_refuse_uploads_that_do_not_fit_and_keep_nothing(
    client: TestClient, tenant: Any, admin_headers: dict[str, str], settings: Settings
) -> None:
    upload = {"headers": {**tenant.headers, "Content-Type": "text/csv"}, "content": LABELLED}
    first = client.post("/v1/datasets", **upload)
    assert first.status_code == 201
    size, rows = first.json()["size_bytes"], first.json()["rows"]

    _quotas(client, admin_headers, tenant.id, dataset_bytes=size + 10)
    _refused_for(client.post("/v1/datasets", **upload), "dataset_bytes", size + 10)
    _quotas(client, admin_headers, tenant.id, dataset_bytes=None, dataset_rows=rows + 1)
    _refused_for(client.post("/v1/datasets", **upload), "dataset_rows", rows + 1)
    _quotas(client, admin_headers, tenant.id, dataset_rows=None, datasets=1)
    _refused_for(client.post("/v1/datasets", **upload), "datasets", 1)
    assert _quotas(client, admin_headers, tenant.id).json()["usage"]["datasets"] == 1

    assert len(client.get("/v1/datasets", headers=tenant.headers).json()["datasets"]) == 1
    staging = settings.resolved_artifacts_dir() / "tmp"
    assert not staging.exists() or list(staging.iterdir()) == []


def test_an_upload_that_cannot_fit_is_refused_before_it_is_validated(
    client: TestClient,
    tenant: Any,
    admin_headers: dict[str, str],
    create_classifier: Callable[..., httpx.Response],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A tenant at its row quota paid a whole validation (seconds of CPU for a big upload, one
    of the API's database slots held) for each refused upload, and slowed every other tenant's
    requests by sending them in a loop."""
    upload = {"headers": {**tenant.headers, "Content-Type": "text/csv"}, "content": LABELLED}
    rows = client.post("/v1/datasets", **upload).json()["rows"]
    _quotas(client, admin_headers, tenant.id, dataset_rows=rows)

    def validated(*_: object, **__: object) -> None:
        raise AssertionError("an upload that cannot fit was validated")

    monkeypatch.setattr(datasets, "stage_upload", validated)
    used_up = (
        f"quota 'dataset_rows' exceeded: the limit is {rows} and the tenant has {rows}, so no upload fits"
    )
    for reply in (client.post("/v1/datasets", **upload), create_classifier(tenant)):
        assert reply.status_code == 403, reply.text
        assert reply.json()["description"] == used_up
    _quotas(client, admin_headers, tenant.id, dataset_rows=None, datasets=1)
    _refused_for(client.post("/v1/datasets", **upload), "datasets", 1)


def test_the_room_check_leaves_what_the_route_loaded_loaded(
    session: Session, settings: Settings, tenant: Any
) -> None:
    """The check ended its read with a rollback, which expires every object in the session: the
    classifier a version upload's route had loaded was read again at its next use, a connection
    held through the validation that followed (and a 500 had it been deleted meanwhile)."""
    loaded = session.get(Tenant, tenant.id)
    session.commit()  # as the route's dependencies end their reads

    quotas.check_room_for_upload(session, settings, tenant.id, counts=("datasets",))

    assert loaded is not None and not inspect(loaded).expired
    assert not session.in_transaction()


def test_nlc_create_counts_its_training_data_against_the_row_and_dataset_quotas(
    client: TestClient,
    tenant: Any,
    admin_headers: dict[str, str],
    create_classifier: Callable[..., httpx.Response],
) -> None:
    _quotas(client, admin_headers, tenant.id, dataset_rows=3)

    _refused_for(create_classifier(tenant), "dataset_rows", 3)

    _quotas(client, admin_headers, tenant.id, dataset_rows=None, datasets=0)
    _refused_for(create_classifier(tenant), "datasets", 0)


def test_classify_over_the_rate_is_429_with_retry_after(
    client: TestClient, tenant: Any, admin_headers: dict[str, str], available: str
) -> None:
    _quotas(client, admin_headers, tenant.id, classify_rps=1)  # burst: 2 s of rate = 2 calls
    url = f"/v1/classifiers/{available}/classify"

    replies = [client.post(url, json={"text": "rain?"}, headers=tenant.headers) for _ in range(4)]

    assert [r.status_code for r in replies[:2]] == [200, 200]
    limited = replies[-1]
    assert limited.status_code == 429
    assert int(limited.headers["Retry-After"]) >= 1
    assert limited.json() == {
        "code": 429,
        "error": "Too Many Requests",
        "description": limited.json()["description"],
    }
    assert "rate limit 'classify_rps' exceeded: the limit is 1 text per second" in limited.text


def test_a_long_text_costs_a_unit_of_the_rate_per_512_characters(
    client: TestClient, tenant: Any, admin_headers: dict[str, str], available: str
) -> None:
    """Counted one a text, a tenant at its rate of 2,048-character texts (whose NFKC form can
    be six times longer) took most of the API's CPU from the others."""
    _quotas(client, admin_headers, tenant.id, classify_rps=2)  # burst: 2 s of rate = 4 units
    url = f"/v1/classifiers/{available}/classify"
    long = "rain " * 409 + "?"  # 2,046 characters: 4 units
    expanding = "\u3316" * 100  # 100 characters, 600 once NFKC has made each "キロメートル": 2 units

    assert classifying.charge_units(["rain?", long, expanding]) == 1 + 4 + 2
    first = client.post(url, json={"text": long}, headers=tenant.headers)
    then = client.post(url, json={"text": "rain?"}, headers=tenant.headers)

    assert first.status_code == 200
    assert then.status_code == 429  # 4 short texts would have been served
    assert "(a text of over 512 characters counts one per 512)" in then.json()["description"]


def test_a_tenant_over_its_rate_does_not_slow_another(
    client: TestClient,
    tenant_factory: Callable[..., Any],
    admin_headers: dict[str, str],
    available: str,
    tenant: Any,
    create_classifier: Callable[..., httpx.Response],
) -> None:
    _quotas(client, admin_headers, tenant.id, classify_rps=1)
    url = f"/v1/classifiers/{available}/classify"
    for _ in range(4):
        client.post(url, json={"text": "rain?"}, headers=tenant.headers)
    assert client.post(url, json={"text": "rain?"}, headers=tenant.headers).status_code == 429

    other = tenant_factory()
    other_id = create_classifier(other).json()["classifier_id"]
    # the other tenant's call reaches its own classifier (409: still training), not the limit
    reply = client.post(f"/v1/classifiers/{other_id}/classify", json={"text": "x"}, headers=other.headers)
    assert reply.status_code == 409


def test_zero_classify_rate_refuses_classify_as_a_quota(
    client: TestClient, tenant: Any, admin_headers: dict[str, str], available: str
) -> None:
    _quotas(client, admin_headers, tenant.id, classify_rps=0)

    reply = client.post(f"/v1/classifiers/{available}/classify", json={"text": "x"}, headers=tenant.headers)

    assert reply.status_code == 403, reply.text
    assert reply.json()["description"] == (  # not "the limit is 0, the tenant has 0 ...": a rate
        "quota 'classify_rps' is 0 for this tenant: no such call is allowed until an administrator raises it"
    )


def test_limiter_allows_the_burst_then_refuses_with_whole_seconds() -> None:
    limiter = RateLimiter(REDIS_TEST_URL, burst_seconds=1.0)
    tenant = f"unit-{uuid.uuid4().hex}"
    try:
        for _ in range(5):
            limiter.acquire("classify_rps", tenant, 5)
        with pytest.raises(RateLimited) as refused:
            limiter.acquire("classify_rps", tenant, 5)
        assert refused.value.retry_after == 1 and refused.value.limit == 5
        limiter.acquire("classify_rps", f"{tenant}-other", 5)  # buckets are per tenant
        with pytest.raises(QuotaExceeded, match="quota 'classify_rps' is 0 for this tenant: no such call"):
            limiter.acquire("classify_rps", tenant, 0)
    finally:
        limiter.close()


def test_a_call_of_many_units_is_served_on_room_for_one_and_its_debt_waited_out() -> None:
    limiter = RateLimiter(REDIS_TEST_URL, burst_seconds=1.0)
    tenant = f"unit-{uuid.uuid4().hex}"
    try:
        limiter.acquire("classify_rps", tenant, 5, units=30)  # 6 s of rate, beyond the 1 s burst
        with pytest.raises(RateLimited) as refused:
            limiter.acquire("classify_rps", tenant, 5)
        assert refused.value.retry_after == 6  # room for one more in 6 s less 1 s of burst, + 0.2 s
    finally:
        limiter.close()


def test_a_lease_serves_a_call_only_with_all_its_units() -> None:
    # 1000 calls/s: a lease of 50 units; a call of 30 spends it, one of 30 more asks Redis
    limiter = RateLimiter(REDIS_TEST_URL, burst_seconds=0.1)
    tenant = f"unit-{uuid.uuid4().hex}"
    try:
        limiter.acquire("classify_rps", tenant, 1000)
        assert limiter.acquire_nowait("classify_rps", tenant, 1000, units=30)
        assert not limiter.acquire_nowait("classify_rps", tenant, 1000, units=30)
        assert limiter.acquire_nowait("classify_rps", tenant, 1000, units=19)
    finally:
        limiter.close()


def test_a_refused_tenant_is_refused_here_until_its_bucket_has_room_without_asking_redis() -> None:
    """Each refused call asked Redis, on one of the few threads classify calls share: a tenant
    flooding over its rate kept them busy. Redis's refusal says when the bucket has room again
    (other replicas can only push that later); until then this replica refuses by itself."""
    limiter = RateLimiter(REDIS_TEST_URL, burst_seconds=0.2)  # 5 calls/s: room for one
    tenant, asked = f"unit-{uuid.uuid4().hex}", []
    script = limiter._script
    assert script is not None
    limiter._script = lambda **kwargs: asked.append(1) or script(**kwargs)  # type: ignore[assignment]
    try:
        limiter.acquire("classify_rps", tenant, 5)
        with pytest.raises(RateLimited):
            limiter.acquire("classify_rps", tenant, 5)
        for _ in range(100):
            with pytest.raises(RateLimited) as refused:
                limiter.acquire_nowait("classify_rps", tenant, 5)
        assert len(asked) == 2 and refused.value.retry_after == 1
        assert not limiter.acquire_nowait("classify_rps", tenant, 50)  # another rate: Redis decides
        time.sleep(0.3)  # the bucket's room came back after 0.2 s
        limiter.acquire("classify_rps", tenant, 5)
        assert len(asked) == 3
    finally:
        limiter.close()


def test_limiter_lets_calls_through_when_redis_is_unreachable_and_stops_asking() -> None:
    limiter = RateLimiter("redis://127.0.0.1:1/0", burst_seconds=1.0, timeout_s=0.2, retry_s=60)
    try:
        limiter.acquire("classify_rps", "t", 1)
        started = time.monotonic()
        for _ in range(50):
            limiter.acquire("classify_rps", "t", 1)
        assert time.monotonic() - started < 0.5  # no timeout per call while Redis is away
    finally:
        limiter.close()


def test_concurrent_creates_cannot_slip_under_the_quota(
    client: TestClient,
    tenant: Any,
    admin_headers: dict[str, str],
    create_classifier: Callable[..., httpx.Response],
    settings: Settings,
) -> None:
    _quotas(client, admin_headers, tenant.id, classifiers=3)
    statuses: list[int] = []

    def create() -> None:
        statuses.append(create_classifier(tenant).status_code)

    threads = [threading.Thread(target=create) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert sorted(statuses) == [200] * 3 + [403] * 5
    assert _quotas(client, admin_headers, tenant.id).json()["usage"]["classifiers"] == 3


def test_replicas_take_high_rates_in_chunks_and_still_share_one_limit() -> None:
    # 1000 calls/s with a 0.1 s burst: 100 calls at once, leased 50 at a time (0.05 s of rate)
    replicas = [RateLimiter(REDIS_TEST_URL, burst_seconds=0.1) for _ in range(2)]
    tenant = f"unit-{uuid.uuid4().hex}"
    try:
        served, started = 0, time.monotonic()
        for _ in range(60):
            for replica in replicas:
                try:
                    replica.acquire("classify_rps", tenant, 1000)
                    served += 1
                except RateLimited:
                    pass
        refilled = 1000 * (time.monotonic() - started)
        assert 100 <= served <= 101 + refilled  # the burst, plus what the bucket refilled meanwhile
        assert not replicas[0]._spend_leased("nothing-leased")
    finally:
        for replica in replicas:
            replica.close()

"""The dashboard's JSON feed (``/ops/api``, session required) and ``GET /metrics``.

The pages poll these routes every couple of seconds; the key actions need the CSRF header.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from datetime import UTC, datetime
from typing import Any

from fastapi import Query, Request, Response

from service.api.admin_schemas import KeyRotate, TenantDeletedInfo
from service.api.deps import InvalidationsDep, SessionDep, SettingsDep, TenantDeleterDep
from service.api.routing import Router
from service.core.errors import BadRequest, Forbidden, Unauthorized
from service.core.models import JobState, utcnow
from service.core.settings import Settings
from service.ops import views
from service.ops.metrics import CONTENT_TYPE, Metrics
from service.ops.session import CsrfSessionDep
from service.ops.session import SessionDep as OpsSessionDep
from service.tenants import accounts
from service.tenants.failed_keys import FailedKeys
from service.training.worker_registry import WorkerRegistry

router = Router(prefix="/ops/api", include_in_schema=False)
_STATES = [state.value for state in JobState]
scrape_router = Router(include_in_schema=False)


@router.get("/overview")
def overview(_: OpsSessionDep, request: Request, session: SessionDep) -> dict[str, Any]:
    client = request.app.state.redis
    registry = None if client is None else WorkerRegistry(client)
    state = request.app.state
    return views.overview(session, registry, state.progress_digests, state.active_history, now=utcnow())


@router.get("/jobs")
def jobs(
    _: OpsSessionDep,
    session: SessionDep,
    tenant: str | None = None,
    state: str | None = None,
    since: str | None = None,
    until: str | None = None,
    page: int = Query(1, ge=1, le=2_147_483_647),
    choices: bool = Query(False, description="Also list the tenants and states to filter by."),
) -> dict[str, Any]:
    if tenant and not accounts.well_formed_id(tenant):  # checked before SQL sees it (a NUL fails there)
        raise BadRequest("tenant", "is not a tenant id")
    if state and state not in _STATES:
        raise BadRequest("state", f"must be one of {', '.join(_STATES)}")
    where = views.JobFilter(
        tenant or None, state or None, _moment("since", since), _moment("until", until), page
    )
    return views.job_list(session, where, with_choices=choices)


@router.get("/jobs/{job_id}")
def job(_: OpsSessionDep, job_id: str, session: SessionDep) -> dict[str, Any]:
    return views.job_detail(session, job_id)


@router.get("/tenants")
def tenants(
    _: OpsSessionDep,
    session: SessionDep,
    settings: SettingsDep,
    page: int = Query(1, ge=1, le=2_147_483_647),
    name: str = Query("", max_length=256),
) -> dict[str, Any]:
    return views.tenants(session, settings, page=page, name=name)


@router.post("/tenants/{tenant_id}/keys", status_code=201)
def rotate_key(
    _: CsrfSessionDep, tenant_id: str, body: KeyRotate, session: SessionDep, invalidations: InvalidationsDep
) -> dict[str, str]:
    """A new key for the tenant, shown only in this reply."""
    issued = accounts.rotate_key(session, tenant_id, revoke_others=body.revoke_others, now=utcnow())
    if body.revoke_others:
        invalidations.announce(tenant_id)
    return {"tenant_id": issued.tenant_id, "key_id": issued.key_id, "api_key": issued.api_key}


@router.post("/tenants/{tenant_id}/keys/{key_id}/revoke")
def revoke_key(
    _: CsrfSessionDep, tenant_id: str, key_id: str, session: SessionDep, invalidations: InvalidationsDep
) -> dict[str, str]:
    accounts.revoke_key(session, tenant_id, key_id, now=utcnow())
    invalidations.announce(tenant_id)
    return {}


@router.post("/tenants/{tenant_id}/delete", response_model=TenantDeletedInfo)
def delete_tenant(_: CsrfSessionDep, tenant_id: str, delete: TenantDeleterDep) -> TenantDeletedInfo:
    """Delete the tenant and everything it owns, as ``DELETE /v1/admin/tenants/{id}`` does."""
    return TenantDeletedInfo.build(delete(tenant_id))


@scrape_router.get("/metrics")
def metrics(request: Request, settings: SettingsDep) -> Response:
    """Every series in the Prometheus text format (see ``service.ops.metrics``), for a scrape
    that brings ``TAAS_METRICS_TOKEN`` as its Bearer token, or, with no token set, for a client
    on this host. The series name jobs, tenants' throughput and the workers' hosts and pids,
    and were served to anyone who reached the API's port."""
    _check_scraper(request, settings)
    registry: Metrics = request.app.state.metrics
    return Response(registry.exposition(), media_type=CONTENT_TYPE)


def _check_scraper(request: Request, settings: Settings) -> None:
    failed_keys: FailedKeys = request.app.state.failed_keys
    if settings.metrics_token is None:
        if not _on_this_host(request):
            raise Forbidden(
                "/metrics answers only clients on this host; set TAAS_METRICS_TOKEN to scrape it "
                "from elsewhere (Authorization: Bearer TOKEN)"
            )
        return
    failed_keys.check(request)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    expected = hashlib.sha256(settings.metrics_token.encode()).digest()
    presented = hashlib.sha256(token.strip().encode()).digest()
    if scheme.lower() != "bearer" or not hmac.compare_digest(presented, expected):
        if token:
            failed_keys.failed(request)
        raise Unauthorized(
            "/metrics needs the metrics token: Authorization: Bearer TOKEN (TAAS_METRICS_TOKEN)"
        )


def _on_this_host(request: Request) -> bool:
    try:
        return request.client is not None and ipaddress.ip_address(request.client.host).is_loopback
    except ValueError:  # not an address (a test client's name)
        return False


def _moment(field: str, value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
        # compared in UTC, the database's time: an offset that moves it out of range is refused
        return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    except (ValueError, OverflowError):
        raise BadRequest(field, "must be an ISO 8601 date or time between the years 1 and 9999") from None

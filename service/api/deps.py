"""Typed dependencies: settings, a DB session, the store, the model cache, the caller.

A classifier or dataset id that is unknown, or belongs to another tenant, is 404 "not
found" — never 403, so ids leak nothing across tenants.

Dependencies that only read ``app.state`` or headers are ``async`` so that FastAPI runs them
on the event loop instead of sending each to the thread pool; those that query the database
are plain functions (FastAPI runs them in a worker thread).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, TypeVar

import anyio
from anyio import from_thread, to_thread
from fastapi import Depends, Header, Query, Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from sqlalchemy import select
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker
from starlette.datastructures import State

from service.api.console import session as console_session
from service.catalogue import classifiers, datasets, tenant_deletion
from service.core.db import POOL_TIMEOUT_S
from service.core.errors import BadRequest, Forbidden, NotFound, Unauthorized
from service.core.models import Classifier, ClassifierVersion, Dataset, Tenant, utcnow
from service.core.paging import MAX_LIMIT
from service.core.settings import Settings
from service.serving import classifying
from service.serving.classifying import Servable
from service.serving.invalidation import Invalidations
from service.serving.lookup_cache import LookupCache
from service.serving.model_cache import ModelCache
from service.storage.store import ArtifactStore
from service.tenants.accounts import hash_key, is_admin_key, presented_key, tenant_for_key, well_formed_id
from service.tenants.failed_keys import FailedKeys
from service.tenants.ratelimit import RateLimiter
from service.tenants.staging import Staging, staging_for

_T = TypeVar("_T")


async def utf8_query(request: Request) -> None:
    """Every route's: a query whose percent-escapes are not UTF-8 is a 400 naming the parameter.
    Starlette would decode them to U+FFFD, so a name stored from ``?name=caf%E9`` would not be
    what the client sent (and a classify would score other text than it asked for)."""
    query: bytes = request.scope["query_string"]
    if b"%" not in query:
        return
    for pair in query.decode("latin-1").split("&"):
        name, _, value = pair.partition("=")
        try:
            urllib.parse.unquote_plus(name, errors="strict")
            urllib.parse.unquote_plus(value, errors="strict")
        except UnicodeDecodeError as exc:
            field = urllib.parse.unquote_plus(name, errors="replace") or "query"
            raise BadRequest(field, f"not UTF-8 once percent-decoded ({exc.reason})") from None


async def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def _session(request: Request) -> AsyncIterator[Session]:
    """A request's session, once one of the pool's connections is the request's to take.

    The wait is on the event loop, holding no thread. A request holding a connection needs a
    thread of anyio's pool (40) to finish (its sync route, the serialising of its reply); when
    more requests than that each waited for a connection in a thread, no holder could finish
    and every database route stalled until the pool's 30 s timeout (60 concurrent status polls
    of one tenant did it), answering 503s to every tenant.
    """
    slot = _DbSlot(request.app.state.db_slots)
    await slot.take()
    try:
        with request.app.state.sessions() as session:
            session.info[_SLOT] = slot
            yield session
    finally:
        slot.give_back()


_SLOT = "taas_db_slot"  # the key of a request session's _DbSlot in its ``info``


class _DbSlot:
    """A request's claim on one of ``app.state.db_slots``, which it may give back for a while."""

    def __init__(self, slots: anyio.Semaphore) -> None:
        self.slots = slots
        self.held = False

    async def take(self) -> None:
        """Wait, on the event loop, for a slot; PoolTimeout after the pool's timeout."""
        with anyio.move_on_after(POOL_TIMEOUT_S) as waited:
            await self.slots.acquire()
        if waited.cancelled_caught:
            raise PoolTimeout(f"no database connection free within {POOL_TIMEOUT_S:g} s")
        self.held = True

    def give_back(self) -> None:
        if self.held:
            self.held = False
            self.slots.release()


async def without_db_slot(
    session: Session, body: Awaitable[_T], *, discard: Callable[[_T], object] | None = None
) -> _T:
    """Await ``body`` (the reading of a request's body) with the request's database slot given
    back, then take one again for the rest of the route (``discard`` undoes the body read, a
    spooled upload, when none comes within the pool's timeout).

    The route's dependencies have ended their reads (:func:`_release`), so the session holds no
    connection meanwhile; but its slot was held until the reply: 15 uploads of one tenant, each
    trickling a byte a minute, held every slot, and every other tenant's database routes (a
    status poll) waited 30 s for a 503."""
    slot: _DbSlot = session.info[_SLOT]
    slot.give_back()
    result = await body
    try:
        await slot.take()
    except BaseException:
        if discard is not None:
            discard(result)
        raise
    return result


def blocking_without_db_slot(
    session: Session, work: Callable[[], _T], *, discard: Callable[[_T], object] | None = None
) -> _T:
    """From a route's worker thread: end the session's read and run ``work`` (an upload's
    validation and its copy to the store: most of a second for the largest, longer to a slow
    remote store) with the request's database slot given back, then take one again
    (``discard`` undoes the work when none comes within the pool's timeout). Outside a
    request (no slot) ``work`` just runs.

    The slot was held through it: uploads of one tenant, each in validation or on its way
    to S3, held every slot, and other tenants' status polls waited for them."""
    slot: _DbSlot | None = session.info.get(_SLOT)
    if slot is None:
        return work()
    session.commit()  # ends the read (objects stay loaded): the connection goes back to the pool
    from_thread.run_sync(slot.give_back)
    result = work()
    try:
        from_thread.run(slot.take)
    except BaseException:
        if discard is not None:
            discard(result)
        raise
    return result


async def _store(request: Request) -> ArtifactStore:
    store: ArtifactStore = request.app.state.store
    return store


async def _models(request: Request) -> ModelCache:
    cache: ModelCache = request.app.state.models
    return cache


async def _invalidations(request: Request) -> Invalidations:
    invalidations: Invalidations = request.app.state.invalidations
    return invalidations


SettingsDep = Annotated[Settings, Depends(_settings)]
SessionDep = Annotated[Session, Depends(_session)]
StoreDep = Annotated[ArtifactStore, Depends(_store)]
ModelCacheDep = Annotated[ModelCache, Depends(_models)]
InvalidationsDep = Annotated[Invalidations, Depends(_invalidations)]


# The key's headers are documented once, as the OpenAPI document's securitySchemes
# (service.api.openapi), not as parameters of each operation.
_KEY_HEADER = Header(include_in_schema=False)
_NO_KEY = "an API key is required (Authorization: Bearer KEY, X-API-Key, or Basic apikey:KEY)"


async def _key(
    authorization: Annotated[str | None, _KEY_HEADER] = None,
    x_api_key: Annotated[str | None, _KEY_HEADER] = None,
) -> str:
    key = presented_key(authorization, x_api_key)
    if not key:
        raise Unauthorized(_NO_KEY)
    return key


KeyDep = Annotated[str, Depends(_key)]


def _tenant(
    request: Request,
    session: SessionDep,
    authorization: Annotated[str | None, _KEY_HEADER] = None,
    x_api_key: Annotated[str | None, _KEY_HEADER] = None,
) -> Tenant:
    """The tenant of the request's API key or, without one, of its console session (whose
    state-changing requests carry its CSRF token: service.api.console.session)."""
    key = presented_key(authorization, x_api_key)
    if not key:
        signed_in = console_session.tenant(request, session)
        if signed_in is None:
            raise Unauthorized(_NO_KEY)
        _release(session)
        return signed_in
    failed_keys: FailedKeys = request.app.state.failed_keys
    failed_keys.check(request)
    tenant = tenant_for_key(session, key)
    if tenant is not None:
        _release(session)
        return tenant
    raise _refusal(request, key)


def _release(session: Session) -> None:
    """End the dependency's read, returning its connection to the pool (objects stay loaded:
    no expiry on commit). An upload route streams its body after this, and a connection held
    through 15 slow uploads emptied the pool: every other request then waited 30 s for a 500."""
    session.commit()


def _refusal(request: Request, key: str) -> Exception:
    """The error for a key that is no tenant's; an unknown one is counted against the address."""
    if is_admin_key(request.app.state.settings, key):
        return Forbidden("the admin key cannot act as a tenant; use a tenant's API key")
    failed_keys: FailedKeys = request.app.state.failed_keys
    failed_keys.failed(request)
    return Unauthorized("the API key is unknown or revoked")


TenantDep = Annotated[Tenant, Depends(_tenant)]


def _staging(
    tenant: TenantDep, session: SessionDep, settings: SettingsDep, store: StoreDep
) -> Iterator[Staging]:
    """The caller's staging paths, removed once the request has ended: after its reply, whether
    the reply was sent whole, refused (a bad ``Range``), cut off by the client or an error."""
    staging = staging_for(session, settings, store, tenant.id)
    try:
        yield staging
    finally:
        staging.remove_all()


StagingDep = Annotated[Staging, Depends(_staging)]


def _admin(request: Request, key: KeyDep, session: SessionDep, settings: SettingsDep) -> None:
    failed_keys: FailedKeys = request.app.state.failed_keys
    failed_keys.check(request)  # first: a guesser held up must not learn that a guess was right
    if is_admin_key(settings, key):
        return
    if tenant_for_key(session, key) is not None:
        raise Forbidden("this route needs the admin key; a tenant key was sent")
    failed_keys.failed(request)
    raise Unauthorized("the admin key is wrong" if settings.admin_key else "no admin key is configured")


AdminDep = Annotated[None, Depends(_admin)]


def _classifier(classifier_id: str, tenant: TenantDep, session: SessionDep) -> Classifier:
    if not well_formed_id(classifier_id):
        raise NotFound("classifier", classifier_id)
    classifier = classifiers.get_classifier(session, tenant.id, classifier_id)
    _release(session)
    return classifier


def _dataset(dataset_id: str, tenant: TenantDep, session: SessionDep) -> Dataset:
    dataset = datasets.get_dataset(session, tenant.id, dataset_id)
    _release(session)
    return dataset


ClassifierDep = Annotated[Classifier, Depends(_classifier)]
DatasetDep = Annotated[Dataset, Depends(_dataset)]

DEFAULT_LIMIT = 100  # a page's items when a request sends an offset and no limit


@dataclass(frozen=True)
class PageAsked:
    """The page a listing request asks for (``?limit=&offset=``), or none: NLC's list."""

    limit: int | None
    offset: int
    paged: bool

    def reply_fields(self, total: int) -> dict[str, int]:
        """The listing reply's paging fields: none unless the request paged."""
        if not self.paged:
            return {}
        return {"total": total, "limit": self.limit or DEFAULT_LIMIT, "offset": self.offset}


async def _page_asked(
    limit: Annotated[
        int | None,
        Query(ge=1, le=MAX_LIMIT, description=f"Items a page (extension; {DEFAULT_LIMIT} with only offset)."),
    ] = None,
    offset: Annotated[
        int | None, Query(ge=0, le=2**31 - 1, description="Items to skip, oldest first (extension).")
    ] = None,
) -> PageAsked:
    if limit is None and offset is None:
        return PageAsked(None, 0, paged=False)
    return PageAsked(limit or DEFAULT_LIMIT, offset or 0, paged=True)


PageDep = Annotated[PageAsked, Depends(_page_asked)]


@dataclass(frozen=True)
class ServingTarget:
    """Everything a classify call needs: the classifier it names (the caller's own, within its
    rate: one text is charged), the caller's lookup (to charge a collection's other texts), a
    check whether the classifier still exists, and the app's settings, store and model cache."""

    classifier: Servable
    lookup: classifying.ServingLookup
    still_exists: Callable[[], bool]
    settings: Settings
    store: ArtifactStore
    models: ModelCache


async def _serving_target(
    classifier_id: str,
    request: Request,
    authorization: Annotated[str | None, _KEY_HEADER] = None,
    x_api_key: Annotated[str | None, _KEY_HEADER] = None,
    version: Annotated[
        int | None,
        Query(
            ge=1,
            le=2**31 - 1,
            description="Classify with this version (extension); default: the serving one.",
        ),
    ] = None,
) -> ServingTarget:
    # The hot path, kept to one dependency (FastAPI's per-dependency cost is real here). The
    # caller, its rate and the classifier come from the lookup cache, else from one query on a
    # worker thread; the rate from this replica's lease, else from Redis on a worker thread.
    key = presented_key(authorization, x_api_key)
    state = request.app.state
    models: ModelCache = state.models
    lookups: LookupCache = state.lookups
    if key:
        digest = hash_key(key)
    else:  # a console session speaks for the digest of its key
        digest = await to_thread.run_sync(_console_digest, request, limiter=models.threads)
    found = lookups.get(digest, classifier_id)
    if found is None:
        failed_keys: FailedKeys = state.failed_keys
        if key:
            failed_keys.check(request)
        found = await to_thread.run_sync(
            _lookup, state.sessions, lookups, digest, classifier_id, limiter=models.threads
        )
    if found is None:
        raise _refusal(request, key) if key else Unauthorized(_NO_KEY)
    await charge_classify(state, found, 1)
    if found.classifier is None:  # unknown, another tenant's, or not even an id
        raise NotFound("classifier", classifier_id)
    classifier_pk = found.classifier.id
    sessions: sessionmaker[Session] = state.sessions

    def still_exists() -> bool:  # the version classify is pinned to, or the classifier
        with sessions() as fresh:
            if version is None:
                return fresh.get(Classifier, classifier_pk) is not None
            pinned = select(ClassifierVersion.id).where(
                ClassifierVersion.classifier_id == classifier_pk, ClassifierVersion.number == version
            )
            return fresh.scalar(pinned) is not None

    classifier = found.classifier
    if version is not None:
        classifier = await to_thread.run_sync(
            _pinned, sessions, classifier_pk, version, limiter=models.threads
        )
    return ServingTarget(classifier, found, still_exists, state.settings, state.store, models)


def _console_digest(request: Request) -> str:
    """:func:`service.api.console.session.key_digest`, Unauthorized without a session."""
    digest = console_session.key_digest(request)
    if digest is None:
        raise Unauthorized(_NO_KEY)
    return digest


async def charge_classify(state: State, found: classifying.ServingLookup, units: int) -> None:
    """Charge ``units`` (:func:`service.serving.classifying.charge_units`) to the caller's classify rate:
    from this replica's lease, else from Redis on a worker thread. RateLimited over the rate,
    QuotaExceeded at a rate of 0."""
    limiter: RateLimiter = state.limiter
    models: ModelCache = state.models
    rps = state.settings.quota_classify_rps if found.classify_rps is None else found.classify_rps
    if not limiter.acquire_nowait("classify_rps", found.tenant_id, rps, units):
        await to_thread.run_sync(
            limiter.acquire, "classify_rps", found.tenant_id, rps, units, limiter=models.threads
        )


def _pinned(sessions: sessionmaker[Session], classifier_id: str, version: int) -> classifying.Servable:
    with sessions() as session:
        return classifying.pinned(session, classifier_id, version)


def _lookup(
    sessions: sessionmaker[Session], lookups: LookupCache, digest: str, classifier_id: str
) -> classifying.ServingLookup | None:
    generation = lookups.generation()
    with sessions() as session:
        found = classifying.lookup(session, digest, classifier_id if well_formed_id(classifier_id) else "")
    if found is not None:
        lookups.put(digest, classifier_id, found, generation)
    return found


ServingDep = Annotated[ServingTarget, Depends(_serving_target)]


def refuse_unknown_query(request: Request) -> None:
    """A 400 naming a query parameter the route does not take (the admin routes' dependency).

    Unknown ones were ignored: ``POST .../keys?revoke_others=true`` issued a key and revoked
    nothing (``revoke_others`` is a field of the JSON body), and an operator who believed a
    leaked key rotated away still had it working."""
    route = request.scope.get("route")
    taken = _query_names(route.dependant) if isinstance(route, APIRoute) else set()
    for name in request.query_params:
        if name not in taken:
            raise BadRequest(
                name, "this route takes no such query parameter (a body field goes in the JSON body)"
            )


def _query_names(dependant: Dependant) -> set[str]:
    """The query parameters a route's function and its dependencies take."""
    names = {param.alias for param in dependant.query_params}
    for dependency in dependant.dependencies:
        names |= _query_names(dependency)
    return names


def _tenant_deleter(
    session: SessionDep,
    settings: SettingsDep,
    store: StoreDep,
    models: ModelCacheDep,
    invalidations: InvalidationsDep,
) -> Callable[[str], tenant_deletion.TenantDeleted]:
    """tenant_deletion.delete_tenant, bound to this request's session and this process's
    caches: the admin route and the dashboard's button."""
    return lambda tenant_id: tenant_deletion.delete_tenant(
        session, settings, store, tenant_id, now=utcnow(), invalidations=invalidations, models=models
    )


TenantDeleterDep = Annotated[Callable[[str], tenant_deletion.TenantDeleted], Depends(_tenant_deleter)]

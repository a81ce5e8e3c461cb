"""Typed dependencies: settings, a DB session, the store, the model cache, the caller.

A classifier or dataset id that is unknown, or belongs to another tenant, is 404 "not
found" — never 403, so ids leak nothing across tenants.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from service import classifiers, datasets
from service.errors import Forbidden, Unauthorized
from service.models import Classifier, Dataset, Tenant
from service.serving import ModelCache
from service.settings import Settings
from service.store import ArtifactStore
from service.tenancy import is_admin_key, presented_key, tenant_for_key


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def _session(request: Request) -> Iterator[Session]:
    with request.app.state.sessions() as session:
        yield session


def _store(request: Request) -> ArtifactStore:
    store: ArtifactStore = request.app.state.store
    return store


def _models(request: Request) -> ModelCache:
    cache: ModelCache = request.app.state.models
    return cache


SettingsDep = Annotated[Settings, Depends(_settings)]
SessionDep = Annotated[Session, Depends(_session)]
StoreDep = Annotated[ArtifactStore, Depends(_store)]
ModelCacheDep = Annotated[ModelCache, Depends(_models)]


def _key(
    authorization: Annotated[str | None, Header()] = None,
    x_api_key: Annotated[str | None, Header()] = None,
) -> str:
    key = presented_key(authorization, x_api_key)
    if not key:
        raise Unauthorized(
            "an API key is required (Authorization: Bearer KEY, X-API-Key, or Basic apikey:KEY)"
        )
    return key


KeyDep = Annotated[str, Depends(_key)]


def _tenant(key: KeyDep, session: SessionDep, settings: SettingsDep) -> Tenant:
    tenant = tenant_for_key(session, key)
    if tenant is not None:
        return tenant
    if is_admin_key(settings, key):
        raise Forbidden("the admin key cannot act as a tenant; use a tenant's API key")
    raise Unauthorized("the API key is unknown or revoked")


TenantDep = Annotated[Tenant, Depends(_tenant)]


def _admin(key: KeyDep, session: SessionDep, settings: SettingsDep) -> None:
    if is_admin_key(settings, key):
        return
    if tenant_for_key(session, key) is not None:
        raise Forbidden("this route needs the admin key; a tenant key was sent")
    raise Unauthorized("the admin key is wrong" if settings.admin_key else "no admin key is configured")


AdminDep = Annotated[None, Depends(_admin)]


def _classifier(classifier_id: str, tenant: TenantDep, session: SessionDep) -> Classifier:
    return classifiers.get_classifier(session, tenant.id, classifier_id)


def _dataset(dataset_id: str, tenant: TenantDep, session: SessionDep) -> Dataset:
    return datasets.get_dataset(session, tenant.id, dataset_id)


ClassifierDep = Annotated[Classifier, Depends(_classifier)]
DatasetDep = Annotated[Dataset, Depends(_dataset)]

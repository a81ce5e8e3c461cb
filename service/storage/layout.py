"""The store layout as keys, the same on every backend (``service.storage.store`` documents it)."""

from __future__ import annotations


def _ident(ident: str) -> str:
    if not ident or "/" in ident or "\\" in ident or ident in {".", ".."}:
        raise ValueError(f"not a valid identifier: {ident!r}")
    return ident


def tenant_prefix(tenant_id: str) -> str:
    """Everything a tenant owns."""
    return f"tenants/{_ident(tenant_id)}"


def dataset_key(tenant_id: str, dataset_id: str) -> str:
    """A tenant's stored dataset (canonical CSV)."""
    return f"{tenant_prefix(tenant_id)}/datasets/{_ident(dataset_id)}.csv"


def classifier_prefix(tenant_id: str, classifier_id: str) -> str:
    """Everything a classifier owns (checkpoints, model)."""
    return f"{tenant_prefix(tenant_id)}/classifiers/{_ident(classifier_id)}"


def version_prefix(tenant_id: str, classifier_id: str, version: int) -> str:
    """Everything one version of a classifier owns (checkpoints, model)."""
    if version < 1:
        raise ValueError(f"not a version number: {version!r}")
    return f"{classifier_prefix(tenant_id, classifier_id)}/versions/{version}"


def checkpoint_prefix(tenant_id: str, classifier_id: str, version: int) -> str:
    """The training checkpoints of a classifier's version."""
    return f"{version_prefix(tenant_id, classifier_id, version)}/checkpoints"


def model_prefix(tenant_id: str, classifier_id: str, version: int) -> str:
    """The trained model folders of a classifier's version."""
    return f"{version_prefix(tenant_id, classifier_id, version)}/model"

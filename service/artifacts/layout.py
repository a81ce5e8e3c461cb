"""The store layout as keys, the same on every backend (``service.store`` documents it)."""

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


def checkpoint_prefix(tenant_id: str, classifier_id: str) -> str:
    """A classifier's training checkpoints."""
    return f"{classifier_prefix(tenant_id, classifier_id)}/checkpoints"


def model_prefix(tenant_id: str, classifier_id: str) -> str:
    """A classifier's trained model folder."""
    return f"{classifier_prefix(tenant_id, classifier_id)}/model"

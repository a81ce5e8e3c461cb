"""Artifact backends behind one key-based interface (:class:`ArtifactBackend`).

* the local folder or shared volume: :class:`service.store.ArtifactStore` (the default);
* S3-compatible object storage: :class:`service.artifacts.s3.S3ArtifactStore`, chosen by
  ``TAAS_ARTIFACTS_URL=s3://bucket/prefix``.

:func:`open_backend` picks one from the settings. docs/deploy.md ("Artifacts across nodes")
says how the API and the workers use it on nodes without a shared file system.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from service.artifacts.base import ArtifactBackend, StoreUnavailable, check_key, check_prefix, join_key

if TYPE_CHECKING:
    from service.settings import Settings

__all__ = ["ArtifactBackend", "StoreUnavailable", "check_key", "check_prefix", "join_key", "open_backend"]


def open_backend(settings: Settings) -> ArtifactBackend:
    """The artifact backend that ``settings`` name: S3 when ``artifacts_url`` is set, else the
    local folder ``resolved_artifacts_dir()``."""
    if settings.artifacts_url:
        from service.artifacts.s3 import S3ArtifactStore

        return S3ArtifactStore(
            settings.artifacts_url,
            endpoint_url=settings.s3_endpoint_url or None,
            region=settings.s3_region or None,
            addressing_style=settings.s3_addressing_style,
        )
    from service.store import ArtifactStore

    return ArtifactStore(settings.resolved_artifacts_dir())

"""A tenant's files in the store's staging area: counted against its storage quota while they
exist, and removed when the request that made them ends, whatever its reply did.

A request that spools an upload or stages a bundle for its reply writes into the staging
folder (``tmp/`` of the artifact root) under the tenant's name
(:meth:`service.storage.store.ArtifactStore.temp_path` with ``owner``). Those bytes count, with
the tenant's stored datasets, against its ``dataset_bytes`` quota for as long as they exist: a
tenant's requests in flight cannot fill the disk that every tenant's uploads share. Counting
reads the staging folder itself, so it holds across the API replicas that share a volume (with
an S3 store each node counts its own disk).

Before issue 51 an export's bundle was removed by a background task of its reply,
which Starlette runs only after a reply it sent whole: a ``Range`` header it refused (400, 416)
or a client that left mid-download left the whole bundle in staging until the hourly sweep, and
a loop of such requests filled the disk (4.6 MB a request in 0.2 s). :class:`Staging` removes
what it handed out when the request's dependencies end, which FastAPI does after the reply,
sent or not.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.core.errors import StagingOverQuota
from service.core.models import Dataset
from service.core.settings import Settings
from service.storage.store import ArtifactStore
from service.tenants.quotas import quotas_for


@dataclass
class Staging:
    """One request's staging paths for one tenant, with what its quota leaves (read when the
    request began)."""

    store: ArtifactStore
    tenant_id: str
    limit: int  # the tenant's dataset_bytes quota
    stored: int  # bytes of its stored datasets
    made: list[Path] = field(default_factory=list)

    def path(self, suffix: str = "") -> Path:
        """A fresh staging path in the tenant's name, removed by :meth:`remove_all`."""
        path = self.store.temp_path(suffix, owner=self.tenant_id)
        self.made.append(path)
        return path

    def check(self, *, more_to_come: bool = False) -> None:
        """StagingOverQuota when the tenant's stored and staged bytes are over its quota (with
        ``more_to_come``: when they leave no room, before a request stages anything)."""
        staged = self.store.staged_bytes(self.tenant_id)
        used = self.stored + staged
        if used > self.limit or (more_to_come and used >= self.limit):
            raise StagingOverQuota(self.limit, self.stored, staged)

    def remove_all(self) -> None:
        """Remove every path this request was handed (a file or a folder), if still there."""
        for path in self.made:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink(missing_ok=True)
        self.made.clear()


def staging_for(session: Session, settings: Settings, store: ArtifactStore, tenant_id: str) -> Staging:
    """The tenant's :class:`Staging`, with its quota and stored bytes read now (a read, ended
    here: the request may then stream its body with no connection held)."""
    limit = quotas_for(session, settings, tenant_id).dataset_bytes
    stored = session.scalar(
        select(func.coalesce(func.sum(Dataset.size_bytes), 0)).where(Dataset.tenant_id == tenant_id)
    )
    session.commit()
    return Staging(store, tenant_id, limit, int(stored or 0))

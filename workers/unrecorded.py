"""The reconciler's sweep of stored files that no row records: what a crash left in the store.

Files go into their final place before the transaction that records them commits (a row never
names a missing file), so an API process killed in between (a SIGKILL, an OOM kill, the end of
the shutdown grace while it waited on a lock) leaves a dataset's CSV, or an imported bundle's
classifier folder, that nothing records and nothing would ever remove; so does a tenant
deletion cut off between its row and its folder. Every ``temp_max_age_seconds`` the
reconciler lists ``tenants/`` of its artifact root and, with S3, of the remote store (where an
API node's uploads go without a local copy), and removes, in both:

* a tenant's folder, when no tenant has its id;
* a file in its ``datasets/`` that no dataset of the tenant has as its path;
* a ``classifiers/<id>/`` folder that no classifier of the tenant has;
* a ``versions/<n>/`` folder of a classifier that has no version ``n``: a version deletion cut
  off between its commit and its files, or whose remote delete failed;
* a ``versions/<n>/model/<folder>`` that the version's row does not name as its model: a
  worker's that died between moving its model there and recording it, when the job then
  failed (a job that succeeds removes the other attempts' folders itself);
* a version's ``checkpoints/`` folder (or a v1 classifier's) that no queued, training or
  cancelled job trains in: a Failed job's, whose worker was lost (its worker discards them
  itself when it records the failure), or a finished one's that a crash kept;

each only when nothing in it, in either copy, changed for ``temp_max_age_seconds``, far longer
than any upload waits for its commit.
"""

from __future__ import annotations

import logging
import stat
import time
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.core.models import (
    MAY_TRAIN_STATES,
    Classifier,
    ClassifierVersion,
    Dataset,
    Tenant,
    TrainingJob,
)
from service.storage.store import ArtifactStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Recorded:
    """What the rows of one tenant name in its folder."""

    datasets: set[str]  # keys of dataset files
    classifiers: set[str]  # classifier ids
    versions: set[str]  # keys of the versions' folders
    models: set[str]  # keys of the versions' model folders
    checkpoints: set[str]  # keys of the checkpoint folders that jobs may still train in


@dataclass
class _Leftover:
    newest: float  # the latest change of anything in it, here or on the remote
    folder: bool


def sweep_unrecorded(session: Session, store: ArtifactStore, max_age_seconds: float) -> int:
    """Remove what no row records and nothing touched for ``max_age_seconds`` (see the module
    docstring); returns how many files and folders went."""
    cutoff = time.time() - max_age_seconds
    stored = _stored(store)
    recorded = {
        tenant_id: _recorded(session, store, tenant_id)
        for tenant_id in sorted({key.split("/")[1] for key in stored})  # every key is tenants/<id>/...
    }
    leftovers: dict[str, _Leftover] = {}
    for key, (changed, is_dir) in stored.items():
        parts = key.split("/")
        depth = _leftover_depth(parts, recorded[parts[1]])
        if depth == 0:
            continue
        leftover = leftovers.setdefault("/".join(parts[:depth]), _Leftover(newest=changed, folder=False))
        leftover.newest = max(leftover.newest, changed)
        leftover.folder |= len(parts) > depth or is_dir
    swept = []
    for key, leftover in sorted(leftovers.items()):
        if leftover.newest >= cutoff:
            continue
        if leftover.folder:
            store.delete_tree(store.resolve(key))
        else:
            store.delete_file(store.resolve(key))
        swept.append(key)
    session.rollback()
    if swept:
        log.info("reconciler: removed %d stored file(s) or folder(s) no row records: %s", len(swept), swept)
    return len(swept)


def _stored(store: ArtifactStore) -> dict[str, tuple[float, bool]]:
    """Every file and folder under ``tenants/``, here and on the remote, by key: (its last
    change, whether it is a folder here). Staging files count: a folder being written is new."""
    found: dict[str, tuple[float, bool]] = {}
    tenants = store.root / "tenants"
    if tenants.is_dir():
        for path in tenants.rglob("*"):
            try:
                info = path.lstat()
            except FileNotFoundError:  # another sweeper, or its owner, removed it meanwhile
                continue
            found[path.relative_to(store.root).as_posix()] = (info.st_mtime, stat.S_ISDIR(info.st_mode))
    if store.remote is not None:
        for key, changed in store.remote.modified("tenants").items():
            here, is_dir = found.get(key, (changed, False))
            found[key] = (max(here, changed), is_dir)
    return found


def _recorded(session: Session, store: ArtifactStore, tenant_id: str) -> _Recorded | None:
    """What the rows of ``tenant_id`` name (None: no tenant has that id)."""
    if session.get(Tenant, tenant_id) is None:
        return None
    versions = session.execute(
        select(ClassifierVersion.classifier_id, ClassifierVersion.number, ClassifierVersion.model_dir).where(
            ClassifierVersion.tenant_id == tenant_id
        )
    ).all()
    return _Recorded(
        datasets=set(session.scalars(select(Dataset.path).where(Dataset.tenant_id == tenant_id))),
        classifiers=set(session.scalars(select(Classifier.id).where(Classifier.tenant_id == tenant_id))),
        versions={
            store.version_dir(tenant_id, cid, number).relative_to(store.root).as_posix()
            for cid, number, _ in versions
        },
        models={model_dir for _, _, model_dir in versions if model_dir is not None},
        checkpoints=set(
            session.scalars(
                select(TrainingJob.checkpoint_dir).where(
                    TrainingJob.tenant_id == tenant_id, TrainingJob.state.in_(MAY_TRAIN_STATES)
                )
            )
        ),
    )


def _leftover_depth(parts: list[str], recorded: _Recorded | None) -> int:
    """How many leading ``parts`` of a stored key (``tenants/<tenant>/...``) name the leftover
    it lies in; 0 when no leftover holds it."""
    if recorded is None:
        return 2
    if len(parts) < 4:
        return 0
    if parts[2] == "datasets":
        return 0 if "/".join(parts[:4]) in recorded.datasets else 4
    if parts[2] != "classifiers":
        return 0
    if parts[3] not in recorded.classifiers:
        return 4
    if parts[4:5] == ["checkpoints"]:  # a v1 classifier's own
        depth = 5
    elif parts[4:5] == ["versions"] and len(parts) > 5:
        if "/".join(parts[:6]) not in recorded.versions:
            return 6
        if parts[6:7] == ["model"] and len(parts) > 7:
            return 0 if "/".join(parts[:8]) in recorded.models else 8
        if parts[6:7] != ["checkpoints"]:
            return 0
        depth = 7
    else:
        return 0
    return 0 if "/".join(parts[:depth]) in recorded.checkpoints else depth

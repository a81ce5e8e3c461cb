"""The reconciler's sweep of stored files that no row records: what a crash left in the store.

Files go into their final place before the transaction that records them commits (a row never
names a missing file), so an API process killed in between (a SIGKILL, an OOM kill, the end of
the shutdown grace while it waited on a lock) leaves a dataset's CSV, or an imported bundle's
classifier folder, that nothing records and nothing would ever remove; so does a tenant
deletion cut off between its row and its folder. Every ``temp_max_age_seconds`` the
reconciler walks ``tenants/`` of its artifact root and removes, here and on the remote store:

* a tenant's folder, when no tenant has its id;
* a file in its ``datasets/`` that no dataset of the tenant has as its path;
* a ``classifiers/<id>/`` folder that no classifier of the tenant has;
* a version's ``checkpoints/`` folder (or a v1 classifier's) that no queued, training or
  cancelled job trains in: a Failed job's, whose worker was lost (its worker discards them
  itself when it records the failure), or a finished one's that a crash kept;

each only when nothing in it changed for ``temp_max_age_seconds``, far longer than any upload
waits for its commit. Only what this node's root holds is seen: with S3, a file whose local
copy was dropped stays.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from service.models import Classifier, Dataset, JobState, Tenant, TrainingJob
from service.store import ArtifactStore

log = logging.getLogger(__name__)
# A job in these states may still train in its checkpoint folder (a cancelled one on a resume).
_RESUMABLE = (JobState.QUEUED.value, JobState.TRAINING.value, JobState.CANCELLED.value)


def sweep_unrecorded(session: Session, store: ArtifactStore, max_age_seconds: float) -> int:
    """Remove what no row records and nothing touched for ``max_age_seconds`` (see the module
    docstring); returns how many files and folders went."""
    tenants = store.root / "tenants"
    if not tenants.is_dir():
        return 0
    cutoff = time.time() - max_age_seconds
    swept: list[Path] = []
    for folder in sorted(tenants.iterdir()):
        if session.get(Tenant, folder.name) is None:
            swept += _remove(store, [folder], cutoff)
            continue
        recorded = set(session.scalars(select(Dataset.path).where(Dataset.tenant_id == folder.name)))
        swept += _remove(
            store, [f for f in _entries(folder / "datasets") if store.relative(f) not in recorded], cutoff
        )
        classifiers = set(session.scalars(select(Classifier.id).where(Classifier.tenant_id == folder.name)))
        swept += _remove(
            store, [d for d in _entries(folder / "classifiers") if d.name not in classifiers], cutoff
        )
        live = set(
            session.scalars(
                select(TrainingJob.checkpoint_dir).where(
                    TrainingJob.tenant_id == folder.name, TrainingJob.state.in_(_RESUMABLE)
                )
            )
        )
        swept += _remove(
            store, [c for c in _checkpoints(folder / "classifiers") if store.relative(c) not in live], cutoff
        )
    session.rollback()
    if swept:
        log.info("reconciler: removed %d stored file(s) or folder(s) no row records: %s", len(swept), swept)
    return len(swept)


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.iterdir()) if folder.is_dir() else []


def _checkpoints(classifiers: Path) -> list[Path]:
    """Every checkpoint folder of the classifiers in ``classifiers``: each version's, and a v1
    classifier's own."""
    found = []
    for classifier in _entries(classifiers):
        found += [classifier / "checkpoints"]
        found += [version / "checkpoints" for version in _entries(classifier / "versions")]
    return [folder for folder in found if folder.is_dir()]


def _remove(store: ArtifactStore, paths: list[Path], cutoff: float) -> list[Path]:
    """Those of ``paths`` whose newest change is before ``cutoff``, removed."""
    removed = []
    for path in paths:
        try:
            if _last_change(path) >= cutoff:
                continue
        except FileNotFoundError:  # another sweeper, or its owner, removed it meanwhile
            continue
        if path.is_dir():
            store.delete_tree(path)
        else:
            store.delete_file(path)
        removed.append(path)
    return removed


def _last_change(path: Path) -> float:
    """The newest modification time of ``path`` and, for a folder, of anything inside it."""
    newest = path.lstat().st_mtime
    if path.is_dir() and not path.is_symlink():
        for inner in path.rglob("*"):
            try:
                newest = max(newest, inner.lstat().st_mtime)
            except FileNotFoundError:
                continue
    return newest

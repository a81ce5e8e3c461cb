"""What a training job keeps in the artifact store, and when a claim removes it.

Each claim of a job trains in a checkpoint folder of its own, ``<checkpoints>/epoch-<E>/``, and
records its checkpoints there, so that a worker that lost its lease cannot overwrite what the
next claim resumes from. The folder starts empty, or seeded from the job's recorded checkpoint:
that file, the older one the trainer kept beside it, and the cached sentence embeddings of the
job's texts. A Failed job's checkpoints go, and so does what a claim wrote for a classifier or
version deleted while it trained.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from functools import partial
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from service.core.models import Classifier
from service.storage.store import ArtifactStore, read_fetched
from service.training.job_views import JobContext, job_context
from trainer.checkpoint import KEEP, checkpoint_version, list_checkpoints
from trainer.sentence_features import CACHE_FILE as VECTORS_CACHE

log = logging.getLogger(__name__)


def claim_epoch(name: str) -> int:
    """The epoch of a claim's checkpoint folder ``epoch-<E>``; a large number for anything else
    (never taken for an earlier claim's)."""
    prefix, _, epoch = name.partition("-")
    return int(epoch) if prefix == "epoch" and epoch.isdigit() else 2**62


def seed_workdir(store: ArtifactStore, context: JobContext, workdir: Path) -> int | None:
    """Put the job's recorded checkpoint, the older one the trainer kept beside it, and the
    cached sentence embeddings of its texts (the encoder's minute on 10,000 texts) into this
    claim's fresh ``workdir``; returns the recorded step, None when there is nothing to
    resume from.

    The trainer resumes from the newest intact file there, so a recorded checkpoint that is
    found corrupt (a bad disk, an altered object) costs the updates since its predecessor
    instead of failing every attempt. Hard links (the trainer never rewrites a file in place,
    it writes a new one and renames), or copies across file systems.
    """
    empty_folder(workdir)
    if context.checkpoint_path is None:
        return None
    recorded = store.resolve(context.checkpoint_path)
    seeded = 0
    for source in _kept_with(store, recorded):
        target = workdir / source.name
        try:  # a store that does not answer is raised: the attempt waits for it
            read_fetched(store.fetch, source, partial(_link_or_copy, target=target))
        except FileNotFoundError:
            continue
        seeded += 1
    if not seeded:
        log.warning("job %s: recorded checkpoint %s is missing; starting over", context.job_id, recorded)
        return None
    with contextlib.suppress(FileNotFoundError):  # the texts' embeddings, when the job has an encoder
        read_fetched(
            store.fetch,
            recorded.parent / VECTORS_CACHE,
            partial(_link_or_copy, target=workdir / VECTORS_CACHE),
        )
    return context.checkpoint_step


def _link_or_copy(source: Path, target: Path) -> None:
    """``target`` the same file as ``source``: a hard link, or a copy across file systems;
    FileNotFoundError when ``source`` is gone."""
    try:
        os.link(source, target)
    except FileNotFoundError:
        raise
    except OSError:
        shutil.copyfile(source, target)


def drop_skipped(workdir: Path, step: int) -> None:
    """Remove the checkpoints past ``step`` from ``workdir``, where a training session began at
    ``step``: files the trainer found unusable and skipped. It removes them itself only at its
    next save, and until then the watcher took the newest for a new checkpoint: it moved the
    pointer back onto the unusable file, which that save then deleted."""
    for version, path in list_checkpoints(workdir):
        if version > step:
            path.unlink(missing_ok=True)


def empty_folder(folder: Path) -> None:
    """Make ``folder`` an empty directory."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)


def _kept_with(store: ArtifactStore, recorded: Path) -> list[Path]:
    """``recorded`` and the older checkpoints its folder keeps (here or in the remote store),
    newest first. Newer files there were never recorded and are left out."""
    folder = recorded.parent
    names = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
    if store.remote is not None:
        names |= {key.rsplit("/", 1)[-1] for key in store.remote.list_keys(store.relative(folder))}
    newest = checkpoint_version(recorded.name) or 0
    versions = ((checkpoint_version(name), name) for name in names)
    older = sorted(((v, name) for v, name in versions if v is not None and v < newest), reverse=True)
    return [recorded] + [folder / name for _, name in older[: KEEP - 1]]


def discard_checkpoints(store: ArtifactStore, context: JobContext) -> None:
    """A Failed job is never resumed (a resume takes cancelled jobs), so its checkpoints
    would only fill the disk. (One whose worker was lost is the reconciler's sweep's:
    ``workers.unrecorded``.)"""
    store.delete_tree(store.resolve(context.checkpoint_dir))


def clean_if_deleted(store: ArtifactStore, sessions: sessionmaker[Session], context: JobContext) -> None:
    """A classifier or version deleted while training: remove what this worker wrote after
    the API removed its files (a last checkpoint)."""
    with sessions() as session:
        if job_context(session, context.job_id) is not None:
            return
        classifier_gone = session.get(Classifier, context.classifier_id) is None
    if classifier_gone:
        store.delete_classifier(context.tenant_id, context.classifier_id)
    else:
        store.delete_tree(store.version_dir(context.tenant_id, context.classifier_id, context.version))

"""Portable model bundles through the API: export a classifier's model, import one as a tenant's
new, Available classifier (the format and its checks: :mod:`trainer.bundle`).

An import checks the whole bundle and loads the model before anything is kept: a tampered,
truncated, oversized or unloadable bundle is a 400 naming the problem, with no row and no file
left behind. The model is stored (on S3 too, where the store has a remote) before the
transaction that checks the quota and writes the rows (:func:`stage_import`, then
:func:`add_import`), so a slow upload holds no database lock, and the route gives its database
slot back meanwhile.
The imported classifier has one version, serving, with no dataset and no training job; its
metrics are the ones the exporting installation measured. It can be retrained (a new version)
like any other.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import IO

from sqlalchemy.orm import Session

from service.catalogue.classifiers import check_language, check_nlc_name
from service.catalogue.datasets import STORE_REFUSED, remove_unrecorded
from service.catalogue.training_data import Limits, class_names_problem
from service.core.errors import BadRequest, Conflict, NotFound, unavailable
from service.core.models import (
    Classifier,
    ClassifierMode,
    ClassifierStatus,
    ClassifierVersion,
    TrainedModel,
)
from service.core.settings import Settings
from service.storage.store import ArtifactStore, read_fetched
from service.tenants import quotas
from service.tenants.staging import Staging
from service.training import status
from trainer.bundle import BundleInvalid, extract_bundle, write_bundle
from trainer.errors import CheckpointCorrupt
from trainer.inference import LoadedModel

BUNDLE_FIELD = "bundle"
IMPORTED = "imported"  # the model folder of an imported classifier, under its model dir


def export(
    store: ArtifactStore,
    classifier: Classifier,
    out: IO[bytes],
    version: ClassifierVersion | None = None,
    *,
    still_exists: Callable[[], bool],
) -> None:
    """Write the model of ``version`` (default: the one the classifier serves) to ``out`` as a
    bundle; Conflict unless it is Available. ``out`` must be seekable: when the node-local
    copy of the model went between its fetch and the read (:func:`read_fetched`), the bundle is
    written again from the start of ``out``. When the model cannot be read: NotFound if
    ``still_exists()`` says the classifier (or the version) was deleted meanwhile, else
    ServiceUnavailable."""
    shown: TrainedModel = classifier if version is None else version
    if shown.status != ClassifierStatus.AVAILABLE.value or not shown.model_dir:
        what = f"classifier '{classifier.id}'" if version is None else f"version {version.number}"
        raise Conflict(f"{what} is {shown.status}; a bundle needs status Available")
    about = {
        "name": classifier.name,
        "language": classifier.language,
        "classifier_id": classifier.id,
        "version": classifier.serving_version if version is None else version.number,
    }

    def write(model_dir: Path) -> None:
        out.seek(0)
        out.truncate()
        write_bundle(model_dir, out, about=about)

    try:
        read_fetched(partial(store.fetch, folder=True), store.resolve(shown.model_dir), write)
    except OSError as exc:
        if not still_exists():
            raise (
                NotFound("classifier", classifier.id)
                if version is None
                else NotFound("version", str(version.number))
            ) from None
        raise unavailable(f"the model of classifier '{classifier.id}' cannot be read", exc) from exc


def stage_import(
    tenant_staging: Staging,
    settings: Settings,
    *,
    bundle: Path,
    name: str | None,
    language: str | None,
    now: datetime,
) -> Classifier:
    """Check the bundle and store its model as a new classifier of the staging's tenant (its
    version 1), here and on the remote store, without the database (the route gives its
    database slot back meanwhile: the extraction, the model's load and a copy to S3 take
    seconds for a big bundle). The classifier returned is not added yet (:func:`add_import`);
    ``name`` and ``language`` default to the exporter's. BadRequest on a bad bundle;
    StagingOverQuota when the unpacked bundle puts the tenant's staged bytes over its quota."""
    store, tenant_id = tenant_staging.store, tenant_staging.tenant_id
    staging = tenant_staging.path(".bundle")
    try:
        try:
            extracted = extract_bundle(bundle, staging, max_bytes=settings.max_upload_bytes)
            tenant_staging.check()
            loaded = LoadedModel.load(staging)  # its tensors load and fit its configs
        except (BundleInvalid, CheckpointCorrupt) as exc:  # named by its files, not the staging folder's path
            raise BadRequest(BUNDLE_FIELD, str(exc).replace(f"{staging}: ", "")) from None
        except OSError as exc:  # the staging folder's disk is full, say: a 500 before
            raise unavailable(STORE_REFUSED, exc) from exc
        if (problem := class_names_problem(loaded.labels, Limits.from_settings(settings))) is not None:
            raise BadRequest(BUNDLE_FIELD, f"model.json: {problem}")
        about = extracted.about
        classifier = status.imported_classifier(
            tenant_id=tenant_id,
            name=check_nlc_name(
                about.get("name", "") if name is None else name, "name", settings.max_name_chars
            ),
            language=check_language(about.get("language", "en") if language is None else language),
            mode=ClassifierMode.MULTI_LABEL if loaded.multi_label else ClassifierMode.SINGLE_LABEL,
            metrics=extracted.meta.get("metrics"),
            now=now,
        )
        try:
            classifier.model_dir = _store_model(store, classifier, staging)
        except Exception as exc:
            discard_import(store, classifier)
            raise unavailable(STORE_REFUSED, exc) from exc
        return classifier
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def add_import(
    session: Session, store: ArtifactStore, settings: Settings, classifier: Classifier, *, now: datetime
) -> Classifier:
    """Add :func:`stage_import`'s classifier as its tenant's, Available (commits); QuotaExceeded,
    or any other failure, removes its stored model again."""
    try:
        quotas.check_can_import_classifier(session, settings, classifier.tenant_id)
        _add(session, classifier, now=now)
    except BaseException:
        session.rollback()
        discard_import(store, classifier)
        raise
    return classifier


def discard_import(store: ArtifactStore, classifier: Classifier) -> None:
    """Remove a staged import's files, here and on the remote store (no row names them)."""
    remove_unrecorded(store, store.classifier_dir(classifier.tenant_id, classifier.id), folder=True)


def _store_model(store: ArtifactStore, classifier: Classifier, staging: Path) -> str:
    """Move the checked model in ``staging`` to the new classifier's version 1, here and on the
    remote store, before any database write (a slow upload holds no lock); its relative path."""
    model_dir = store.model_dir(classifier.tenant_id, classifier.id, 1) / IMPORTED
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(staging, model_dir)
    store.publish(model_dir)
    return store.relative(model_dir)


def _add(session: Session, classifier: Classifier, *, now: datetime) -> None:
    """Commit ``classifier`` and its version 1 (its model already stored), and its event."""
    status.add_imported(session, classifier, now=now)
    session.commit()

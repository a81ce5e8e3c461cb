"""Turn received uploads into domain calls: NLC create, JSON create, dataset upload, evaluation.

Blocking (validation, file moves, the upload to a remote store): routes run these in the thread
pool. Each one discards the spooled upload whatever happens. An upload is validated and stored
(:func:`service.catalogue.datasets.stage_upload`) before the transaction begins, once a read has found
room for it (``quotas.check_room_for_upload``), with the request's database slot given back
meanwhile (:func:`service.api.deps.blocking_without_db_slot`); quotas are then checked (the
sizes are known) inside the transaction that adds the rows (``service.tenants.quotas``), and a
refusal removes the stored file again.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TypeVar

from sqlalchemy.orm import Session

from service.api.deps import blocking_without_db_slot
from service.api.schemas import CreateFromDataset, VersionFromDataset
from service.api.uploads import RAW_BODY, Upload
from service.catalogue import classifiers, datasets, versions
from service.catalogue.test_data import TEST_DATA, read_test_file
from service.catalogue.training_data import InputFormat, Limits, check_negatives_allowed
from service.core.errors import BadRequest, Conflict
from service.core.models import (
    Classifier,
    ClassifierMode,
    ClassifierVersion,
    Dataset,
    Evaluation,
    Promote,
    utcnow,
)
from service.core.settings import Settings
from service.storage.store import ArtifactStore
from service.tenants import quotas
from service.training import evaluations
from service.webhooks.callback_urls import UnsafeCallback, check_callback_url

_Choice = TypeVar("_Choice", bound=StrEnum)
TRAINING_DATA = "training_data"
TRAINING_METADATA = "training_metadata"
DATASET_PARTS = frozenset({TRAINING_DATA, "file"})
TEST_PARTS = frozenset({TEST_DATA, "file"})


def classifier_from_upload(
    upload: Upload, session: Session, store: ArtifactStore, settings: Settings, tenant_id: str
) -> Classifier:
    """NLC create: ``training_metadata`` JSON ``{"language", "name"}`` (and, extensions, a
    ``callback_url`` for status webhooks, ``promote`` and ``mode``) + headerless ``training_data``
    CSV."""
    try:
        metadata = _metadata(upload.fields.get(TRAINING_METADATA))
        name = classifiers.check_nlc_name(
            metadata.get("name", ""), "training_metadata.name", settings.max_name_chars
        )
        language = classifiers.check_language(metadata.get("language"), "training_metadata.language")
        callback_url = _callback_url(
            metadata.get("callback_url"), "training_metadata.callback_url", settings, tenant_id
        )
        promote = _choice(Promote, metadata.get("promote", Promote.AUTO.value), "training_metadata.promote")
        mode = _choice(
            ClassifierMode, metadata.get("mode", ClassifierMode.SINGLE_LABEL.value), "training_metadata.mode"
        )
        quotas.check_room_for_upload(session, settings, tenant_id, counts=quotas.CLASSIFIER_UPLOAD)
        staged = _stage_training_data(upload, session, store, settings, tenant_id)
        with datasets.undone_on_failure(session, store, staged):
            check_negatives_allowed(staged.summary, mode == ClassifierMode.MULTI_LABEL)
            quotas.check_can_create_classifier(
                session,
                settings,
                tenant_id,
                dataset_bytes=staged.summary.size_bytes,
                dataset_rows=staged.summary.rows,
            )
        return classifiers.create_classifier(
            session,
            store,
            settings,
            tenant_id=tenant_id,
            name=name,
            language=language,
            source=staged,
            now=utcnow(),
            promote=promote,
            mode=mode,
            callback_url=callback_url,
        )
    finally:
        upload.discard()


def version_from_upload(
    upload: Upload, session: Session, store: ArtifactStore, settings: Settings, classifier: Classifier
) -> ClassifierVersion:
    """New version (extension), as NLC create: headerless ``training_data`` CSV and an optional
    ``training_metadata`` JSON with a ``callback_url``."""
    try:
        raw = upload.fields.get(TRAINING_METADATA)
        metadata = {} if raw is None else _metadata(raw)
        if unknown := sorted(set(metadata) - {"callback_url"}):  # not silently ignored
            raise BadRequest(
                f"{TRAINING_METADATA}.{unknown[0]}",
                "a new version takes only a callback_url; name, language, mode and promote are"
                " the classifier's, set when it was created",
            )
        callback_url = _callback_url(
            metadata.get("callback_url"), "training_metadata.callback_url", settings, classifier.tenant_id
        )
        quotas.check_room_for_upload(session, settings, classifier.tenant_id, counts=quotas.VERSION_UPLOAD)
        staged = _stage_training_data(upload, session, store, settings, classifier.tenant_id)
        with datasets.undone_on_failure(session, store, staged):
            check_negatives_allowed(staged.summary, classifier.mode == ClassifierMode.MULTI_LABEL.value)
            quotas.check_can_add_version(
                session,
                settings,
                classifier.tenant_id,
                dataset_bytes=staged.summary.size_bytes,
                dataset_rows=staged.summary.rows,
            )
        return versions.create_version(
            session, store, settings, classifier, source=staged, now=utcnow(), callback_url=callback_url
        )
    finally:
        upload.discard()


def version_from_dataset(
    spec: VersionFromDataset,
    session: Session,
    store: ArtifactStore,
    settings: Settings,
    classifier: Classifier,
) -> ClassifierVersion:
    """New version (extension): train on the tenant's stored dataset ``spec.dataset_id``."""
    callback_url = _callback_url(spec.callback_url, "callback_url", settings, classifier.tenant_id)
    dataset = datasets.trainable_dataset(session, classifier.tenant_id, spec.dataset_id)
    quotas.check_can_add_version(session, settings, classifier.tenant_id)
    return versions.create_version(
        session, store, settings, classifier, source=dataset, now=utcnow(), callback_url=callback_url
    )


def classifier_from_dataset(
    spec: CreateFromDataset, session: Session, store: ArtifactStore, settings: Settings, tenant_id: str
) -> Classifier:
    """JSON create (extension): train on the tenant's stored dataset ``spec.dataset_id``."""
    callback_url = _callback_url(spec.callback_url, "callback_url", settings, tenant_id)
    dataset = datasets.trainable_dataset(session, tenant_id, spec.dataset_id)
    quotas.check_can_create_classifier(session, settings, tenant_id)
    return classifiers.create_classifier(
        session,
        store,
        settings,
        tenant_id=tenant_id,
        name=datasets.check_name(spec.name, "name", settings.max_name_chars),
        language=classifiers.check_language(spec.language),
        source=dataset,
        now=utcnow(),
        promote=spec.promote,
        mode=spec.mode,
        callback_url=callback_url,
    )


def dataset_from_upload(
    upload: Upload,
    session: Session,
    store: ArtifactStore,
    settings: Settings,
    tenant_id: str,
    name: str | None,
) -> Dataset:
    """Dataset upload: CSV with a ``text,label`` header or JSON Lines, as a multipart part
    (``training_data`` or ``file``) or as the raw body; ``name`` from the query or a ``name`` part."""
    try:
        sent = [upload.files[p] for p in (TRAINING_DATA, "file", RAW_BODY) if p in upload.files]
        if not sent:
            raise BadRequest(
                TRAINING_DATA, "no training data: send a 'training_data' part or a CSV/JSONL body"
            )
        if len(sent) > 1:  # the second was ignored
            raise BadRequest(TRAINING_DATA, "send the data once: a 'training_data' and a 'file' part came")
        checked = datasets.check_name(_name(name, upload), "name", settings.max_name_chars)
        quotas.check_room_for_upload(session, settings, tenant_id, counts=quotas.DATASET_UPLOAD)
        staged = _staged(session, store, settings, sent[0], "labelled", tenant_id, with_report=True)
        with datasets.undone_on_failure(session, store, staged):
            quotas.check_can_store_dataset(
                session, settings, tenant_id, size_bytes=staged.summary.size_bytes, rows=staged.summary.rows
            )
        return datasets.create_dataset(session, store, staged, name=checked, now=utcnow())
    finally:
        upload.discard()


def evaluation_from_upload(
    upload: Upload,
    session: Session,
    store: ArtifactStore,
    settings: Settings,
    classifier: Classifier,
    version: int | None,
    name: str | None,
) -> Evaluation:
    """An evaluation of ``version`` (default: the serving one) on a test file sent as a
    ``test_data`` (or ``file``) part or as the raw body, checked, then recorded queued."""
    try:
        sent = [upload.files[p] for p in (TEST_DATA, "file", RAW_BODY) if p in upload.files]
        if len(sent) != 1:
            raise BadRequest(TEST_DATA, "send the test file once: a 'test_data' part or the raw body")
        number = version if version is not None else classifier.serving_version
        if number is None:
            raise Conflict("no version of the classifier serves yet: name one with ?version=N")
        found = versions.get_version(session, classifier, number)
        scratch = store.temp_path(".csv", owner=classifier.tenant_id)
        multi_label = classifier.mode == ClassifierMode.MULTI_LABEL.value
        data = blocking_without_db_slot(
            session,
            lambda: read_test_file(sent[0], scratch, Limits.from_settings(settings), multi_label=multi_label),
        )
    finally:
        upload.discard()
    return evaluations.create_evaluation(
        session,
        classifier,
        found,
        name=name or "test data",
        texts=data.texts,
        labels=data.labels,
        now=utcnow(),
    )


def _name(query: str | None, upload: Upload) -> str:
    """The dataset's name: the query's, else the ``name`` part's (strictly UTF-8, as a query's
    is), else "dataset"."""
    if query is not None:
        return query
    try:
        return upload.fields.get("name", b"dataset").decode("utf-8")
    except UnicodeDecodeError:  # was decoded with replacement characters and stored so
        raise BadRequest("name", "is not valid UTF-8") from None


def _stage_training_data(
    upload: Upload, session: Session, store: ArtifactStore, settings: Settings, tenant_id: str
) -> datasets.StagedDataset:
    if TRAINING_DATA not in upload.files:
        raise BadRequest(TRAINING_DATA, "the multipart part 'training_data' is required")
    return _staged(session, store, settings, upload.files[TRAINING_DATA], "nlc", tenant_id)


def _staged(
    session: Session,
    store: ArtifactStore,
    settings: Settings,
    source: Path,
    fmt: InputFormat,
    tenant_id: str,
    *,
    with_report: bool = False,
) -> datasets.StagedDataset:
    """:func:`service.catalogue.datasets.stage_upload` (validation, the report if asked for, and
    the copy to the store) with the request's database slot given back meanwhile; its files
    removed again if no slot comes back."""
    return blocking_without_db_slot(
        session,
        lambda: datasets.stage_upload(
            store, source, fmt, Limits.from_settings(settings), tenant_id=tenant_id, with_report=with_report
        ),
        discard=lambda staged: datasets.remove_unrecorded(store, staged.path),
    )


def _choice(kind: type[_Choice], value: object, field: str) -> _Choice:
    """``value`` as one of ``kind``'s values; BadRequest naming ``field`` and the choices."""
    choices = [member.value for member in kind]
    if not isinstance(value, str) or value not in choices:
        raise BadRequest(field, f"must be one of {', '.join(map(repr, choices))}")
    return kind(value)


def _callback_url(value: object, field: str, settings: Settings, tenant_id: str) -> str | None:
    """The checked callback URL of a create (None when not given); BadRequest naming ``field``."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRequest(field, "must be a string: the URL that status events are POSTed to")
    try:
        check_callback_url(
            value,
            allow_private=settings.webhook_allow_private,
            tenant_id=tenant_id,
            timeout=settings.webhook_timeout_seconds,
        )
    except UnsafeCallback as refused:
        raise BadRequest(field, str(refused)) from None
    return value


def _metadata(raw: bytes | None) -> dict[str, object]:
    if raw is None:
        raise BadRequest(TRAINING_METADATA, "the multipart part 'training_metadata' is required")
    try:
        metadata = json.loads(raw)
    except (ValueError, RecursionError):  # ValueError: not JSON, not UTF-8, an int of 4,300+ digits
        raise BadRequest(
            TRAINING_METADATA, 'must be JSON such as {"language": "en", "name": "..."}'
        ) from None
    if not isinstance(metadata, dict):
        raise BadRequest(TRAINING_METADATA, "must be a JSON object")
    return metadata

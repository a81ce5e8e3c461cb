"""Wire models: NLC v1 shapes (field names exactly as the ibm-watson SDK reads them) plus extensions;
the admin API's are in :mod:`service.api.admin_schemas`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from service.core.models import (
    Classifier,
    ClassifierMode,
    ClassifierStatus,
    ClassifierVersion,
    Dataset,
    JobEvent,
    Promote,
    StatusEvent,
    TrainingJob,
    WebhookAttempt,
    timestamp,
)
from service.training import job_views
from service.training.status_events import event_json
from trainer.sentence_features import NGRAMS

PROGRESS_FIELDS = (
    "phase",
    "epoch",
    "step",
    "total_steps",
    "loss",
    "samples_per_second",
    "eta_seconds",
    "checkpoints",
    "resumed",
)


# --- classifiers -----------------------------------------------------------------------


class CreateFromDataset(BaseModel):
    """JSON create (extension): train on a stored dataset. Any other field is refused, not
    ignored: a misspelt ``callbak_url`` or ``promot`` trained without what was asked for."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {"name": "weather", "language": "en", "dataset_id": "0b9f6c1e-5d5e-4a43-9d8e-2f1b7f0c4d21"}
            ]
        },
    )

    name: str = Field(min_length=1, max_length=256)
    language: str = "en"
    dataset_id: str
    callback_url: str | None = None
    promote: Promote = Promote.AUTO
    mode: ClassifierMode = ClassifierMode.SINGLE_LABEL


class VersionFromDataset(BaseModel):
    """JSON new version (extension): train the next version on a stored dataset. Any other
    field is refused, not ignored: name, language, mode and promote are the classifier's."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"dataset_id": "0b9f6c1e-5d5e-4a43-9d8e-2f1b7f0c4d21"}]},
    )

    dataset_id: str
    callback_url: str | None = None


class ClassifierChange(BaseModel):
    """``PATCH /v1/classifiers/{id}`` (extension): the fields named change, those left out stay.
    Strict: ``"0.05"`` or ``true`` is refused, not read as a number."""

    model_config = ConfigDict(
        extra="forbid", strict=True, json_schema_extra={"examples": [{"out_of_scope_rate": 0.05}]}
    )

    out_of_scope_rate: float | None = Field(
        None,
        description="The share of in-scope texts a single-label classifier may reject as out of "
        "scope, strictly between 0 and 1; null serves the model's own (0.02 unless trained otherwise).",
        json_schema_extra={"exclusiveMinimum": 0, "exclusiveMaximum": 1},
    )


class ClassifierSummary(BaseModel):
    """One entry of the classifier list."""

    classifier_id: str
    url: str
    name: str
    language: str
    created: str

    @classmethod
    def build(cls, c: Classifier, base_url: str) -> ClassifierSummary:
        """The list entry for ``c``."""
        return cls(
            classifier_id=c.id,
            url=f"{base_url}/v1/classifiers/{c.id}",
            name=c.name,
            language=c.language,
            created=timestamp(c.created_at),
        )


class Paging(BaseModel):
    """The paging fields of a listing (extension), in its reply only when the request sent
    ``limit`` or ``offset``: NLC's list had neither, and its clients get the list whole."""

    total: int | None = Field(None, description="Items in the whole listing (paged requests only).")
    limit: int | None = Field(None, description="The most items this page holds (paged requests only).")
    offset: int | None = Field(None, description="The index of this page's first item (paged requests only).")


class ClassifierList(Paging):
    """``GET /v1/classifiers``: NLC's list, oldest first; a page of it with ``limit``/``offset``."""

    classifiers: list[ClassifierSummary]


class ClassifierInfo(ClassifierSummary):
    """A classifier with its status (its serving version's, or while none serves its newest's);
    ``progress``, ``metrics``, the version fields and ``out_of_scope_rate`` are taas extensions."""

    status: str
    status_description: str
    progress: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    serving_version: int | None = None
    latest_version: int = 1
    promote: str = Promote.AUTO.value
    mode: str = ClassifierMode.SINGLE_LABEL.value
    model: dict[str, Any] | None = None
    out_of_scope_rate: float | None = Field(
        None, description="The tenant's out-of-scope rate (PATCH); null: the serving model's own."
    )

    @classmethod
    def build_info(cls, c: Classifier, job: TrainingJob | None, base_url: str) -> ClassifierInfo:
        """The full view of ``c``, with its latest job's progress."""
        summary = ClassifierSummary.build(c, base_url)
        return cls(
            **summary.model_dump(),
            status=c.status,
            status_description=c.status_description,
            progress=_progress(job),
            metrics=c.metrics if c.status == ClassifierStatus.AVAILABLE.value else None,
            serving_version=c.serving_version,
            latest_version=c.latest_version,
            promote=c.promote,
            mode=c.mode,
            model=model_of(c.metrics) if c.status == ClassifierStatus.AVAILABLE.value else None,
            out_of_scope_rate=c.out_of_scope_rate,
        )


class VersionInfo(BaseModel):
    """One version of a classifier (extension): its status, dataset, metrics once Available,
    its training's progress, and whether it serves."""

    classifier_id: str
    version: int
    url: str
    serving: bool
    status: str
    status_description: str
    dataset_id: str | None
    created: str
    updated: str
    progress: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    model: dict[str, Any] | None = None

    @classmethod
    def build(
        cls, v: ClassifierVersion, serving_version: int | None, job: TrainingJob | None, base_url: str
    ) -> VersionInfo:
        """The view of version ``v``, beside the classifier's ``serving_version``, with its job's
        progress."""
        return cls(
            classifier_id=v.classifier_id,
            version=v.number,
            url=f"{base_url}/v1/classifiers/{v.classifier_id}/versions/{v.number}",
            serving=serving_version == v.number,
            status=v.status,
            status_description=v.status_description,
            dataset_id=v.dataset_id,
            created=timestamp(v.created_at),
            updated=timestamp(v.updated_at),
            progress=_progress(job),
            metrics=v.metrics if v.status == ClassifierStatus.AVAILABLE.value else None,
            model=model_of(v.metrics) if v.status == ClassifierStatus.AVAILABLE.value else None,
        )


def model_of(metrics: dict[str, Any] | None) -> dict[str, Any]:
    """What an Available version's model reads (extension ``"model"``): its training's entry
    (trainer.sentence_features.describe_model), or for a version trained before sentence
    encoders, the n-gram model's."""
    described = (metrics or {}).get("model")
    return described if isinstance(described, dict) else {"kind": NGRAMS}


class TrainingHistory(BaseModel):
    """``GET /v1/classifiers/{id}/versions/{n}/history`` (extension): the version's training as
    a time series, about a point a second (thinned to at most 240, the whole run at a coarser
    step): each point's unix time ``t``, ``epoch``, ``step``, ``loss``, ``samples_per_second``
    and ``validation_accuracy`` (measured at an epoch's end; null between)."""

    classifier_id: str
    version: int
    points: list[dict[str, Any]]


class VersionList(BaseModel):
    """``GET /v1/classifiers/{id}/versions``: every version, oldest first."""

    classifier_id: str
    serving_version: int | None
    versions: list[VersionInfo]


def _progress(job: TrainingJob | None) -> dict[str, Any] | None:
    if job is None:
        return None
    reported = job.progress or {}
    progress: dict[str, Any] = {name: reported.get(name) for name in PROGRESS_FIELDS}
    progress["phase"] = job_views.shown_phase(job)
    progress["eta_seconds"] = job_views.eta_seconds(job)
    progress["state"] = job.state
    progress["attempts"] = job.attempts
    progress["failures"] = job.failures
    return progress


# --- training timeline (extension) -------------------------------------------------------


class TrainingEvent(BaseModel):
    """One transition of a training job: queued, claimed, resumed, checkpoint, lease_lost,
    crashed, cancelled, done, failed."""

    job_id: str
    event: str
    at: str
    worker: str | None
    attempt: int
    epoch: int
    step: int | None
    detail: str | None

    @classmethod
    def build(cls, e: JobEvent) -> TrainingEvent:
        """The view of ``e``."""
        return cls(
            job_id=e.job_id,
            event=e.kind,
            at=timestamp(e.at),
            worker=e.worker_id,
            attempt=e.attempt,
            epoch=e.epoch,
            step=e.step,
            detail=e.detail,
        )


class DeliveryAttempt(BaseModel):
    """One attempt to deliver a status event to its callback URL."""

    attempt: int
    at: str
    status_code: int | None
    error: str | None
    next_attempt: str | None

    @classmethod
    def build(cls, a: WebhookAttempt) -> DeliveryAttempt:
        """The view of ``a``."""
        return cls(
            attempt=a.attempt,
            at=timestamp(a.at),
            status_code=a.status_code,
            error=a.error,
            next_attempt=timestamp(a.next_attempt_at) if a.next_attempt_at else None,
        )


class StatusEventInfo(BaseModel):
    """A status change as its webhook sends it, with the delivery: ``none`` (no callback URL),
    ``pending``, ``delivered`` or ``failed`` (given up), and each attempt."""

    id: str
    type: str
    created: str
    classifier_id: str
    version: int | None
    status: str
    previous_status: str
    status_description: str
    callback_url: str | None
    delivery: str
    next_attempt: str | None
    attempts: list[DeliveryAttempt]

    @classmethod
    def build(cls, e: StatusEvent, attempts: list[WebhookAttempt]) -> StatusEventInfo:
        """The view of ``e`` and its attempts."""
        return cls(
            **event_json(e),
            callback_url=e.callback_url,
            delivery=e.delivery,
            next_attempt=timestamp(e.next_attempt_at) if e.next_attempt_at else None,
            attempts=[DeliveryAttempt.build(a) for a in attempts],
        )


class TrainingEvents(BaseModel):
    """``GET /v1/classifiers/{id}/events``: the training timeline, oldest first, and the newest
    status events with their webhook deliveries, newest first."""

    classifier_id: str
    events: list[TrainingEvent]
    status_events: list[StatusEventInfo]


class WebhookSecret(BaseModel):
    """The tenant's webhook signing secret."""

    secret: str


# --- classify --------------------------------------------------------------------------


class ClassifyInput(BaseModel):
    """``POST /v1/classifiers/{id}/classify``."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"text": "Is it raining?"}]})

    text: str


class CollectionItem(BaseModel):
    """One text of a collection."""

    text: str


class ClassifyCollectionInput(BaseModel):
    """``POST /v1/classifiers/{id}/classify_collection``."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"collection": [{"text": "hot?"}, {"text": "snow?"}]}]}
    )

    collection: list[CollectionItem]


class ClassifiedClass(BaseModel):
    """A class and its confidence."""

    class_name: str
    confidence: float


class CollectionResult(BaseModel):
    """The classification of one text of a collection; ``labels`` (extension), only from a
    multi-label classifier, holds the classes it predicts (confidences are then independent);
    ``in_scope_score`` and ``out_of_scope`` (extensions), from a single-label classifier
    trained with out-of-scope detection, say whether the text belongs to none of its classes."""

    text: str
    top_class: str
    classes: list[ClassifiedClass]
    labels: list[str] | None = None
    in_scope_score: float | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="The share of the classifier's own held-out in-scope training texts that "
        "score lower than this one: near 0, unlike anything it was trained on.",
    )
    out_of_scope: bool | None = Field(
        default=None,
        description="Whether the text is judged to belong to none of the classes: its "
        "in_scope_score is below the classifier's rate (by default 0.02: about 2 % of "
        "in-scope texts are rejected). top_class and classes are given all the same.",
    )


class Classification(CollectionResult):
    """Reply to classify."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "classifier_id": "0b9f6c1e-5d5e-4a43-9d8e-2f1b7f0c4d21",
                    "url": "http://127.0.0.1:8000/v1/classifiers/0b9f6c1e-5d5e-4a43-9d8e-2f1b7f0c4d21",
                    "text": "Is it raining?",
                    "top_class": "conditions",
                    "classes": [
                        {"class_name": "conditions", "confidence": 0.93},
                        {"class_name": "temperature", "confidence": 0.07},
                    ],
                }
            ]
        }
    )

    classifier_id: str
    url: str


class ClassificationCollection(BaseModel):
    """Reply to classify_collection."""

    classifier_id: str
    url: str
    collection: list[CollectionResult]


# --- datasets (extension) ----------------------------------------------------------------


class DatasetInfo(BaseModel):
    """A stored training set."""

    dataset_id: str
    name: str
    url: str
    rows: int
    classes: int
    size_bytes: int
    sha256: str
    created: str

    @classmethod
    def build(cls, d: Dataset, base_url: str) -> DatasetInfo:
        """The view of ``d``."""
        return cls(
            dataset_id=d.id,
            name=d.name,
            url=f"{base_url}/v1/datasets/{d.id}",
            rows=d.rows,
            classes=d.classes,
            size_bytes=d.size_bytes,
            sha256=d.sha256,
            created=timestamp(d.created_at),
        )


class DatasetList(Paging):
    """``GET /v1/datasets``: oldest first; a page of it with ``limit``/``offset``."""

    datasets: list[DatasetInfo]


# --- health ------------------------------------------------------------------------------


class Health(BaseModel):
    """``GET /healthz``: the process is up and answering."""

    status: str = Field(examples=["ok"])


class Readiness(BaseModel):
    """``GET /readyz``: whether this replica can serve (``ready``, 200) or not (``unready``, 503),
    and each dependency's answer: the database, Redis and the artifact store."""

    status: str = Field(examples=["ready"])
    checks: dict[str, bool] = Field(examples=[{"database": True, "redis": True, "store": True}])

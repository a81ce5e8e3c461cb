"""The data model (SQLAlchemy 2.0): tenants and their keys, datasets, classifiers and their
versions, training jobs, and the status events with their webhook delivery attempts.

The schema changes only through Alembic revisions in ``migrations/``; keep them in step.
Every timestamp is timezone-aware UTC (:class:`UTCDateTime`).
"""

from __future__ import annotations

import enum
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def new_id() -> str:
    """A fresh random identifier for any row."""
    return str(uuid.uuid4())


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


def timestamp(moment: datetime) -> str:
    """The wire form of a time (NLC's): ISO 8601 UTC with milliseconds and ``Z``."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that always comes back timezone-aware UTC.

    PostgreSQL stores ``timestamptz``; SQLite has no zone, so values are stored as naive UTC
    (which keeps string comparison in SQL correct) and given back their zone on load.
    Binding a naive datetime is a bug and raises ValueError.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime: use timezone-aware UTC")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class JobState(enum.StrEnum):
    """Where a training job is in its life; only ``service.training.jobs`` and
    ``service.training.leases`` move it."""

    QUEUED = "queued"
    TRAINING = "training"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


# A job in these states is active: it holds a training slot or waits for one (the fair
# dispatcher's slots, the training_jobs quota), and a cancel or a deletion stops it.
ACTIVE_STATES = (JobState.QUEUED.value, JobState.TRAINING.value)
# ... and with CANCELLED, may still train: a resume puts a cancelled job back in the queue, so its
# dataset and its checkpoint folder are still needed.
MAY_TRAIN_STATES = (*ACTIVE_STATES, JobState.CANCELLED.value)


class EvaluationState(enum.StrEnum):
    """Where an evaluation (a version scored on a tenant's test file) is; only
    ``service.training.evaluations`` moves it."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class ClassifierStatus(enum.StrEnum):
    """NLC v1 classifier status values, exactly as the wire spells them."""

    NON_EXISTENT = "Non Existent"
    TRAINING = "Training"
    FAILED = "Failed"
    AVAILABLE = "Available"
    UNAVAILABLE = "Unavailable"


class Delivery(enum.StrEnum):
    """Where the webhook of a status event is: no callback URL (only recorded), waiting for an
    attempt, delivered (a 2xx answer), or given up after ``webhook_max_attempts``."""

    NONE = "none"
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class ClassifierMode(enum.StrEnum):
    """What a classifier predicts: one class per text (NLC's, the default), or any number of
    classes, each with an independent confidence (the rows of one text name its classes)."""

    SINGLE_LABEL = "single_label"
    MULTI_LABEL = "multi_label"


class Promote(enum.StrEnum):
    """When a classifier's newly trained version starts serving: at once, if it is newer than
    the serving one (``auto``), or on the tenant's ``promote`` call (``manual``). A classifier's
    first Available version always serves, since nothing else can."""

    AUTO = "auto"
    MANUAL = "manual"


class DatasetOrigin(enum.StrEnum):
    """How a dataset came to be: uploaded on its own, or with an NLC create (owned by it)."""

    UPLOAD = "upload"
    CLASSIFIER = "classifier"


class Base(DeclarativeBase):
    """Declarative base of every table."""

    # Named constraints, so that Alembic's SQLite batch mode can alter them later.
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_name)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSON}


class Tenant(Base):
    """A customer: owns keys, datasets and classifiers; sees nothing of other tenants."""

    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(256), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # sealed (service.core.sealing; never plain text); NULL until first needed (service.webhooks.secrets)
    webhook_secret: Mapped[str | None] = mapped_column(String(255), default=None)


class ApiKey(Base):
    """A tenant's API key, stored only as its SHA-256; revoked keys stay for the audit trail."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class Dataset(Base):
    """Labelled training data, stored once as canonical CSV (``text,label``) in the artifact store."""

    __tablename__ = "datasets"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(256))
    origin: Mapped[str] = mapped_column(String(16), default=DatasetOrigin.UPLOAD.value)
    path: Mapped[str] = mapped_column(String(512))
    rows: Mapped[int] = mapped_column(Integer)
    classes: Mapped[int] = mapped_column(Integer)
    size_bytes: Mapped[int] = mapped_column(Integer)
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # service.catalogue.dataset_report's findings, computed at upload; None for a dataset stored
    # before reports existed (or with an NLC create), until its report is first asked for
    report: Mapped[dict[str, Any] | None] = mapped_column(default=None)


class TrainedModel:
    """The columns of one trained (or training) model: its dataset, NLC status, model folder
    (store-relative) and metrics; a version's own, or the classifier's view of one."""

    dataset_id: Mapped[str | None] = mapped_column(
        ForeignKey("datasets.id", ondelete="SET NULL"), index=True, default=None
    )
    status: Mapped[str] = mapped_column(String(16), default=ClassifierStatus.TRAINING.value)
    status_description: Mapped[str] = mapped_column(Text, default="")
    model_dir: Mapped[str | None] = mapped_column(String(512), default=None)
    metrics: Mapped[dict[str, Any] | None] = mapped_column(default=None)


class Classifier(TrainedModel, Base):
    """An NLC classifier, and the NLC view of it: ``status``, ``model_dir``, ``metrics`` and
    ``dataset_id`` are those of its serving version (``serving_version``) or, while none serves
    yet, of its newest one. ``service.training.status`` writes the view in the transaction that
    changes the version it shows, so classify reads one row."""

    __tablename__ = "classifiers"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(256))
    language: Mapped[str] = mapped_column(String(16))
    mode: Mapped[str] = mapped_column(String(16), default=ClassifierMode.SINGLE_LABEL.value)  # revision 0005
    # Versions (revision 0005): the one serving (None until one is Available), the newest number
    # given out, and when a new one is promoted.
    serving_version: Mapped[int | None] = mapped_column(Integer, default=None)
    latest_version: Mapped[int] = mapped_column(Integer, default=1)
    promote: Mapped[str] = mapped_column(String(8), default=Promote.AUTO.value)
    # The tenant's out-of-scope rate (revision 0009): None serves each model's own, set at training.
    out_of_scope_rate: Mapped[float | None] = mapped_column(Float, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ClassifierVersion(TrainedModel, Base):
    """One trained (or training) model of a classifier: version ``number`` 1, 2, … with its own
    dataset, status, model and metrics. A version that fails or is deleted leaves the others."""

    __tablename__ = "classifier_versions"
    __table_args__ = (UniqueConstraint("classifier_id", "number"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    classifier_id: Mapped[str] = mapped_column(ForeignKey("classifiers.id", ondelete="CASCADE"), index=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class TrainingJob(Base):
    """One training run of a classifier; a worker holds it by lease, fenced by ``epoch``."""

    __tablename__ = "training_jobs"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    classifier_id: Mapped[str] = mapped_column(ForeignKey("classifiers.id", ondelete="CASCADE"), index=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    version: Mapped[int] = mapped_column(Integer, default=1)  # the version it trains (revision 0005)
    state: Mapped[str] = mapped_column(String(16), default=JobState.QUEUED.value, index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    lease_owner: Mapped[str | None] = mapped_column(String(256), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    progress: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    checkpoint_dir: Mapped[str] = mapped_column(String(512))
    error: Mapped[str | None] = mapped_column(Text, default=None)
    # Reliability (revision 0002): failed attempts so far, the back-off before the next claim,
    # when the wake-up message was last sent, and the fenced pointer to the newest checkpoint.
    failures: Mapped[int] = mapped_column(Integer, default=0)
    not_before: Mapped[datetime | None] = mapped_column(default=None)
    enqueued_at: Mapped[datetime | None] = mapped_column(default=None)
    checkpoint_path: Mapped[str | None] = mapped_column(String(512), default=None)
    checkpoint_step: Mapped[int | None] = mapped_column(Integer, default=None)
    # Where the status events of this training go (revision 0004); per job, so that a new version
    # of a classifier can name its own.
    callback_url: Mapped[str | None] = mapped_column(String(2048), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class JobEvent(Base):
    """An append-only record of a job transition (the timeline): queued, claimed, resumed,
    checkpoint, lease_lost, crashed, cancelled, done, failed. ``attempt`` is the claim it belongs
    to, ``step`` the applied updates it refers to (a checkpoint's, the one resumed from)."""

    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("training_jobs.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    epoch: Mapped[int] = mapped_column(Integer)
    worker_id: Mapped[str | None] = mapped_column(String(256), default=None)
    detail: Mapped[str | None] = mapped_column(Text, default=None)
    at: Mapped[datetime] = mapped_column(default=utcnow, index=True)  # the dashboard reads by time
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    step: Mapped[int | None] = mapped_column(Integer, default=None)


class StatusEvent(Base):
    """A change of a classifier version's status, recorded in the transaction that makes it: the
    webhook outbox. ``id`` is the event's idempotency key, the same on every delivery attempt.
    A deletion is a change to ``Non Existent``; a deleted classifier keeps only its events still
    to be delivered."""

    __tablename__ = "status_events"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    # Not a foreign key (since revision 0005): the event of a deletion outlives its classifier.
    classifier_id: Mapped[str] = mapped_column(String(36), index=True)
    version: Mapped[int | None] = mapped_column(Integer, default=None)  # revision 0005
    type: Mapped[str] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(String(16))
    previous_status: Mapped[str] = mapped_column(String(16))
    description: Mapped[str] = mapped_column(Text, default="")
    callback_url: Mapped[str | None] = mapped_column(String(2048), default=None)
    delivery: Mapped[str] = mapped_column(String(16), index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # When the next attempt is due (while one runs: when it is presumed lost), when a message
    # for it was last sent, and when a receiver took it.
    next_attempt_at: Mapped[datetime | None] = mapped_column(default=None)
    enqueued_at: Mapped[datetime | None] = mapped_column(default=None)
    delivered_at: Mapped[datetime | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class WebhookAttempt(Base):
    """One delivery attempt of a status event: the receiver's HTTP status, or why it failed, and
    when the next attempt is due (None: delivered or given up)."""

    __tablename__ = "webhook_attempts"

    event_id: Mapped[str] = mapped_column(
        ForeignKey("status_events.id", ondelete="CASCADE"), primary_key=True
    )
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    status_code: Mapped[int | None] = mapped_column(Integer, default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    next_attempt_at: Mapped[datetime | None] = mapped_column(default=None)


class TenantQuota(Base):
    """A tenant's quota overrides set by the admin; a NULL column means the installation default."""

    __tablename__ = "tenant_quotas"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True)
    classifiers: Mapped[int | None] = mapped_column(Integer, default=None)
    versions: Mapped[int | None] = mapped_column(Integer, default=None)  # revision 0005
    training_jobs: Mapped[int | None] = mapped_column(Integer, default=None)
    dataset_bytes: Mapped[int | None] = mapped_column(BigInteger, default=None)
    dataset_rows: Mapped[int | None] = mapped_column(Integer, default=None)
    datasets: Mapped[int | None] = mapped_column(Integer, default=None)  # revision 0006
    classify_rps: Mapped[int | None] = mapped_column(Integer, default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class Evaluation(Base):
    """One version scored on a tenant's test rows (revision 0011): a job a worker runs under a
    lease, like training, fenced by ``attempt``. The rows wait in ``test_rows`` (JSON: texts and
    labels) until the report (``report``, :mod:`trainer.evaluation_report`) replaces them; it is
    kept with the version and goes with it."""

    __tablename__ = "evaluations"

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    classifier_id: Mapped[str] = mapped_column(ForeignKey("classifiers.id", ondelete="CASCADE"), index=True)
    version_id: Mapped[str] = mapped_column(
        ForeignKey("classifier_versions.id", ondelete="CASCADE"), index=True
    )
    version: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(256))  # the test file's, as the tenant named it
    state: Mapped[str] = mapped_column(String(16), default=EvaluationState.QUEUED.value, index=True)
    rows: Mapped[int] = mapped_column(Integer)
    done: Mapped[int] = mapped_column(Integer, default=0)  # texts answered so far
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    enqueued_at: Mapped[datetime | None] = mapped_column(default=None)
    test_rows: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    report: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    error: Mapped[str | None] = mapped_column(Text, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)

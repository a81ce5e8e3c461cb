"""The replies of the taas API as the client returns them: the decoded JSON, typed.

``TypedDict`` rather than classes: a reply is returned as the server sent it (``taas … --json``
prints it unchanged, and a field a newer server adds is kept), and type checkers still know
each field. The fields are those of ``/openapi.json``; a key marked ``NotRequired`` is absent
from some replies (an older server's, or one that does not apply).
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class Progress(TypedDict, total=False):
    """A training's progress (extension): the trainer's ``phase`` (``encoding``, ``preparing``,
    ``training``, ``evaluating``, ``saving``, ``done``) or else the job's state, and its counters."""

    phase: str | None
    state: str
    epoch: int | None
    step: int | None
    total_steps: int | None
    loss: float | None
    samples_per_second: float | None
    eta_seconds: float | None
    checkpoints: int | None
    resumed: int | None
    attempts: int
    failures: int


class Metrics(TypedDict, total=False):
    """A trained version's evaluation on its held-out texts: ``accuracy``, ``macro_f1``, ``n``,
    ``per_class`` and ``confusion`` (single-label); ``micro_f1``, ``hamming_loss``,
    ``subset_accuracy``, ``threshold``… (multi-label)."""

    accuracy: float
    macro_f1: float
    micro_f1: float
    n: int
    per_class: Any
    confusion: Any


class ModelKind(TypedDict, total=False):
    """What an Available version's model reads: ``kind`` "n-grams", or "sentence-encoder+n-grams"
    with the ``encoder``'s name, ``encoder_sha256`` and ``encoder_layers``."""

    kind: str
    encoder: str
    encoder_sha256: str
    encoder_layers: list[int]


class ClassifierSummary(TypedDict):
    """An entry of ``GET /v1/classifiers``."""

    classifier_id: str
    url: str
    name: str
    language: str
    created: str


class Classifier(ClassifierSummary):
    """``GET /v1/classifiers/{id}``: NLC's status, with progress, metrics and versions (extensions)."""

    status: str
    status_description: str
    progress: Progress | None
    metrics: Metrics | None
    serving_version: int | None
    latest_version: int
    promote: str
    mode: str
    model: ModelKind | None
    out_of_scope_rate: float | None


class ClassifiedClass(TypedDict):
    class_name: str
    confidence: float


class ClassifiedText(TypedDict):
    """One text's classification: its ten most confident classes, highest first; a multi-label
    classifier's adds ``labels``, the classes it predicts; a single-label one trained with
    out-of-scope detection ``in_scope_score`` and ``out_of_scope``."""

    text: str
    top_class: str
    classes: list[ClassifiedClass]
    labels: NotRequired[list[str]]
    in_scope_score: NotRequired[float]
    out_of_scope: NotRequired[bool]


class Classification(ClassifiedText):
    """``POST /v1/classifiers/{id}/classify``."""

    classifier_id: str
    url: str


class Version(TypedDict):
    """One version of a classifier (extension)."""

    classifier_id: str
    version: int
    url: str
    serving: bool
    status: str
    status_description: str
    dataset_id: str | None
    created: str
    updated: str
    progress: Progress | None
    metrics: Metrics | None
    model: ModelKind | None


class VersionList(TypedDict):
    classifier_id: str
    serving_version: int | None
    versions: list[Version]


class Dataset(TypedDict):
    """A stored training set (extension)."""

    dataset_id: str
    name: str
    url: str
    rows: int
    classes: int
    size_bytes: int
    sha256: str
    created: str
    warnings: NotRequired[list[str]]  # the upload's reply: its report's warnings


class DatasetReport(TypedDict):
    """``GET /v1/datasets/{id}/report`` (extension): each finding is a dict of counts and
    examples, as docs/api.md shows them."""

    rows: int
    texts: int
    classes: int
    class_counts: list[dict[str, Any]]
    imbalance: float | None
    small_classes: dict[str, Any]
    exact_duplicates: dict[str, Any]
    near_duplicates: dict[str, Any]
    multi_label_texts: dict[str, Any]
    confusable_classes: dict[str, Any]
    dropped: int
    warnings: list[str]


class TrainingEvents(TypedDict):
    """``GET /v1/classifiers/{id}/events``: the training timeline and the status events."""

    classifier_id: str
    events: list[dict[str, Any]]
    status_events: list[dict[str, Any]]


class Quotas(TypedDict):
    """``GET /v1/admin/tenants/{id}/quotas``: the quotas in force, the overrides, the defaults
    and the tenant's usage, by quota name."""

    tenant_id: str
    quotas: dict[str, int]
    overrides: dict[str, int | None]
    defaults: dict[str, int]
    usage: dict[str, int]


class Evaluation(TypedDict):
    """A version scored on a test file (extension): ``status`` queued, running, completed (with
    its ``report``) or failed (with its ``error``)."""

    evaluation_id: str
    classifier_id: str
    version: int
    name: str
    status: str
    rows: int
    done: int
    created: str
    started: str | None
    finished: str | None
    error: str | None
    url: str
    report_html_url: str
    accuracy: float | None
    macro_f1: float | None
    report: dict[str, Any] | None


class EvaluationList(TypedDict):
    classifier_id: str
    evaluations: list[Evaluation]

"""``/v1/classifiers/{id}/evaluate`` and ``…/evaluations`` (extension): an evaluation and its
report (the dict :mod:`trainer.evaluation_report` builds)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from service.core.models import Evaluation, timestamp


class EvaluationInfo(BaseModel):
    """One evaluation: a version of the classifier scored on a test file the tenant sent. Its
    ``status`` goes ``queued``, ``running`` (``done`` of ``rows`` answered), then ``completed``
    with the ``report``, or ``failed`` with the ``error``."""

    evaluation_id: str
    classifier_id: str
    version: int = Field(description="The version scored.")
    name: str = Field(description="The test file's name.")
    status: str = Field(description="queued, running, completed or failed.")
    rows: int = Field(description="Test rows (one per text and class).")
    done: int = Field(description="Rows answered so far.")
    created: str
    started: str | None = None
    finished: str | None = None
    error: str | None = None
    url: str
    report_html_url: str = Field(description="The report as a page (once completed).")
    accuracy: float | None = Field(
        default=None, description="Once completed, a single-label classifier's accuracy (listings too)."
    )
    macro_f1: float | None = Field(default=None, description="Once completed, the macro-F1 (listings too).")
    report: dict[str, Any] | None = Field(
        default=None,
        description="Once completed: accuracy, macro_f1, per_class (precision, recall, f1, support, "
        "predicted), confusion (labels, matrix), calibration (ece, bins), confused_pairs (with "
        "example texts), unknown_classes and out_of_scope; a multi-label classifier's has its "
        "micro and macro figures, subset accuracy and threshold instead.",
    )

    @classmethod
    def build(cls, evaluation: Evaluation, base_url: str, *, with_report: bool = True) -> EvaluationInfo:
        """The view of ``evaluation`` (its report left out of listings: ``with_report``)."""
        url = f"{base_url}/v1/classifiers/{evaluation.classifier_id}/evaluations/{evaluation.id}"
        report = evaluation.report or {}
        return cls(
            evaluation_id=evaluation.id,
            classifier_id=evaluation.classifier_id,
            version=evaluation.version,
            name=evaluation.name,
            status=evaluation.state,
            rows=evaluation.rows,
            done=evaluation.done,
            created=timestamp(evaluation.created_at),
            started=None if evaluation.started_at is None else timestamp(evaluation.started_at),
            finished=None if evaluation.finished_at is None else timestamp(evaluation.finished_at),
            error=evaluation.error,
            url=url,
            report_html_url=f"{url}/report.html",
            accuracy=report.get("accuracy"),
            macro_f1=report.get("macro_f1"),
            report=evaluation.report if with_report else None,
        )


class EvaluationList(BaseModel):
    """``GET /v1/classifiers/{id}/evaluations``: newest first, without their reports."""

    classifier_id: str
    evaluations: list[EvaluationInfo]

"""Evaluations (extension): score a trained version on the tenant's own test file, as a job.

``POST /v1/classifiers/{id}/evaluate`` checks the file and answers 202 at once; a worker answers
the rows with the version's model (service.training.evaluations). The report (accuracy,
macro-F1, per-class table, confusion matrix, calibration, the pairs confused most with
examples) is kept with the version, as JSON and as a page.
"""

from __future__ import annotations

from fastapi import Path, Query, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from service.api import bodies, intake
from service.api.deps import ClassifierDep, SessionDep, SettingsDep, StagingDep, StoreDep, without_db_slot
from service.api.evaluation_page import render_report
from service.api.evaluation_schemas import EvaluationInfo, EvaluationList
from service.api.routes.classifiers import base_url
from service.api.routing import Router
from service.api.uploads import Upload, read_upload
from service.core.errors import Conflict
from service.core.models import EvaluationState
from service.training import evaluations
from service.training.queue import wake_evaluator

router = Router(prefix="/v1/classifiers/{classifier_id}", tags=["evaluations"])
EvaluationId = Path(description="The evaluation's id.")


@router.post("/evaluate", response_model=EvaluationInfo, status_code=202, openapi_extra=bodies.TEST_UPLOAD)
async def evaluate(
    request: Request,
    classifier: ClassifierDep,
    session: SessionDep,
    settings: SettingsDep,
    store: StoreDep,
    staging: StagingDep,
    version: int | None = Query(
        None, ge=1, le=2**31 - 1, description="The version to score; default: the serving one."
    ),
    name: str | None = Query(
        None, max_length=256, description="A name for the test file, shown with its report."
    ),
) -> EvaluationInfo:
    """Score a version on a test file (a ``test_data`` part, or the raw body): NLC's CSV without a
    header, CSV with a ``text,label`` header, or JSON Lines, under the training data's rules.
    Rows labelled ``__out_of_scope__`` are out-of-scope examples: they are scored on whether the
    classifier rejects them. 409 unless the version is Available."""
    upload = await without_db_slot(
        session,
        read_upload(request, staging, settings.max_upload_bytes, intake.TEST_PARTS),
        discard=Upload.discard,
    )
    evaluation = await run_in_threadpool(
        intake.evaluation_from_upload, upload, session, store, settings, classifier, version, name
    )
    wake_evaluator(settings, evaluation.id)
    return EvaluationInfo.build(evaluation, base_url(request))


@router.get("/evaluations", response_model=EvaluationList)
def list_evaluations(
    request: Request,
    classifier: ClassifierDep,
    session: SessionDep,
    version: int | None = Query(None, ge=1, le=2**31 - 1, description="Only this version's."),
) -> EvaluationList:
    """The classifier's evaluations, newest first, without their reports."""
    url = base_url(request)
    found = evaluations.list_evaluations(session, classifier, version)
    return EvaluationList(
        classifier_id=classifier.id,
        evaluations=[EvaluationInfo.build(e, url, with_report=False) for e in found],
    )


@router.get("/evaluations/{evaluation_id}", response_model=EvaluationInfo)
def get_evaluation(
    request: Request, classifier: ClassifierDep, session: SessionDep, evaluation_id: str = EvaluationId
) -> EvaluationInfo:
    """One evaluation, with its report once completed."""
    return EvaluationInfo.build(
        evaluations.get_evaluation(session, classifier, evaluation_id), base_url(request)
    )


@router.get(
    "/evaluations/{evaluation_id}/report.html",
    response_class=HTMLResponse,
    responses={200: {"content": {"text/html": {}}, "description": "The report as a page."}},
)
def get_evaluation_report_page(
    classifier: ClassifierDep,
    session: SessionDep,
    evaluation_id: str = EvaluationId,
    download: bool = Query(False, description="Ask the browser to save it as a file."),
) -> HTMLResponse:
    """The completed evaluation's report as one self-contained page; 409 before it completes."""
    evaluation = evaluations.get_evaluation(session, classifier, evaluation_id)
    if evaluation.state != EvaluationState.COMPLETED.value or evaluation.report is None:
        raise Conflict(
            f"evaluation {evaluation.id} is {evaluation.state}: its report comes once it is completed"
        )
    headers = (
        {"Content-Disposition": f'attachment; filename="evaluation-{evaluation.id}.html"'}
        if download
        else None
    )
    return HTMLResponse(render_report(classifier, evaluation), headers=headers)


@router.delete("/evaluations/{evaluation_id}")
def delete_evaluation(
    classifier: ClassifierDep, session: SessionDep, evaluation_id: str = EvaluationId
) -> dict[str, object]:
    """Delete an evaluation and its report (one running stops)."""
    evaluations.delete_evaluation(session, classifier, evaluation_id)
    return {}

"""Run one evaluation: a version's model answers a tenant's test rows, the report goes in their place.

The worker claims the evaluation under a lease (:func:`service.training.evaluations.claim`), loads
the version's model (fetched from the remote store on nodes without a shared file system, the
shared sentence encoder loaded once per process), answers the rows a chunk at a time and, after
each chunk, records its progress, which renews the lease: a worker that dies leaves an expired
lease, and the reconciler gives the evaluation to another. A model that cannot be loaded fails
the evaluation with the reason; a claim lost meanwhile (the evaluation deleted, or taken over
after an expired lease) stops the work and writes nothing.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from service.core.db import session_factory, shared_engine
from service.core.settings import Settings
from service.storage.store import ArtifactStore, read_fetched
from service.training import evaluations
from trainer.data import LabelledData
from trainer.errors import TrainerError
from trainer.evaluation_report import evaluate_model
from trainer.inference import LoadedModel

log = logging.getLogger(__name__)


class _ClaimLost(Exception):
    """The evaluation was deleted, or another worker took it over: stop, write nothing."""


def run_evaluation(evaluation_id: str, settings: Settings) -> str:
    """Claim and run evaluation ``evaluation_id``; returns what became of it (``completed``,
    ``failed``, ``lost``, or ``not claimable``: gone, finished or held by a live worker)."""
    hold = timedelta(seconds=settings.lease_seconds)
    with session_factory(shared_engine(settings))() as session:
        claimed = evaluations.claim(session, evaluation_id, now=datetime.now(UTC), hold=hold)
        if claimed is None:
            return "not claimable"
        store = ArtifactStore.open(settings)
        try:
            model = read_fetched(
                lambda path: store.fetch(path, folder=True),
                store.resolve(claimed.model_dir),
                LoadedModel.load,
            )
        except (TrainerError, OSError) as error:
            log.warning("evaluation %s: the model cannot be loaded: %s", evaluation_id, error)
            evaluations.fail(
                session,
                claimed.id,
                claimed.attempt,
                f"the version's model cannot be loaded: {error}",
                now=_now(),
            )
            return "failed"

        def progress(done: int, total: int) -> None:
            rows = done if total == len(claimed.texts) else round(done / total * len(claimed.texts))
            if not evaluations.record_progress(
                session, claimed.id, claimed.attempt, rows, now=_now(), hold=hold
            ):
                raise _ClaimLost

        try:
            report = evaluate_model(
                model, LabelledData(claimed.texts, claimed.labels), rate=claimed.rate, progress=progress
            )
        except _ClaimLost:
            log.info("evaluation %s: deleted or taken over meanwhile; stopped", evaluation_id)
            return "lost"
        if not evaluations.complete(session, claimed.id, claimed.attempt, report, now=_now()):
            return "lost"
        log.info("evaluation %s: %d rows scored", evaluation_id, len(claimed.texts))
        return "completed"


def _now() -> datetime:
    return datetime.now(UTC)

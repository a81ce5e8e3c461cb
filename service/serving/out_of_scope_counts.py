"""How many texts each classifier judged in or out of scope, for ``GET /metrics``.

Counted where a classify reply is written (service.api.routes.classify.reply_json, on the
event loop: no lock is needed) and read at scrape time by service.ops.metrics, so that a
classify call pays for two integer additions, not for a labelled Prometheus series' lock.
The series are per classifier: an operator watches a bot whose traffic drifts out of scope
(a new product line its classes do not cover) by its share of out-of-scope answers.
"""

from __future__ import annotations


class OutOfScopeCounts:
    """Per classifier id since this process started: [texts answered with an out-of-scope
    decision, texts judged out of scope]."""

    def __init__(self) -> None:
        self._counts: dict[str, list[int]] = {}

    def add(self, classifier_id: str, answered: int, out_of_scope: int) -> None:
        """Count one reply's texts."""
        counts = self._counts.get(classifier_id)
        if counts is None:
            counts = self._counts[classifier_id] = [0, 0]
        counts[0] += answered
        counts[1] += out_of_scope

    def snapshot(self) -> list[tuple[str, int, int]]:
        """(classifier id, answered, out of scope) of every classifier counted."""
        return [
            (classifier_id, answered, out) for classifier_id, (answered, out) in list(self._counts.items())
        ]

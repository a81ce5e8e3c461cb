"""An evaluation's report as one self-contained HTML page (no script, no stylesheet to fetch):
the page a tenant downloads, shares or opens offline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape

from service.core.models import Classifier, Evaluation, timestamp

MATRIX_CLASSES = 40  # a larger confusion matrix is left to the JSON report
_env = Environment(
    loader=FileSystemLoader(Path(__file__).resolve().parent / "templates"),
    autoescape=select_autoescape(["html"]),
)


def render_report(classifier: Classifier, evaluation: Evaluation) -> str:
    """The page of ``evaluation``'s completed report."""
    report: dict[str, Any] = evaluation.report or {}
    return _env.get_template("evaluation.html").render(
        classifier_name=classifier.name,
        e=evaluation,
        r=report,
        finished=timestamp(evaluation.finished_at) if evaluation.finished_at else "",
        per_class=sorted(report.get("per_class", []), key=lambda c: (c["f1"], c["class_name"])),
        matrix=_matrix(report.get("confusion")),
        pct=_percent,
    )


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _matrix(confusion: dict[str, Any] | None) -> dict[str, Any] | None:
    """The confusion matrix's rows with each cell's shade (its share of the row's rows), or None
    when there is none or it is too large to draw."""
    if not confusion or len(confusion["labels"]) > MATRIX_CLASSES:
        return None
    labels = confusion["labels"]
    rows = []
    for i, (label, counts) in enumerate(zip(labels, confusion["matrix"], strict=True)):
        total = sum(counts) or 1
        cells = [
            {"count": count, "right": i == j, "shade": round(count / total * 0.85, 3)}
            for j, count in enumerate(counts)
        ]
        rows.append({"label": label, "cells": cells})
    return {"labels": labels, "rows": rows}

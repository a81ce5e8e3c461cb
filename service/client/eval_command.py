"""``taas eval CLASSIFIER FILE``: score a classifier on your own test file, as a job on the
workers, follow it with a progress bar, and print what it found: accuracy, macro-F1, calibration,
out-of-scope figures, the weakest classes and the pairs confused most; ``--html`` saves the
report page, ``--json`` prints the evaluation with its whole report."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from service.client.api import Api
from service.client.errors import ClientError
from service.client.follow import POLL_SECONDS
from service.client.terminal import (
    JSON_OPTION,
    err,
    logged_in_api,
    new_table,
    one_line_errors,
    out,
    print_json,
)

CLASSES_SHOWN = 5  # the weakest classes the summary lists
PAIRS_SHOWN = 5
_ENDED = ("completed", "failed")


@one_line_errors
def evaluate(
    classifier: str = typer.Argument(
        ..., metavar="CLASSIFIER", help="A classifier's id, a unique start of its id, or its name."
    ),
    file: Path = typer.Argument(..., help="Test data: NLC CSV, CSV with a text,label header, or JSON Lines."),
    version: int | None = typer.Option(None, help="The version to score.", show_default="the serving one"),
    html: Path | None = typer.Option(None, "--html", help="Also save the report as a page at this path."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Score CLASSIFIER on FILE (its rows' labels are the right answers) and print the report;
    exit 1 if the evaluation fails."""
    with logged_in_api() as api:
        classifier_id = api.find_classifier(classifier)
        queued = api.evaluate(classifier_id, file, version=version)
        final = _follow(api, queued, show=not as_json)
        if final["status"] == "failed":
            raise ClientError(f"evaluation {final['evaluation_id']} failed: {final['error']}")
        if html is not None:
            page = api.evaluation_page(classifier_id, final["evaluation_id"])
            try:
                html.write_text(page, encoding="utf-8")
            except OSError as error:
                raise ClientError(f"cannot write {html}: {error.strerror or error}") from None
    if as_json:
        return print_json(final)
    for section in summary(final):
        out.print(section, highlight=False)
    if html is not None:
        out.print(f"report page saved to {html}", highlight=False)


def _follow(api: Api, queued: Any, *, show: bool) -> Any:
    """Poll the evaluation until it ends, with a bar of its rows answered when ``show``."""
    columns = (TextColumn("{task.description:<10}", markup=False), BarColumn(), MofNCompleteColumn())
    found = queued
    with Progress(*columns, console=err, disable=not show) as bar:
        task = bar.add_task(found["status"], total=found["rows"])
        while found["status"] not in _ENDED:
            time.sleep(POLL_SECONDS)
            found = api.get_evaluation(found["classifier_id"], found["evaluation_id"])
            bar.update(task, description=found["status"], completed=found["done"])
    return found


def summary(evaluation: Any) -> list[Any]:
    """The printed report of a completed evaluation: its headline figures, the weakest classes
    and the pairs confused most."""
    report = evaluation["report"]
    head = f"version {evaluation['version']} on {evaluation['name']}: {report['rows']} rows"
    if report["multi_label"]:
        return [
            f"{head}; micro-F1 {report['micro_f1']:.3f}, macro-F1 {report['macro_f1']:.3f}, "
            f"every label right on {report['subset_accuracy']:.1%} of the texts"
        ]
    sections: list[Any] = [
        f"{head}; accuracy {report['accuracy']:.3f} ({report['n']} in scope), macro-F1 "
        f"{report['macro_f1']:.3f}, calibration error {report['calibration']['ece']:.3f}"
    ]
    scoped = report.get("out_of_scope")
    if scoped:
        line = (
            f"out of scope at rate {scoped['rate']:g}: {scoped['rejected_in_scope']} in-scope rows rejected"
        )
        if scoped["out_of_scope_rows"]:
            line += f", {scoped['caught']} of {scoped['out_of_scope_rows']} out-of-scope rows caught"
        sections.append(line)
    for unknown in report["unknown_classes"][:CLASSES_SHOWN]:
        sections.append(f"! {unknown['class_name']}: {unknown['rows']} rows of a class the version never saw")
    weakest = sorted(report["per_class"], key=lambda c: (c["f1"], c["class_name"]))[:CLASSES_SHOWN]
    table = new_table("weakest classes", "precision", "recall", "F1", "rows")
    for c in weakest:
        table.add_row(
            c["class_name"],
            f"{c['precision']:.3f}",
            f"{c['recall']:.3f}",
            f"{c['f1']:.3f}",
            str(c["support"]),
        )
    sections.append(table)
    if report["confused_pairs"]:
        pairs = new_table("true class", "answered", "rows", "example")
        for p in report["confused_pairs"][:PAIRS_SHOWN]:
            pairs.add_row(p["true_class"], p["predicted_class"], str(p["rows"]), p["examples"][0]["text"])
        sections.append(pairs)
    return sections

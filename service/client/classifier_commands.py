"""``taas classifiers …``: list, show, delete, cancel and resume a training; retrain, list the
versions, promote one (roll back); set the out-of-scope rate. Each takes a classifier by its
id, a unique start of its id, or its name (:meth:`service.client.api.Api.find_classifier`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from service.client.api import Api
from service.client.errors import ClientError
from service.client.follow import metrics_line, progress_line, settle
from service.client.paths import segments
from service.client.terminal import (
    CLASSIFIER_ARGUMENT,
    JSON_LIST_OPTION,
    JSON_OPTION,
    WAIT_OPTION,
    logged_in_api,
    new_table,
    nothing_here,
    one_line_errors,
    out,
    print_json,
)
from service.client.training_files import is_labelled, start_training

classifiers = typer.Typer(
    no_args_is_help=True,
    help="Your classifiers: list, show, delete, cancel training; retrain, promote, roll back; set-rate.",
)


@classifiers.command("list")
@one_line_errors
def list_classifiers(as_json: bool = JSON_LIST_OPTION) -> None:
    """Your classifiers, with their status."""
    with logged_in_api() as api:
        listed = api.list_classifiers()
        found = [c for c in (_still_there(api, c["classifier_id"]) for c in listed) if c is not None]
    if as_json:
        return print_json(found)
    if not found:
        return nothing_here("no classifiers yet: `taas train FILE --name NAME` trains one")
    table = new_table("id", "name", "status", "created")
    for c in found:
        table.add_row(c["classifier_id"], c["name"], c["status"], c["created"])
    out.print(table)


def _still_there(api: Api, classifier_id: str) -> Any:
    """The classifier's resource, or None when it was deleted since the list was read (one
    deleted meanwhile failed the whole listing)."""
    try:
        return api.get_classifier(classifier_id)
    except ClientError as error:
        if error.status == 404:
            return None
        raise


@classifiers.command("show")
@one_line_errors
def show_classifier(classifier: str = CLASSIFIER_ARGUMENT, as_json: bool = JSON_OPTION) -> None:
    """A classifier's status, training progress and (once Available) its evaluation."""
    with logged_in_api() as api:
        found = api.get_classifier(api.find_classifier(classifier))
    if as_json:
        return print_json(found)
    progress, metrics = found.get("progress") or {}, found.get("metrics") or {}
    table = Table.grid(padding=(0, 2))
    rows = [
        ("id", found["classifier_id"]),
        ("name", found["name"]),
        ("status", f"{found['status']}: {found['status_description']}"),
        ("created", found["created"]),
        ("training", progress_line(dict(progress)) if progress else None),
        ("evaluation", metrics_line(dict(metrics)) or None),
        ("model", _model_line(found.get("model"))),
        ("out-of-scope rate", _rate_line(found.get("out_of_scope_rate"), found.get("mode"))),
    ]
    for label, value in rows:
        if value is not None:
            table.add_row(Text(label, style="bold"), value)
    out.print(table)


def _model_line(model: Any) -> str | None:
    """What the serving version's model reads, in a few words (None before one is Available)."""
    if not model:
        return None
    if model.get("encoder"):
        return f"n-grams and the sentence encoder {model['encoder']}"
    return "n-grams"


def _rate_line(rate: Any, mode: Any) -> str | None:
    """The rate out-of-scope answers use: the tenant's, or the model's own (multi-label: none)."""
    if mode == "multi_label":
        return None
    return "the model's own (set at training)" if rate is None else f"{rate:g} (set by you)"


@classifiers.command("delete")
@one_line_errors
def delete_classifier(classifier: str = CLASSIFIER_ARGUMENT, as_json: bool = JSON_OPTION) -> None:
    """Delete a classifier, its model and its training data (training stops)."""
    with logged_in_api() as api:
        classifier_id = api.find_classifier(classifier)
        api.delete_classifier(classifier_id)
    if as_json:
        return print_json({})
    out.print(f"deleted {classifier_id}")


@classifiers.command("cancel")
@one_line_errors
def cancel_classifier(classifier: str = CLASSIFIER_ARGUMENT, as_json: bool = JSON_OPTION) -> None:
    """Stop a training and keep its checkpoint (`taas classifiers resume` continues it)."""
    with logged_in_api() as api:
        reply = api.cancel_training(api.find_classifier(classifier))
    if as_json:
        return print_json(reply)
    out.print(f"{reply['classifier_id']}: {reply['status']}")


@classifiers.command("resume")
@one_line_errors
def resume_classifier(
    classifier: str = CLASSIFIER_ARGUMENT, wait: bool = WAIT_OPTION, as_json: bool = JSON_OPTION
) -> None:
    """Continue a cancelled training from its last checkpoint."""
    with logged_in_api() as api:
        classifier_id = api.find_classifier(classifier)
        resumed = api.resume_training(classifier_id)
        if not as_json:
            out.print(f"{classifier_id}: {resumed['status']}")
        path = segments("classifiers", classifier_id)
        settle(api, path, resumed, f"classifier {classifier_id}", wait=wait, as_json=as_json)


@classifiers.command("versions")
@one_line_errors
def list_versions(classifier: str = CLASSIFIER_ARGUMENT, as_json: bool = JSON_OPTION) -> None:
    """A classifier's versions: status, accuracy, and which one serves."""
    with logged_in_api() as api:
        found = api.list_versions(api.find_classifier(classifier))
    if as_json:
        return print_json(found)
    table = new_table("version", "serving", "status", "accuracy", "created")
    for v in found["versions"]:
        accuracy = (v.get("metrics") or {}).get("accuracy")
        table.add_row(
            str(v["version"]),
            "*" if v["serving"] else "",
            v["status"],
            "" if accuracy is None else f"{accuracy:.3f}",
            v["created"],
        )
    out.print(table)


@classifiers.command("retrain")
@one_line_errors
def retrain(
    classifier: str = CLASSIFIER_ARGUMENT,
    file: Path = typer.Argument(
        ..., help="Training data: CSV with a text,label header, JSON Lines, or NLC CSV."
    ),
    wait: bool = WAIT_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Train the next version of a classifier on FILE; the serving version keeps serving."""
    labelled = is_labelled(file)
    with logged_in_api() as api:
        classifier_id = api.find_classifier(classifier)
        created = start_training(
            api,
            file,
            file.stem,
            labelled=labelled,
            from_csv=lambda data: api.create_version(classifier_id, data),
            from_dataset=lambda dataset_id: api.create_version_from_dataset(classifier_id, dataset_id),
        )
        label = f"version {created['version']} of {classifier_id}"
        if not as_json:
            out.print(f"{label} is training")
        path = segments("classifiers", classifier_id, "versions", created["version"])
        settle(api, path, created, label, wait=wait, as_json=as_json)


@classifiers.command("promote")
@one_line_errors
def promote(
    classifier: str = CLASSIFIER_ARGUMENT,
    version: int = typer.Argument(..., metavar="N", help="The version to serve (an older one rolls back)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Serve version N of a classifier, on every API replica at once."""
    with logged_in_api() as api:
        classifier_id = api.find_classifier(classifier)
        reply = api.promote_version(classifier_id, version)
    if as_json:
        return print_json(reply)
    out.print(f"{classifier_id}: version {version} serves")


@classifiers.command("set-rate")
@one_line_errors
def set_rate(
    classifier: str = CLASSIFIER_ARGUMENT,
    rate: str = typer.Argument(
        ...,
        metavar="RATE",
        help="A share of in-scope texts to reject, strictly between 0 and 1 (0.05: 5 %), or default.",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Set a single-label classifier's out-of-scope rate without retraining (default: put back
    its model's own); every API replica answers with it at once."""
    value = _rate(rate)
    with logged_in_api() as api:
        classifier_id = api.find_classifier(classifier)
        reply = api.set_out_of_scope_rate(classifier_id, value)
    if as_json:
        return print_json(reply)
    shown = "the model's own" if value is None else f"{value:g}"
    out.print(f"{classifier_id}: out-of-scope rate {shown}")


def _rate(text: str) -> float | None:
    """RATE as the API takes it: a number (the server checks its range), or None for default."""
    if text == "default":
        return None
    try:
        return float(text)
    except ValueError:
        raise ClientError(f"RATE {text!r}: give a number between 0 and 1, such as 0.05, or default") from None

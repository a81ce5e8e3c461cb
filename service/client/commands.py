"""The client commands of ``taas``: log in, upload, train (with a live progress bar,
:mod:`service.client.follow`), classify, manage classifiers and their versions and, with the
admin key, tenants (:mod:`service.client.admin`).

Every command prints a readable table or line, or with ``--json`` the server's JSON reply for
scripts (classify and the listings: a JSON list of their results or items); any failure is one
line on stderr (``error: ...``) and exit status 1.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from service.client import config, offline
from service.client.admin import tenants
from service.client.api import Api, ClientError, segments
from service.client.follow import progress_line, settle
from service.client.terminal import (
    JSON_LIST_OPTION,
    JSON_OPTION,
    logged_in_api,
    new_table,
    one_line_errors,
    out,
    print_json,
)

SNIFF_BYTES = 64 * 1024  # what _is_labelled reads of a training file

datasets = typer.Typer(no_args_is_help=True, help="Labelled training data stored on the platform.")
classifiers = typer.Typer(
    no_args_is_help=True,
    help="Your classifiers: list, show, delete, cancel training; retrain, promote, roll back.",
)


def register(cli: typer.Typer) -> None:
    """Mount the client commands on the ``taas`` command."""
    cli.command(name="login")(login)
    cli.command(name="train")(train)
    cli.command(name="classify")(classify)
    cli.add_typer(datasets, name="datasets")
    cli.add_typer(classifiers, name="classifiers")
    cli.add_typer(tenants, name="tenants")


def _key_from_stdin() -> str:
    """The key typed at a hidden prompt, or the first line piped in (``< var/admin.key``)."""
    if sys.stdin is None:  # started with its stdin closed
        key = ""
    elif sys.stdin.isatty():
        key = typer.prompt("API key", hide_input=True).strip()
    else:
        key = sys.stdin.readline().strip()
    if not key:
        raise ClientError("no key given: pass KEY, or pipe it in (taas login URL < var/admin.key)")
    return key


@one_line_errors
def login(
    url: str = typer.Argument(..., help="The platform's URL, e.g. http://127.0.0.1:8000."),
    key: str | None = typer.Argument(
        None,
        help="A tenant's API key, or the admin key. Left out, it is read from a hidden prompt or "
        "from stdin, which keeps it out of the shell history and the process list.",
    ),
) -> None:
    """Check KEY against the platform at URL and remember both for the other commands."""
    key = key if key is not None else _key_from_stdin()
    with Api(url, key) as api:
        admin = api.is_admin()
    path = config.save(config.Login(url=api.url, key=key, admin=admin))
    out.print(f"logged in to {api.url} as {'the administrator' if admin else 'a tenant'} (saved in {path})")


@datasets.command("upload")
@one_line_errors
def upload_dataset(
    file: Path = typer.Argument(..., help="CSV with a text,label header, or JSON Lines."),
    name: str | None = typer.Option(
        None, help="The dataset's name.", show_default="the file's name without its suffix"
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Store a labelled file as a dataset that classifiers can train on."""
    with logged_in_api() as api:
        dataset = api.upload_dataset(file, name or file.stem)
    if as_json:
        return print_json(dataset)
    out.print(f"dataset {dataset['dataset_id']}: {dataset['rows']} rows, {dataset['classes']} classes")


@datasets.command("list")
@one_line_errors
def list_datasets(as_json: bool = JSON_LIST_OPTION) -> None:
    """Your stored datasets (the data of an NLC create is its classifier's, not listed)."""
    with logged_in_api() as api:
        found = api.call("GET", "/v1/datasets")["datasets"]
    if as_json:
        return print_json(found)
    table = new_table("id", "name", "rows", "classes", "created")
    for d in found:
        table.add_row(d["dataset_id"], d["name"], str(d["rows"]), str(d["classes"]), d["created"])
    out.print(table)


@datasets.command("delete")
@one_line_errors
def delete_dataset(dataset_id: str = typer.Argument(..., metavar="ID"), as_json: bool = JSON_OPTION) -> None:
    """Delete a dataset (refused while a classifier may still train on it)."""
    with logged_in_api() as api:
        reply = api.call("DELETE", segments("datasets", dataset_id))
    if as_json:
        return print_json(reply)
    out.print(f"deleted dataset {dataset_id}")


@one_line_errors
def train(
    file: Path = typer.Argument(
        ..., help="Training data: CSV with a text,label header, JSON Lines, or NLC CSV."
    ),
    name: str = typer.Option(..., "--name", "-n", help="The classifier's name."),
    language: str = typer.Option("en", help="The language of the texts."),
    wait: bool = typer.Option(
        False, "--wait", help="Follow the training to its end; exit 1 unless Available."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Create a classifier from FILE and start its training."""
    if not name.strip():
        raise ClientError("--name must not be blank")
    labelled = _is_labelled(file)
    with logged_in_api() as api:
        if labelled:
            body = {"name": name, "language": language}
            created = _train_on_upload(api, file, name, "/v1/classifiers", body)
        else:
            metadata = {"name": name, "language": language}
            created = api.post_nlc_csv("/v1/classifiers", file, metadata)
        if not as_json:
            out.print(f"classifier {created['classifier_id']} ({name}) is training")
        path = segments("classifiers", created["classifier_id"])
        settle(api, path, created, f"classifier {created['classifier_id']}", wait=wait, as_json=as_json)


@one_line_errors
def classify(
    classifier_id: str = typer.Argument(..., metavar="ID|BUNDLE", help="A classifier id, or a bundle file."),
    texts: list[str] = typer.Argument(..., metavar="TEXT...", help="One or more texts."),
    as_json: bool = JSON_LIST_OPTION,
) -> None:
    """Classify each TEXT with the classifier ID, or offline with a model bundle file (a path
    instead of an ID: see GET /v1/classifiers/{id}/bundle)."""
    for number, text in enumerate(texts, start=1):
        if not text.strip():
            raise ClientError(f"TEXT {number} is blank: the API classifies no empty text")
    if offline.is_bundle(classifier_id):
        results = offline.classify(Path(classifier_id), texts)
    else:
        results = _classify_online(classifier_id, texts)
    if as_json:
        return print_json(results)
    out.print(results_table(results))


def results_table(results: list[dict[str, Any]]) -> Table:
    """classify's table: each text's top class and confidence, and for a multi-label model the
    classes it predicts (its results' ``labels``)."""
    multi_label = any("labels" in result for result in results)
    table = new_table("text", "top class", "confidence", *(["labels"] if multi_label else []))
    for result in results:
        labels = [", ".join(result["labels"])] if multi_label else []
        table.add_row(
            result["text"], result["top_class"], f"{result['classes'][0]['confidence']:.3f}", *labels
        )
    return table


def _classify_online(classifier_id: str, texts: list[str]) -> list[dict[str, Any]]:
    # classify_collection even for one text: every result then has its items' shape (classify's
    # reply adds classifier_id and url)
    collection = [{"text": text} for text in texts]
    with logged_in_api() as api:
        path = segments("classifiers", classifier_id, "classify_collection")
        try:
            return list(api.call("POST", path, json={"collection": collection})["collection"])
        except ClientError as error:  # "collection.3.text: ..." is the command line's TEXT 4
            told = re.sub(r"\bcollection\.(\d+)\.text\b", lambda at: f"TEXT {int(at[1]) + 1}", str(error))
            raise ClientError(told, error.status) from None


@classifiers.command("list")
@one_line_errors
def list_classifiers(as_json: bool = JSON_LIST_OPTION) -> None:
    """Your classifiers, with their status."""
    with logged_in_api() as api:
        listed = api.call("GET", "/v1/classifiers")["classifiers"]
        found = [c for c in (_still_there(api, c["classifier_id"]) for c in listed) if c is not None]
    if as_json:
        return print_json(found)
    table = new_table("id", "name", "status", "created")
    for c in found:
        table.add_row(c["classifier_id"], c["name"], c["status"], c["created"])
    out.print(table)


def _still_there(api: Api, classifier_id: str) -> Any:
    """The classifier's resource, or None when it was deleted since the list was read (one
    deleted meanwhile failed the whole listing)."""
    try:
        return api.call("GET", segments("classifiers", classifier_id))
    except ClientError as error:
        if error.status == 404:
            return None
        raise


@classifiers.command("show")
@one_line_errors
def show_classifier(
    classifier_id: str = typer.Argument(..., metavar="ID"), as_json: bool = JSON_OPTION
) -> None:
    """A classifier's status, training progress and (once Available) its metrics."""
    with logged_in_api() as api:
        found = api.call("GET", segments("classifiers", classifier_id))
    if as_json:
        return print_json(found)
    progress, metrics = found.get("progress") or {}, found.get("metrics") or {}
    table = Table.grid(padding=(0, 2))
    rows = [
        ("id", found["classifier_id"]),
        ("name", found["name"]),
        ("status", f"{found['status']}: {found['status_description']}"),
        ("created", found["created"]),
        ("training", progress_line(progress) if progress else None),
        ("accuracy", f"{metrics['accuracy']:.3f}" if "accuracy" in metrics else None),
        ("macro F1", f"{metrics['macro_f1']:.3f}" if "macro_f1" in metrics else None),
    ]
    for label, value in rows:
        if value is not None:
            table.add_row(Text(label, style="bold"), value)
    out.print(table)


@classifiers.command("delete")
@one_line_errors
def delete_classifier(
    classifier_id: str = typer.Argument(..., metavar="ID"), as_json: bool = JSON_OPTION
) -> None:
    """Delete a classifier, its model and its training data (training stops)."""
    with logged_in_api() as api:
        reply = api.call("DELETE", segments("classifiers", classifier_id))
    if as_json:
        return print_json(reply)
    out.print(f"deleted {classifier_id}")


@classifiers.command("cancel")
@one_line_errors
def cancel_classifier(
    classifier_id: str = typer.Argument(..., metavar="ID"), as_json: bool = JSON_OPTION
) -> None:
    """Stop a training and keep its checkpoint (`taas classifiers resume` continues it)."""
    with logged_in_api() as api:
        reply = api.call("POST", segments("classifiers", classifier_id, "cancel"))
    if as_json:
        return print_json(reply)
    out.print(f"{classifier_id}: {reply['status']}")


@classifiers.command("resume")
@one_line_errors
def resume_classifier(
    classifier_id: str = typer.Argument(..., metavar="ID"),
    wait: bool = typer.Option(
        False, "--wait", help="Follow the training to its end; exit 1 unless Available."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Continue a cancelled training from its last checkpoint."""
    path = segments("classifiers", classifier_id)
    with logged_in_api() as api:
        resumed = api.call("POST", f"{path}/resume")
        if not as_json:
            out.print(f"{classifier_id}: {resumed['status']}")
        settle(api, path, resumed, f"classifier {classifier_id}", wait=wait, as_json=as_json)


@classifiers.command("versions")
@one_line_errors
def list_versions(
    classifier_id: str = typer.Argument(..., metavar="ID"), as_json: bool = JSON_OPTION
) -> None:
    """A classifier's versions: status, accuracy, and which one serves."""
    with logged_in_api() as api:
        found = api.call("GET", segments("classifiers", classifier_id, "versions"))
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
    classifier_id: str = typer.Argument(..., metavar="ID"),
    file: Path = typer.Argument(
        ..., help="Training data: CSV with a text,label header, JSON Lines, or NLC CSV."
    ),
    wait: bool = typer.Option(
        False, "--wait", help="Follow the training to its end; exit 1 unless Available."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Train the next version of a classifier on FILE; the serving version keeps serving."""
    versions = segments("classifiers", classifier_id, "versions")
    with logged_in_api() as api:
        if _is_labelled(file):
            created = _train_on_upload(api, file, file.stem, versions, {})
        else:
            created = api.post_nlc_csv(versions, file, None)
        label = f"version {created['version']} of {classifier_id}"
        if not as_json:
            out.print(f"{label} is training")
        settle(api, f"{versions}/{created['version']}", created, label, wait=wait, as_json=as_json)


@classifiers.command("promote")
@one_line_errors
def promote(
    classifier_id: str = typer.Argument(..., metavar="ID"),
    version: int = typer.Argument(..., metavar="N", help="The version to serve (an older one rolls back)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Serve version N of a classifier, on every API replica at once."""
    with logged_in_api() as api:
        reply = api.call("POST", segments("classifiers", classifier_id, "versions", version, "promote"))
    if as_json:
        return print_json(reply)
    out.print(f"{classifier_id}: version {version} serves")


def _train_on_upload(api: Api, file: Path, name: str, path: str, body: dict[str, str]) -> Any:
    """Upload FILE as a dataset and POST ``body`` with its id to ``path`` (a new classifier, or a
    new version); the dataset is deleted again when that fails (or is interrupted), since it
    was uploaded for this training alone."""
    dataset = api.upload_dataset(file, name)
    try:
        return api.call("POST", path, json={**body, "dataset_id": dataset["dataset_id"]})
    except (ClientError, KeyboardInterrupt):
        api.call("DELETE", segments("datasets", dataset["dataset_id"]))
        raise


def _is_labelled(file: Path) -> bool:
    """Whether FILE is a dataset upload (JSON Lines, or CSV whose header names text and label)
    rather than NLC's headerless ``text,class`` CSV: told by its first line that is not blank
    (JSON: a JSON object, or an array, which the server names), whatever the file's name; only
    the first ``SNIFF_BYTES`` are read. (Told by the first CSV record, a ``.json`` file of
    JSON Lines went as NLC CSV and trained classes such as ``"label": "music"}``; told by a
    first ``{`` or ``[``, NLC data such as ``[URGENT] disk full,alerts`` went as JSON.)"""
    if file.suffix.lower() in {".jsonl", ".ndjson"}:
        return True
    try:
        with open(file, "rb") as source:
            head = source.read(SNIFF_BYTES).decode("utf-8-sig", errors="replace")
    except OSError as error:
        raise ClientError(f"cannot read {file}: {error}") from None
    first = next((line.strip() for line in head.splitlines() if line.strip()), "")
    if first.startswith(("{", "[")):
        try:
            if isinstance(json.loads(first), dict | list):
                return True
        except (ValueError, RecursionError):
            pass
    try:
        header = next(csv.reader([first]), [])
    except csv.Error:  # an unclosed quote: no header; the server names the row
        return False
    return {"text", "label"} <= {cell.strip().lower() for cell in header}

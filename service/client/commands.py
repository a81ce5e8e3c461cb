"""The client commands of ``taas``: log in, upload, train (with a live progress bar,
:mod:`service.client.follow`), classify, try texts one by one (:mod:`service.client.shell`),
score a classifier on a test file (:mod:`service.client.eval_command`),
manage classifiers and their versions (:mod:`service.client.classifier_commands`) and, with the
admin key, tenants (:mod:`service.client.admin`). A classifier or dataset is named by its id, a
unique start of its id, or its name.

Every command prints a readable table or line, or with ``--json`` the server's JSON reply for
scripts (classify and the listings: a JSON list of their results or items); any failure is one
line on stderr (``error: ...``) and exit status 1.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from service.client import config, offline
from service.client.admin import tenants
from service.client.api import Api
from service.client.classifier_commands import classifiers
from service.client.dataset_report import dataset_sections
from service.client.errors import ClientError
from service.client.eval_command import evaluate
from service.client.follow import settle
from service.client.paths import segments
from service.client.shell import in_scope_cell, shell
from service.client.terminal import (
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

datasets = typer.Typer(no_args_is_help=True, help="Labelled training data stored on the platform.")


def register(cli: typer.Typer) -> None:
    """Mount the client commands on the ``taas`` command."""
    cli.command(name="login")(login)
    cli.command(name="train")(train)
    cli.command(name="classify")(classify)
    cli.command(name="eval")(evaluate)
    cli.command(name="shell")(shell)
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
    for warning in dataset.get("warnings", []):
        out.print(f"! {warning}", highlight=False)


@datasets.command("show")
@one_line_errors
def show_dataset(
    dataset: str = typer.Argument(
        ..., metavar="DATASET", help="A dataset's id, a unique start of its id, or its name."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """A dataset and its report: class counts, duplicates, texts under several classes, the
    classes a quick model confuses, and the warnings these call for."""
    with logged_in_api() as api:
        dataset_id = api.find_dataset(dataset)
        found, report = api.get_dataset(dataset_id), api.dataset_report(dataset_id)
    if as_json:
        return print_json({**found, "report": report})
    for section in dataset_sections(found, report):
        out.print(section, highlight=False)


@datasets.command("list")
@one_line_errors
def list_datasets(as_json: bool = JSON_LIST_OPTION) -> None:
    """Your stored datasets (the data of an NLC create is its classifier's, not listed)."""
    with logged_in_api() as api:
        found = api.list_datasets()
    if as_json:
        return print_json(found)
    if not found:
        return nothing_here("no datasets yet: `taas datasets upload FILE` stores one")
    table = new_table("id", "name", "rows", "classes", "created")
    for d in found:
        table.add_row(d["dataset_id"], d["name"], f"{d['rows']:,}", f"{d['classes']:,}", d["created"])
    out.print(table)


@datasets.command("delete")
@one_line_errors
def delete_dataset(
    dataset: str = typer.Argument(
        ..., metavar="DATASET", help="A dataset's id, a unique start of its id, or its name."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Delete a dataset (refused while a classifier may still train on it)."""
    with logged_in_api() as api:
        dataset_id = api.find_dataset(dataset)
        api.delete_dataset(dataset_id)
    if as_json:
        return print_json({})
    out.print(f"deleted dataset {dataset_id}")


@one_line_errors
def train(
    file: Path = typer.Argument(
        ..., help="Training data: CSV with a text,label header, JSON Lines, or NLC CSV."
    ),
    name: str = typer.Option(..., "--name", "-n", help="The classifier's name."),
    language: str = typer.Option("en", help="The language of the texts."),
    wait: bool = WAIT_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Create a classifier from FILE and start its training."""
    if not name.strip():
        raise ClientError("--name must not be blank")
    labelled = is_labelled(file)
    with logged_in_api() as api:
        created = start_training(
            api,
            file,
            name,
            labelled=labelled,
            from_csv=lambda data: api.create_classifier(data, name, language),
            from_dataset=lambda dataset_id: api.create_classifier_from_dataset(dataset_id, name, language),
        )
        if not as_json:
            out.print(f"classifier {created['classifier_id']} ({name}) is training")
        path = segments("classifiers", created["classifier_id"])
        settle(api, path, created, f"classifier {created['classifier_id']}", wait=wait, as_json=as_json)


@one_line_errors
def classify(
    classifier: str = typer.Argument(
        ...,
        metavar="CLASSIFIER|BUNDLE",
        help="A classifier's id, a unique start of its id, or its name; or a bundle file.",
    ),
    texts: list[str] = typer.Argument(..., metavar="TEXT...", help="One or more texts."),
    as_json: bool = JSON_LIST_OPTION,
) -> None:
    """Classify each TEXT with the classifier, or offline with a model bundle file (a path
    instead of a classifier: see GET /v1/classifiers/{id}/bundle)."""
    for number, text in enumerate(texts, start=1):
        if not text.strip():
            raise ClientError(f"TEXT {number} is blank: the API classifies no empty text")
    if offline.is_bundle(classifier):
        results = offline.classify(Path(classifier), texts)
    else:
        results = _classify_online(classifier, texts)
    if as_json:
        return print_json(results)
    out.print(results_table(results))


def results_table(results: list[dict[str, Any]]) -> Table:
    """classify's table: each text's top class and confidence, and for a multi-label model the
    classes it predicts (its results' ``labels``), for one with out-of-scope detection whether
    the text is in scope and its score."""
    multi_label = any("labels" in result for result in results)
    scoped = any("in_scope_score" in result for result in results)
    columns = ["labels"] if multi_label else ["in scope"] if scoped else []
    table = new_table("text", "top class", "confidence", *columns)
    for result in results:
        extra = [", ".join(result["labels"])] if multi_label else [in_scope_cell(result)] if scoped else []
        table.add_row(
            result["text"], result["top_class"], f"{result['classes'][0]['confidence']:.3f}", *extra
        )
    return table


def _classify_online(classifier: str, texts: list[str]) -> list[dict[str, Any]]:
    # classify_collection even for one text: every result then has its items' shape (classify's
    # reply adds classifier_id and url)
    with logged_in_api() as api:
        classifier_id = api.find_classifier(classifier)
        try:
            return [dict(result) for result in api.classify_collection(classifier_id, texts)]
        except ClientError as error:  # "collection.3.text: ..." is the command line's TEXT 4
            told = re.sub(r"\bcollection\.(\d+)\.text\b", lambda at: f"TEXT {int(at[1]) + 1}", str(error))
            raise ClientError(told, error.status) from None

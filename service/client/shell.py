"""``taas shell CLASSIFIER``: try a classifier on texts typed one a line (or piped in), each
answered with its most confident classes, until the end of the input (Ctrl-D)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import typer
from rich.table import Table

from service.client.api import Api
from service.client.errors import ClientError
from service.client.models import ClassifiedText, Classifier, Version
from service.client.terminal import CLASSIFIER_ARGUMENT, err, logged_in_api, one_line_errors, out

PROMPT = "> "
# a text the API refuses (too long, invisible) is said and the shell goes on; anything else ends it
_REFUSED_TEXT = frozenset({400, 413})


@one_line_errors
def shell(
    classifier: str = CLASSIFIER_ARGUMENT,
    top: int = typer.Option(3, "--top", min=1, max=10, help="How many classes to show for each text."),
    version: int | None = typer.Option(
        None, "--version", min=1, help="Classify with this version instead of the serving one."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print each text's classify reply as one JSON line (JSON Lines), for scripts."
    ),
) -> None:
    """Classify texts one by one, as you type them (one a line; Ctrl-D ends) or as they are piped
    in: each text's top classes and their confidences."""
    interactive = sys.stdin is not None and sys.stdin.isatty()
    with logged_in_api() as api:
        classifier_id = _ready(api, classifier, version, quiet=as_json)
        for text in _texts(interactive):
            try:
                answer = api.classify(classifier_id, text, version=version)
            except ClientError as error:
                if error.status not in _REFUSED_TEXT:
                    raise
                err.print(f"error: {error}", highlight=False)
                continue
            if as_json:
                typer.echo(json.dumps(answer, ensure_ascii=False))
            else:
                out.print(answer_table(answer, top, echo=not interactive))


def _ready(api: Api, classifier: str, version: int | None, *, quiet: bool) -> str:
    """The classifier's id, once it is known to answer (its serving version Available, or the
    version asked for): a shell that refused every text with the same 409 would say nothing."""
    classifier_id = api.find_classifier(classifier)
    found = api.get_classifier(classifier_id)
    label = f"{found['name']} ({classifier_id})"
    state: Classifier | Version = found
    if version is not None:
        label, state = f"{label} version {version}", api.get_version(classifier_id, version)
    if state["status"] != "Available":
        raise ClientError(f"{label} is {state['status']}: {state['status_description']}")
    if not quiet:
        err.print(f"{label}: one text a line; Ctrl-D ends", highlight=False)
    return classifier_id


def _texts(interactive: bool) -> Iterator[str]:
    """The texts to classify: each line typed at the prompt (with line editing) or read from the
    input, blank ones skipped; the end of the input ends them, as does Ctrl-C at the prompt."""
    if interactive:
        import readline  # noqa: F401  (line editing and history for input())

        while True:
            try:
                line = input(PROMPT)
            except (EOFError, KeyboardInterrupt):
                err.print()
                return
            if line.strip():
                yield line
        return
    if sys.stdin is None:
        return
    for line in sys.stdin:
        text = line.rstrip("\r\n")
        if text.strip():
            yield text


def answer_table(answer: ClassifiedText, top: int, *, echo: bool) -> Table:
    """One text's answer: its ``top`` classes with their confidences (and a multi-label model's
    predicted ``labels``), under the text itself when ``echo`` (it was piped in, not typed)."""
    table = Table.grid(padding=(0, 2))
    if echo:
        table.add_row(answer["text"], "")
    for scored in answer["classes"][:top]:
        table.add_row(f"  {scored['class_name']}", f"{scored['confidence']:.3f}")
    if "labels" in answer:
        table.add_row("  labels", ", ".join(answer["labels"]))
    if "in_scope_score" in answer:
        table.add_row("  in scope", in_scope_cell(answer))
    return table


def in_scope_cell(result: Mapping[str, Any]) -> str:
    """Whether a classify result is in scope, with its score: ``yes 0.731``, or ``NO 0.004``
    for a text the classifier judged to be of none of its classes."""
    if "in_scope_score" not in result:
        return ""
    return f"{'NO' if result.get('out_of_scope') else 'yes'} {result['in_scope_score']:.3f}"

"""Training files as ``taas train`` and ``taas classifiers retrain`` take them: told apart by
their first line (a labelled CSV or JSON Lines, or NLC's headerless CSV), and a labelled one
stored as a dataset for the training it starts."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from service.client.api import Api
from service.client.errors import ClientError

SNIFF_BYTES = 64 * 1024  # what is_labelled reads of a training file
T = TypeVar("T")


def start_training(
    api: Api,
    file: Path,
    name: str,
    *,
    labelled: bool,
    from_csv: Callable[[Path], T],
    from_dataset: Callable[[str], T],
) -> T:
    """Start a training on FILE: NLC's CSV is sent as it is (``from_csv``); a ``labelled`` file
    is uploaded as a dataset named ``name`` and trained on (``from_dataset``, given its id), and
    deleted again when that is refused or interrupted, since it was uploaded for it alone."""
    if not labelled:
        return from_csv(file)
    dataset = api.upload_dataset(file, name)
    try:
        return from_dataset(dataset["dataset_id"])
    except (ClientError, KeyboardInterrupt):
        api.delete_dataset(dataset["dataset_id"])
        raise


def is_labelled(file: Path) -> bool:
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

"""Training files as ``taas train`` and ``taas classifiers retrain`` take them: told apart by
their first line (a labelled CSV or JSON Lines, or NLC's headerless CSV), and a labelled one
stored as a dataset for the training it starts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from service.client.api import Api
from service.client.errors import ClientError
from service.client.file_forms import SNIFF_BYTES, is_labelled_head

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
    """Whether FILE is a dataset upload rather than NLC's headerless CSV: a ``.jsonl`` or
    ``.ndjson`` name, else its first line (:func:`service.client.file_forms.is_labelled_head`),
    whatever the file's name; only the first ``SNIFF_BYTES`` are read."""
    if file.suffix.lower() in {".jsonl", ".ndjson"}:
        return True
    try:
        with open(file, "rb") as source:
            return is_labelled_head(source.read(SNIFF_BYTES))
    except OSError as error:
        raise ClientError(f"cannot read {file}: {error}") from None

"""Read a tenant's test file for an evaluation: the training data's forms and rules, told apart.

A test file comes in any form training data does (service.catalogue.training_data): NLC's CSV
without a header (``text,class[,class...]``), CSV with a ``text,label`` header, or JSON Lines;
the first line that is not blank tells which. It passes the same rules (text and class length,
printable, UTF-8, at most ``max_training_rows`` rows) except the least number of classes: one
class is a fair test. A broken rule is a 400 that names the ``test_data`` field and the row.
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path

from service.catalogue.training_data import InputFormat, Limits, check_negatives_allowed, convert
from service.core.errors import BadRequest, InvalidTrainingData
from trainer.data import LabelledData, read_labelled_csv

TEST_DATA = "test_data"
_SNIFF_BYTES = 64 * 1024  # the first line is looked for in this much of the file


def read_test_file(source: Path, scratch: Path, limits: Limits, *, multi_label: bool) -> LabelledData:
    """The rows of the test file ``source`` (one per text and class), checked; ``scratch`` is a
    file the canonical CSV is written to on the way, removed before this returns. BadRequest
    names the row and the rule a file breaks."""
    try:
        summary = convert(source, scratch, _format_of(source), replace(limits, min_classes=1))
        check_negatives_allowed(summary, multi_label)
        return read_labelled_csv(scratch)
    except InvalidTrainingData as exc:
        raise BadRequest(TEST_DATA, str(exc)) from None
    finally:
        scratch.unlink(missing_ok=True)


def _format_of(source: Path) -> InputFormat:
    """``labelled`` when the first line that is not blank is a JSON object or a header naming
    ``text`` and ``label``; ``nlc`` otherwise."""
    with open(source, "rb") as file:
        head = file.read(_SNIFF_BYTES).decode("utf-8-sig", errors="replace")
    first = next((line for line in head.splitlines() if line.strip()), "")
    if first.lstrip().startswith(("{", "[")):
        return "labelled"  # JSON Lines (an array is refused there, with the reason)
    fields = next(csv.reader([first]), [])
    names = {field.strip().lower() for field in fields}
    return "labelled" if {"text", "label"} <= names else "nlc"

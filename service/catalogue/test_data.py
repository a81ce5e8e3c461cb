"""Read a tenant's test file for an evaluation: the training data's forms and rules, told apart.

A test file comes in any form training data does (service.catalogue.training_data): NLC's CSV
without a header (``text,class[,class...]``), CSV with a ``text,label`` header, or JSON Lines;
the first line that is not blank tells which. It passes the same rules (text and class length,
printable, UTF-8, at most ``max_training_rows`` rows) except the least number of classes: one
class is a fair test. A broken rule is a 400 that names the ``test_data`` field and the row.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from service.catalogue.training_data import InputFormat, Limits, check_negatives_allowed, convert
from service.client.file_forms import SNIFF_BYTES, is_labelled_head
from service.core.errors import BadRequest, InvalidTrainingData
from trainer.data import LabelledData, read_labelled_csv

TEST_DATA = "test_data"


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
    """``labelled`` or ``nlc``, told by the file's first line as the ``taas`` commands tell a
    training file's (:func:`service.client.file_forms.is_labelled_head`)."""
    with open(source, "rb") as file:
        return "labelled" if is_labelled_head(file.read(SNIFF_BYTES)) else "nlc"

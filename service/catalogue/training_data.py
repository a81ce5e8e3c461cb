"""Read uploaded training data, enforce Watson NLC's rules, write the canonical CSV.

Two input forms are accepted:

* ``nlc``: the NLC v1 CSV — no header, each row ``text,class[,class...]``;
* ``labelled``: CSV with a header naming ``text`` and ``label`` columns, or JSON Lines with
  ``{"text": ..., "label": ...}`` objects (``label`` may also be a list of classes).

Both become the canonical form the trainer reads (``trainer.read_labelled_csv``): UTF-8 CSV
with header ``text,label``, one row per (text, class) pair. A violated rule raises
:class:`~service.core.errors.InvalidTrainingData` naming the 1-based row of the input (counting
the header line, if any) and the rule. Input is streamed row by row; it is never held whole,
and a row too wide to be a text and its classes is refused before it is parsed
(:attr:`Limits.max_commas`).
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from service.core.errors import InvalidTrainingData
from service.core.settings import Settings
from service.core.text import has_surrogates, unprintable, visible
from trainer.data import OUT_OF_SCOPE_CLASS

InputFormat = Literal["nlc", "labelled"]
_ENCODING = "utf-8-sig"  # accepts, and drops, a leading BOM
_FORMAT_COMMAS = 32  # a row's commas besides its text's and its classes': columns, JSON keys


@dataclass(frozen=True)
class Limits:
    """The training-data rules in force (from Settings)."""

    max_rows: int
    max_text_chars: int
    max_class_chars: int
    min_classes: int
    max_classes: int

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        """The limits an installation configured."""
        return cls(
            max_rows=settings.max_training_rows,
            max_text_chars=settings.max_text_chars,
            max_class_chars=settings.max_class_chars,
            min_classes=settings.min_classes,
            max_classes=settings.max_classes,
        )

    @property
    def max_commas(self) -> int:
        """Most commas one input row may hold: its text's own, one per class, and a few for the
        format's columns or keys. csv and json build a row whole before any rule sees it, and one
        32 MB line of 11 M fields took 1.5 GB and 23 s to build; refused, it costs neither."""
        return self.max_text_chars + self.max_classes + _FORMAT_COMMAS


@dataclass(frozen=True)
class Summary:
    """What was written: input rows, canonical rows, distinct classes, size and digest, and
    whether it holds examples of out-of-scope text (``negatives``: OUT_OF_SCOPE_CLASS rows)."""

    input_rows: int
    rows: int
    classes: int
    size_bytes: int
    sha256: str
    negatives: bool = False


def convert(source: Path, dest: Path, fmt: InputFormat, limits: Limits) -> Summary:
    """Validate ``source`` and write its canonical CSV to ``dest``.

    Raises InvalidTrainingData on the first violated rule; ``dest`` may then hold a partial
    file, which the caller removes.
    """
    _refuse_wide_encoding(source)
    with open(source, encoding=_ENCODING, errors="surrogateescape", newline="") as text_in:
        read = _nlc_records if fmt == "nlc" else _labelled_records
        records = read(text_in, limits.max_commas)
        classes: set[str] = set()
        composed: dict[str, tuple[str, int]] = {}  # each class's NFC form: the class, its first row
        input_rows = written = 0
        with open(dest, "w", encoding="utf-8", newline="") as out:
            writer = csv.writer(out, lineterminator="\n")
            # the minimal quoting leaves a lone "\r" bare, which a reader takes for a line end
            quoted = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_ALL)
            writer.writerow(["text", "label"])
            for row, text, labels in records:
                input_rows += 1
                text = _check_text(row, text, limits)
                checked = list(dict.fromkeys(_check_label(row, label, limits) for label in labels))
                if OUT_OF_SCOPE_CLASS in checked and len(checked) > 1:
                    raise InvalidTrainingData(
                        row, f"a text under {OUT_OF_SCOPE_CLASS} (out of scope) cannot have another class"
                    )
                for label in checked:
                    if label not in classes and len(classes) >= limits.max_classes:
                        raise InvalidTrainingData(
                            row, f"more than {limits.max_classes} distinct classes (max_classes)"
                        )
                    if written == limits.max_rows:  # pairs: 10 rows of 3,000 classes were 30,000
                        raise InvalidTrainingData(
                            row,
                            f"more than {limits.max_rows} training rows (max_training_rows;"
                            " a text with several classes counts once per class)",
                        )
                    if label not in classes:
                        _check_composed(row, label, composed)
                    classes.add(label)
                    (quoted if "\r" in text or "\r" in label else writer).writerow([text, label])
                    written += 1
    if input_rows == 0:
        raise InvalidTrainingData(0, "training data has no rows")
    if len(classes - {OUT_OF_SCOPE_CLASS}) < limits.min_classes:
        besides = f" besides {OUT_OF_SCOPE_CLASS}" if OUT_OF_SCOPE_CLASS in classes else ""
        raise InvalidTrainingData(
            0,
            f"training data has {len(classes - {OUT_OF_SCOPE_CLASS})} distinct class(es){besides}; "
            f"at least {limits.min_classes} are required (min_classes)",
        )
    size, digest = dest.stat().st_size, _sha256(dest)
    return Summary(input_rows, written, len(classes), size, digest, OUT_OF_SCOPE_CLASS in classes)


def check_negatives_allowed(summary: Summary, multi_label: bool) -> None:
    """InvalidTrainingData unless data with out-of-scope examples trains a single-label model."""
    if summary.negatives and multi_label:
        raise InvalidTrainingData(
            0, f"{OUT_OF_SCOPE_CLASS} (examples of out-of-scope text) is for single-label classifiers only"
        )


def _refuse_wide_encoding(source: Path) -> None:
    """UTF-16 or UTF-32 without a byte-order mark decodes as UTF-8 whose every other character
    is NUL: the header was refused as not naming "text" and "label", and NLC data trained
    classes of NUL-separated letters. A NUL in a text is allowed, so only data whose first
    bytes are a quarter NUL or more (no text is) is refused."""
    with open(source, "rb") as raw:
        head = raw.read(4096)
    if len(head) >= 4 and head.count(0) * 4 >= len(head):
        raise InvalidTrainingData(
            0, "the data looks like UTF-16 or UTF-32 (a NUL byte between characters): send it as UTF-8"
        )


def _nlc_records(lines: Iterable[str], max_commas: int) -> Iterator[tuple[int, str, list[str]]]:
    for record, (row, fields) in enumerate(_csv_rows(lines, max_commas)):
        if len(fields) < 2:
            raise InvalidTrainingData(row, "a row needs a text and at least one class")
        # the first record, not row 1: after a blank line, a header trained a class "label"
        if record == 0 and [field.strip().lower() for field in fields[:2]] == ["text", "label"]:
            raise InvalidTrainingData(
                row,
                "looks like a header (text,label), and NLC training data has none: leave it out, "
                "or upload the file as a dataset (POST /v1/datasets), which reads it",
            )
        yield row, fields[0], fields[1:]


def _labelled_records(stream: Iterable[str], max_commas: int) -> Iterator[tuple[int, str, list[str]]]:
    # the format is told by the first line that is not blank (blank ones still count as rows)
    lines = iter(stream)
    leading: list[str] = []
    for line in lines:
        leading.append(line)
        if line.strip():
            break
    rest = itertools.chain(leading, lines)
    first = leading[-1].lstrip() if leading else ""
    if not first:
        raise InvalidTrainingData(0, "training data has no rows")
    if first.startswith("["):  # read as CSV, a JSON array was "malformed CSV (',' expected after '"')"
        raise InvalidTrainingData(
            len(leading),
            'a JSON array is not read: send JSON Lines (one {"text": ..., "label": ...} object a line) '
            "or CSV with a text,label header",
        )
    if first.startswith("{"):
        yield from _jsonl_records(rest, max_commas)
    else:
        yield from _header_csv_records(rest, max_commas)


def _header_csv_records(lines: Iterable[str], max_commas: int) -> Iterator[tuple[int, str, list[str]]]:
    rows = _csv_rows(lines, max_commas)
    header_row, header = next(rows, (1, []))
    names = [_valid_utf8(header_row, h).strip().lower() for h in header]
    if "text" not in names or "label" not in names:
        raise InvalidTrainingData(header_row, 'the header must name the columns "text" and "label"')
    text_at, label_at = names.index("text"), names.index("label")
    for row, fields in rows:
        if len(fields) <= max(text_at, label_at):
            raise InvalidTrainingData(row, f"expected {len(names)} columns, found {len(fields)}")
        yield row, fields[text_at], [fields[label_at]]


def _jsonl_records(lines: Iterable[str], max_commas: int) -> Iterator[tuple[int, str, list[str]]]:
    for row, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        if line.count(",") > max_commas:
            raise _too_wide(row, max_commas)
        try:
            record = json.loads(_valid_utf8(row, line))
        except json.JSONDecodeError as exc:
            raise InvalidTrainingData(row, f"not a JSON object ({exc.msg})") from None
        except ValueError:  # JSON, but an integer past Python's 4,300 digits
            raise InvalidTrainingData(row, "holds a number of over 4,300 digits") from None
        except RecursionError:
            raise InvalidTrainingData(row, "JSON nested too deeply") from None
        if not isinstance(record, dict):
            raise InvalidTrainingData(row, "not a JSON object")
        text, label = record.get("text"), record.get("label")
        labels = label if isinstance(label, list) else [label]
        if not isinstance(text, str) or not labels or not all(isinstance(x, str) for x in labels):
            raise InvalidTrainingData(row, 'needs a string "text" and a string (or list) "label"')
        yield row, _valid_utf8(row, text), [_valid_utf8(row, str(x)) for x in labels]


def _csv_rows(lines: Iterable[str], max_commas: int) -> Iterator[tuple[int, list[str]]]:
    counted = _CommaCount(lines, max_commas)
    reader = csv.reader(counted, strict=True)
    row = 0
    while True:
        row += 1
        counted.commas = 0
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            if "field larger than field limit" in str(exc):
                raise InvalidTrainingData(
                    row,
                    f"a field has over {csv.field_size_limit():,} characters, far past a text's limit"
                    " (max_text_chars)",
                ) from None
            raise InvalidTrainingData(row, f"malformed CSV ({exc})") from None
        except _TooWide:
            raise _too_wide(row, max_commas) from None
        if fields:  # blank lines are skipped but still counted
            yield row, [_valid_utf8(row, f) for f in fields]


class _TooWide(Exception):
    """The row being read has more commas than a row may."""


class _CommaCount:
    """The lines csv.reader reads, counting the commas of the row it is reading (its lines:
    a quoted field may span several) and raising _TooWide past ``limit``, before the row is
    built. Every field but the first follows a comma, so they bound its fields."""

    def __init__(self, lines: Iterable[str], limit: int) -> None:
        self._lines = iter(lines)
        self._limit = limit
        self.commas = 0

    def __iter__(self) -> _CommaCount:
        return self

    def __next__(self) -> str:
        line = next(self._lines)
        self.commas += line.count(",")
        if self.commas > self._limit:
            raise _TooWide
        return line


def _too_wide(row: int, max_commas: int) -> InvalidTrainingData:
    return InvalidTrainingData(
        row,
        f"more than {max_commas} commas in one row; a row holds one text (max_text_chars)"
        " and its classes (max_classes)",
    )


def _valid_utf8(row: int, value: str) -> str:
    # Undecodable bytes were mapped to lone surrogates (errors="surrogateescape"); a JSON Lines
    # "\ud800" escape makes one too. Neither can be written as UTF-8.
    if has_surrogates(value):
        raise InvalidTrainingData(row, "not valid UTF-8")
    return value


def _check_text(row: int, text: str, limits: Limits) -> str:
    text = text.strip()
    if not text:
        raise InvalidTrainingData(row, "text is empty")
    if not visible(text):
        raise InvalidTrainingData(row, "text has no visible character (only zero-width or format characters)")
    if len(text) > limits.max_text_chars:
        raise InvalidTrainingData(
            row, f"text has {len(text)} characters; the limit is {limits.max_text_chars} (max_text_chars)"
        )
    return text


def class_names_problem(labels: Sequence[str], limits: Limits) -> str | None:
    """What in a model's class names (an imported bundle's) breaks the rules its training
    data would have had to meet, or None."""
    if not limits.min_classes <= len(labels) <= limits.max_classes:
        return (
            f"the model has {len(labels)} classes; {limits.min_classes} to {limits.max_classes} are allowed"
            " (min_classes, max_classes)"
        )
    for number, label in enumerate(labels, 1):
        try:
            if _check_label(0, label, limits) != label:
                return f"class {number} starts or ends with white space"
        except InvalidTrainingData as exc:
            return f"class {number}: {exc.rule}"
    return None


def _check_label(row: int, label: str, limits: Limits) -> str:
    label = label.strip()
    if not label:
        raise InvalidTrainingData(row, "class is empty")
    if not visible(label):
        raise InvalidTrainingData(
            row, "class has no visible character (only zero-width or format characters)"
        )
    if (problem := unprintable(label)) is not None:  # NLC: no tabs or line ends in a class
        raise InvalidTrainingData(row, f"class {problem}")
    if len(label) > limits.max_class_chars:
        raise InvalidTrainingData(
            row, f"class has {len(label)} characters; the limit is {limits.max_class_chars} (max_class_chars)"
        )
    return label


def _check_composed(row: int, label: str, composed: dict[str, tuple[str, int]]) -> None:
    """Two classes that read the same but are coded differently (é as one code point, or as e
    and a combining accent: NFC against NFD, as files from different systems have them) would
    split one class's examples in two; refused, naming both."""
    form = label if label.isascii() else unicodedata.normalize("NFC", label)
    other, other_row = composed.setdefault(form, (label, row))
    if other != label:
        raise InvalidTrainingData(
            row,
            f"class {ascii(label)} reads as class {ascii(other)} of row {other_row} but is coded"
            " differently (Unicode NFC and NFD, say): write both alike",
        )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()

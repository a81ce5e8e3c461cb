"""Labelled training text: reading the CSV format, validating it, and splitting it.

The CSV has one row per (text, label) pair. Single-label training reads each row as one
example (LabelledData); multi-label training reads every row with the same text as ONE
example whose label set is the union of those rows' labels (LabelledData.grouped), which is
how a Watson NLC row naming several classes (``text,class1,class2``) is stored.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainer.errors import InvalidTrainingData

HEADER = ("text", "label")
# The reserved class of a tenant's examples of text that belongs to none of its classes: a
# single-label model learns them as negatives and never answers with it (trainer.in_scope).
OUT_OF_SCOPE_CLASS = "__out_of_scope__"
MAX_TEXT_CHARS = 4096


@dataclass(frozen=True)
class LabelledData:
    """Parallel lists of texts and their labels (one label per text)."""

    texts: list[str]
    labels: list[str]

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.labels):
            raise ValueError(f"{len(self.texts)} texts but {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def classes(self) -> list[str]:
        """The distinct labels, sorted (the model's class order)."""
        return sorted(set(self.labels))

    @property
    def strata(self) -> list[str]:
        """What stratifies each example (folds, the data fingerprint): its label."""
        return self.labels

    def subset(self, indices: np.ndarray) -> LabelledData:
        """The examples at ``indices``."""
        return LabelledData([self.texts[i] for i in indices], [self.labels[i] for i in indices])

    def grouped(self) -> MultiLabelData:
        """The multi-label reading of these rows: one example per distinct text, in first-seen
        order, whose label set is the union of the labels of that text's rows."""
        by_text: dict[str, set[str]] = {}
        for text, label in zip(self.texts, self.labels, strict=True):
            by_text.setdefault(text, set()).add(label)
        return MultiLabelData(list(by_text), [tuple(sorted(labels)) for labels in by_text.values()])


@dataclass(frozen=True)
class MultiLabelData:
    """Parallel lists of distinct texts and their label sets (each a sorted, non-empty tuple)."""

    texts: list[str]
    label_sets: list[tuple[str, ...]]

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.label_sets):
            raise ValueError(f"{len(self.texts)} texts but {len(self.label_sets)} label sets")

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def classes(self) -> list[str]:
        """The distinct labels of all sets, sorted (the model's class order)."""
        return sorted({label for labels in self.label_sets for label in labels})

    @property
    def strata(self) -> list[str]:
        """What stratifies each example (folds, the data fingerprint): its whole label set, so
        that every distinct combination, rare ones too, is dealt round the folds."""
        return ["\x00".join(label_set) for label_set in self.label_sets]

    def subset(self, indices: np.ndarray) -> MultiLabelData:
        """The examples at ``indices``."""
        return MultiLabelData([self.texts[i] for i in indices], [self.label_sets[i] for i in indices])


def read_labelled_csv(path: Path) -> LabelledData:
    """Read a CSV file with the header ``text,label`` (UTF-8, a BOM is allowed).

    Raises InvalidTrainingData(row, rule) naming the first offending record: not UTF-8,
    malformed CSV, a missing or different header, a record without exactly two fields,
    an empty text or label, a text longer than MAX_TEXT_CHARS characters.
    """
    raw = Path(path).read_bytes()
    try:
        content = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidTrainingData(raw[: exc.start].count(b"\n") + 1, "the file is not UTF-8") from exc
    return parse_labelled_csv(content)


def parse_labelled_csv(content: str) -> LabelledData:
    """Parse CSV text with the header ``text,label``; the rules of read_labelled_csv apply."""
    reader = csv.reader(io.StringIO(content, newline=""))
    texts: list[str] = []
    labels: list[str] = []
    try:
        header = next(reader, None)
        if header is None or tuple(h.strip().lower() for h in header) != HEADER:
            raise InvalidTrainingData(1, "the first row must be the header 'text,label'")
        for record in reader:
            row = reader.line_num
            if not record or all(not field.strip() for field in record):
                continue
            if len(record) != 2:
                raise InvalidTrainingData(row, f"expected 2 fields (text,label), found {len(record)}")
            text, label = record[0].strip(), record[1].strip()
            if not text:
                raise InvalidTrainingData(row, "the text is empty")
            if not label:
                raise InvalidTrainingData(row, "the label is empty")
            if len(text) > MAX_TEXT_CHARS:
                raise InvalidTrainingData(row, f"the text is longer than {MAX_TEXT_CHARS} characters")
            texts.append(text)
            labels.append(label)
    except csv.Error as exc:
        raise InvalidTrainingData(reader.line_num, f"malformed CSV: {exc}") from exc
    return LabelledData(texts, labels)


def check_trainable(data: LabelledData | MultiLabelData) -> None:
    """Raise InvalidTrainingData(0, ...) unless the data has examples of at least two classes."""
    if len(data) == 0:
        raise InvalidTrainingData(0, "the training data has no examples")
    if len(data.classes) < 2:
        raise InvalidTrainingData(0, "the training data needs at least two classes")


def check_negatives(data: LabelledData, multi_label: bool) -> None:
    """Raise InvalidTrainingData(0, ...) if the data has OUT_OF_SCOPE_CLASS examples and is
    to train a ``multi_label`` model, or has fewer than two classes besides them (a
    classifier's whole data; a cross-fitting fold may hold one class and the examples)."""
    if OUT_OF_SCOPE_CLASS not in data.classes:
        return
    if multi_label:
        raise InvalidTrainingData(
            0, f"{OUT_OF_SCOPE_CLASS} (examples of out-of-scope text) is for single-label classifiers only"
        )
    if len(data.classes) < 3:
        raise InvalidTrainingData(
            0, f"the training data needs at least two classes besides {OUT_OF_SCOPE_CLASS}"
        )


def stratified_split(labels: list[str], fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded stratified split of example indices into (train, validation), both sorted.

    Each class gives round(fraction * count) of its examples to validation, but a class
    with fewer than 3 examples gives none and every class keeps at least 2 in training,
    so no class disappears from training. Classes are visited in sorted order with one
    generator, so the split depends only on (labels, fraction, seed).
    """
    rng = np.random.default_rng(seed)
    by_class: dict[str, list[int]] = {}
    for index, label in enumerate(labels):
        by_class.setdefault(label, []).append(index)
    validation: list[int] = []
    for label in sorted(by_class):
        members = np.asarray(by_class[label], dtype=np.int64)
        take = 0 if len(members) < 3 else min(int(round(fraction * len(members))), len(members) - 2)
        validation.extend(rng.permutation(members)[:take].tolist())
    is_validation = np.zeros(len(labels), dtype=bool)
    is_validation[validation] = True
    everything = np.arange(len(labels), dtype=np.int64)
    return everything[~is_validation], everything[is_validation]


def multilabel_split(
    label_sets: list[tuple[str, ...]], fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded split of multi-label example indices into (train, validation), both sorted.

    Stratifying by label set (each distinct combination as one class) would keep every
    example of a rare combination in training, and with many classes most combinations are
    rare, so validation would hold mostly the common single-label examples: the threshold
    chosen on it would be chosen for the wrong mix. Instead, examples are visited in one
    seeded random order and moved to validation, up to round(fraction * examples), when every
    class of theirs keeps at least 2 examples in training: the rule of stratified_split (a
    class with fewer than 3 examples gives none), applied per class rather than per example.
    """
    rng = np.random.default_rng(seed)
    in_training: dict[str, int] = {}
    for labels in label_sets:
        for label in labels:
            in_training[label] = in_training.get(label, 0) + 1
    take = int(round(fraction * len(label_sets)))
    is_validation = np.zeros(len(label_sets), dtype=bool)
    taken = 0
    for index in rng.permutation(len(label_sets)).tolist():
        if taken >= take:
            break
        if all(in_training[label] > 2 for label in label_sets[index]):
            is_validation[index] = True
            taken += 1
            for label in label_sets[index]:
                in_training[label] -= 1
    everything = np.arange(len(label_sets), dtype=np.int64)
    return everything[~is_validation], everything[is_validation]


def stratified_folds(labels: list[str], folds: int, seed: int) -> np.ndarray:
    """Seeded stratified fold number (0..folds-1) of each example.

    Each class's examples, shuffled, are dealt round the folds, starting where the previous
    class stopped, so folds differ in size by at most one and a class with fewer examples
    than folds lands in as many different folds as it has examples. Depends only on
    (labels, folds, seed).
    """
    rng = np.random.default_rng(seed)
    by_class: dict[str, list[int]] = {}
    for index, label in enumerate(labels):
        by_class.setdefault(label, []).append(index)
    fold_of = np.zeros(len(labels), dtype=np.int64)
    dealt = 0
    for label in sorted(by_class):
        members = rng.permutation(np.asarray(by_class[label], dtype=np.int64))
        fold_of[members] = (dealt + np.arange(len(members))) % folds
        dealt += len(members)
    return fold_of

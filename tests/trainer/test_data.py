from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from trainer.data import (
    LabelledData,
    check_trainable,
    read_labelled_csv,
    stratified_folds,
    stratified_split,
)
from trainer.errors import InvalidTrainingData


def _write(tmp_path: Path, content: bytes) -> Path:
    path = tmp_path / "data.csv"
    path.write_bytes(content)
    return path


def test_reads_utf8_with_bom_quotes_and_commas(tmp_path: Path) -> None:
    path = _write(tmp_path, '\ufefftext,label\n"hello, world",greet\nMünchen Hbf?,travel\n'.encode())
    data = read_labelled_csv(path)
    assert data.texts == ["hello, world", "München Hbf?"]
    assert data.labels == ["greet", "travel"]


@pytest.mark.parametrize(
    ("content", "row", "rule_part"),
    [
        (b"", 1, "header"),
        (b"sentence,intent\nhi,greet\n", 1, "header"),
        (b"text,label\nhi,greet\nbye\n", 3, "2 fields"),
        (b"text,label\nhi,greet,extra\n", 2, "2 fields"),
        (b"text,label\n  ,greet\n", 2, "text is empty"),
        (b"text,label\nhi,\n", 2, "label is empty"),
        (b"text,label\nhi,greet\n\xff\xfe,bad\n", 3, "UTF-8"),
        (b"text,label\nhi,greet\n" + b"x" * 5000 + b",long\n", 3, "longer"),
    ],
)
def test_invalid_files_name_the_row_and_the_rule(
    tmp_path: Path, content: bytes, row: int, rule_part: str
) -> None:
    with pytest.raises(InvalidTrainingData) as raised:
        read_labelled_csv(_write(tmp_path, content))
    assert raised.value.row == row
    assert rule_part in raised.value.rule


def test_data_with_one_class_or_no_rows_is_not_trainable() -> None:
    with pytest.raises(InvalidTrainingData, match="two classes"):
        check_trainable(LabelledData(["a", "b"], ["x", "x"]))
    with pytest.raises(InvalidTrainingData, match="no examples"):
        check_trainable(LabelledData([], []))


def test_stratified_split_is_seeded_and_keeps_rare_classes_in_training() -> None:
    labels = ["a"] * 50 + ["b"] * 30 + ["rare"] * 2
    train_a, validation_a = stratified_split(labels, 0.1, seed=3)
    train_b, validation_b = stratified_split(labels, 0.1, seed=3)
    assert train_a.tolist() == train_b.tolist() and validation_a.tolist() == validation_b.tolist()
    assert Counter(labels[i] for i in validation_a) == {"a": 5, "b": 3}
    assert sorted(train_a.tolist() + validation_a.tolist()) == list(range(len(labels)))
    _, other = stratified_split(labels, 0.1, seed=4)
    assert other.tolist() != validation_a.tolist()


def test_stratified_folds_are_balanced_seeded_and_spread_rare_classes() -> None:
    labels = ["a"] * 11 + ["b"] * 7 + ["c"] * 2 + ["d"]
    folds = stratified_folds(labels, 5, seed=3)
    assert np.array_equal(folds, stratified_folds(labels, 5, seed=3))
    sizes = np.bincount(folds, minlength=5)
    assert sizes.max() - sizes.min() <= 1
    assert len({int(folds[i]) for i, label in enumerate(labels) if label == "c"}) == 2
    for label in "ab":
        per_fold = Counter(int(folds[i]) for i, y in enumerate(labels) if y == label)
        assert max(per_fold.values()) - min(per_fold.values()) <= 1 and len(per_fold) == 5

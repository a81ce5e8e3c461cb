from __future__ import annotations

from trainer.evaluate import MAX_CONFUSION_CLASSES, classification_report, expected_calibration_error


def test_the_report_counts_per_class_and_keeps_a_small_confusion_matrix_whole() -> None:
    report = classification_report(["a", "a", "b", "c"], ["a", "b", "b", "c"])
    assert report["accuracy"] == 0.75 and report["n"] == 4
    assert report["confusion"] == {"labels": ["a", "b", "c"], "matrix": [[1, 1, 0], [0, 1, 0], [0, 0, 1]]}


def test_with_thousands_of_classes_the_confusion_matrix_keeps_the_confused_ones() -> None:
    true = [f"class {i:04d}" for i in range(3000)]
    predicted = list(true)
    predicted[7], predicted[2999] = "class 0008", "class 0000"
    confusion = classification_report(true, predicted)["confusion"]
    assert confusion["truncated"] is True  # type: ignore[index]
    labels = confusion["labels"]  # type: ignore[index]
    assert len(labels) == MAX_CONFUSION_CLASSES and labels == sorted(labels)
    assert {"class 0000", "class 0007", "class 0008", "class 2999"} <= set(labels)


def test_ece_is_the_bin_weighted_gap_between_confidence_and_accuracy() -> None:
    assert expected_calibration_error([1.0, 1.0], [True, True]) == 0.0
    assert abs(expected_calibration_error([0.9, 0.9], [True, False]) - 0.4) < 1e-12

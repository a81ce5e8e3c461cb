"""The dataset report's findings, each on small hand-made rows (service.catalogue.dataset_report)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from service.catalogue.confusable_classes import confusable_classes, normalised
from service.catalogue.dataset_report import build_report

CLEAN = {
    "weather": [
        "what is the weather today",
        "weather forecast for tomorrow",
        "will the weather be rainy",
        "is the weather cold outside",
        "weather in paris this weekend",
        "how is the weather now",
    ],
    "music": [
        "play some jazz music",
        "play music by queen",
        "play relaxing music please",
        "stop the music",
        "play the next music track",
        "turn the music up",
    ],
}


def _rows(classes: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    texts = [text for texts in classes.values() for text in texts]
    labels = [label for label, texts in classes.items() for _ in texts]
    return texts, labels


def _report(classes: dict[str, list[str]], extra: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    texts, labels = _rows(classes)
    return build_report(texts + [t for t, _ in extra], labels + [c for _, c in extra])


def test_clean_data_has_nothing_to_report() -> None:
    report = _report(CLEAN)

    assert report["warnings"] == []
    assert report["class_counts"] == [
        {"class_name": "music", "rows": 6},
        {"class_name": "weather", "rows": 6},
    ]
    assert report["imbalance"] == 1.0
    assert report["small_classes"]["count"] == 0
    assert report["exact_duplicates"] == {"rows": 0, "examples": []}
    assert report["near_duplicates"] == {"texts": 0, "examples": []}
    assert report["multi_label_texts"]["texts"] == 0
    assert report["confusable_classes"]["pairs"] == []
    assert report["confusable_classes"]["accuracy"] == 1.0
    assert report["dropped"] == 0


def test_a_small_class_is_warned_of_by_name_and_rows() -> None:
    report = _report(CLEAN, [("I want my money back", "refund"), ("refund my order", "refund")])

    assert report["small_classes"] == {
        "threshold": 5,
        "count": 1,
        "classes": [{"class_name": "refund", "rows": 2}],
    }
    assert report["warnings"][0] == (
        "1 class with fewer than 5 rows: 'refund' (2); such classes are often misclassified"
    )


def test_the_warning_names_at_most_ten_small_classes() -> None:
    report = _report(CLEAN, [(f"text {i}", f"tiny{i:02}") for i in range(12)])

    assert report["small_classes"]["count"] == 12
    assert len(report["small_classes"]["classes"]) == 10
    assert report["warnings"][0].startswith("12 classes with fewer than 5 rows: 'tiny00' (1), ")
    assert "'tiny09' (1) and 2 more;" in report["warnings"][0]


def test_imbalance_is_the_largest_class_over_the_smallest() -> None:
    big = {"big": [f"big text number {i}" for i in range(50)], "small": [f"small {i}" for i in range(5)]}

    report = _report(big)

    assert report["imbalance"] == 10.0
    assert "the classes are imbalanced: 'big' has 50 rows, 'small' 5 (10 times fewer)" in report["warnings"]


def test_exact_duplicates_count_the_repeats() -> None:
    report = _report(
        CLEAN,
        [
            ("how is the weather now", "weather"),
            ("how is the weather now", "weather"),
            ("stop the music", "music"),
        ],
    )

    assert report["exact_duplicates"] == {
        "rows": 3,
        "examples": [
            {"text": "how is the weather now", "class_name": "weather", "times": 3},
            {"text": "stop the music", "class_name": "music", "times": 2},
        ],
    }
    assert "3 rows are exact duplicates (the same text and class)" in report["warnings"]


def test_near_duplicates_differ_only_in_case_punctuation_spacing_or_unicode_form() -> None:
    variants = [
        ("How is the  WEATHER now?", "weather"),
        ("how is the weather now!", "weather"),
        ("ｈｏｗ ｉｓ ｔｈｅ ｗｅａｔｈｅｒ ｎｏｗ", "weather"),
    ]

    report = _report(CLEAN, variants)

    assert report["near_duplicates"]["texts"] == 3
    assert report["near_duplicates"]["examples"] == [
        {"texts": ["how is the weather now", "How is the  WEATHER now?", "how is the weather now!"]}
    ]
    assert report["exact_duplicates"]["rows"] == 0
    assert (
        "3 texts differ from another only in case, punctuation, spacing or Unicode form" in report["warnings"]
    )


def test_normalised_folds_case_width_punctuation_and_spaces() -> None:
    assert normalised("  Ｈｅｌｌｏ,\tWORLD!! ¿Qué?  ") == "hello world qué"


def test_a_few_texts_under_two_classes_are_warned_of_as_a_conflict() -> None:
    report = _report(CLEAN, [("play some jazz music", "weather")])

    assert report["multi_label_texts"]["texts"] == 1
    assert report["multi_label_texts"]["examples"] == [
        {"text": "play some jazz music", "classes": ["music", "weather"]}
    ]
    assert (
        "1 text has more than one class (e.g. 'play some jazz music': music, weather);"
        " in single-label data that is a conflict" in report["warnings"]
    )


def test_data_that_is_multi_label_on_purpose_is_reported_but_not_warned_of() -> None:
    texts, labels = _rows(CLEAN)
    tagged = [(text, "indoors") for text in texts[::2]]

    report = build_report(texts + [t for t, _ in tagged], labels + [c for _, c in tagged])

    assert report["multi_label_texts"]["texts"] == 6
    assert report["multi_label_texts"]["share"] == 0.5
    assert not any("more than one class" in warning for warning in report["warnings"])


def test_two_classes_that_really_overlap_are_the_most_confusable_pair() -> None:
    # the same questions about invoices, given one class or the other at random
    invoices = [f"question about my invoice {i}" for i in range(20)]
    overlapping = {
        **CLEAN,
        "billing": invoices[0::2],
        "payments": invoices[1::2],
    }
    texts, labels = _rows(overlapping)

    found = confusable_classes(texts, labels)

    top = found.pairs[0]
    assert (top.class_a, top.class_b) == ("billing", "payments")
    assert top.a_as_b + top.b_as_a >= 6
    assert (top.evaluated_a, top.evaluated_b) == (10, 10)
    assert {m.class_name for m in top.examples} <= {"billing", "payments"}
    assert all("invoice" in m.text and m.taken_for != m.class_name for m in top.examples)
    assert all({p.class_a, p.class_b} <= {"billing", "payments"} for p in found.pairs)
    report = build_report(texts, labels)
    assert any("classes 'billing' and 'payments' look alike" in warning for warning in report["warnings"])


def test_the_confusable_pairs_are_the_same_on_every_run() -> None:
    texts, labels = _rows(
        {"a": [f"alpha {i % 3} beta" for i in range(20)], "b": [f"alpha {i % 4} gamma" for i in range(20)]}
    )

    assert confusable_classes(texts, labels) == confusable_classes(texts, labels)


def test_a_text_under_both_classes_is_no_mistake_when_given_either() -> None:
    texts, labels = _rows(CLEAN)
    shared = ["play the weather forecast song"] * 2

    found = confusable_classes(texts + shared, labels + ["music", "weather"])

    assert all("play the weather forecast song" not in [m.text for m in p.examples] for p in found.pairs)

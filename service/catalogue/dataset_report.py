"""A dataset's report: what in its rows is likely to hurt the classifiers trained on it.

Computed once, at upload, from the canonical CSV's rows (one per text and class) and stored
with the dataset (``datasets.report``, JSON); ``GET /v1/datasets/{id}/report`` shows it, and
the upload's reply carries its warnings. Pure functions: :func:`build_report` takes the texts
and labels and returns the JSON-ready dict that :class:`service.api.dataset_report_schemas.DatasetReport`
describes. Nothing is ever dropped from a dataset (a bad row refuses the whole upload), so
``dropped`` is always 0; the field says so rather than leaves it to be guessed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from service.catalogue.confusable_classes import Confusion, confusable_classes, normalised
from trainer.data import read_labelled_csv

SMALL_CLASS_ROWS = 5  # a class with fewer rows than this is warned of
IMBALANCE_WARNING = 10.0  # largest / smallest class rows at or past which the upload is warned
MULTI_LABEL_MINORITY = 0.1  # texts with several classes up to this share look like mistakes
CONFUSED_SHARE = 0.2  # a pair whose held-out rows went to each other this often is warned of
CONFUSED_AT_LEAST = 3  # ... when at least this many did
NAMES_SHOWN = 10  # classes a warning names
EXAMPLES = 5  # examples each finding keeps
VARIANTS_SHOWN = 3  # texts shown of one group of near-duplicates
REPORT_VERSION = 1


def build_report(texts: Sequence[str], labels: Sequence[str]) -> dict[str, Any]:
    """The report of the rows ``texts[i], labels[i]``: class counts and imbalance, small
    classes, exact and near duplicates, texts under several classes, the classes a quick
    cross-validated probe confuses most, and the warnings these call for."""
    counts = Counter(labels)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    small = [
        name
        for name, rows in sorted(counts.items(), key=lambda item: (item[1], item[0]))
        if rows < SMALL_CLASS_ROWS
    ]
    classes_of = _classes_of_text(texts, labels)
    report: dict[str, Any] = {
        "version": REPORT_VERSION,
        "rows": len(texts),
        "texts": len(classes_of),
        "classes": len(counts),
        "class_counts": [{"class_name": name, "rows": rows} for name, rows in ranked],
        "imbalance": round(ranked[0][1] / ranked[-1][1], 2) if ranked else None,
        "small_classes": {
            "threshold": SMALL_CLASS_ROWS,
            "count": len(small),
            "classes": [{"class_name": name, "rows": counts[name]} for name in small[:NAMES_SHOWN]],
        },
        "exact_duplicates": _exact_duplicates(texts, labels),
        "near_duplicates": _near_duplicates(classes_of),
        "multi_label_texts": _multi_label_texts(classes_of),
        "confusable_classes": _confusion_json(confusable_classes(texts, labels)),
        "dropped": 0,
    }
    report["warnings"] = _warnings(report)
    return report


def report_of_csv(path: Path) -> dict[str, Any]:
    """:func:`build_report` of a canonical CSV (``text,label``)."""
    data = read_labelled_csv(path)
    return build_report(data.texts, data.labels)


def _classes_of_text(texts: Sequence[str], labels: Sequence[str]) -> dict[str, list[str]]:
    """Each distinct text's distinct classes, in the order the rows first give them."""
    found: dict[str, dict[str, None]] = {}
    for text, label in zip(texts, labels, strict=True):
        found.setdefault(text, {})[label] = None
    return {text: list(classes) for text, classes in found.items()}


def _exact_duplicates(texts: Sequence[str], labels: Sequence[str]) -> dict[str, Any]:
    """Rows that repeat an earlier row (the same text and class): how many, and the most
    repeated ones."""
    times = Counter(zip(texts, labels, strict=True))
    repeated = sorted(((n, pair) for pair, n in times.items() if n > 1), key=lambda item: -item[0])
    return {
        "rows": sum(n - 1 for n, _ in repeated),
        "examples": [{"text": t, "class_name": c, "times": n} for n, (t, c) in repeated[:EXAMPLES]],
    }


def _near_duplicates(classes_of: dict[str, list[str]]) -> dict[str, Any]:
    """Distinct texts that read the same as another once normalised (Unicode NFKC, case,
    punctuation and white space: :func:`normalised`): how many besides the first of each
    group, and a few groups."""
    groups: dict[str, list[str]] = {}
    for text in classes_of:
        groups.setdefault(normalised(text), []).append(text)
    shared = [variants for variants in groups.values() if len(variants) > 1]
    return {
        "texts": sum(len(variants) - 1 for variants in shared),
        "examples": [{"texts": variants[:VARIANTS_SHOWN]} for variants in shared[:EXAMPLES]],
    }


def _multi_label_texts(classes_of: dict[str, list[str]]) -> dict[str, Any]:
    """Texts given two or more classes: how many, their share of the distinct texts, and a few."""
    several = [(text, classes) for text, classes in classes_of.items() if len(classes) > 1]
    return {
        "texts": len(several),
        "share": round(len(several) / len(classes_of), 4) if classes_of else 0.0,
        "examples": [{"text": text, "classes": classes} for text, classes in several[:EXAMPLES]],
    }


def _confusion_json(found: Confusion) -> dict[str, Any]:
    """The probe's result as the report stores it (accuracy rounded)."""
    shown = asdict(found)
    shown["accuracy"] = None if found.accuracy is None else round(found.accuracy, 4)
    return shown


def _warnings(report: dict[str, Any]) -> list[str]:
    """The short sentences a report calls for, most harmful first; none for clean data."""
    said = []
    small = report["small_classes"]
    if small["count"]:
        listed = ", ".join(f"'{c['class_name']}' ({c['rows']})" for c in small["classes"])
        more = (
            f" and {small['count'] - len(small['classes'])} more"
            if small["count"] > len(small["classes"])
            else ""
        )
        said.append(
            f"{_count(small['count'], 'class', 'classes')} with fewer than {small['threshold']} rows:"
            f" {listed}{more}; such classes are often misclassified"
        )
    if report["imbalance"] is not None and report["imbalance"] >= IMBALANCE_WARNING:
        largest, smallest = report["class_counts"][0], report["class_counts"][-1]
        said.append(
            f"the classes are imbalanced: '{largest['class_name']}' has {largest['rows']} rows,"
            f" '{smallest['class_name']}' {smallest['rows']} ({report['imbalance']:g} times fewer)"
        )
    multi = report["multi_label_texts"]
    if multi["texts"] and multi["share"] <= MULTI_LABEL_MINORITY:
        example = multi["examples"][0]
        said.append(
            f"{_count(multi['texts'], 'text has', 'texts have')} more than one class"
            f" (e.g. {example['text']!r}: {', '.join(example['classes'])}); in single-label data that is"
            " a conflict"
        )
    for pair in report["confusable_classes"]["pairs"]:
        confused = pair["a_as_b"] + pair["b_as_a"]
        evaluated = pair["evaluated_a"] + pair["evaluated_b"]
        if confused >= CONFUSED_AT_LEAST and confused >= CONFUSED_SHARE * evaluated:
            said.append(
                f"classes '{pair['class_a']}' and '{pair['class_b']}' look alike: a quick model took"
                f" {confused} of their {evaluated} held-out rows for the other"
            )
    duplicates = report["exact_duplicates"]["rows"]
    if duplicates:
        said.append(
            f"{_count(duplicates, 'row is an exact duplicate', 'rows are exact duplicates')}"
            " (the same text and class)"
        )
    near = report["near_duplicates"]["texts"]
    if near:
        said.append(
            f"{_count(near, 'text differs', 'texts differ')} from another only in case, punctuation,"
            " spacing or Unicode form"
        )
    return said


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"

"""What ``taas datasets show`` prints: a dataset, its report's warnings, and a section per
finding (a table, or "none" where there is nothing to show)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from service.client.models import Dataset, DatasetReport
from service.client.terminal import new_table


def dataset_sections(dataset: Dataset, report: DatasetReport) -> Iterator[RenderableType]:
    """The dataset's facts, then each section of its report under its heading."""
    facts = Table.grid(padding=(0, 2))
    for label, value in (
        ("id", dataset["dataset_id"]),
        ("name", dataset["name"]),
        ("rows", f"{dataset['rows']:,} ({report['texts']:,} distinct texts)"),
        ("classes", f"{dataset['classes']:,}"),
        (
            "imbalance",
            "-" if report["imbalance"] is None else f"{report['imbalance']:g} (largest / smallest)",
        ),
        ("dropped", f"{report['dropped']} (a bad row refuses the upload instead)"),
        ("created", dataset["created"]),
    ):
        facts.add_row(Text(label, style="bold"), value)
    yield facts
    yield from _section("warnings", _warnings(report["warnings"]))
    yield from _section("classes", _class_counts(report["class_counts"]))
    yield from _section("exact duplicates", _exact_duplicates(report["exact_duplicates"]))
    yield from _section("near duplicates", _near_duplicates(report["near_duplicates"]))
    yield from _section("texts with several classes", _multi_label(report["multi_label_texts"]))
    yield from _section("confusable classes", _confusable(report["confusable_classes"]))


def _section(heading: str, table: Table | None) -> Iterator[RenderableType]:
    yield Text(f"\n{heading}", style="bold")
    yield table if table is not None else "none"


def _warnings(warnings: list[str]) -> Table | None:
    if not warnings:
        return None
    table = Table.grid()
    for warning in warnings:
        table.add_row(f"! {warning}")
    return table


def _class_counts(counts: list[dict[str, Any]]) -> Table | None:
    if not counts:
        return None
    table = new_table("class", "rows")
    for entry in counts:
        table.add_row(entry["class_name"], f"{entry['rows']:,}")
    return table


def _exact_duplicates(found: dict[str, Any]) -> Table | None:
    if not found["rows"]:
        return None
    table = new_table("text", "class", "times")
    for entry in found["examples"]:
        table.add_row(entry["text"], entry["class_name"], str(entry["times"]))
    table.caption = f"repeats in all: {found['rows']:,}"
    return table


def _near_duplicates(found: dict[str, Any]) -> Table | None:
    if not found["texts"]:
        return None
    table = new_table("texts that read the same")
    for entry in found["examples"]:
        table.add_row(" | ".join(entry["texts"]))
    table.caption = f"texts like another in all: {found['texts']:,}"
    return table


def _multi_label(found: dict[str, Any]) -> Table | None:
    if not found["texts"]:
        return None
    table = new_table("text", "classes")
    for entry in found["examples"]:
        table.add_row(entry["text"], ", ".join(entry["classes"]))
    table.caption = f"texts with several classes in all: {found['texts']:,} ({found['share']:.1%})"
    return table


def _confusable(found: dict[str, Any]) -> Table | None:
    if not found["pairs"]:
        return None
    table = new_table("class a", "class b", "a taken for b", "b taken for a", "e.g.")
    for pair in found["pairs"]:
        examples = "; ".join(
            f"{m['text']!r} ({m['class_name']} -> {m['taken_for']})" for m in pair["examples"]
        )
        table.add_row(
            pair["class_a"],
            pair["class_b"],
            f"{pair['a_as_b']} of {pair['evaluated_a']}",
            f"{pair['b_as_a']} of {pair['evaluated_b']}",
            examples,
        )
    accuracy = "-" if found["accuracy"] is None else f"{found['accuracy']:.3f}"
    table.caption = (
        f"a nearest-centroid model, {found['folds']}-fold cross-validated on"
        f" {found['rows_evaluated']:,} rows: held-out accuracy {accuracy}"
    )
    return table

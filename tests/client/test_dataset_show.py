"""``taas datasets show``: a dataset and its report, and the warnings ``datasets upload`` prints."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

from tests.client.conftest import Live

pytestmark = pytest.mark.dialect_neutral


def test_show_prints_the_report_and_upload_its_warnings(
    taas: Callable[..., Result], live: Live, tmp_path: Path
) -> None:
    data = tmp_path / "weather.csv"
    data.write_text("text,label\nhot,t\ncold,t\nrain,c\nrain,c\n")
    taas("login", live.url, live.key)

    uploaded = taas("datasets", "upload", str(data))
    shown = taas("datasets", "show", "weather")

    assert uploaded.exit_code == 0, uploaded.output
    assert "! 1 row is an exact duplicate (the same text and class)" in uploaded.stdout
    assert shown.exit_code == 0, shown.output
    lines = [line.rstrip() for line in shown.stdout.splitlines()]
    assert "! 1 row is an exact duplicate (the same text and class)" in lines
    assert any(line.startswith("! 2 classes with fewer than 5 rows") for line in lines)
    # a section with findings is a table; one without says "none"
    exact = lines.index("exact duplicates")
    assert lines[exact + 4].split() == ["│", "rain", "│", "c", "│", "2", "│"]
    assert lines[exact + 6] == "repeats in all: 1"
    for empty in ("near duplicates", "texts with several classes"):
        assert lines[lines.index(empty) + 1] == "none", empty


def test_show_json_is_the_dataset_with_its_report(
    taas: Callable[..., Result], live: Live, tmp_path: Path
) -> None:
    data = tmp_path / "clean.csv"
    data.write_text(
        "text,label\n" + "".join(f"warm day {i},temperature\nrainy day {i},rain\n" for i in range(6))
    )
    taas("login", live.url, live.key)
    dataset_id = json.loads(taas("datasets", "upload", str(data), "--json").stdout)["dataset_id"]

    shown = json.loads(taas("datasets", "show", dataset_id, "--json").stdout)
    printed = [line.rstrip() for line in taas("datasets", "show", dataset_id).stdout.splitlines()]

    assert shown["dataset_id"] == dataset_id
    assert shown["report"]["warnings"] == [] and shown["report"]["rows"] == 12
    for empty in ("warnings", "exact duplicates", "near duplicates", "texts with several classes"):
        assert printed[printed.index(empty) + 1] == "none", empty

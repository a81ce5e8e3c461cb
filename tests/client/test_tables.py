"""What the client's tables show, from replies in the API's shape."""

from __future__ import annotations

from rich.console import Console

from service.client.commands import results_table


def _rendered(results: list[dict[str, object]]) -> str:
    console = Console(width=200, record=True)
    console.print(results_table(results))
    return console.export_text()


def test_a_multi_label_models_results_show_the_classes_it_predicts() -> None:
    classes = [{"class_name": "weather", "confidence": 0.97}, {"class_name": "travel", "confidence": 0.91}]
    text = _rendered(
        [
            {
                "text": "rain in oslo?",
                "top_class": "weather",
                "classes": classes,
                "labels": ["weather", "travel"],
            }
        ]
    )

    assert "labels" in text and "weather, travel" in text


def test_a_single_label_models_results_have_no_labels_column() -> None:
    classes = [{"class_name": "weather", "confidence": 0.97}]
    text = _rendered([{"text": "rain in oslo?", "top_class": "weather", "classes": classes}])

    assert "labels" not in text and "0.970" in text


def test_results_with_an_out_of_scope_decision_show_it_and_the_score() -> None:
    classes = [{"class_name": "weather", "confidence": 0.41}]
    text = _rendered(
        [
            {
                "text": "rain in oslo?",
                "top_class": "weather",
                "classes": classes,
                "in_scope_score": 0.731,
                "out_of_scope": False,
            },
            {
                "text": "my card was stolen",
                "top_class": "weather",
                "classes": classes,
                "in_scope_score": 0.004,
                "out_of_scope": True,
            },
        ]
    )

    assert "in scope" in text and "yes 0.731" in text and "NO 0.004" in text

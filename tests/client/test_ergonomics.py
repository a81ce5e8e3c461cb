"""The client commands read as a person would use them: a classifier by its name or the start
of its id, `taas shell` to try texts one by one, a line instead of an empty table, quotas in
KiB and percentages, an out-of-scope rate by number or `default`, every page of a listing, the
accuracy when a training ends, a row per training phase on the progress bar, and every URL in
`taas up`'s banner."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import Result
from rich.console import Console

from service.cli.commands import banner
from service.client import follow, refs
from service.client.errors import ClientError
from service.core.settings import Settings
from tests.client.conftest import Live
from tests.conftest import ADMIN_KEY

pytestmark = pytest.mark.dialect_neutral


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_classifier_is_named_by_its_name_or_the_start_of_its_id(
    taas: Callable[..., Result], live: Live
) -> None:
    weather = live.available("weather")
    assert "as a tenant" in taas("login", live.url, live.key).stdout

    by_name = _json(taas("classify", "weather", "is it cold outside", "--json"))
    by_prefix = _json(taas("classifiers", "show", weather[:8], "--json"))

    assert by_name[0]["top_class"] == "temperature"
    assert by_prefix["classifier_id"] == weather
    unknown = taas("classifiers", "show", "nowhere")
    assert unknown.exit_code == 1
    assert unknown.stderr == (
        "error: 404 Not Found: no classifier is named 'nowhere' or has an id that starts with it\n"
    )


def test_a_name_two_classifiers_share_is_an_error_naming_both(
    taas: Callable[..., Result], live: Live
) -> None:
    first, second = live.create("twin"), live.create("twin")
    taas("login", live.url, live.key)

    result = taas("classifiers", "delete", "twin")

    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert "could be any of 2 classifiers" in result.stderr
    assert f"{first} (twin)" in result.stderr and f"{second} (twin)" in result.stderr
    assert len(_json(taas("classifiers", "list", "--json"))) == 2  # nothing deleted


def test_a_shared_id_prefix_is_ambiguous_and_a_longer_one_is_not() -> None:
    found = [("ab12-x", "one"), ("ab34-y", "two"), ("cd56-z", "ab")]

    assert refs.resolve("classifier", "ab1", found) == "ab12-x"
    with pytest.raises(ClientError, match=r"'ab' could be any of 3 classifiers: ab12-x \(one\), ab34-y"):
        refs.resolve("classifier", "ab", found)  # two prefixes, and a name
    assert refs.is_full_id("0B9F6C1E-5D5E-4A43-9D8E-2F1B7F0C4D21") and not refs.is_full_id("0b9f6c1e")


def test_shell_classifies_each_line_and_goes_on_after_a_refused_text(
    taas: Callable[..., Result], live: Live
) -> None:
    live.available("weather")
    taas("login", live.url, live.key)

    shown = taas(
        "shell", "weather", "--top", "2", input="is it cold outside\n\n" + "x" * 3000 + "\nwill it rain\n"
    )
    lines = taas("shell", "weather", "--json", input="is it cold outside\nwill it rain\n")

    assert shown.exit_code == 0, shown.output
    assert "weather (" in shown.stderr and "Ctrl-D ends" in shown.stderr
    assert "is it cold outside" in shown.stdout and "will it rain" in shown.stdout
    assert "temperature" in shown.stdout and "conditions" in shown.stdout
    assert "error: 400 Bad Request: text:" in shown.stderr  # the long text, said; the next one answered
    answers = [json.loads(line) for line in lines.stdout.splitlines()]
    assert [a["text"] for a in answers] == ["is it cold outside", "will it rain"]
    assert answers[0]["top_class"] == "temperature" and 0 < answers[0]["classes"][0]["confidence"] <= 1
    assert "in scope" in shown.stdout and answers[0]["out_of_scope"] is False


def test_classify_shows_which_texts_are_out_of_scope_online_and_from_a_bundle(
    taas: Callable[..., Result], live: Live, tmp_path: Path
) -> None:
    weather = live.available("weather")
    taas("login", live.url, live.key)
    bundle = tmp_path / "weather.taas"
    bundle.write_bytes(
        httpx.get(f"{live.url}/v1/classifiers/{weather}/bundle", headers={"X-API-Key": live.key}).content
    )
    texts = ["is it cold outside", "?!"]  # the second has no word: no training text was like it

    online = _json(taas("classify", "weather", *texts, "--json"))
    offline = _json(taas("classify", str(bundle), *texts, "--json"))
    table = taas("classify", "weather", *texts)

    assert [a["out_of_scope"] for a in online] == [False, True]
    assert [a["out_of_scope"] for a in offline] == [False, True]
    assert [a["in_scope_score"] for a in offline] == pytest.approx([a["in_scope_score"] for a in online])
    assert "in scope" in table.stdout and "NO 0.000" in table.stdout and "yes " in table.stdout


def test_shell_refuses_a_classifier_that_cannot_answer_yet(taas: Callable[..., Result], live: Live) -> None:
    live.create("still-training")
    taas("login", live.url, live.key)

    result = taas("shell", "still-training", input="hello\n")

    assert result.exit_code == 1 and "is Training" in result.stderr and result.stderr.count("\n") == 1


def test_empty_listings_say_how_to_make_the_first(taas: Callable[..., Result], live: Live) -> None:
    taas("login", live.url, live.key)

    assert (
        taas("classifiers", "list").stdout == "no classifiers yet: `taas train FILE --name NAME` trains one\n"
    )
    assert taas("datasets", "list").stdout == "no datasets yet: `taas datasets upload FILE` stores one\n"
    assert _json(taas("classifiers", "list", "--json")) == [] == _json(taas("datasets", "list", "--json"))


def test_listings_read_every_page(
    taas: Callable[..., Result], live: Live, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = [live.create(f"c{i}") for i in range(3)]
    taas("login", live.url, live.key)
    monkeypatch.setattr("service.client.api.ITEMS_PER_CALL", 2)

    assert [c["classifier_id"] for c in _json(taas("classifiers", "list", "--json"))] == made


def test_quotas_show_sizes_and_shares_and_can_be_set(taas: Callable[..., Result], live: Live) -> None:
    live.create("one")
    taas("login", live.url, input=ADMIN_KEY + "\n")

    def row(result: Result, quota: str) -> str:
        assert result.exit_code == 0, result.output
        return next(line for line in result.stdout.splitlines() if f" {quota} " in line)

    shown = taas("tenants", "quotas", live.tenant_id)
    changed = _json(taas("tenants", "quotas", live.tenant_id, "--set", "classifiers=4", "--json"))
    set_again = taas("tenants", "quotas", live.tenant_id, "--set", "classifiers=4")
    reset = taas("tenants", "quotas", live.tenant_id, "--set", "classifiers=default")

    assert "bytes" in row(shown, "dataset_bytes") and "1 GiB" in row(shown, "dataset_bytes")
    assert "<0.1%" in row(shown, "dataset_bytes") and "1%" in row(shown, "classifiers")
    assert "100 texts/s" in row(shown, "classify_rps")
    assert changed["quotas"]["classifiers"] == 4 and changed["overrides"]["classifiers"] == 4
    assert "25%" in row(set_again, "classifiers") and " set " in row(set_again, "classifiers")
    assert " default " in row(reset, "classifiers")


def test_the_out_of_scope_rate_is_set_shown_and_put_back_to_the_models_own(
    taas: Callable[..., Result], live: Live
) -> None:
    weather = live.available("weather")
    taas("login", live.url, live.key)

    changed = taas("classifiers", "set-rate", "weather", "0.05")
    shown = taas("classifiers", "show", "weather")
    reset = _json(taas("classifiers", "set-rate", "weather", "default", "--json"))
    refused = taas("classifiers", "set-rate", "weather", "1")
    unreadable = taas("classifiers", "set-rate", "weather", "five percent")

    assert changed.exit_code == 0 and changed.stdout == f"{weather}: out-of-scope rate 0.05\n"
    assert "0.05 (set by you)" in shown.stdout
    assert reset["out_of_scope_rate"] is None
    assert refused.exit_code == 1 and refused.stderr.count("\n") == 1
    assert "400" in refused.stderr and "out_of_scope_rate" in refused.stderr
    assert unreadable.exit_code == 1 and "RATE 'five percent'" in unreadable.stderr


def test_a_wait_that_ends_available_says_how_well_it_did(capsys: pytest.CaptureFixture[str]) -> None:
    final = {"status": "Available", "metrics": {"accuracy": 0.95, "macro_f1": 0.9481, "n": 1200}}

    follow.ended(final, "classifier x", quiet=False)
    follow.ended(
        {"status": "Available", "metrics": {"micro_f1": 0.8, "macro_f1": 0.7}}, "version 2", quiet=False
    )

    assert capsys.readouterr().out == (
        "classifier x is Available: accuracy 0.950, macro F1 0.948 on 1,200 held-out texts\n"
        "version 2 is Available: micro F1 0.800, macro F1 0.700\n"
    )


class _Training:
    """An Api whose classifier goes through the trainer's phases, one a poll."""

    def __init__(self) -> None:
        progress = [
            {"phase": "queued"},
            {"phase": "preparing"},
            {"phase": "training", "step": 40, "total_steps": 100, "epoch": 1},
            {"phase": "training", "step": 100, "total_steps": 100, "epoch": 2},
            {"phase": "evaluating", "step": 100, "total_steps": 100},
        ]
        self.replies: list[dict[str, Any]] = [{"status": "Training", "progress": p} for p in progress]
        self.replies.append({"status": "Available", "progress": {"phase": "succeeded"}, "metrics": {}})
        self.seen: list[list[tuple[str, float | None, float]]] = []
        self.bar: Any = None

    def call(self, method: str, path: str, **_: object) -> dict[str, Any]:
        if self.bar is not None:
            self.seen.append([(t.description, t.total, t.completed) for t in self.bar.tasks])
        return self.replies.pop(0)


def test_the_bar_has_a_row_per_phase_and_evaluation_does_not_read_as_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = _Training()
    monkeypatch.setattr(follow, "POLL_SECONDS", 0.0)
    monkeypatch.setattr(follow, "err", Console(file=io.StringIO(), force_terminal=False))
    real = follow.Progress

    def watched(*args: Any, **kwargs: Any) -> Any:
        api.bar = real(*args, **kwargs)
        return api.bar

    monkeypatch.setattr(follow, "Progress", watched)

    final = follow.follow(api, "/v1/classifiers/x", show=True)  # type: ignore[arg-type]

    assert final["status"] == "Available"
    evaluating = api.seen[-1]  # the rows as the last poll found them: evaluating is live
    assert [row[0] for row in evaluating] == ["queued", "preparing", "training", "evaluating"]
    assert evaluating[2] == ("training", 100, 100)  # done, in its own row
    assert evaluating[3] == ("evaluating", None, 0)  # no length: it pulses, at no percentage
    assert [(t.total, t.completed) for t in api.bar.tasks][-1] == (1, 1)  # finished once Available


def test_the_start_up_banner_names_every_url(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, data_dir=tmp_path, admin_key=None)

    lines = banner("http://127.0.0.1:8000", settings, tmp_path / "admin.key", "admin_k", workers=1)

    text = "\n".join(lines)
    for path in ("/console", "/docs", "/redoc", "/openapi.json", "/ops", "/metrics", "/healthz", "/readyz"):
        assert f"http://127.0.0.1:8000{path}" in text, path
    assert "admin_k" in text and lines[0] == "taas is up with 1 worker(s)"

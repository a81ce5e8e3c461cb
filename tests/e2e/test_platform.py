"""`taas up` end to end: a tenant trains over HTTP and classifies; the platform stops cleanly on
SIGTERM and a second `taas up` on the same data dir carries on."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from benchmarks import chaos
from tests.processes import command_line, descendants

pytestmark = pytest.mark.e2e

TRAIN_TIMEOUT = 180.0


def create_classifier(client: httpx.Client, training_csv: Path, name: str, language: str = "en") -> str:
    """Upload NLC training data the way NLC clients do (multipart); the new classifier's id."""
    metadata = json.dumps({"name": name, "language": language})
    with open(training_csv, "rb") as data:
        reply = client.post(
            "/v1/classifiers",
            files={
                "training_data": ("train.csv", data, "text/csv"),
                "training_metadata": ("metadata.json", metadata, "application/json"),
            },
        )
    assert reply.status_code == 200, reply.text
    assert reply.json()["status"] == "Training"
    return str(reply.json()["classifier_id"])


def wait_available(
    client: httpx.Client, classifier_id: str, wait_until: Callable[..., Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Poll until Available; returns the final resource and the progress seen while Training."""
    progress_while_training: list[dict[str, Any]] = []

    def available() -> dict[str, Any] | None:
        info: dict[str, Any] = client.get(f"/v1/classifiers/{classifier_id}").json()
        assert info["status"] in {"Training", "Available"}, info
        if info["status"] == "Training":
            progress_while_training.append(info["progress"])
        return info if info["status"] == "Available" else None

    info = wait_until(available, timeout=TRAIN_TIMEOUT, interval=0.1, message="classifier Available")
    return info, progress_while_training


def test_tenant_trains_on_uploaded_nlc_data_and_classifies_the_test_set_accurately(
    platform: Any, chatbot: Any, wait_until: Callable[..., Any]
) -> None:
    with platform.client(platform.create_tenant()) as client:
        classifier_id = create_classifier(client, chatbot.train_nlc, "chatbot")

        info, training = wait_available(client, classifier_id, wait_until)

        assert any(p["step"] is not None for p in training), f"no progress reported: {training}"
        assert info["metrics"]["accuracy"] > 0
        correct = 0
        for start in range(0, len(chatbot.test), 30):
            batch = chatbot.test[start : start + 30]
            reply = client.post(
                f"/v1/classifiers/{classifier_id}/classify_collection",
                json={"collection": [{"text": text} for text, _ in batch]},
            )
            assert reply.status_code == 200, reply.text
            results = reply.json()["collection"]
            correct += sum(r["top_class"] == label for r, (_, label) in zip(results, batch, strict=True))
    assert correct / len(chatbot.test) >= 0.9


def test_sigterm_stops_every_child_and_a_second_up_trains_what_the_first_queued(
    platform_factory: Callable[..., Any], intents_nlc: Path, wait_until: Callable[..., Any]
) -> None:
    platform = platform_factory(workers=0)
    platform.start()
    key_file = platform.data_dir / "admin.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(platform.data_dir.stat().st_mode) == 0o700, "the database and sessions are in it"
    assert platform.admin_key in platform.output(), "a new admin key is printed once"
    assert f"taas login {platform.base_url} < {key_file}" in platform.output()
    tenant_key = platform.create_tenant()
    with platform.client(tenant_key) as client:
        classifier_id = create_classifier(client, intents_nlc, "intents")
    children = platform.process_tree()
    assert len(children) >= 2, "expected the embedded redis-server and the API"
    _assert_the_embedded_redis_wants_its_password(platform.data_dir, children)

    assert platform.stop() == 0
    wait_until(
        lambda: not platform.still_running(children),
        timeout=15,
        message=f"children of taas up still running: {platform.still_running(children)}",
    )

    platform.workers = 1
    platform.start()
    assert platform.admin_key not in platform.output(), "the admin key is printed only once"
    with platform.client(tenant_key) as client:
        wait_available(client, classifier_id, wait_until)
        listed = [c["classifier_id"] for c in client.get("/v1/classifiers").json()["classifiers"]]
        assert listed == [classifier_id]
        reply = client.post(f"/v1/classifiers/{classifier_id}/classify", json={"text": "fly me to rome"})
        assert reply.status_code == 200, reply.text
        assert reply.json()["top_class"] == "flights"
    children = platform.process_tree()
    assert platform.stop() == 0
    wait_until(lambda: not platform.still_running(children), timeout=15, message="children stopped")


def test_sighup_of_a_closed_terminal_stops_every_child_in_order(
    platform_factory: Callable[..., Any], wait_until: Callable[..., Any]
) -> None:
    """SIGHUP's default action ended `taas up` at once, and the kernel then stopped every child
    together: Redis went while the workers were putting their jobs back on the queue."""
    platform = platform_factory(workers=0)
    platform.start()
    children = platform.process_tree()
    assert platform.process is not None

    platform.process.send_signal(signal.SIGHUP)

    assert platform.exit_status(90, after="SIGHUP") == 0, platform.output()
    assert "received SIGHUP, stopping" in platform.output()
    wait_until(lambda: not platform.still_running(children), timeout=15, message="children stopped")


def test_a_second_ctrl_c_stops_at_once_a_child_that_does_not_stop(
    platform_factory: Callable[..., Any], wait_until: Callable[..., Any]
) -> None:
    """The stop waited each child's grace (a minute for a worker, 15 s for the API) whatever the
    user did: a second Ctrl-C now kills the children still running."""
    platform = platform_factory(workers=0)
    platform.start()
    children = platform.process_tree()
    (api,) = [pid for pid in children if "uvicorn" in command_line(pid)]
    os.kill(api, signal.SIGSTOP)  # hung: SIGTERM stays pending
    assert platform.process is not None

    platform.process.send_signal(signal.SIGINT)
    wait_until(lambda: "stopping (Ctrl-C again" in platform.output(), timeout=15, message="stopping")
    platform.process.send_signal(signal.SIGINT)

    assert platform.exit_status(10, after="a second SIGINT") == 0, platform.output()  # under the API's 15 s
    assert "received a signal while stopping: stopping at once" in platform.output()
    wait_until(lambda: not platform.still_running(children), timeout=15, message="children stopped")


def test_a_first_ctrl_c_hurries_a_stop_that_a_dying_child_began(
    platform_factory: Callable[..., Any], wait_until: Callable[..., Any]
) -> None:
    """A child that keeps dying makes `taas up` give up and stop the others, each within its
    grace. Only a second signal hurried that stop, so the user's first Ctrl-C did nothing for
    up to a minute; now any signal during a stop kills the children still running."""
    platform = platform_factory(workers=0)
    platform.start()
    (api,) = [pid for pid in platform.process_tree() if "uvicorn" in command_line(pid)]
    os.kill(api, signal.SIGSTOP)  # hung: SIGTERM stays pending, its 15 s of grace would run out
    assert platform.process is not None
    killed: set[int] = set()

    def reconciler_killed_until_given_up() -> bool:
        if "giving up" in platform.output():
            return True
        for pid in platform.process_tree() - killed:
            if "workers.reconciler" in command_line(pid):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        return False

    wait_until(reconciler_killed_until_given_up, timeout=60, interval=0.1, message="taas up gave up")
    platform.process.send_signal(signal.SIGINT)

    assert platform.exit_status(10, after="SIGINT") == 1, platform.output()  # under the API's 15 s of grace
    assert "received a signal while stopping: stopping at once" in platform.output()


def _assert_the_embedded_redis_wants_its_password(data_dir: Path, pids: set[int]) -> None:
    """Every process on the host reaches loopback; only this user reads the password's file."""
    assert stat.S_IMODE((data_dir / "redis" / "auth.conf").stat().st_mode) == 0o600
    (title,) = [command_line(p) for p in pids if "redis-server" in command_line(p)]
    port = int(title.split()[1].rpartition(":")[2])  # redis-server sets it to "<binary> 127.0.0.1:<port>"
    with redis.Redis(port=port, socket_timeout=5) as stranger, pytest.raises(redis.AuthenticationError):
        stranger.ping()


def test_job_training_at_sigterm_checkpoints_and_the_next_up_resumes_it(
    platform_factory: Callable[..., Any], tmp_path: Path, wait_until: Callable[..., Any]
) -> None:
    platform = platform_factory()
    platform.start()
    tenant_key = platform.create_tenant()
    # the crash benchmark's job: long enough to interrupt (SNIPS trains in a few seconds now)
    training_csv = tmp_path / "long.csv"
    training_csv.write_text(chaos.long_csv())
    with platform.client(tenant_key) as client:
        classifier_id = create_classifier(client, training_csv, "long", chaos.NGRAM_LANGUAGE)

        def training_steps() -> bool:
            info = client.get(f"/v1/classifiers/{classifier_id}").json()
            assert info["status"] == "Training", "trained before it could be interrupted"
            return bool(info["progress"]["step"])

        wait_until(training_steps, timeout=TRAIN_TIMEOUT, interval=0.05, message="training under way")

    assert platform.stop() == 0

    platform.start()
    with platform.client(tenant_key) as client:
        info, _ = wait_available(client, classifier_id, wait_until)
    assert info["progress"]["attempts"] == 2
    assert info["progress"]["resumed"] >= 1


def test_a_ctrl_c_while_taas_loads_ends_it_with_130_and_no_traceback(tmp_path: Path) -> None:
    """The CLI's imports take a second or so; a Ctrl-C in them printed a KeyboardInterrupt's
    traceback from whichever module was loading. The signal is sent once the first of them
    (httpx) has loaded, as Python's import-time profile reports it on stderr."""
    taas = str(Path(sys.executable).with_name("taas"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAAS_")}
    env["PYTHONPROFILEIMPORTTIME"] = "1"
    up = subprocess.Popen(
        [taas, "up", "--port", str(chaos.free_port()), "--data-dir", str(tmp_path / "var")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # a terminal's Ctrl-C: pytest-xdist's workers ignore SIGINT, and their children inherit it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    watchdog = threading.Timer(60, up.kill)  # the reads below block until taas ends
    watchdog.start()
    try:
        assert up.stderr is not None
        for line in up.stderr:
            if line.split("|")[-1].strip() == "httpx":
                break
        else:
            pytest.fail("httpx was never imported")

        up.send_signal(signal.SIGINT)
        rest = up.stderr.read()

        assert up.wait(timeout=30) == 130, rest[-2000:]
        assert "Traceback" not in rest and "KeyboardInterrupt" not in rest, rest[-2000:]
        assert not (tmp_path / "var").exists()  # it stopped before doing anything
    finally:
        watchdog.cancel()
        if up.poll() is None:
            up.kill()
            up.wait()


def test_the_supervisor_keeps_supervising_when_its_stderr_cannot_be_written(tmp_path: Path) -> None:
    """With stderr in a file on a full disk, the OSError of a child's exit line ended `taas up`
    and every process with it. Here stderr is a pipe whose reader has gone (EPIPE)."""
    port = chaos.free_port()
    taas = str(Path(sys.executable).with_name("taas"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAAS_")}
    up = subprocess.Popen(
        [taas, "up", "--port", str(port), "--data-dir", str(tmp_path / "var")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert up.stdout is not None and up.stderr is not None
        for line in up.stdout:
            if b"taas is up" in line:
                break
        up.stderr.close()  # the next line the supervisor writes there fails
        [worker] = [
            p for p in descendants(up.pid) if command_line(p).split()[-3:] == ["-m", "workers", "--quiet"]
        ]

        os.kill(worker, signal.SIGKILL)

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            restarted = [
                p for p in descendants(up.pid) if command_line(p).split()[-3:] == ["-m", "workers", "--quiet"]
            ]
            if restarted and restarted != [worker]:
                break
            assert up.poll() is None, "taas up died"
            time.sleep(0.2)
        else:
            pytest.fail("the killed worker was not restarted")
        assert httpx.get(f"http://127.0.0.1:{port}/v1/classifiers").status_code == 401
    finally:
        up.terminate()
        up.wait(timeout=90)

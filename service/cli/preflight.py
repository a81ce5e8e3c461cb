"""What the server commands check and prepare before they start: the data dir (writable, with
room), the port, Redis, the S3 artifact store, the database schema, the admin key, and the lock
that keeps two ``taas up`` off one data dir. Each refusal is one line on stderr and exit
status 1 (:func:`service.cli.output.fail`)."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import redis

from service.cli.migrations import require_migrated
from service.cli.output import fail
from service.core.sealing import SECRETS_KEY_FILE, SealingError, ensure_key_file, key_ring
from service.core.settings import Settings, admin_key_problem
from service.tenants.accounts import new_admin_key


def prepare_data_dir(data_dir: Path) -> Path:
    """Create the data dir and check that it is writable, with room: a megabyte is written and
    flushed (an empty file fitted a full disk, whose first write then failed with a traceback
    and left an empty admin.key); returns its absolute path. A new one is this user's alone
    (0700): it holds the database, the Redis append-only file with the dashboard's sessions,
    and every tenant's data; an existing one keeps the mode its owner gave it."""
    path = data_dir.expanduser().resolve()
    if path.exists() and not path.is_dir():
        fail(f"data dir {path} is not a directory")
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path) as probe:
            probe.write(bytes(1 << 20))
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            fail(f"data dir {path} is full ({error.strerror}): free some space")
        fail(f"data dir {path} is not writable: {error.strerror}")
    return path


def check_redis(url: str) -> None:
    """Exit with a one-line error unless the Redis at ``url`` answers: the workers would retry
    it for ever while taas said it was up."""
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
        client.ping()
        client.close()
    except (redis.RedisError, ValueError) as error:
        parts = urlsplit(url)
        where = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()  # no password
        fail(f"cannot reach Redis at {where} (TAAS_REDIS_URL): {error}")


def check_port_free(host: str, port: int) -> None:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        fail(f"cannot listen on {host}:{port}: {error.strerror}")
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            fail(f"cannot listen on {host}:{port}: {error.strerror} (choose another with --port)")


def require_services(settings: Settings) -> None:
    """Exit with a one-line error unless the database is migrated and the Redis URL is set:
    what the API, a worker, the reconciler and the webhook worker need before they take any
    request or message."""
    require_migrated(settings)
    try:
        settings.require_redis_url()
    except RuntimeError as error:
        fail(str(error))


def require_encoders(settings: Settings) -> None:
    """Exit with a one-line error unless every pretrained sentence encoder taas trains on is
    installed (unless TAAS_SENTENCE_ENCODER is off): a worker without it would fail every
    English job, and an API could serve none of their classifiers."""
    if not settings.sentence_encoder:
        return
    from trainer.encoder import ENCODERS, EncoderUnavailable

    for spec in ENCODERS.values():
        try:
            spec.files()
        except EncoderUnavailable as error:
            fail(f"{error} (or set TAAS_SENTENCE_ENCODER=0 to train n-gram models only)")


def require_store(settings: Settings) -> None:
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
        fail(f"{error} (TAAS_ARTIFACTS_URL, TAAS_S3_ENDPOINT_URL)")


def admin_key_for(settings: Settings) -> tuple[str, Path, bool]:
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
            fail(f"{key_file} is empty; delete it to generate a new admin key")
        problem = admin_key_problem(stored)
        if problem:
            fail(f"{key_file}: {problem}; or delete the file to generate a new admin key")
        return stored, key_file, False
    try:
        with os.fdopen(fd, "w") as out:
            out.write(key + "\n")
            out.flush()
            os.fsync(out.fileno())
    except OSError as error:  # an empty key file would refuse every later start
        key_file.unlink(missing_ok=True)
        fail(f"cannot write {key_file}: {error.strerror}")
    return key, key_file, True


def secrets_key_ready(settings: Settings, *, make: bool) -> None:
    """Exit with a one-line error unless a key seals secrets at rest (``TAAS_SECRETS_KEY``, else
    ``<data-dir>/secrets.key``); with ``make``, that file is made (mode 0600) when neither
    exists. Only a process whose data dir is the installation's own may make it (``taas up``,
    ``taas api``): a webhook worker with a key of its own could not open what the API sealed."""
    if settings.secrets_key is None and make:
        try:
            ensure_key_file(settings.data_dir)
        except OSError as error:
            fail(f"cannot write {settings.data_dir / SECRETS_KEY_FILE}: {error.strerror or error}")
    try:
        key_ring(settings)
    except SealingError as error:
        fail(str(error))


@contextlib.contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive lock on the data dir: two `taas up` must not share one Redis AOF."""
    with open(lock_file, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fail(f"another `taas up` is running on {lock_file.parent}")
        yield

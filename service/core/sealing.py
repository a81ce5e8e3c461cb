"""Secrets at rest: what taas must read back in plain text (a tenant's webhook signing secret)
is stored sealed, with AES-256-GCM under a key the operator supplies.

API keys need no such thing: only their SHA-256 is stored. A webhook secret must be read to
sign, so a database dump or backup with it in plain text let anyone forge any tenant's webhooks.

**The key** is ``TAAS_SECRETS_KEY``, any string of 32 characters or more, else the file
``<data-dir>/secrets.key`` (mode 0600) that ``taas up``, ``taas api`` and ``taas migrate`` make
once when the variable is unset (:func:`ensure_key_file`). Every process that reads or writes
secrets must have the same key: the API and the webhook worker (and ``taas migrate``, which seals
the plain-text secrets of older releases). Training workers and the reconciler need none. The
AES key is derived from it with HKDF-SHA256, so a passphrase serves as well as random bytes.

**A sealed value** reads ``taas1:<key id>:<base64url of nonce, ciphertext and tag>``. The key id
(8 hex digits of a digest of the derived key) names the key that sealed it, so that during a
rotation the former keys (``TAAS_SECRETS_OLD_KEYS``, comma-separated) still open what they
sealed while ``taas reseal`` seals it all again under the current one. The associated data
binds a value to its place (``tenants.webhook_secret:<tenant id>``): a sealed value copied into
another row does not open.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from service.core.settings import SECRETS_KEY_MIN_CHARS, Settings

SECRETS_KEY_FILE = "secrets.key"  # in the data dir, when TAAS_SECRETS_KEY is unset
PREFIX = "taas1"
_INFO = b"taas secrets at rest v1"
_NONCE_BYTES = 12


class SealingError(Exception):
    """A secret cannot be sealed or opened: no key, a key that does not open it, or a sealed
    value that was altered. The message says which, and never holds a secret."""


class NoSecretsKey(SealingError):
    """Neither ``TAAS_SECRETS_KEY`` nor ``<data-dir>/secrets.key`` gives a key."""


@dataclass(frozen=True)
class _Key:
    id: str
    aead: AESGCM


def _derive(passphrase: str) -> _Key:
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(passphrase.encode())
    key_id = hashlib.sha256(b"taas key id\0" + raw).hexdigest()[:8]
    return _Key(key_id, AESGCM(raw))


class KeyRing:
    """The current key, which seals, and the former ones, which only open."""

    def __init__(self, current: str, former: tuple[str, ...] = ()) -> None:
        self._current = _derive(current)
        self._keys = {k.id: k for k in (*map(_derive, former), self._current)}

    @property
    def key_id(self) -> str:
        """The id of the current key (what :meth:`seal` writes)."""
        return self._current.id

    def seal(self, plaintext: str, *, place: str) -> str:
        """``plaintext`` sealed under the current key, bound to ``place``."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._current.aead.encrypt(nonce, plaintext.encode(), place.encode())
        body = base64.urlsafe_b64encode(nonce + sealed).rstrip(b"=").decode("ascii")
        return f"{PREFIX}:{self._current.id}:{body}"

    def open(self, sealed: str, *, place: str) -> str:
        """The plaintext of ``sealed``; SealingError when it is not a sealed value, no key of
        the ring sealed it, or it was altered or moved from another place."""
        prefix, key_id, body = (sealed.split(":", 2) + ["", ""])[:3]
        if prefix != PREFIX:
            raise SealingError(f"the value at {place} is not sealed (it does not start {PREFIX}:)")
        key = self._keys.get(key_id)
        if key is None:
            raise SealingError(
                f"the value at {place} was sealed with key {key_id}, which is neither TAAS_SECRETS_KEY "
                f"(key {self._current.id}) nor one of TAAS_SECRETS_OLD_KEYS"
            )
        try:
            data = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
            return key.aead.decrypt(data[:_NONCE_BYTES], data[_NONCE_BYTES:], place.encode()).decode()
        except (ValueError, InvalidTag):
            raise SealingError(f"the value at {place} does not open: it was altered or moved") from None

    def is_current(self, sealed: str) -> bool:
        """Whether ``sealed`` is sealed under the current key (else ``taas reseal`` reseals it)."""
        return sealed.startswith(f"{PREFIX}:{self._current.id}:")


def is_sealed(value: str) -> bool:
    """Whether ``value`` has the form of a sealed value (a plain-text secret of an older
    release does not)."""
    return value.startswith(f"{PREFIX}:")


def key_ring(settings: Settings) -> KeyRing:
    """The installation's key ring: ``TAAS_SECRETS_KEY`` (with ``TAAS_SECRETS_OLD_KEYS``), else
    ``<data-dir>/secrets.key``. NoSecretsKey when there is neither. Memoised by the keys (and
    by the file's identity), so each call costs a ``stat`` at most."""
    former = tuple(k for k in (settings.secrets_old_keys or "").replace(",", " ").split() if k)
    if settings.secrets_key:
        return _ring(settings.secrets_key, former)
    path = (settings.data_dir / SECRETS_KEY_FILE).resolve()
    try:
        stat = path.stat()
    except FileNotFoundError:
        raise NoSecretsKey(
            f"no key to seal secrets with: set TAAS_SECRETS_KEY (the same in the API, the webhook "
            f"worker and `taas migrate`), or run `taas up`, `taas api` or `taas migrate`, which make "
            f"{path} once"
        ) from None
    return _ring_from_file(path, stat.st_mtime_ns, stat.st_ino, former)


@functools.lru_cache(maxsize=8)
def _ring(current: str, former: tuple[str, ...]) -> KeyRing:
    return KeyRing(current, former)


@functools.lru_cache(maxsize=8)
def _ring_from_file(path: Path, _mtime_ns: int, _inode: int, former: tuple[str, ...]) -> KeyRing:
    key = path.read_text().strip()
    if len(key) < SECRETS_KEY_MIN_CHARS:
        raise NoSecretsKey(f"{path} holds no key of {SECRETS_KEY_MIN_CHARS} characters or more")
    return KeyRing(key, former)


def ensure_key_file(data_dir: Path) -> Path | None:
    """Make ``<data-dir>/secrets.key`` (mode 0600 from its first byte) unless it exists; the
    path when it was made now, else None. OSError when it cannot be written (an empty file is
    removed again: it would refuse every later start)."""
    path = data_dir / SECRETS_KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return None
    try:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(32) + "\n")
            out.flush()
            os.fsync(out.fileno())
    except OSError:
        path.unlink(missing_ok=True)
        raise
    return path

"""The key-based artifact interface that every backend satisfies (local folder, S3-compatible).

A *key* is a store-relative POSIX path, the form the database already keeps
(``tenants/<tenant>/datasets/<id>.csv``): no leading ``/``, no empty, ``.`` or ``..`` segment, no
backslash. Every write is atomic for readers: a reader sees the old object, no object, or the
whole new one, never a part (local: temp file, fsync, rename; S3: a PUT or a completed
multipart upload is atomic).

Trees (a model folder, a checkpoint folder) are copied file by file under a key prefix, so a
worker node can keep a node-local working copy and sync it with the store.

Failures are OSErrors on every backend: FileNotFoundError for a missing object, and
:class:`StoreUnavailable` when a remote store does not answer or refuses (S3 unreachable, a
missing bucket, rejected credentials).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable


class StoreUnavailable(OSError):
    """A remote artifact store did not do what it was asked: unreachable, a missing bucket,
    rejected credentials, a failed request. No fault of the data: a worker waits it out without
    counting a failed attempt, and the API answers a 503."""


def check_key(key: str) -> str:
    """``key`` if it is a valid store key; raises ValueError otherwise."""
    if not isinstance(key, str) or not key or key.startswith("/") or "\\" in key:
        raise ValueError(f"not a store key: {key!r}")
    if any(part in {"", ".", ".."} for part in key.split("/")):
        raise ValueError(f"not a store key: {key!r}")
    return key


def check_prefix(prefix: str) -> str:
    """A key prefix naming a folder (no trailing ``/``); ``""`` is the whole store."""
    prefix = prefix.rstrip("/")
    return prefix if not prefix else check_key(prefix)


def join_key(prefix: str, relative: str) -> str:
    """``prefix/relative`` (either may be empty), validated."""
    return check_key("/".join(part for part in (prefix.rstrip("/"), relative) if part))


@runtime_checkable
class ArtifactBackend(Protocol):
    """What the API and the workers need from an artifact store, whatever holds the bytes."""

    def describe(self) -> str:
        """Where the artifacts live, for logs (``file:///...`` or ``s3://bucket/prefix``)."""
        ...

    def check(self) -> None:
        """Raise OSError when the store cannot be reached or written (start-up check)."""
        ...

    def exists(self, key: str) -> bool:
        """Whether an object is stored under ``key``."""
        ...

    def put_bytes(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` atomically, replacing any object there."""
        ...

    def get_bytes(self, key: str) -> bytes:
        """The object under ``key``; FileNotFoundError when there is none."""
        ...

    def upload(self, source: Path, key: str) -> None:
        """Copy the local file ``source`` to ``key`` atomically (``source`` is kept)."""
        ...

    def download(self, key: str, dest: Path) -> None:
        """Copy ``key`` to the local file ``dest`` atomically (parents are created);
        FileNotFoundError when there is no such object."""
        ...

    def list_keys(self, prefix: str = "") -> list[str]:
        """Every key under the folder ``prefix`` (recursive), sorted. ``a/b`` does not match
        ``a/bc/...``."""
        ...

    def modified(self, prefix: str = "") -> dict[str, float]:
        """``list_keys``'s keys, each with when its object was last written (seconds since the
        epoch): how long a leftover has lain untouched."""
        ...

    def delete(self, key: str) -> None:
        """Remove the object under ``key`` if there is one."""
        ...

    def delete_prefix(self, prefix: str) -> int:
        """Remove every object under the folder ``prefix``; returns how many were removed."""
        ...

    def upload_tree(self, source_dir: Path, prefix: str, *, mirror: bool = False) -> int:
        """Copy every file under ``source_dir`` to ``prefix/<relative path>``; with ``mirror``,
        then remove the objects under ``prefix`` that ``source_dir`` no longer has (new files
        land before old ones go). Returns the number of files copied."""
        ...

    def download_tree(self, prefix: str, dest_dir: Path) -> int:
        """Copy every object under ``prefix`` to ``dest_dir/<relative key>``; returns how many."""
        ...


class TreeOps:
    """``upload_tree`` / ``download_tree`` in terms of the single-object operations."""

    def list_keys(self, prefix: str = "") -> list[str]:  # pragma: no cover - provided by the backend
        raise NotImplementedError

    def upload(self, source: Path, key: str) -> None:  # pragma: no cover - provided by the backend
        raise NotImplementedError

    def download(self, key: str, dest: Path) -> None:  # pragma: no cover - provided by the backend
        raise NotImplementedError

    def delete(self, key: str) -> None:  # pragma: no cover - provided by the backend
        raise NotImplementedError

    def upload_tree(self, source_dir: Path, prefix: str, *, mirror: bool = False) -> int:
        prefix = check_prefix(prefix)
        files = sorted(p for p in source_dir.rglob("*") if p.is_file() and not is_staging(p.name))
        written = set()
        for path in files:
            key = join_key(prefix, path.relative_to(source_dir).as_posix())
            self.upload(path, key)
            written.add(key)
        if mirror:
            for key in self.list_keys(prefix):
                if key not in written:
                    self.delete(key)
        return len(files)

    def download_tree(self, prefix: str, dest_dir: Path) -> int:
        prefix = check_prefix(prefix)
        keys = self.list_keys(prefix)
        for key in keys:
            relative = key[len(prefix) + 1 :] if prefix else key
            self.download(key, dest_dir.joinpath(*relative.split("/")))
        return len(keys)


def is_staging(name: str) -> bool:
    """A half-written local file (``.<name>.<hex>.tmp``), never part of a tree or a listing."""
    return name.startswith(".") and name.endswith(".tmp")

"""The artifact store: datasets, checkpoints and models under one root, scoped by tenant.

Layout (paths in the database are relative to the root, POSIX style)::

    tenants/<tenant_id>/datasets/<dataset_id>.csv
    tenants/<tenant_id>/classifiers/<classifier_id>/versions/<n>/checkpoints/
    tenants/<tenant_id>/classifiers/<classifier_id>/versions/<n>/model/
    tmp/                                staging: files are validated here, then moved in

Besides these path methods, the store has the key-based interface that every artifact backend
shares (:class:`service.storage.base.ArtifactBackend`: ``put_bytes``, ``upload``, ``download``,
``list_keys``, ``upload_tree`` ...), so code written against keys runs unchanged on the
S3-compatible backend (:mod:`service.storage.s3`).

Nodes without a shared file system (``TAAS_ARTIFACTS_URL=s3://...``): every node keeps its own
local root as a working copy of a *remote* backend, by key. Writes go through to the remote
(``put_file``, ``publish``) before the database row naming them is written; deletes remove
both copies; reads fetch on a local miss (``fetch``). A copy this node will not read again is
not kept: an upload goes to the remote only (``put_file``), a worker drops its job's
dataset and model once the job has succeeded (``drop_local``), and an API node drops the
model folders it fetched once they have not been loaded for a while (``sweep_model_copies``:
a loaded model is served from memory, and a later load fetches the folder again). Every
path the database names is written once and never rewritten (models and checkpoints live in
per-claim folders), so a node's local copy of a key is never stale. Without a remote, the
local root is the store and the remote operations do nothing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
import uuid
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, TypeVar

from service.storage.base import ArtifactBackend, TreeOps, check_key, check_prefix, is_staging

if TYPE_CHECKING:
    from service.core.settings import Settings

T = TypeVar("T")


class ArtifactStore(TreeOps):
    """Tenant-scoped file layout with atomic puts; the root may be a local dir or a shared volume."""

    def __init__(self, root: Path, remote: ArtifactBackend | None = None) -> None:
        self.root = root.resolve()
        self.remote = remote

    @classmethod
    def open(cls, settings: Settings) -> ArtifactStore:
        """The node's store: the local artifact root, with the S3 remote when one is configured."""
        remote = open_backend(settings) if settings.artifacts_url else None
        return cls(settings.resolved_artifacts_dir(), remote)

    def tenant_dir(self, tenant_id: str) -> Path:
        """The folder holding everything a tenant owns (datasets, classifiers)."""
        return self.root / "tenants" / _safe(tenant_id)

    def dataset_path(self, tenant_id: str, dataset_id: str) -> Path:
        """Where a tenant's stored dataset (canonical CSV) lives."""
        return self.tenant_dir(tenant_id) / "datasets" / f"{_safe(dataset_id)}.csv"

    def classifier_dir(self, tenant_id: str, classifier_id: str) -> Path:
        """The folder holding everything a classifier owns (checkpoints, model)."""
        return self.tenant_dir(tenant_id) / "classifiers" / _safe(classifier_id)

    def version_dir(self, tenant_id: str, classifier_id: str, version: int) -> Path:
        """The folder holding everything one version of a classifier owns."""
        if version < 1:
            raise ValueError(f"not a version number: {version!r}")
        return self.classifier_dir(tenant_id, classifier_id) / "versions" / str(version)

    def checkpoint_dir(self, tenant_id: str, classifier_id: str, version: int) -> Path:
        """The trainer's ``workdir`` for a version's job: checkpoints to resume from."""
        return self.version_dir(tenant_id, classifier_id, version) / "checkpoints"

    def model_dir(self, tenant_id: str, classifier_id: str, version: int) -> Path:
        """Where the trained model of a classifier's version is written."""
        return self.version_dir(tenant_id, classifier_id, version) / "model"

    def temp_path(self, suffix: str = "", *, owner: str | None = None) -> Path:
        """A fresh path in the staging folder (same file system as the store, so moves are atomic).

        With ``owner`` (a tenant's id) the name starts ``<owner>.``, so that :meth:`staged_bytes`
        counts it against that tenant while it exists."""
        staging = self.root / "tmp"
        staging.mkdir(mode=0o700, parents=True, exist_ok=True)
        prefix = "" if owner is None else f"{_safe(owner)}{_OWNER_MARK}"
        return staging / f"{prefix}{uuid.uuid4().hex}{suffix}"

    def staged_bytes(self, owner: str) -> int:
        """The bytes in the staging folder now under ``owner``'s name (:meth:`temp_path`): files,
        and every file inside folders (an unpacked bundle). Entries that go while they are
        counted count as nothing."""
        prefix = f"{_safe(owner)}{_OWNER_MARK}"
        total = 0
        try:
            entries = list(os.scandir(self.root / "tmp"))
        except FileNotFoundError:
            return 0
        for entry in entries:
            if entry.name.startswith(prefix):
                total += _bytes_under(Path(entry.path))
        return total

    def sweep_staging(self, max_age_seconds: float) -> int:
        """Delete staging entries not modified for ``max_age_seconds`` (uploads and downloads
        cut off by a crash); returns how many went. Safe beside another sweeper of the same
        root: an entry already gone is skipped."""
        staging = self.root / "tmp"
        if not staging.is_dir():
            return 0
        cutoff = time.time() - max_age_seconds
        swept = 0
        for entry in staging.iterdir():
            try:
                if entry.lstat().st_mtime >= cutoff:
                    continue
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
                swept += 1
            except FileNotFoundError:
                continue
        return swept

    def sweep_model_copies(self, max_age_seconds: float) -> int:
        """With a remote, drop this node's copies of model folders not fetched for a load for
        ``max_age_seconds`` (``fetch`` marks a folder each time it is asked for one); returns
        how many went. Nothing without a remote: the local root is then the store.

        Only model folders, which are complete once they appear and never rewritten: a job's
        checkpoints, which a worker sharing this root may be writing, are never touched. A
        process still serving such a model does so from memory; one loading it as it goes
        fetches it again (:func:`read_fetched`).
        """
        if self.remote is None:
            return 0
        cutoff = time.time() - max_age_seconds
        swept = 0
        for folder in self.root.glob("tenants/*/classifiers/*/versions/*/model/*"):
            try:
                if not folder.is_dir() or folder.stat().st_mtime >= cutoff:
                    continue
            except FileNotFoundError:
                continue
            self.drop_local(folder)
            swept += 1
        return swept

    def sweep_work_copies(self, max_age_seconds: float) -> int:
        """With a remote, drop this node's copies of datasets, and its checkpoint folders, that
        nothing touched for ``max_age_seconds``; returns how many went. Nothing without a
        remote: the local root is then the store.

        A worker keeps a job's dataset copy and checkpoints after a failed or stopped attempt,
        so that a retry here resumes without a download, and drops them when the job succeeds
        here; a job that then succeeded on another node, Failed or was deleted left them on
        this disk for ever. The remote holds each one still wanted (a resume fetches it again).
        A training job touches its checkpoint folder as it reports progress (about once a
        second), so a folder in use is never this old, whatever the checkpoint cadence.
        """
        if self.remote is None:
            return 0
        cutoff = time.time() - max_age_seconds
        swept = 0
        copies = [
            *self.root.glob("tenants/*/datasets/*"),
            *self.root.glob("tenants/*/classifiers/*/versions/*/checkpoints/*"),
        ]
        for copy in copies:
            try:
                if _last_touched(copy) >= cutoff:
                    continue
            except FileNotFoundError:
                continue
            self.drop_local(copy)
            swept += 1
        return swept

    def relative(self, path: Path) -> str:
        """The store-relative POSIX form of ``path``; raises ValueError if it lies outside the root."""
        return path.resolve().relative_to(self.root).as_posix()

    def resolve(self, relative: str) -> Path:
        """The absolute path of a store-relative one; raises ValueError on absolute paths or ``..``."""
        return _resolve(self.root, relative)

    def put_file(self, source: Path, dest: Path) -> None:
        """Store ``source`` as ``dest`` atomically (a reader sees no file or the whole file):
        moved here, or, with a remote store, uploaded there only. A node that wrote a file this
        way does not read it again (an API node's upload; a worker fetches it on a miss), so
        a copy here would only fill the node's disk.

        ``source`` is consumed, whatever happens. Raises OSError (or the remote's error) on
        failure.
        """
        if self.remote is None:
            self._put_local(source, dest)
            return
        try:
            self.remote.upload(source, self.relative(dest))
        finally:
            source.unlink(missing_ok=True)

    def drop_local(self, path: Path) -> None:
        """Remove this node's copy of a file or folder that the remote store holds (nothing
        without a remote: the local root is then the store). A folder is renamed into staging
        first, so a reader finds it whole or not at all (and then fetches it again:
        :func:`read_fetched`)."""
        if self.remote is None:
            return
        if not path.is_dir():
            path.unlink(missing_ok=True)
            return
        doomed = self.temp_path(".dropped")
        try:
            os.replace(path, doomed)
        except FileNotFoundError:
            return
        shutil.rmtree(doomed, ignore_errors=True)

    def _put_local(self, source: Path, dest: Path) -> None:
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.stat().st_dev == dest.parent.stat().st_dev:
                os.replace(source, dest)
                return
            _copy_atomically(source, dest)  # another filesystem: os.replace cannot move it
        finally:
            source.unlink(missing_ok=True)

    def delete_file(self, path: Path) -> None:
        """Remove one stored file if present (here and on the remote)."""
        path.unlink(missing_ok=True)
        if self.remote is not None:
            self.remote.delete(self.relative(path))

    def delete_tree(self, folder: Path, *, keep: Path | None = None) -> None:
        """Remove a folder and everything in it, here and on the remote; with ``keep``, all but
        that subfolder (the remote may hold subfolders that other nodes wrote)."""
        if keep is None:
            shutil.rmtree(folder, ignore_errors=True)
        elif folder.is_dir():
            for child in folder.iterdir():
                if child != keep:
                    shutil.rmtree(child, ignore_errors=True)
        if self.remote is None:
            return
        if keep is None:
            self.remote.delete_prefix(self.relative(folder))
            return
        kept = self.relative(keep) + "/"
        for key in self.remote.list_keys(self.relative(folder)):
            if not key.startswith(kept):
                self.remote.delete(key)

    def delete_classifier(self, tenant_id: str, classifier_id: str) -> None:
        """Remove a classifier's checkpoints and model, if any."""
        self.delete_tree(self.classifier_dir(tenant_id, classifier_id))

    def delete_tenant(self, tenant_id: str) -> None:
        """Remove everything stored for a tenant: datasets, classifiers, leftovers."""
        self.delete_tree(self.tenant_dir(tenant_id))

    # --- the node-local working copy of a remote store -------------------------------------
    def publish(self, path: Path) -> None:
        """Copy a file or folder this node wrote under the root to the remote store (no-op
        without one)."""
        if self.remote is None:
            return
        key = self.relative(path)
        if path.is_dir():
            self.remote.upload_tree(path, key)
        else:
            self.remote.upload(path, key)

    def prune(self, folder: Path) -> None:
        """Remove the remote objects under ``folder`` that the local folder no longer has (e.g.
        the checkpoints the trainer rotated out)."""
        if self.remote is None:
            return
        here = {self.relative(p) for p in folder.rglob("*") if p.is_file()} if folder.is_dir() else set()
        for key in self.remote.list_keys(self.relative(folder)):
            if key not in here:
                self.remote.delete(key)

    def fetch(self, path: Path, *, folder: bool = False) -> Path:
        """``path`` under the root, copied from the remote store first when it is not here.

        A folder arrives whole or not at all (downloaded to staging, then renamed in), so a
        reader never loads half a model. With a remote, a folder's modification time is set to
        now, the mark :meth:`sweep_model_copies` ages it by. FileNotFoundError when neither
        copy exists.
        """
        if path.is_dir() if folder else path.is_file():
            if folder and self.remote is not None:
                os.utime(path)  # FileNotFoundError if dropped meanwhile: read_fetched fetches again
            return path
        if self.remote is None:
            raise FileNotFoundError(f"no artifact {self.relative(path)!r} in {self.describe()}")
        key = self.relative(path)
        if not folder:
            self.remote.download(key, path)
            return path
        staging = self.temp_path(".fetch")
        try:
            if self.remote.download_tree(key, staging) == 0:
                raise FileNotFoundError(f"no artifact folder {key!r} in {self.remote.describe()}")
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.replace(staging, path)
            except OSError:
                if not path.is_dir():  # not "another request fetched it first"
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return path

    # --- the key-based backend interface (service.storage.base.ArtifactBackend) ---------------
    def describe(self) -> str:
        """Where the artifacts live: ``file://<root>``."""
        return self.root.as_uri()

    def check(self) -> None:
        """Raise OSError unless the root exists (it is created) and is writable."""
        self.root.mkdir(parents=True, exist_ok=True)
        probe = self.temp_path(".probe")
        probe.write_bytes(b"")
        probe.unlink()

    def exists(self, key: str) -> bool:
        """Whether a file is stored under ``key``."""
        return self._keypath(key).is_file()

    def put_bytes(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` atomically (temp file, fsync, rename)."""
        dest = self._keypath(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        staged = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.tmp")
        try:
            with open(staged, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(staged, dest)
        finally:
            staged.unlink(missing_ok=True)

    def get_bytes(self, key: str) -> bytes:
        """The file under ``key``; FileNotFoundError when there is none."""
        return self._keypath(key).read_bytes()

    def upload(self, source: Path, key: str) -> None:
        """Copy the local file ``source`` to ``key`` atomically; ``source`` is kept."""
        dest = self._keypath(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        _copy_atomically(source, dest)

    def download(self, key: str, dest: Path) -> None:
        """Copy ``key`` to the local file ``dest`` atomically; FileNotFoundError when absent."""
        source = self._keypath(key)
        if not source.is_file():
            raise FileNotFoundError(f"no artifact {key!r} in {self.describe()}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        _copy_atomically(source, dest)

    def list_keys(self, prefix: str = "") -> list[str]:
        """Every key under the folder ``prefix``, sorted (staging files are never listed)."""
        prefix = check_prefix(prefix)
        folder = self._keypath(prefix) if prefix else self.root
        if not folder.is_dir():
            return []
        keys = []
        for path in folder.rglob("*"):
            if path.is_file() and not is_staging(path.name):
                key = path.relative_to(self.root).as_posix()
                if prefix or not key.startswith("tmp/"):
                    keys.append(key)
        return sorted(keys)

    def modified(self, prefix: str = "") -> dict[str, float]:
        """``list_keys``'s keys, each with its file's modification time."""
        found = {}
        for key in self.list_keys(prefix):
            with contextlib.suppress(FileNotFoundError):  # removed since it was listed
                found[key] = self._keypath(key).stat().st_mtime
        return found

    def delete(self, key: str) -> None:
        """Remove the file under ``key`` if present."""
        self._keypath(key).unlink(missing_ok=True)

    def delete_prefix(self, prefix: str) -> int:
        """Remove the folder ``prefix`` and everything in it; returns how many files went."""
        keys = self.list_keys(prefix)
        folder = self._keypath(check_prefix(prefix)) if prefix.strip("/") else None
        if folder is None:
            for key in keys:
                self.delete(key)
        else:
            shutil.rmtree(folder, ignore_errors=True)
        return len(keys)

    def _keypath(self, key: str) -> Path:
        return self.resolve(check_key(key))


def open_backend(settings: Settings) -> ArtifactBackend:
    """The artifact backend that ``settings`` name: S3 when ``artifacts_url`` is set, else the
    local folder ``resolved_artifacts_dir()``."""
    if settings.artifacts_url:
        from service.storage.s3 import S3ArtifactStore

        return S3ArtifactStore(
            settings.artifacts_url,
            endpoint_url=settings.s3_endpoint_url or None,
            region=settings.s3_region or None,
            addressing_style=settings.s3_addressing_style,
        )
    return ArtifactStore(settings.resolved_artifacts_dir())


def _last_touched(path: Path) -> float:
    """The newest modification time of ``path``, or of a folder and everything in it (a
    training job touches its checkpoint folder with each progress report)."""
    if not path.is_dir():
        return path.stat().st_mtime
    return max([path.stat().st_mtime, *(entry.stat().st_mtime for entry in path.rglob("*"))])


def read_fetched(fetch: Callable[[Path], Path], path: Path, read: Callable[[Path], T]) -> T:
    """``read`` of ``fetch(path)``, the node-local copy of an artifact. When the read fails
    because that copy went between the fetch and the read (:meth:`ArtifactStore.drop_local` by
    a process sharing this root), fetch and read once more; a failure with the copy still in
    place is the read's own, and is raised."""
    try:
        return read(fetch(path))
    except Exception:
        if path.exists():
            raise
        return read(fetch(path))


@lru_cache(maxsize=4096)
def _resolve(root: Path, relative: str) -> Path:
    # Memoised: classify resolves its model folder on every call.
    pure = PurePosixPath(relative)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise ValueError(f"not a store-relative path: {relative!r}")
    return root.joinpath(*pure.parts)


_OWNER_MARK = "."  # between an owner's id and the rest of a staging name (ids hold no dot)


def _bytes_under(path: Path) -> int:
    """The size of a file, or of every file under a folder; 0 for what is gone."""
    try:
        if not path.is_dir() or path.is_symlink():
            return path.lstat().st_size
        total = 0
        for folder, _, files in os.walk(path):
            for name in files:
                with contextlib.suppress(FileNotFoundError):
                    total += os.lstat(os.path.join(folder, name)).st_size
        return total
    except FileNotFoundError:
        return 0


def _safe(ident: str) -> str:
    if not ident or "/" in ident or "\\" in ident or ident in {".", ".."}:
        raise ValueError(f"not a valid identifier: {ident!r}")
    return ident


def _copy_atomically(source: Path, dest: Path) -> None:
    staged = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.tmp")
    try:
        with open(source, "rb") as src, open(staged, "wb") as out:
            shutil.copyfileobj(src, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(staged, dest)
    finally:
        staged.unlink(missing_ok=True)

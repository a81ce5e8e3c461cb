"""One set of storage tests, run against every artifact backend: the local folder
(``service.storage.store.ArtifactStore``) and S3-compatible object storage
(``service.storage.s3.S3ArtifactStore``) on a real S3 server (moto, a subprocess)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import boto3
import pytest

from service.core.settings import Settings
from service.storage import layout
from service.storage.base import ArtifactBackend, StoreUnavailable
from service.storage.s3 import S3ArtifactStore, parse_s3_url
from service.storage.store import ArtifactStore, open_backend
from service.training.job_views import JobContext
from workers import job_files


@pytest.fixture(params=["local", "s3"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactBackend:
    """A fresh, empty store on each backend in turn."""
    if request.param == "local":
        return ArtifactStore(tmp_path / "artifacts")
    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = request.getfixturevalue("s3_bucket")
    settings = Settings(
        data_dir=tmp_path / "var",
        artifacts_url=f"s3://{bucket}/taas-{uuid.uuid4().hex[:6]}",
        s3_endpoint_url=endpoint,
        s3_addressing_style="path",
    )
    store = open_backend(settings)  # the production path: settings + standard AWS env credentials
    assert isinstance(store, S3ArtifactStore)
    return store


def test_both_backends_satisfy_the_interface(backend: ArtifactBackend) -> None:
    assert isinstance(backend, ArtifactBackend)
    backend.check()
    assert backend.describe().startswith(("file://", "s3://"))


def test_put_get_overwrite(backend: ArtifactBackend) -> None:
    key = layout.dataset_key("t1", "d1")
    assert not backend.exists(key)
    backend.put_bytes(key, b"text,label\nhello,greet\n")
    assert backend.exists(key)
    assert backend.get_bytes(key) == b"text,label\nhello,greet\n"
    backend.put_bytes(key, b"")
    assert backend.get_bytes(key) == b""


def test_upload_keeps_source_and_download_is_whole(backend: ArtifactBackend, tmp_path: Path) -> None:
    source = tmp_path / "model.pt"
    data = os.urandom(300_000)
    source.write_bytes(data)
    backend.upload(source, "tenants/t1/classifiers/c1/model/model.pt")
    assert source.read_bytes() == data
    dest = tmp_path / "node" / "cache" / "model.pt"  # parents are created
    backend.download("tenants/t1/classifiers/c1/model/model.pt", dest)
    assert dest.read_bytes() == data
    assert [p.name for p in dest.parent.iterdir()] == ["model.pt"]  # no staging file left behind


def test_big_file_round_trip(backend: ArtifactBackend, tmp_path: Path) -> None:
    """Above boto3's 8 MiB multipart threshold: a multipart upload, completed atomically."""
    source = tmp_path / "big.bin"
    data = os.urandom(9 * 1024 * 1024)
    source.write_bytes(data)
    backend.upload(source, "big/big.bin")
    backend.download("big/big.bin", tmp_path / "back.bin")
    assert (tmp_path / "back.bin").read_bytes() == data


def test_missing_objects(backend: ArtifactBackend, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        backend.get_bytes("nope/missing.csv")
    with pytest.raises(FileNotFoundError):
        backend.download("nope/missing.csv", tmp_path / "x")
    assert not (tmp_path / "x").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    backend.delete("nope/missing.csv")  # idempotent
    assert backend.list_keys("nope") == []
    assert backend.delete_prefix("nope") == 0


def test_list_is_recursive_sorted_and_folder_bounded(backend: ArtifactBackend) -> None:
    for key in ["a/b/2", "a/b/1", "a/b/c/3", "a/bc/4", "a/x"]:
        backend.put_bytes(key, key.encode())
    assert backend.list_keys("a/b") == ["a/b/1", "a/b/2", "a/b/c/3"]
    assert backend.list_keys("a/b/") == ["a/b/1", "a/b/2", "a/b/c/3"]
    assert backend.list_keys("a") == ["a/b/1", "a/b/2", "a/b/c/3", "a/bc/4", "a/x"]
    assert backend.list_keys("") == ["a/b/1", "a/b/2", "a/b/c/3", "a/bc/4", "a/x"]
    assert backend.list_keys("a/b/1") == []  # a key is not a folder


def test_modified_lists_the_same_keys_with_when_each_was_written(backend: ArtifactBackend) -> None:
    before = time.time()
    for key in ["a/b/1", "a/b/c/2", "a/bc/3"]:
        backend.put_bytes(key, b"x")

    modified = backend.modified("a/b")

    assert sorted(modified) == backend.list_keys("a/b") == ["a/b/1", "a/b/c/2"]
    assert all(before - 2 <= when <= time.time() + 2 for when in modified.values())  # S3 keeps seconds


def test_delete_and_delete_prefix(backend: ArtifactBackend) -> None:
    prefix = layout.classifier_prefix("t1", "c1")
    for name in ["checkpoints/ckpt-1", "checkpoints/ckpt-2", "model/model.pt"]:
        backend.put_bytes(f"{prefix}/{name}", b"x")
    backend.put_bytes(layout.classifier_prefix("t1", "c10") + "/model/model.pt", b"sibling")
    backend.delete(f"{prefix}/checkpoints/ckpt-1")
    assert backend.list_keys(prefix) == [f"{prefix}/checkpoints/ckpt-2", f"{prefix}/model/model.pt"]
    assert backend.delete_prefix(prefix) == 2
    assert backend.list_keys(prefix) == []
    assert backend.get_bytes(layout.classifier_prefix("t1", "c10") + "/model/model.pt") == b"sibling"


def test_tree_sync_for_node_local_working_copies(backend: ArtifactBackend, tmp_path: Path) -> None:
    """What a worker node without the shared volume does: train into a local folder, push it up
    (mirroring, so dropped checkpoints go), and what the API does on a cache miss: pull it down."""
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "ckpt-1").write_bytes(b"one")
    (work / "sub" / "meta.json").write_bytes(b"{}")
    (work / ".ckpt-2.abc.tmp").write_bytes(b"half-written")  # never synced
    prefix = layout.checkpoint_prefix("t1", "c1", 1)
    assert backend.upload_tree(work, prefix) == 2
    assert backend.list_keys(prefix) == [f"{prefix}/ckpt-1", f"{prefix}/sub/meta.json"]

    (work / "ckpt-1").unlink()
    (work / "ckpt-2").write_bytes(b"two")
    assert backend.upload_tree(work, prefix, mirror=True) == 2
    assert backend.list_keys(prefix) == [f"{prefix}/ckpt-2", f"{prefix}/sub/meta.json"]

    copy = tmp_path / "other-node"
    assert backend.download_tree(prefix, copy) == 2
    assert (copy / "ckpt-2").read_bytes() == b"two"
    assert (copy / "sub" / "meta.json").read_bytes() == b"{}"
    assert backend.download_tree("tenants/t1/classifiers/none", tmp_path / "empty") == 0


@pytest.mark.parametrize("key", ["", "/abs", "../up", "a/../b", "a//b", "a/./b", "a\\b", "a/"])
def test_invalid_keys_are_refused(backend: ArtifactBackend, key: str) -> None:
    with pytest.raises(ValueError):
        backend.put_bytes(key, b"x")
    with pytest.raises(ValueError):
        backend.get_bytes(key)


@pytest.mark.parametrize(
    "call",
    [
        lambda: layout.dataset_key("t/1", "d"),
        lambda: layout.model_prefix("..", "c", 1),
        lambda: layout.checkpoint_prefix("t", "", 1),
        lambda: layout.model_prefix("t", "c", 0),
    ],
)
def test_layout_refuses_bad_identifiers(call: Callable[[], str]) -> None:
    with pytest.raises(ValueError):
        call()


def test_layout_keys_match_the_local_paths(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    assert store.relative(store.dataset_path("t", "d")) == layout.dataset_key("t", "d")
    assert store.relative(store.classifier_dir("t", "c")) == layout.classifier_prefix("t", "c")
    assert store.relative(store.version_dir("t", "c", 2)) == layout.version_prefix("t", "c", 2)
    assert store.relative(store.checkpoint_dir("t", "c", 2)) == layout.checkpoint_prefix("t", "c", 2)
    assert store.relative(store.model_dir("t", "c", 2)) == layout.model_prefix("t", "c", 2)


def test_local_keys_and_paths_are_one_store(tmp_path: Path) -> None:
    """A file put through the path API is visible through the key API, and the staging folder
    is not part of a listing."""
    store = ArtifactStore(tmp_path)
    staged = store.temp_path(".csv")
    staged.write_bytes(b"a,b\n")
    store.put_file(staged, store.dataset_path("t", "d"))
    store.temp_path(".csv").write_bytes(b"half")
    assert store.list_keys() == [layout.dataset_key("t", "d")]
    assert store.get_bytes(layout.dataset_key("t", "d")) == b"a,b\n"


def test_a_file_from_another_filesystem_is_copied_whole_and_its_source_consumed(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or shm.stat().st_dev == tmp_path.stat().st_dev:
        pytest.skip("needs /dev/shm on a filesystem other than the temp dir's")
    store = ArtifactStore(tmp_path)
    source = shm / f"taas-test-{uuid.uuid4().hex}.csv"
    source.write_bytes(b"a,b\n" * 1000)
    dest = store.dataset_path("t", "d")

    store.put_file(source, dest)

    assert dest.read_bytes() == b"a,b\n" * 1000 and not source.exists()
    assert [p.name for p in dest.parent.iterdir()] == [dest.name]  # no staged copy left beside it


def test_open_backend_picks_from_settings(tmp_path: Path) -> None:
    local = open_backend(Settings(data_dir=tmp_path))
    assert isinstance(local, ArtifactStore) and local.root == (tmp_path / "artifacts").resolve()
    assert parse_s3_url("s3://bucket") == ("bucket", "")
    assert parse_s3_url("s3://bucket/a/b/") == ("bucket", "a/b")
    for bad in ["http://bucket/x", "s3:///x", "s3://bucket/a/../b", "s3://b/x?y=1"]:
        with pytest.raises(ValueError):
            parse_s3_url(bad)


def test_s3_check_fails_on_a_missing_bucket(s3_endpoint: str, aws_env: dict[str, str]) -> None:
    store = S3ArtifactStore(
        f"s3://absent-{uuid.uuid4().hex[:8]}", endpoint_url=s3_endpoint, addressing_style="path"
    )
    with pytest.raises(OSError, match="not reachable"):
        store.check()


@pytest.fixture
def store(tmp_path: Path, s3_endpoint: str, s3_bucket: str) -> ArtifactStore:
    """A node's artifact store: its own folder, with the test bucket as the remote."""
    settings = Settings(
        data_dir=tmp_path / "var",
        artifacts_url=f"s3://{s3_bucket}/taas",
        s3_endpoint_url=s3_endpoint,
        s3_addressing_style="path",
    )
    return ArtifactStore(tmp_path / "node", open_backend(settings))


def test_a_node_drops_model_copies_not_loaded_lately_and_nothing_else(
    tmp_path: Path, store: ArtifactStore
) -> None:
    stale, fresh = (store.model_dir("t1", c, 1) / "epoch-1" for c in ("c1", "c2"))
    checkpoints = store.checkpoint_dir("t1", "c1", 1) / "epoch-1"
    for folder in (stale, fresh, checkpoints):
        folder.mkdir(parents=True)
        (folder / "weights.pt").write_bytes(b"w")
        store.publish(folder)
    long_ago = time.time() - 7200
    for folder in (stale, fresh, checkpoints):
        os.utime(folder, (long_ago, long_ago))
    assert store.fetch(fresh, folder=True) == fresh  # a load asked for it: marked now

    assert store.sweep_model_copies(3600) == 1
    assert not stale.exists() and fresh.is_dir() and checkpoints.is_dir()
    assert (store.fetch(stale, folder=True) / "weights.pt").read_bytes() == b"w"  # back from S3
    assert ArtifactStore(tmp_path / "node").sweep_model_copies(0) == 0  # without S3 it is the store
    assert fresh.is_dir()


def test_s3_delete_prefix_raises_on_objects_s3_kept() -> None:
    """DeleteObjects answers 200 with a failure per object it kept (a quiet delete lists only
    those): they went unnoticed, and the caller took the folder for gone."""
    listing = [{"Contents": [{"Key": "p/a", "LastModified": datetime.now(UTC)}]}]
    client = SimpleNamespace(
        get_paginator=lambda _name: SimpleNamespace(paginate=lambda **_kw: listing),
        delete_objects=lambda **_kw: {"Errors": [{"Key": "p/a", "Code": "AccessDenied", "Message": "no"}]},
    )
    store = S3ArtifactStore("s3://bucket/p", client=client)

    with pytest.raises(StoreUnavailable, match=r"1 object\(s\) not deleted, e.g. 'p/a': AccessDenied"):
        store.delete_prefix("")


def test_a_worker_node_drops_dataset_and_checkpoint_copies_untouched_lately(
    tmp_path: Path, store: ArtifactStore
) -> None:
    """A job whose attempt failed or stopped on this node, then succeeded on another, Failed or
    was deleted, left its dataset copy and checkpoints on this node's disk for good."""
    old_data, new_data = (store.dataset_path("t1", d) for d in ("d1", "d2"))
    old_claim, training = (store.checkpoint_dir("t1", c, 1) / "epoch-1" for c in ("c1", "c2"))
    model = store.model_dir("t1", "c1", 1) / "epoch-1"
    for path in (old_data, new_data):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"text,label\n")
        store.publish(path)
    for folder in (old_claim, training, model):
        folder.mkdir(parents=True)
        (folder / "ckpt-4.pt").write_bytes(b"w")
        store.publish(folder)
    (training / "ckpt-8.pt").write_bytes(b"w")  # in use: its newest checkpoint is fresh
    long_ago = time.time() - 7200
    for path in (old_data, old_claim, old_claim / "ckpt-4.pt", training, training / "ckpt-4.pt", model):
        os.utime(path, (long_ago, long_ago))

    assert store.sweep_work_copies(3600) == 2
    assert not old_data.exists() and not old_claim.exists()
    assert (
        new_data.is_file() and (training / "ckpt-4.pt").is_file() and model.is_dir()
    )  # models: their own rule
    assert (store.fetch(old_claim / "ckpt-4.pt")).read_bytes() == b"w"  # back from S3 on a resume
    assert ArtifactStore(tmp_path / "node").sweep_work_copies(0) == 0  # without S3 it is the store
    assert new_data.is_file()


def test_a_resume_seeds_its_folder_from_s3_when_the_local_copy_goes_under_it(
    tmp_path: Path, store: ArtifactStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another worker process sharing the node's root may drop an old local copy (its sweep of
    work copies) between this one's fetch and its link: the seed failed with FileNotFoundError,
    a failed attempt, where S3 had the file all along."""
    folder = store.checkpoint_dir("t1", "c1", 1)
    recorded = folder / "epoch-1" / "ckpt-8.pt"
    recorded.parent.mkdir(parents=True)
    recorded.write_bytes(b"state")
    store.publish(recorded)
    link = job_files._link_or_copy
    swept: list[Path] = []

    def swept_first(source: Path, target: Path) -> None:
        if not swept:
            swept.append(source)
            store.drop_local(source)  # the other process's sweep, just after this one's fetch
        link(source, target)

    monkeypatch.setattr(job_files, "_link_or_copy", swept_first)
    context = JobContext(
        job_id="j1",
        tenant_id="t1",
        classifier_id="c1",
        version=1,
        multi_label=False,
        language="en",
        state="training",
        epoch=2,
        attempts=2,
        dataset_path=None,
        checkpoint_dir=store.relative(folder),
        checkpoint_path=store.relative(recorded),
        checkpoint_step=8,
    )
    workdir = folder / "epoch-2"

    assert job_files.seed_workdir(store, context, workdir) == 8
    assert (workdir / "ckpt-8.pt").read_bytes() == b"state"


def test_s3_a_bucket_deleted_under_a_running_node_is_an_unavailable_store_not_a_missing_object(
    s3_endpoint: str, s3_bucket: str, tmp_path: Path
) -> None:
    """A download starts with a HEAD, which answers a bare 404 for a missing bucket as for a
    missing object: every dataset was "missing", and each job failed its attempts."""
    store = S3ArtifactStore(f"s3://{s3_bucket}/p", endpoint_url=s3_endpoint, addressing_style="path")
    with pytest.raises(FileNotFoundError):  # the bucket is there: the object is missing
        store.download("tenants/t/datasets/d.csv", tmp_path / "d.csv")
    boto3.client("s3", endpoint_url=s3_endpoint).delete_bucket(Bucket=s3_bucket)

    for fetch in (
        lambda: store.download("tenants/t/datasets/d.csv", tmp_path / "d.csv"),
        lambda: store.get_bytes("tenants/t/datasets/d.csv"),
        lambda: store.exists("tenants/t/datasets/d.csv"),
    ):
        with pytest.raises(StoreUnavailable):
            fetch()

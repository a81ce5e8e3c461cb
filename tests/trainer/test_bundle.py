"""Model bundles: a round trip classifies identically, and every kind of bad archive is refused
by name with nothing written."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from synthetic import synthetic_data

from trainer.bundle import MANIFEST, BundleInvalid, extract_bundle, write_bundle
from trainer.engine import train
from trainer.errors import CheckpointCorrupt
from trainer.hparams import HParams
from trainer.inference import META_FILE, WEIGHTS_FILE, LoadedModel

TEXTS = ["is it going to rain", "play a jazz song", "book a table for two", "çà et là 🙂"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bundle-model")
    hparams = HParams(batch_size=4, min_updates=60, max_epochs=2, embedding_dim=8, validation_fraction=0.2)
    train(synthetic_data(10), workdir=root / "w", out_dir=root / "m", hparams=hparams)
    return root / "m"


@pytest.fixture
def bundle(model_dir: Path, tmp_path: Path) -> Path:
    path = tmp_path / "model.taas"
    with path.open("wb") as out:
        write_bundle(model_dir, out)
    return path


def test_a_bundle_classifies_exactly_as_its_model_directory(model_dir: Path, bundle: Path) -> None:
    assert LoadedModel.load(bundle).classify(TEXTS) == LoadedModel.load(model_dir).classify(TEXTS)


def test_one_model_always_gives_the_same_bundle(model_dir: Path, bundle: Path, tmp_path: Path) -> None:
    again = io.BytesIO()
    write_bundle(model_dir, again)
    assert again.getvalue() == bundle.read_bytes()


def test_extract_writes_the_model_directory_and_returns_its_metadata(model_dir: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "about.taas"
    with bundle.open("wb") as out:
        write_bundle(model_dir, out, about={"name": "weather", "language": "en"})
    extracted = extract_bundle(bundle, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([META_FILE, WEIGHTS_FILE])
    assert extracted.meta["labels"] == ["booking", "music", "weather"]
    assert "hparams" in extracted.meta and "metrics" in extracted.meta
    assert extracted.about == {"name": "weather", "language": "en"}


def _rewrite(bundle: Path, change: Callable[[dict[str, bytes]], dict[str, bytes]]) -> None:
    """Re-pack ``bundle`` with its members (name -> bytes) passed through ``change``."""
    with tarfile.open(bundle, "r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
    with gzip.open(bundle, "wb") as packed, tarfile.open(fileobj=packed, mode="w") as tar:
        for name, data in change(members).items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _flip_weights(members: dict[str, bytes]) -> dict[str, bytes]:
    weights = bytearray(members[WEIGHTS_FILE])
    weights[len(weights) // 2] ^= 0xFF
    return {**members, WEIGHTS_FILE: bytes(weights)}


def _forged_manifest(members: dict[str, bytes]) -> dict[str, bytes]:
    manifest = json.loads(members[MANIFEST])
    manifest["format"] = "something-else/9"
    return {**members, MANIFEST: json.dumps(manifest).encode()}


def _resealed(members: dict[str, bytes], meta: bytes) -> dict[str, bytes]:
    """The bundle with ``meta`` as its model.json, the manifest's size and SHA-256 updated to it
    (what someone who edits a bundle on purpose sends)."""
    manifest = json.loads(members[MANIFEST])
    manifest["files"][META_FILE] = {"bytes": len(meta), "sha256": hashlib.sha256(meta).hexdigest()}
    return {**members, META_FILE: meta, MANIFEST: json.dumps(manifest).encode()}


def _meta_with(**fields: object) -> Callable[[dict[str, bytes]], dict[str, bytes]]:
    def change(members: dict[str, bytes]) -> dict[str, bytes]:
        return _resealed(members, json.dumps({**json.loads(members[META_FILE]), **fields}).encode())

    return change


def _files_listed(members: dict[str, bytes]) -> dict[str, bytes]:
    manifest = json.loads(members[MANIFEST])
    manifest["files"] = list(manifest["files"])  # the names, without their sizes and checksums
    return {**members, MANIFEST: json.dumps(manifest).encode()}


_DEEP = b"[" * 20_000 + b"]" * 20_000  # past the parser's recursion limit


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (_flip_weights, "weights.pt does not match its SHA-256"),
        (lambda m: {**m, META_FILE: m[META_FILE] + b" "}, "model.json does not match its SHA-256"),
        (lambda m: {k: v for k, v in m.items() if k != WEIGHTS_FILE}, "lacks weights.pt"),
        (lambda m: {**m, "../../etc/cron.d/x": b"boom"}, "unexpected member '../../etc/cron.d/x'"),
        (_forged_manifest, "manifest.json is not a taas bundle manifest"),
        (lambda m: {**m, MANIFEST: b"{not json"}, "manifest.json is not a taas bundle manifest"),
        (lambda m: {**m, MANIFEST: _DEEP}, "manifest.json is not a taas bundle manifest"),
        (lambda m: _resealed(m, _DEEP), "model.json is not a taas model: no readable model.json"),
        (_files_listed, "manifest.json is not a taas bundle manifest"),
    ],
)
def test_an_altered_bundle_is_refused_by_name_and_nothing_is_written(
    bundle: Path, tmp_path: Path, change: Callable[[dict[str, bytes]], dict[str, bytes]], problem: str
) -> None:
    _rewrite(bundle, change)
    with pytest.raises(BundleInvalid, match=problem.replace(".", r"\.").replace("(", r"\(")):
        extract_bundle(bundle, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("labels", "problem"),
    [
        ("abc", "labels must be a list of strings"),
        (["booking", 7, "weather"], "labels must be a list of strings"),
        (["booking", "music"], "labels must be 3 strings, one per class, not 2"),
        (["booking", "music", "music"], "labels must be distinct: 'music' appears more than once"),
    ],
)
def test_a_resealed_bundle_whose_labels_do_not_fit_its_model_is_refused(
    bundle: Path, labels: object, problem: str
) -> None:
    _rewrite(bundle, _meta_with(labels=labels))
    with pytest.raises(CheckpointCorrupt, match=f"model files do not fit together: {problem}"):
        LoadedModel.load(bundle)


def _model_json(members: dict[str, bytes]) -> dict[str, object]:
    return dict(json.loads(members[META_FILE]))


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda meta: {"model": {**meta["model"], "rows": 6_000_000}}, "'buckets' has shape"),
        (lambda meta: {"model": {**meta["model"], "classes": 0}}, "dim and classes at least 1"),
        (lambda meta: {"model": {**meta["model"], "dim": "64"}}, "must be whole numbers"),
        (lambda meta: {"featurizer": {**meta["featurizer"], "word_ngrams": 100_000}}, "word_ngrams must be"),
        (
            lambda meta: {"featurizer": {**meta["featurizer"], "char_ngram_max": "5"}},
            "char_ngram_max must be",
        ),
        (lambda meta: {"featurizer": {**meta["featurizer"], "char_ngram_min": 6}}, "above char_ngram_max"),
        (lambda meta: {"featurizer": {**meta["featurizer"], "buckets": 8}}, "'buckets' must rise strictly"),
        (lambda meta: {"featurizer": []}, "'featurizer' must be an object"),
        (lambda meta: {"multi_label": True, "threshold": "0.5"}, "threshold '0.5' is not a number"),
    ],
    ids=[
        "huge-rows",
        "no-classes",
        "text-dim",
        "word-ngrams",
        "text-ngrams",
        "ngrams-crossed",
        "few-buckets",
        "list",
        "text-threshold",
    ],
)
def test_a_resealed_bundle_whose_shapes_or_settings_are_not_a_models_is_refused(
    bundle: Path, change: Callable[[dict[str, object]], dict[str, object]], problem: str
) -> None:
    """Shapes are checked against the stored tensors before anything is built (6 M rows would
    be gigabytes), and n-gram settings within what training writes (they set classify's cost)."""

    def reseal(members: dict[str, bytes]) -> dict[str, bytes]:
        meta = _model_json(members)
        return _resealed(members, json.dumps(meta | change(meta)).encode())

    _rewrite(bundle, reseal)
    with pytest.raises(CheckpointCorrupt, match=f"model files do not fit together: .*{problem}"):
        LoadedModel.load(bundle)


def test_a_link_member_is_refused(bundle: Path, tmp_path: Path) -> None:
    with gzip.open(bundle, "wb") as packed, tarfile.open(fileobj=packed, mode="w") as tar:
        link = tarfile.TarInfo(WEIGHTS_FILE)
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    with pytest.raises(BundleInvalid, match="not a regular file|only the regular files"):
        extract_bundle(bundle, tmp_path / "out")


@pytest.mark.parametrize("keep", [0.5, 0.95])
def test_a_truncated_bundle_is_refused(bundle: Path, tmp_path: Path, keep: float) -> None:
    data = bundle.read_bytes()
    bundle.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(BundleInvalid, match="not a complete taas bundle"):
        extract_bundle(bundle, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_file_that_is_no_archive_is_refused(tmp_path: Path) -> None:
    junk = tmp_path / "junk.taas"
    junk.write_bytes(b"PK\x03\x04 definitely not a gzip'd tar")
    with pytest.raises(BundleInvalid, match="not a complete taas bundle"):
        LoadedModel.load(junk)


def test_an_oversized_bundle_is_refused_before_and_after_decompression(bundle: Path, tmp_path: Path) -> None:
    size = bundle.stat().st_size
    with pytest.raises(BundleInvalid, match=f"the bundle is {size} bytes; the limit is {size - 1}"):
        extract_bundle(bundle, tmp_path / "out", max_bytes=size - 1)
    # compressible content: small on disk, over the limit once unpacked
    _rewrite(bundle, lambda m: {**m, WEIGHTS_FILE: bytes(4 * size)})
    with pytest.raises(BundleInvalid, match="unpacks to more than the limit"):
        extract_bundle(bundle, tmp_path / "out", max_bytes=2 * size)


def _reweighted(
    change: Callable[[dict[str, torch.Tensor]], None],
) -> Callable[[dict[str, bytes]], dict[str, bytes]]:
    """A bundle whose tensors went through ``change``, resealed: model.json's weights_sha256 and
    the manifest both updated (what a forger sends)."""

    def reseal(members: dict[str, bytes]) -> dict[str, bytes]:
        tensors = torch.load(io.BytesIO(members[WEIGHTS_FILE]), weights_only=True)
        change(tensors)
        out = io.BytesIO()
        torch.save(tensors, out)
        weights = out.getvalue()
        meta = {**_model_json(members), "weights_sha256": hashlib.sha256(weights).hexdigest()}
        manifest = json.loads(members[MANIFEST])
        manifest["files"][WEIGHTS_FILE] = {
            "bytes": len(weights),
            "sha256": hashlib.sha256(weights).hexdigest(),
        }
        return _resealed(
            {**members, WEIGHTS_FILE: weights, MANIFEST: json.dumps(manifest).encode()},
            json.dumps(meta).encode(),
        )

    return reseal


def _stretch_embedding(tensors: dict[str, torch.Tensor]) -> None:
    """One stored number viewed as the whole table (stride 0): any shape from a tiny file."""
    tensors["embedding"] = tensors["embedding"][:1, :1].clone().expand(*tensors["embedding"].shape)


def _zero_idf(tensors: dict[str, torch.Tensor]) -> None:
    tensors["idf"] = torch.zeros_like(tensors["idf"])


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (_stretch_embedding, "'embedding' does not store each of its"),
        (_zero_idf, "'idf' must be positive"),
    ],
    ids=["stretched", "zero-idf"],
)
def test_forged_weights_are_refused_before_the_model_is_built(
    bundle: Path, change: Callable[[dict[str, torch.Tensor]], None], problem: str
) -> None:
    """A 2 KB bundle whose tensors were views of one number made the API build a model of
    gigabytes; an IDF of 0 made every confidence NaN (0/0 in the normalisation)."""
    _rewrite(bundle, _reweighted(change))
    with pytest.raises(CheckpointCorrupt, match=problem):
        LoadedModel.load(bundle)


def _deep(levels: int) -> dict[str, object]:
    metrics: dict[str, object] = {"a": 1}
    for _ in range(levels - 1):
        metrics = {"a": metrics}
    return metrics


@pytest.mark.parametrize(
    ("metrics", "problem"),
    [
        (_deep(300), "nest deeper than 6 levels"),
        ({"accuracy": float("nan")}, "hold NaN or an infinity"),
        ({"notes": "x" * (3 << 20)}, "take .* bytes as JSON; the limit is"),
    ],
    ids=["deep", "nan", "huge"],
)
def test_metrics_a_reply_cannot_carry_are_refused(
    bundle: Path, tmp_path: Path, metrics: object, problem: str
) -> None:
    """Metrics nested 300 deep were stored, and every reply carrying them was a 500."""
    _rewrite(bundle, _meta_with(metrics=metrics))
    with pytest.raises(BundleInvalid, match=f"its metrics {problem}"):
        extract_bundle(bundle, tmp_path / "out", max_bytes=8 << 20)
    assert not (tmp_path / "out").exists()


def _with_headers(bundle: Path, headers: Callable[[tarfile.TarFile], None]) -> None:
    """Re-pack ``bundle`` with raw tar blocks written by ``headers`` before its members."""
    with tarfile.open(bundle, "r:gz") as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar}  # type: ignore[union-attr]
    with (
        gzip.open(bundle, "wb") as packed,
        tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        headers(tar)
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_an_extended_header_counts_toward_the_unpacked_limit(bundle: Path, tmp_path: Path) -> None:
    """tarfile reads a PAX header whole before the member it describes: a 219 KB bundle with a
    200 MB comment took 586 MB of the API's memory and then imported."""
    limit = 1 << 20

    def comment(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo("padding")
        info.pax_headers = {"comment": "x" * (2 * limit)}
        tar.addfile(info, io.BytesIO())

    _with_headers(bundle, comment)
    with pytest.raises(BundleInvalid, match=f"unpacks to more than the limit of {limit} bytes"):
        extract_bundle(bundle, tmp_path / "out", max_bytes=limit)


def test_a_chain_of_extended_headers_is_refused_not_a_crash(bundle: Path, tmp_path: Path) -> None:
    """tarfile reads each PAX header one call deeper: 2,000 of them were a RecursionError (500)."""

    def chain(tar: tarfile.TarFile) -> None:
        record = b"13 comment=a\n"
        for _ in range(5000):
            info = tarfile.TarInfo("././@PaxHeader")
            info.type, info.size = tarfile.XHDTYPE, len(record)
            tar.fileobj.write(info.tobuf(tarfile.USTAR_FORMAT) + record.ljust(512, b"\0"))  # type: ignore[union-attr]
            tar.offset += 1024

    _with_headers(bundle, chain)
    with pytest.raises(BundleInvalid, match="not a complete taas bundle"):
        extract_bundle(bundle, tmp_path / "out")


def test_a_long_member_name_is_cut_short_in_the_message(bundle: Path, tmp_path: Path) -> None:
    _rewrite(bundle, lambda m: {**m, "a" * 100_000: b"x"})
    with pytest.raises(BundleInvalid, match="unexpected member 'aaa") as refused:
        extract_bundle(bundle, tmp_path / "out")
    assert len(str(refused.value)) < 300


@pytest.mark.parametrize(
    "damage",
    [lambda data: data[:-8], lambda data: data + b"trailing bytes that are no gzip member"],
    ids=["no-trailer", "trailing-junk"],
)
def test_a_bundle_whose_gzip_stream_does_not_end_right_is_refused(
    bundle: Path, tmp_path: Path, damage: Callable[[bytes], bytes]
) -> None:
    """The tar's end comes before gzip's length and CRC: a file cut there, or with bytes after
    it, imported."""
    bundle.write_bytes(damage(bundle.read_bytes()))
    with pytest.raises(BundleInvalid, match="not a complete taas bundle"):
        extract_bundle(bundle, tmp_path / "out")

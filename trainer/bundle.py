"""Portable model bundles: a model directory in one archive, checked before anything is used.

A bundle is a gzip'd tar holding exactly ``manifest.json`` (the bundle format, an ``about``
object from the exporter, and per file its size and SHA-256), ``model.json`` (labels,
featurizer and model configs, hyper-parameters, metrics: see :mod:`trainer.inference`) and
``weights.pt`` (tensors only, loaded with ``torch.load(weights_only=True)``). Nothing in a
bundle is executed or unpickled as code.

:func:`extract_bundle` refuses, with :class:`BundleInvalid` naming the problem, anything but
that: a file that is not a gzip'd tar or ends early, a bundle or member over ``max_bytes``
(before decompression and after, so a small archive cannot inflate to fill a disk), a member
that is not a regular file with one of those three names (links, folders, ``../`` paths), a
missing or repeated member, and a file whose size or SHA-256 differs from the manifest.

A model that reads a pretrained sentence encoder carries only its own weights: the manifest
names its base encoder (``"encoder": {"name", "sha256"}``, as model.json's ``"sentence"`` does),
and a bundle whose encoder this installation lacks, or has with other weights, is refused.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from trainer.encoder import EncoderUnavailable
from trainer.errors import TrainerError
from trainer.inference import META_FILE, WEIGHTS_FILE, parse_metadata
from trainer.sentence_features import SentenceInput, check_encoder

FORMAT = "taas-model-bundle/1"
MANIFEST = "manifest.json"
MODEL_FILES = (META_FILE, WEIGHTS_FILE)
DEFAULT_MAX_BYTES = 256 * 1024 * 1024


class BundleInvalid(TrainerError):
    """The archive is not a usable taas model bundle; the message says why."""


@dataclass(frozen=True)
class Extracted:
    """A bundle that checked out: its ``model.json`` and the manifest's free-form ``about``."""

    meta: dict[str, Any]
    about: dict[str, Any]


def write_bundle(model_dir: Path, out: IO[bytes], *, about: dict[str, Any] | None = None) -> None:
    """Write the model in ``model_dir`` as a bundle to ``out``, with ``about`` (JSON-able facts
    such as the classifier's name and language) in the manifest. Reproducible: fixed times and
    owners, so one model and ``about`` always give the same bytes."""
    files = {name: (Path(model_dir) / name).read_bytes() for name in MODEL_FILES}
    manifest: dict[str, object] = {
        "format": FORMAT,
        "about": about or {},
        "files": {name: {"bytes": len(data), "sha256": _sha256(data)} for name, data in files.items()},
    }
    sentence = json.loads(files[META_FILE]).get("sentence")
    if sentence is not None:
        manifest["encoder"] = {"name": sentence["encoder"], "sha256": sentence["sha256"]}
    members = {MANIFEST: json.dumps(manifest, indent=2, sort_keys=True).encode("utf-8"), **files}
    with (
        gzip.GzipFile(filename="", fileobj=out, mode="wb", mtime=0) as packed,
        tarfile.open(fileobj=packed, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))


def extract_bundle(source: Path, dest: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Extracted:
    """Check the bundle at ``source`` and write its model directory into ``dest`` (created;
    nothing is written unless the whole bundle checks out).

    Raises BundleInvalid.
    """
    size = Path(source).stat().st_size
    if size > max_bytes:
        raise BundleInvalid(f"the bundle is {size} bytes; the limit is {max_bytes}")
    members = _read_members(Path(source), max_bytes)
    manifest = _manifest(members)
    for name in MODEL_FILES:
        expected, data = manifest["files"][name], members[name]
        if len(data) != expected["bytes"] or _sha256(data) != expected["sha256"]:
            raise BundleInvalid(f"{name} does not match its SHA-256 in {MANIFEST}: the bundle was altered")
    dest = Path(dest)
    try:
        meta = parse_metadata(members[META_FILE], dest)
    except TrainerError as exc:
        reason = str(exc).removeprefix(f"{dest}: ")  # the staging folder means nothing to the sender
        raise BundleInvalid(f"{META_FILE} is not a taas model: {reason}") from exc
    if problem := _metrics_problem(meta.get("metrics")):
        raise BundleInvalid(f"{META_FILE} is not a taas model: its metrics {problem}")
    _check_base_encoder(meta, manifest)
    dest.mkdir(parents=True, exist_ok=True)
    for name in MODEL_FILES:
        (dest / name).write_bytes(members[name])
    return Extracted(meta, manifest["about"])


def _check_base_encoder(meta: dict[str, Any], manifest: dict[str, Any]) -> None:
    """Raise BundleInvalid unless the model's base encoder (if any) is the manifest's and is
    installed here with the same weights."""
    sentence = meta.get("sentence")
    named = manifest.get("encoder")
    if sentence is None:
        if named is not None:
            raise BundleInvalid(f"{MANIFEST} names a base encoder, but {META_FILE} reads none")
        return
    if not isinstance(sentence, dict):
        raise BundleInvalid(f"{META_FILE} is not a taas model: 'sentence' must be an object")
    if named != {"name": sentence.get("encoder"), "sha256": sentence.get("sha256")}:
        raise BundleInvalid(f"{MANIFEST} does not name the base encoder that {META_FILE} reads")
    try:
        check_encoder(SentenceInput(**sentence))
    except TypeError as exc:
        raise BundleInvalid(f"{META_FILE} is not a taas model: 'sentence': {exc}") from exc
    except EncoderUnavailable as exc:
        raise BundleInvalid(
            f"the bundle's base encoder is not available on this installation: {exc}"
        ) from exc


def _read_members(source: Path, max_bytes: int) -> dict[str, bytes]:
    members: dict[str, bytes] = {}
    total = 0
    try:
        with gzip.open(source, "rb") as packed:
            inflated = _Inflated(packed, max_bytes + _TAR_OVERHEAD)
            # stream mode only reads (typeshed asks any fileobj for write, seek and tell)
            with tarfile.open(fileobj=inflated, mode="r|") as tar:  # type: ignore[call-overload]
                for member in tar:
                    if member.name not in (MANIFEST, *MODEL_FILES) or not member.isfile():
                        raise BundleInvalid(
                            f"unexpected member {member.name[:100]!r}: a bundle holds only the regular "
                            f"files {', '.join((MANIFEST, *MODEL_FILES))}"
                        )
                    if member.name in members:
                        raise BundleInvalid(f"{member.name} appears twice")
                    total += member.size
                    if total > max_bytes:
                        raise BundleInvalid(f"the bundle unpacks to more than the limit of {max_bytes} bytes")
                    extracted = tar.extractfile(member)
                    assert extracted is not None  # a regular file
                    members[member.name] = extracted.read()
            inflated.read_to_end()  # gzip checks its length and CRC at the end: a cut file fails
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, RecursionError) as exc:
        # RecursionError: tarfile reads a chain of PAX headers one call deeper each
        reason = str(exc) or type(exc).__name__
        raise BundleInvalid(f"not a complete taas bundle (a gzip'd tar): {reason}") from exc
    missing = [name for name in (MANIFEST, *MODEL_FILES) if name not in members]
    if missing:
        raise BundleInvalid(f"the bundle lacks {', '.join(missing)}")
    return members


# A tar's own bytes besides its members': a 512-byte header each, padding to 512 bytes, the two
# closing blocks and the padding of the last 10,240-byte record.
_TAR_OVERHEAD = 64 * 1024


class _Inflated:
    """The decompressed bytes of a bundle, refused past ``limit``.

    Counting the members' sizes is not enough: tarfile reads a PAX or GNU long-name header
    whole before it yields the member it describes, so a 219 KB bundle with a 200 MB comment
    header took 586 MB of the API's memory and then imported; every byte read counts here."""

    def __init__(self, packed: gzip.GzipFile, limit: int) -> None:
        self.packed, self.limit, self.count = packed, limit, 0

    def read(self, size: int = -1) -> bytes:
        room = self.limit + 1 - self.count
        data = self.packed.read(room if size < 0 else min(size, room))
        self.count += len(data)
        if self.count > self.limit:
            raise BundleInvalid(
                f"the bundle unpacks to more than the limit of {self.limit - _TAR_OVERHEAD} bytes"
            )
        return data

    def read_to_end(self) -> None:
        while self.read(1 << 16):
            pass


def _manifest(members: dict[str, bytes]) -> dict[str, Any]:
    try:
        manifest = json.loads(members[MANIFEST])
        files = manifest["files"]
        if manifest["format"] != FORMAT or not isinstance(files, dict) or set(files) != set(MODEL_FILES):
            raise ValueError(f"expected format {FORMAT} listing {', '.join(MODEL_FILES)}")
        if not isinstance(manifest.get("about", {}), dict):
            raise ValueError("'about' must be an object")
        manifest.setdefault("about", {})
        for entry in files.values():
            if not (isinstance(entry["bytes"], int) and isinstance(entry["sha256"], str)):
                raise ValueError("each file needs an integer 'bytes' and a string 'sha256'")
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise BundleInvalid(f"{MANIFEST} is not a taas bundle manifest: {exc}") from exc
    return dict(manifest)


# Training's metrics nest three deep (per_class -> label -> figure) and take about 220 KB for
# 3,000 classes; the API serves them in every status reply and stores them in a JSON column.
_METRICS_DEPTH = 6
_METRICS_BYTES = 2 * 1024 * 1024


def _metrics_problem(metrics: object) -> str | None:
    """Why a bundle's metrics cannot be stored and served, or None. Nested 300 deep, they were
    stored and then every reply that carried them was a 500 (pydantic's serialisation depth);
    a NaN is JSON only to Python (PostgreSQL's JSON refuses it, strict parsers too)."""
    if metrics is None:
        return None
    stack = [(metrics, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > _METRICS_DEPTH:
            return f"nest deeper than {_METRICS_DEPTH} levels"
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack.extend((child, depth + 1) for child in children)
    try:
        size = len(json.dumps(metrics, allow_nan=False))
    except ValueError:
        return "hold NaN or an infinity"
    if size > _METRICS_BYTES:
        return f"take {size} bytes as JSON; the limit is {_METRICS_BYTES}"
    return None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

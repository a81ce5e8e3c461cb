"""Checkpoints: one dict with named keys, written atomically with a SHA-256, the last two kept.

File layout: ``ckpt-<version:012d>.pt`` = MAGIC, the hex SHA-256 of the payload, a newline,
then the payload (``torch.save`` of the dict). The checksum lives inside the file, so a
checkpoint and its checksum are replaced together by one ``os.replace``. Loading uses
``torch.load(weights_only=True)``: a checkpoint holds tensors and plain containers only.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from pathlib import Path
from typing import Any

import torch

from trainer.errors import CheckpointCorrupt

WEIGHTS = "weights"  # model state_dict
OPTIMIZER = "optimizer"  # {"kind": "sgd" or "adam", "state": [] or Adam's [m, v per parameter]}
VERSION = "version"  # updates applied so far
CURSORS = "cursors"  # [ {epoch, seed, position} ] one per learner
RNG = "rng"  # {"torch": ByteTensor, "learner_seeds": [seed + rank]}
HPARAMS = "hparams"  # HParams.as_dict()
EARLY_STOP = "early_stop"  # best score, best weights, epochs without improvement, finished flag
DATA = "data"  # fingerprint of the training data and the split it was trained with
JOB = "job"  # checkpoints, resumes, training seconds, learners, cumulative pushed/applied

MAGIC = b"TAAS-CKPT-1\n"
KEEP = 2
_NAME = re.compile(r"^ckpt-(\d{12})\.pt$")


def checkpoint_path(workdir: Path, version: int) -> Path:
    """Where the checkpoint of ``version`` lives in ``workdir``."""
    return Path(workdir) / f"ckpt-{version:012d}.pt"


def save_atomic(path: Path, state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` so that a reader sees the old file or the new one, never half."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    digest = hashlib.sha256(payload).hexdigest().encode("ascii")
    write_atomic(Path(path), MAGIC + digest + b"\n" + payload)


def write_atomic(path: Path, payload: bytes) -> None:
    """Replace ``path`` with ``payload`` atomically and durably.

    Temp file in the same directory, flush, fsync, os.replace, then fsync the directory so
    the rename itself survives a power cut. A write that fails (a full disk) removes its temp
    file: left, it held the last free space, and the failed attempt could not even be recorded.
    """
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def load_verified(path: Path) -> dict[str, Any]:
    """Read one checkpoint, verifying its checksum. Raises CheckpointCorrupt if it is not intact."""
    try:
        blob = Path(path).read_bytes()
    except OSError as exc:
        raise CheckpointCorrupt(f"{path}: cannot be read: {exc}") from exc
    head = len(MAGIC) + 64 + 1
    if len(blob) < head or not blob.startswith(MAGIC) or blob[head - 1 : head] != b"\n":
        raise CheckpointCorrupt(f"{path}: not a checkpoint or truncated header")
    payload = blob[head:]
    if hashlib.sha256(payload).hexdigest().encode("ascii") != blob[len(MAGIC) : head - 1]:
        raise CheckpointCorrupt(f"{path}: checksum mismatch (torn or altered file)")
    try:
        state = torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as exc:  # torch raises many types for a bad payload
        raise CheckpointCorrupt(f"{path}: unreadable payload: {exc}") from exc
    if not isinstance(state, dict) or VERSION not in state:
        raise CheckpointCorrupt(f"{path}: payload is not a checkpoint dict")
    return state


def checkpoint_version(name: str) -> int | None:
    """The version a checkpoint file's name carries; None for any other name."""
    match = _NAME.match(name)
    return int(match.group(1)) if match else None


def list_checkpoints(workdir: Path) -> list[tuple[int, Path]]:
    """(version, path) of the checkpoint files in ``workdir``, newest first."""
    workdir = Path(workdir)
    if not workdir.is_dir():
        return []
    found = [(v, p) for p in workdir.iterdir() if (v := checkpoint_version(p.name)) is not None]
    return sorted(found, reverse=True)


def load_latest(workdir: Path) -> dict[str, Any] | None:
    """The newest intact checkpoint in ``workdir``; None when there is none at all.

    A corrupt or partial newest file is skipped in favour of the previous one. Raises
    CheckpointCorrupt when checkpoint files exist but none of them is intact.
    """
    found = list_checkpoints(workdir)
    problems: list[str] = []
    for _, path in found:
        try:
            return load_verified(path)
        except CheckpointCorrupt as exc:
            problems.append(str(exc))
    if found:
        raise CheckpointCorrupt("no usable checkpoint: " + "; ".join(problems))
    return None


def save(workdir: Path, state: dict[str, Any]) -> Path:
    """Write the checkpoint of ``state[VERSION]`` into ``workdir`` and keep only the last two.

    Files of a higher version than the one written are discarded too: they can only be
    corrupt leftovers that a resume had to skip.
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    version = int(state[VERSION])
    path = checkpoint_path(workdir, version)
    save_atomic(path, state)
    older = 0
    for found_version, found_path in list_checkpoints(workdir):
        if found_version > version:
            found_path.unlink(missing_ok=True)
        elif found_version < version:
            older += 1
            if older >= KEEP:
                found_path.unlink(missing_ok=True)
    for leftover in workdir.glob("ckpt-*.pt.tmp"):
        if leftover.is_file():  # a write of ours that died; not what someone else put there
            leftover.unlink(missing_ok=True)
    return path


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

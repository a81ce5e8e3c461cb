from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainer import checkpoint as ckpt
from trainer.errors import CheckpointCorrupt


def _state(version: int) -> dict[str, object]:
    return {ckpt.VERSION: version, ckpt.WEIGHTS: {"w": torch.full((4, 3), float(version))}}


def test_save_keeps_the_last_two_and_load_latest_returns_the_newest(tmp_path: Path) -> None:
    for version in (10, 20, 30):
        ckpt.save(tmp_path, _state(version))
    assert [v for v, _ in ckpt.list_checkpoints(tmp_path)] == [30, 20]
    assert ckpt.load_latest(tmp_path)[ckpt.VERSION] == 30  # type: ignore[index]


def test_torn_newest_checkpoint_falls_back_to_the_previous_one(tmp_path: Path) -> None:
    ckpt.save(tmp_path, _state(1))
    newest = ckpt.save(tmp_path, _state(2))
    blob = newest.read_bytes()
    newest.write_bytes(blob[: len(blob) // 2])
    assert ckpt.load_latest(tmp_path)[ckpt.VERSION] == 1  # type: ignore[index]


def test_flipped_byte_fails_the_checksum_and_falls_back(tmp_path: Path) -> None:
    ckpt.save(tmp_path, _state(1))
    newest = ckpt.save(tmp_path, _state(2))
    blob = bytearray(newest.read_bytes())
    blob[-10] ^= 0xFF
    newest.write_bytes(bytes(blob))
    with pytest.raises(CheckpointCorrupt, match="checksum"):
        ckpt.load_verified(newest)
    assert ckpt.load_latest(tmp_path)[ckpt.VERSION] == 1  # type: ignore[index]


def test_no_usable_checkpoint_raises_and_an_empty_dir_means_fresh_start(tmp_path: Path) -> None:
    assert ckpt.load_latest(tmp_path / "missing") is None
    only = ckpt.save(tmp_path, _state(5))
    only.write_bytes(b"garbage")
    with pytest.raises(CheckpointCorrupt):
        ckpt.load_latest(tmp_path)


def test_saving_after_a_fallback_discards_the_corrupt_newer_file(tmp_path: Path) -> None:
    ckpt.save(tmp_path, _state(1))
    ckpt.save(tmp_path, _state(9)).write_bytes(b"torn")
    ckpt.save(tmp_path, _state(5))
    assert [v for v, _ in ckpt.list_checkpoints(tmp_path)] == [5, 1]


def test_a_leftover_temp_file_is_never_read(tmp_path: Path) -> None:
    ckpt.save(tmp_path, _state(3))
    (tmp_path / "ckpt-000000000004.pt.tmp").write_bytes(b"half written")
    assert ckpt.load_latest(tmp_path)[ckpt.VERSION] == 3  # type: ignore[index]


def test_a_write_that_fails_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint write that hit a full disk left its partial ``.tmp``, which held the last
    free space: the failed attempt could not even be recorded."""

    def disk_full(_: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ckpt.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        ckpt.write_atomic(tmp_path / "ckpt-000000000300.pt", b"x" * 4096)

    assert list(tmp_path.iterdir()) == []

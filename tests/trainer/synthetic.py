"""Tiny synthetic labelled data for the trainer tests (imported by conftest and test modules)."""

from __future__ import annotations

import csv
import random
from pathlib import Path

from trainer.data import LabelledData

_VOCABULARY = {
    "weather": ["rain", "sunny", "forecast", "umbrella", "temperature", "cloudy", "wind", "snow"],
    "music": ["play", "song", "album", "playlist", "jazz", "guitar", "artist", "volume"],
    "booking": ["table", "restaurant", "reserve", "dinner", "seats", "tonight", "party", "book"],
}
_FILLER = ["please", "the", "a", "for", "me", "now", "can", "you", "what", "is"]


def synthetic_data(rows_per_class: int, seed: int = 7) -> LabelledData:
    """Short texts mixing class words and filler words; separable but not trivially so."""
    rng = random.Random(seed)
    texts: list[str] = []
    labels: list[str] = []
    for _ in range(rows_per_class):
        for label, words in _VOCABULARY.items():
            picked = rng.sample(words, 2) + rng.sample(_FILLER, 3)
            rng.shuffle(picked)
            texts.append(" ".join(picked))
            labels.append(label)
    return LabelledData(texts, labels)


def write_csv(path: Path, data: LabelledData) -> Path:
    """Write ``data`` as a text,label CSV."""
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(zip(data.texts, data.labels, strict=True))
    return path

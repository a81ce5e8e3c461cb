"""The cost of ranking a classify reply's classes: all of them against the ten a reply shows.

    python benchmarks/rank_bench.py                 # 3,000 classes and 30 classes
    python benchmarks/rank_bench.py --classes 500 3000 --texts 30

For each class count, trains a model on generated data (``many_classes.py``'s: 3 rows a class,
a short training: the ranking's cost does not depend on the model's accuracy), then times
``LoadedModel.classify`` of a classify_collection's texts (``--texts``, 30) ranking every class
(``top`` None, what every call did before the twenty-eighth session) and ranking the ten a
reply shows (``top`` 10, what the API asks for now). One JSON line per class count: the
median milliseconds of each and their ratio.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.many_classes import many_classes  # noqa: E402
from service.api.routes.classify import CLASSES_SHOWN  # noqa: E402
from trainer import train  # noqa: E402
from trainer.hparams import DEFAULT_HPARAMS  # noqa: E402
from trainer.inference import LoadedModel  # noqa: E402


def _median_ms(model: LoadedModel, texts: list[str], top: int | None, repeats: int) -> float:
    model.classify(texts, top=top)  # warm
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        model.classify(texts, top=top)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", type=int, nargs="+", default=[30, 3000])
    parser.add_argument("--texts", type=int, default=30, help="texts per call (a full collection: 30)")
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    hparams = dataclasses.replace(DEFAULT_HPARAMS, max_epochs=1, min_updates=0, cross_fit_folds=0)
    for classes in args.classes:
        data = many_classes(classes, 3)
        with tempfile.TemporaryDirectory() as folder:
            out = Path(folder) / "model"
            train(data, workdir=Path(folder) / "work", out_dir=out, hparams=hparams, learners=1)
            model = LoadedModel.load(out)
        texts = data.texts[: args.texts]
        every = _median_ms(model, texts, None, args.repeats)
        shown = _median_ms(model, texts, CLASSES_SHOWN, args.repeats)
        report = {
            "classes": classes,
            "texts": len(texts),
            "rank_all_ms": round(every, 2),
            "rank_top10_ms": round(shown, 2),
            "all_over_top10": round(every / shown, 1),
        }
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

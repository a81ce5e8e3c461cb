"""One rare class among common ones: how much of it each system still finds.

    python benchmarks/imbalance.py DATASET_DIR... [--rare-rows N] [--folds F] [--repeats R]
        [--per-repeat P] [--max-rows M] [--set KEY=VALUE...] [--variant NAME:KEY=VALUE[,...]...]

Tenants' data is rarely balanced: a new intent arrives with ten examples beside old ones with
hundreds. For each folder only ``train.csv`` is read, and it is split as in
benchmarks/validation_sweep.py (the same folds, systems, ``--set`` and ``--variant``). On each
split, each class in turn is cut to ``--rare-rows`` training rows (a seeded sample; the other
classes keep theirs) and every system trains on that; the validation rows stay whole. taas
trains its n-gram model here (the encoder's share of rare classes: validation_sweep --encoder).

Prints one JSON line per dataset and system: ``rare_recall``, the share of the rare class's
validation rows it gets right, pooled over every class and split; ``accuracy``, over all the
validation rows of those runs; ``ece`` (null for the SVM); and for every system but taas the
paired ``wins`` and ``losses`` against taas on the rare class's rows.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from trainer import HParams, LabelledData

sys.path.insert(0, str(Path(__file__).parent))
from validation_sweep import (  # noqa: E402  (the sibling benchmark script)
    PEERS,
    Score,
    _peer,
    _taas,
    paired,
    pooled_ece,
    read_train,
    splits,
    subset,
    sweep_parser,
    taas_systems,
)


def cut_class(data: LabelledData, label: str, rows: int, seed: int) -> LabelledData:
    """``data`` with only a seeded sample of ``rows`` of ``label``'s examples."""
    own = np.flatnonzero(np.asarray(data.labels) == label)
    dropped = np.random.default_rng(seed).permutation(own)[rows:]
    return subset(data, np.setdiff1d(np.arange(len(data)), dropped))


def imbalance(
    folder: Path,
    systems: dict[str, HParams],
    rare_rows: int,
    folds: int,
    repeats: int,
    per_repeat: int,
    max_rows: int | None,
) -> list[dict[str, object]]:
    """One summary row per system for the folder's train.csv (see the module docstring)."""
    data = read_train(folder, max_rows)
    runs: dict[str, list[tuple[Score, np.ndarray]]] = {system: [] for system in [*systems, *PEERS]}
    for split, (train_rows, validation_rows) in enumerate(splits(data.labels, folds, repeats, per_repeat)):
        validation = subset(data, validation_rows)
        for label in sorted(set(data.labels)):
            train_data = cut_class(subset(data, train_rows), label, rare_rows, seed=split)
            rare = np.asarray(validation.labels) == label
            for system, hparams in systems.items():
                runs[system].append((_taas(hparams, train_data, validation, None), rare))
            for system in PEERS:
                runs[system].append((_peer(system, train_data, validation), rare))
    base = np.concatenate([c[r] for (c, _), r in runs["taas"]])
    summary = []
    for system, scored in runs.items():
        scores = [score for score, _ in scored]
        correct = np.concatenate([c for c, _ in scores])
        rare_correct = np.concatenate([c[r] for (c, _), r in scored])
        row: dict[str, object] = {
            "dataset": folder.name,
            "system": system,
            "rare_rows": rare_rows,
            "runs": len(scored),
            "rare_recall": round(float(rare_correct.mean()), 4),
            "accuracy": round(float(correct.mean()), 4),
            "ece": pooled_ece(scores, correct),
        }
        if system != "taas":
            row["wins"], row["losses"] = paired(rare_correct, base)
        summary.append(row)
    return summary


def main() -> None:
    parser = sweep_parser(__doc__.splitlines()[0])
    parser.add_argument("--rare-rows", type=int, default=10, help="training rows left to the rare class")
    parser.set_defaults(per_repeat=1)
    args = parser.parse_args()
    systems = taas_systems(args)
    for folder in args.datasets:
        for row in imbalance(
            folder, systems, args.rare_rows, args.folds, args.repeats, args.per_repeat, args.max_rows
        ):
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

"""benchmarks/accuracy.py's ``--json`` contract (issue 8, deliverable 4), run as a user runs it: one
line per dataset and system, the system names and fields the issue names, the dataset named
after its folder, and every peer paired with taas on the same test rows."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmark_runs import run_benchmark, run_script
from synthetic import synthetic_data, write_csv

from trainer import DEFAULT_HPARAMS

ISSUE_FIELDS = {"dataset", "system", "accuracy", "macro_f1", "ece", "train_s", "model_bytes"}


@pytest.mark.slow
def test_json_lines_name_each_system_and_pair_the_peers_with_taas(tmp_path: Path) -> None:
    folder = tmp_path / "tiny-intents"
    folder.mkdir()
    write_csv(folder / "train.csv", synthetic_data(12, seed=1))
    test = synthetic_data(4, seed=2)
    write_csv(folder / "test.csv", test)

    lines = run_benchmark("accuracy.py", str(folder), "--json")

    rows = {row["system"]: row for row in lines}
    assert set(rows) == {"taas", "fasttext", "tfidf-logreg", "tfidf-svm", "minilm-logreg", "minilm+tfidf-svm"}
    for system, row in rows.items():
        assert ISSUE_FIELDS <= set(row), system
        assert row["dataset"] == "tiny-intents"
        assert row["correct"] == round(row["accuracy"] * len(test.texts))
        assert row["model_bytes"] > 0 and row["train_s"] >= 0
    assert rows["tfidf-svm"]["ece"] is None  # the SVM gives no probabilities
    assert all(0 <= rows[s]["ece"] <= 1 for s in ("taas", "fasttext", "tfidf-logreg", "minilm-logreg"))
    assert "vs_taas" not in rows["taas"]
    for system in set(rows) - {"taas"}:
        pairing = rows[system]["vs_taas"]
        # the rows only one of the two gets right differ by as much as their correct counts
        lead = rows["taas"]["correct"] - rows[system]["correct"]
        assert pairing["taas_only"] - pairing["peer_only"] == lead
        assert 0 <= pairing["mcnemar_p"] <= 1


@pytest.mark.slow
def test_seeds_train_taas_once_per_seed_and_name_each_row(tmp_path: Path) -> None:
    folder = tmp_path / "tiny-intents"
    folder.mkdir()
    write_csv(folder / "train.csv", synthetic_data(12, seed=1))
    write_csv(folder / "test.csv", synthetic_data(4, seed=2))

    # n-grams: the seeds are named the same on either model, and the encoder's doubles the time
    lines = run_benchmark(
        "accuracy.py", str(folder), "--seeds", "3", "--no-peers", "--language", "fr", "--json"
    )

    assert [row["system"] for row in lines] == ["taas", "taas-seed1", "taas-seed2"]
    assert [row["seed"] for row in lines] == [DEFAULT_HPARAMS.seed + i for i in range(3)]


def test_seeds_below_one_are_refused_with_the_reason(tmp_path: Path) -> None:
    ran = run_script("accuracy.py", str(tmp_path), "--seeds", "0")

    assert ran.returncode == 2
    assert "--seeds must be at least 1, not 0" in ran.stderr


def test_a_data_set_inside_another_is_named_after_both(tmp_path: Path) -> None:
    """hint3's three ``v1`` folders were all "v1" in one run's rows."""
    from benchmarks.accuracy import dataset_name

    for folder in (
        tmp_path / "hint3-curekart",
        tmp_path / "hint3-curekart" / "v1",
        tmp_path / "other" / "v1",
    ):
        folder.mkdir(parents=True)
    (tmp_path / "hint3-curekart" / "train.csv").write_text("text,label\n")

    assert dataset_name(tmp_path / "hint3-curekart") == "hint3-curekart"
    assert dataset_name(tmp_path / "hint3-curekart" / "v1") == "hint3-curekart/v1"
    assert dataset_name(tmp_path / "other" / "v1") == "v1"  # its parent is no data set

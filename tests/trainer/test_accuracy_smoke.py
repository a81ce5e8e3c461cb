from __future__ import annotations

from pathlib import Path

import pytest

from trainer.data import read_labelled_csv
from trainer.engine import train
from trainer.evaluate import classification_report
from trainer.inference import LoadedModel

SHARED_DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
CHATBOT = SHARED_DATA / "nlu-eval-chatbot"


@pytest.mark.slow
@pytest.mark.skipif(not (CHATBOT / "train.csv").exists(), reason=f"shared dataset absent: {CHATBOT}")
def test_chatbot_accuracy_reaches_the_svm_baseline_minus_three_points(tmp_path: Path) -> None:
    train(read_labelled_csv(CHATBOT / "train.csv"), workdir=tmp_path / "w", out_dir=tmp_path / "m")
    test = read_labelled_csv(CHATBOT / "test.csv")
    predicted = [scores[0][0] for scores in LoadedModel.load(tmp_path / "m").classify(test.texts)]
    assert classification_report(test.labels, predicted)["accuracy"] >= 0.961

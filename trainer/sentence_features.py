"""A text's sentence embedding as features beside its n-grams, in the same bag.

The model (trainer.model.TextClassifier) is a sum of weighted embedding rows into a hidden
layer, then a linear layer. An encoder model gives each text ``dim`` more entries in its bag:
rows ``first_row`` .. ``first_row + dim - 1`` of the same table (right after the n-gram rows),
weighted by the text's L2-normalised sentence embedding times ``scale``. Those ``dim`` rows are
a linear projection of the embedding into the hidden layer, learned with the n-gram rows: the
whole model stays one linear classifier over [TF-IDF n-grams ; scale x embedding], factorised
through the hidden layer, and the parameter server, the learners, checkpoints and the CUDA
path train it as they train the n-gram model (the sentence rows are rows every mini-batch
touches). The embeddings are computed once per text and job (``encode_texts``), cached in the
job's work folder so that a resumed job does not encode again.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from trainer.checkpoint import write_atomic
from trainer.encoder import EncoderUnavailable, SentenceEncoder, shared_encoder
from trainer.features import Bags

CACHE_FILE = "sentence-vectors.npz"


@dataclass(frozen=True)
class SentenceVectors:
    """The sentence embeddings of a set of distinct texts, found by text."""

    encoder: str  # the encoder's name
    sha256: str  # of the encoder's weights
    layers: tuple[int, ...]  # whose mean-pooled outputs (SentenceEncoder.encode)
    index: dict[str, int]
    matrix: np.ndarray  # texts x dim, float32, each row L2-normalised

    @property
    def dim(self) -> int:
        """The embedding's width."""
        return int(self.matrix.shape[1])

    def of(self, texts: Sequence[str]) -> np.ndarray:
        """The embeddings of ``texts`` (each one of the encoded texts), in their order."""
        return self.matrix[[self.index[text] for text in texts]]


def encode_texts(
    encoder: SentenceEncoder,
    texts: Sequence[str],
    cache_dir: Path | None = None,
    layers: tuple[int, ...] | None = None,
    on_batch: Callable[[int], None] | None = None,
) -> SentenceVectors:
    """The embeddings of every distinct text of ``texts`` (of ``layers``; default: the
    encoder's, SentenceEncoder.encode, which calls ``on_batch`` with the distinct texts encoded
    so far).

    With ``cache_dir``, they are kept there (CACHE_FILE, written atomically) and read back by a
    later call for the same texts and encoder weights instead of encoding again: a job resumed
    after a crash skips the encoder's minute on 10,000 texts.
    """
    distinct = list(dict.fromkeys(texts))
    layers = encoder.spec.layers if layers is None else layers
    key = _cache_key(f"{encoder.sha256} {layers}", distinct)
    matrix = _read_cache(cache_dir / CACHE_FILE, key) if cache_dir is not None else None
    if matrix is None or matrix.shape != (len(distinct), encoder.width(layers)):
        matrix = encoder.encode(distinct, layers, on_batch=on_batch)
        if cache_dir is not None:
            buffer = io.BytesIO()
            np.savez(buffer, key=np.array(key), matrix=matrix)
            cache_dir.mkdir(parents=True, exist_ok=True)
            write_atomic(cache_dir / CACHE_FILE, buffer.getvalue())
    return SentenceVectors(
        encoder.name, encoder.sha256, layers, {t: i for i, t in enumerate(distinct)}, matrix
    )


def _cache_key(encoder: str, texts: list[str]) -> str:
    digest = hashlib.sha256(encoder.encode())
    for text in texts:
        digest.update(text.encode("utf-8") + b"\x00")
    return digest.hexdigest()


def _read_cache(path: Path, key: str) -> np.ndarray | None:
    """The cached matrix when ``path`` holds one for ``key``; None when absent, stale or unreadable."""
    try:
        with np.load(path, allow_pickle=False) as saved:
            if str(saved["key"]) != key:
                return None
            return np.asarray(saved["matrix"], dtype=np.float32)
    except (OSError, ValueError, KeyError):
        return None


@dataclass(frozen=True)
class SentenceInput:
    """How a model reads the sentence embedding: which encoder (name and the sha256 of its
    weights), which of its layers (SentenceEncoder.encode), the embedding's width, its scale in
    the bags, the first of its rows, and the scale of the n-gram entries beside it
    (HParams.encoder_scale, encoder_ngram_scale)."""

    encoder: str
    sha256: str
    layers: tuple[int, ...]
    dim: int
    scale: float
    first_row: int
    ngram_scale: float = 1.0

    def append(self, bags: Bags, embeddings: np.ndarray) -> Bags:
        """``bags`` with each text's embedding appended (one embedding per bag, in order)."""
        if embeddings.shape[1:] != (self.dim,):
            raise ValueError(f"embeddings of width {embeddings.shape[1:]}, the model reads {self.dim}")
        if self.ngram_scale != 1.0:
            bags = Bags(bags.ids, bags.weights * np.float32(self.ngram_scale), bags.offsets)
        return _with_sentence_rows(bags, embeddings, self.first_row, self.scale)

    def as_dict(self) -> dict[str, object]:
        """JSON-safe dict of every field (model.json's ``"sentence"``)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, values: object, rows: int) -> SentenceInput:
        """model.json's ``"sentence"``, checked against a model of ``rows`` embedding rows
        (a bundle's model.json comes from outside). Raises ValueError."""
        if not isinstance(values, dict):
            raise ValueError("'sentence' must be an object")
        layers = values.get("layers")
        if not (isinstance(layers, list) and layers and all(type(n) is int and 1 <= n <= 64 for n in layers)):
            raise ValueError("sentence layers must be a list of layer numbers")
        sentence = cls(**{**values, "layers": tuple(layers)})
        if not (isinstance(sentence.encoder, str) and isinstance(sentence.sha256, str)):
            raise ValueError("sentence encoder and sha256 must be strings")
        if type(sentence.dim) is not int or type(sentence.first_row) is not int:
            raise ValueError("sentence dim and first_row must be whole numbers")
        if not (1 <= sentence.dim and 0 <= sentence.first_row and sentence.first_row + sentence.dim == rows):
            raise ValueError(
                f"the sentence rows {sentence.first_row}+{sentence.dim} are not the last of {rows}"
            )
        for name in ("scale", "ngram_scale"):
            value = getattr(sentence, name)
            if type(value) not in (int, float) or not 0 < value < 1e3:  # NaN too
                raise ValueError(f"sentence {name} {value!r} is not a positive number below 1000")
        return sentence


NGRAMS = "n-grams"
ENCODER_AND_NGRAMS = "sentence-encoder+n-grams"


def describe_model(sentence: SentenceInput | None) -> dict[str, object]:
    """What a model reads, for its metrics and the API (``"model"``): ``{"kind": "n-grams"}``, or
    the encoder's kind, name, weights' sha256 and layers. A model without the entry (trained
    before encoders) is an n-gram model."""
    if sentence is None:
        return {"kind": NGRAMS}
    return {
        "kind": ENCODER_AND_NGRAMS,
        "encoder": sentence.encoder,
        "encoder_sha256": sentence.sha256,
        "encoder_layers": list(sentence.layers),
    }


def _with_sentence_rows(bags: Bags, embeddings: np.ndarray, first_row: int, scale: float) -> Bags:
    """``bags`` with each text's embedding appended as ``dim`` weighted rows from ``first_row``
    (see the module docstring). ``embeddings`` has one row per bag, in the bags' order."""
    texts, dim = embeddings.shape
    if texts != len(bags):
        raise ValueError(f"{texts} embeddings for {len(bags)} bags")
    lengths = np.diff(np.append(bags.offsets, len(bags.ids)))
    offsets = bags.offsets + dim * np.arange(texts, dtype=np.int64)
    # each text's n-gram entries keep their order, then its dim sentence rows follow
    total = len(bags.ids) + texts * dim
    is_ngram = np.ones(total, dtype=bool)
    sentence_at = (offsets + lengths)[:, None] + np.arange(dim, dtype=np.int64)
    is_ngram[sentence_at.ravel()] = False
    ids = np.empty(total, dtype=np.int64)
    weights = np.empty(total, dtype=np.float32)
    ids[is_ngram], weights[is_ngram] = bags.ids, bags.weights
    ids[~is_ngram] = np.tile(np.arange(first_row, first_row + dim, dtype=np.int64), texts)
    weights[~is_ngram] = (embeddings * np.float32(scale)).ravel()
    return Bags(ids, weights, offsets)


def check_encoder(sentence: SentenceInput) -> None:
    """Raise EncoderUnavailable unless this installation has the encoder ``sentence`` names,
    with the very weights (sha256) the model was trained on."""
    encoder = shared_encoder(sentence.encoder)
    if encoder.sha256 != sentence.sha256:
        raise EncoderUnavailable(
            f"the model was trained on {sentence.encoder} weights {sentence.sha256[:12]}…, "
            f"this installation has {encoder.sha256[:12]}…"
        )
    if (
        not all(1 <= n <= encoder.layers for n in sentence.layers)
        or encoder.width(sentence.layers) != sentence.dim
    ):
        raise EncoderUnavailable(
            f"the model reads {sentence.dim} values of layers {list(sentence.layers)} of {sentence.encoder}, "
            f"which has {encoder.layers} layers of {encoder.dim}"
        )

"""The model directory format, and loading a trained model to classify texts.

A model directory holds ``weights.pt`` (tensors only: embedding stored as float16 to halve
the file, output layer, the featurizer's known buckets and IDF) and ``model.json`` (labels,
configs, hyper-parameters, metrics, the SHA-256 of ``weights.pt``). ``model.json`` is written
last, so its presence means the directory is complete. Loading uses
``torch.load(weights_only=True)``: nothing in a model directory is ever unpickled as code.

A multi-label model (one sigmoid per class) says so in ``model.json``: ``"multi_label": true``
and its decision ``"threshold"``, under the format MULTI_LABEL_FORMAT, so that a reader that
knows only FORMAT refuses it instead of serving its scores as a softmax. A single-label
model's files are as they always were; one without the field is single-label.

A model that reads a pretrained encoder's sentence embedding (trainer.sentence_features) says
so in ``"sentence"`` (the encoder's name and weights' sha256, the embedding's width, scale and
first row), under SENTENCE_FORMAT, which older readers refuse. Its files hold only its own
weights: the encoder is the installation's, loaded once per process (trainer.encoder), and a
model is served only on the very weights it was trained on.
"""

from __future__ import annotations

import hashlib
import io
import json
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer.checkpoint import write_atomic
from trainer.data import OUT_OF_SCOPE_CLASS
from trainer.encoder import shared_encoder
from trainer.errors import CheckpointCorrupt, WeightsOutOfBounds
from trainer.evaluate import decide
from trainer.features import DEFAULT_CACHE_BYTES, Bags, Featurizer, FeaturizerConfig
from trainer.in_scope import (
    NEIGHBOURS,
    InScope,
    load_in_scope,
    top_confidences,
    without_negatives,
)
from trainer.model import ModelConfig, TextClassifier, logits_of
from trainer.sentence_features import SentenceInput, check_encoder
from trainer.weight_bounds import out_of_bounds, stores_every_value

FORMAT = "taas-text-classifier/1"
MULTI_LABEL_FORMAT = "taas-text-classifier/2"  # FORMAT plus "multi_label" and "threshold"
SENTENCE_FORMAT = "taas-text-classifier/3"  # MULTI_LABEL_FORMAT plus "sentence"
FORMATS = (FORMAT, MULTI_LABEL_FORMAT, SENTENCE_FORMAT)
WEIGHTS_FILE = "weights.pt"
META_FILE = "model.json"
_CLASSIFY_BATCH = 512


def save_model(
    out_dir: Path,
    model: TextClassifier,
    featurizer: Featurizer,
    labels: Sequence[str],
    temperature: float,
    extra: dict[str, Any],
    threshold: float | None = None,
    sentence: SentenceInput | None = None,
    in_scope: InScope | None = None,
) -> None:
    """Write a complete model directory (created if missing); ``extra`` goes into model.json.
    ``sentence``: how the model reads the encoder's embedding (None: n-grams only);
    ``in_scope``: its out-of-scope scoring (trainer.in_scope; None: none).

    The output layer is saved divided by ``temperature`` (trainer.calibration), so a loaded
    model's softmax gives the calibrated confidences with no extra step. A ``threshold``
    marks a multi-label model (sigmoid confidences, that decision threshold).
    """
    tensors = {
        "embedding": model.embedding.weight.detach().to(torch.float16).contiguous(),
        "output.weight": model.output.weight.detach() / temperature,
        "output.bias": model.output.bias.detach() / temperature,
        **({} if model.direct is None else {"direct.weight": model.direct.weight.detach() / temperature}),
        "buckets": torch.from_numpy(featurizer.buckets.astype(np.int32)),  # < 2**24: int32 is exact
        "idf": torch.from_numpy(featurizer.idf.copy()),
    }
    if in_scope is not None and in_scope.neighbours is not None:
        tensors[NEIGHBOURS] = in_scope.neighbours.to(torch.float16).contiguous()
    if problem := out_of_bounds({k: v for k, v in tensors.items() if k != "buckets"}):
        # a model no loader would take must not be written (its job ended Available, every
        # classify a 503); weights grow so only when training diverges
        raise WeightsOutOfBounds(problem)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    payload = buffer.getvalue()
    write_atomic(out_dir / WEIGHTS_FILE, payload)
    mode: dict[str, object] = {"multi_label": True, "threshold": threshold} if threshold is not None else {}
    if sentence is not None:
        mode["sentence"] = sentence.as_dict()
    if in_scope is not None:
        mode["in_scope"] = in_scope.as_dict()
    meta = {
        "format": SENTENCE_FORMAT
        if sentence is not None
        else FORMAT
        if threshold is None
        else MULTI_LABEL_FORMAT,
        **mode,
        "labels": list(labels),
        "model": model.config.as_dict(),
        "featurizer": featurizer.config.as_dict(),
        "weights_sha256": hashlib.sha256(payload).hexdigest(),
        **extra,
    }
    # UTF-8, not \u escapes: a class name of emoji took 12 bytes a character, and names appear
    # in the labels, the per-class metrics and the confusion matrix
    text = json.dumps(meta, indent=2, sort_keys=True, ensure_ascii=False)
    write_atomic(out_dir / META_FILE, text.encode("utf-8"))


def read_metadata(model_dir: Path) -> dict[str, Any]:
    """The parsed model.json of a model directory. Raises CheckpointCorrupt if absent or invalid."""
    try:
        content = (Path(model_dir) / META_FILE).read_bytes()
    except OSError as exc:
        raise CheckpointCorrupt(f"{model_dir}: no readable {META_FILE}: {exc}") from exc
    return parse_metadata(content, model_dir)


def parse_metadata(content: bytes, model_dir: Path) -> dict[str, Any]:
    """model.json's ``content`` parsed and checked (``model_dir``: where it is, or is to be,
    for the messages). Raises CheckpointCorrupt if it is not a model's."""
    try:
        meta = json.loads(content.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, nested past the parser
        raise CheckpointCorrupt(f"{model_dir}: no readable {META_FILE}: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") not in FORMATS:
        raise CheckpointCorrupt(
            f"{model_dir}: {META_FILE} is not a model of the formats {', '.join(FORMATS)}"
        )
    if not isinstance(meta.get("metrics", {}), dict | None):
        raise CheckpointCorrupt(f"{model_dir}: {META_FILE} has metrics that are not a JSON object")
    return meta


def _labels(labels: object, classes: int) -> list[str]:
    """model.json's labels, checked: ``classes`` distinct strings, one per output row (a
    bundle's model.json comes from outside)."""
    if not (isinstance(labels, list) and all(isinstance(label, str) for label in labels)):
        raise ValueError("labels must be a list of strings")
    if len(labels) != classes:
        raise ValueError(f"labels must be {classes} strings, one per class, not {len(labels)}")
    if len(set(labels)) != classes:
        repeated = next(label for label in labels if labels.count(label) > 1)
        raise ValueError(f"labels must be distinct: {repeated[:100]!r} appears more than once")
    return labels


_WEIGHTS = ("buckets", "idf", "embedding", "output.weight", "output.bias")
_DIRECT = "direct.weight"  # an encoder model's direct path (trainer.model), since 2026-12-07


def _check_weights(tensors: object, model_dir: Path) -> None:
    """Raise CheckpointCorrupt unless ``tensors`` names every weight, each a tensor (and the
    in-scope neighbours, if there, one too)."""
    if not isinstance(tensors, dict):
        raise CheckpointCorrupt(f"{model_dir}: {WEIGHTS_FILE} does not hold named tensors")
    for key in (*_WEIGHTS, *(k for k in (NEIGHBOURS, _DIRECT) if k in tensors)):
        tensor = tensors.get(key)
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointCorrupt(f"{model_dir}: {WEIGHTS_FILE} has no tensor '{key}'")
        if not stores_every_value(tensor):
            raise CheckpointCorrupt(
                f"{model_dir}: {WEIGHTS_FILE}: '{key}' does not store each of its {tensor.numel()} values"
            )


def _model_config(spec: object, tensors: dict[str, torch.Tensor], sentence_dim: int) -> ModelConfig:
    """model.json's model shape, checked against the stored tensors before anything is built
    from it: a bundle's model.json comes from outside, and a rows figure of millions would
    have the model allocate gigabytes before its weights were found not to fit. The last
    ``sentence_dim`` embedding rows are the sentence embedding's, with no n-gram bucket."""
    if not isinstance(spec, dict):
        raise ValueError("'model' must be an object")
    config = ModelConfig(**spec)
    if (
        not all(type(v) is int and v >= 1 for v in (config.dim, config.classes))
        or type(config.rows) is not int
    ):
        raise ValueError(
            "the model's rows, dim and classes must be whole numbers, dim and classes at least 1"
        )
    if config.direct and (config.direct != sentence_dim or not 0 < config.direct_scale < 1e3):
        raise ValueError(
            f"a direct path of {config.direct!r} values at scale {config.direct_scale!r} "
            f"where the model reads {sentence_dim} sentence values"
        )
    shapes = {
        "buckets": (config.rows - sentence_dim,),
        "idf": (config.rows - sentence_dim,),
        "embedding": (config.rows, config.dim),
        "output.weight": (config.classes, config.dim),
        "output.bias": (config.classes,),
        **({_DIRECT: (config.classes, config.direct)} if config.direct or _DIRECT in tensors else {}),
    }
    for key, shape in shapes.items():
        found = tuple(tensors[key].shape) if key in tensors else "none"
        if found != shape:
            raise ValueError(f"'{key}' has shape {found} where model.json makes it {shape}")
    if tensors["buckets"].is_floating_point():
        raise ValueError("'buckets' must hold integers")
    return config


def _check_buckets(buckets: torch.Tensor, table: int) -> None:
    """The kept hash buckets, one per embedding row: strictly rising, within [0, ``table``)."""
    if len(buckets) and not (
        bool((buckets[1:] > buckets[:-1]).all()) and 0 <= int(buckets[0]) <= int(buckets[-1]) < table
    ):
        raise ValueError(f"'buckets' must rise strictly within [0, {table})")


# What training ever writes, with room: an imported model's n-gram settings set each classify's
# cost (a word_ngrams of 100,000 took seconds of CPU a text).
_FEATURIZER_BOUNDS = {
    "word_ngrams": (1, 3),
    "char_ngram_min": (1, 6),
    "char_ngram_max": (1, 6),
    "buckets": (1, 1 << 31),
    "max_features": (1, 1 << 24),
}


def _featurizer_config(spec: object) -> FeaturizerConfig:
    """model.json's featurizer settings, each a whole number within ``_FEATURIZER_BOUNDS``."""
    if not isinstance(spec, dict):
        raise ValueError("'featurizer' must be an object")
    config = FeaturizerConfig(**spec)
    for name, (low, high) in _FEATURIZER_BOUNDS.items():
        value = getattr(config, name)
        if type(value) is not int or not low <= value <= high:
            raise ValueError(f"featurizer {name} must be a whole number from {low} to {high}, not {value!r}")
    if config.char_ngram_min > config.char_ngram_max:
        raise ValueError("featurizer char_ngram_min is above char_ngram_max")
    return config


MIN_CACHE_BYTES = 512 << 10  # a tiny model's n-gram caches: a few thousand words each


class LoadedModel:
    """A trained classifier in memory, ready to classify texts.

    ``multi_label``: the model scores each class with its own sigmoid (confidences do not sum
    to 1) and ``threshold`` is its decision threshold; single-label models have a softmax and
    no threshold. ``labels_of`` turns one text's scores into its predicted labels either way.
    ``in_scope``: a single-label model's out-of-scope scoring, if it has one (in_scope_scores).
    """

    def __init__(
        self,
        labels: list[str],
        featurizer: Featurizer,
        model: TextClassifier,
        threshold: float | None = None,
        sentence: SentenceInput | None = None,
        in_scope: InScope | None = None,
    ) -> None:
        self.labels = labels
        self.in_scope = in_scope
        # a single-label model trained with out-of-scope examples: their class's column, and the
        # classes it answers with (trainer.in_scope)
        self.negatives = (
            labels.index(OUT_OF_SCOPE_CLASS) if OUT_OF_SCOPE_CLASS in labels and threshold is None else None
        )
        self.classes = [label for label in labels if label != OUT_OF_SCOPE_CLASS]
        self.threshold = threshold
        self.featurizer = featurizer
        self.sentence = sentence
        self.model = model.eval()
        direct = None if model.direct is None else model.direct.weight.detach()
        self._params = (
            model.embedding.weight.detach(),
            model.output.weight.detach(),
            model.output.bias.detach(),
        )
        self._direct = (direct, model.config.direct_scale)
        tensors = [*model.parameters()]
        weights = sum(t.numel() * t.element_size() for t in tensors) + featurizer.buckets.nbytes
        # The featurizer's two caches of n-gram rows may hold as much as half the weights each
        # (a snips-sized model's vocabulary needs about 11 MB), within bounds; counted here, so
        # a model cache's budget holds whatever classify texts fill them with.
        featurizer.cache_bytes = min(max(weights // 2, MIN_CACHE_BYTES), DEFAULT_CACHE_BYTES)
        self.nbytes = weights + featurizer.idf.nbytes + 2 * featurizer.cache_bytes
        self.nbytes += in_scope.nbytes if in_scope is not None else 0

    @classmethod
    def load(cls, model_dir: Path, *, check_encoder_weights: bool = True) -> LoadedModel:
        """Load a model directory written by save_model.

        Raises CheckpointCorrupt when a file is missing, its checksum differs from model.json,
        or its contents do not match the recorded shapes. ``model_dir`` may also be a bundle
        file (:mod:`trainer.bundle`; BundleInvalid if it does not check out). An encoder model
        raises EncoderUnavailable unless this installation has its encoder, with the weights
        it was trained on (``check_encoder_weights`` False skips that, for a caller that
        passes the embeddings in itself: loading the encoder takes a process 90 MB).
        """
        model_dir = Path(model_dir)
        if model_dir.is_file():
            return cls._load_bundle(model_dir)
        meta = read_metadata(model_dir)
        try:
            payload = (model_dir / WEIGHTS_FILE).read_bytes()
        except OSError as exc:
            raise CheckpointCorrupt(f"{model_dir}: cannot read {WEIGHTS_FILE}: {exc}") from exc
        if hashlib.sha256(payload).hexdigest() != meta.get("weights_sha256"):
            raise CheckpointCorrupt(f"{model_dir}: {WEIGHTS_FILE} does not match its checksum")
        try:
            tensors = torch.load(io.BytesIO(payload), weights_only=True)
        except Exception as exc:  # torch raises many types for a bad payload
            raise CheckpointCorrupt(
                f"{model_dir}: {WEIGHTS_FILE} is not a tensors-only torch file: {exc}"
            ) from exc
        _check_weights(tensors, model_dir)
        try:
            sentence = (
                SentenceInput.from_dict(meta["sentence"], tensors["embedding"].shape[0])
                if meta.get("sentence") is not None
                else None
            )
            config = _model_config(meta.get("model"), tensors, sentence.dim if sentence is not None else 0)
            labels = _labels(meta.get("labels"), config.classes)
            featurizer_config = _featurizer_config(meta.get("featurizer"))
            _check_buckets(tensors["buckets"], featurizer_config.buckets)
            if tensors["idf"].numel() and not bool((tensors["idf"] > 0).all()):  # False for NaN too
                # a text of n-grams all of IDF 0 has a norm of 0: 0/0, NaN confidences
                raise ValueError("'idf' must be positive (training writes each n-gram's IDF, at least 1)")
            embedding = tensors["embedding"].to(torch.float32)
            weights = {**tensors, "embedding": embedding}  # the float32 copy is the one checked and kept
            layers = ("output.weight", "output.bias", *([_DIRECT] if config.direct else []))
            if problem := out_of_bounds({k: weights[k] for k in ("idf", "embedding", *layers)}):
                raise CheckpointCorrupt(f"{model_dir}: {WEIGHTS_FILE}: {problem}")
            featurizer = Featurizer(featurizer_config, tensors["buckets"].numpy(), tensors["idf"].numpy())
            model = TextClassifier(config, embedding_init=0.0, output_init=0.0)  # replaced next
            model.load_state_dict({"embedding.weight": embedding, **{k: tensors[k] for k in layers}})
            threshold = meta["threshold"] if meta.get("multi_label") else None
            if threshold is not None and type(threshold) not in (int, float):
                raise ValueError(f"threshold {threshold!r} is not a number")
            if threshold is not None and not 0.0 < threshold < 1.0:  # NaN too
                raise ValueError(f"threshold {threshold} is not between 0 and 1")
            dim = sentence.dim if sentence is not None else None
            in_scope = None if threshold is not None else load_in_scope(meta, tensors, dim)
        except (KeyError, TypeError, RuntimeError, ValueError) as exc:
            raise CheckpointCorrupt(f"{model_dir}: model files do not fit together: {exc}") from exc
        if sentence is not None and check_encoder_weights:
            check_encoder(sentence)
        return cls(labels, featurizer, model, threshold, sentence, in_scope)

    @classmethod
    def _load_bundle(cls, bundle: Path) -> LoadedModel:
        from trainer.bundle import extract_bundle  # the bundle format builds on this module's

        with tempfile.TemporaryDirectory(prefix="taas-bundle-") as unpacked:
            extract_bundle(bundle, Path(unpacked))
            return cls.load(Path(unpacked))  # read whole into memory: the folder can go

    @property
    def multi_label(self) -> bool:
        """Whether the model scores each class with its own sigmoid (it has a threshold)."""
        return self.threshold is not None

    @property
    def encoder(self) -> str | None:
        """The name of the sentence encoder this model reads, or None (n-grams only)."""
        return self.sentence.encoder if self.sentence is not None else None

    def embed(self, texts: Sequence[str]) -> np.ndarray | None:
        """The sentence embeddings this model reads for ``texts``, from this process's shared
        encoder (None for an n-gram model). A caller that serves several models on one encoder
        computes them once for all (service batching) and passes them in."""
        if self.sentence is None:
            return None
        return shared_encoder(self.sentence.encoder).encode(texts, self.sentence.layers)

    def bags(self, texts: Sequence[str], embeddings: np.ndarray | None = None) -> Bags:
        """The model's input bags for ``texts``: their n-grams, and for an encoder model their
        sentence embeddings (``embeddings``, one row per text; computed here when None)."""
        bags = self.featurizer.transform(texts)
        if self.sentence is None:
            return bags
        if embeddings is None:
            embeddings = self.embed(texts)
        assert embeddings is not None
        return self.sentence.append(bags, embeddings)

    def probabilities(self, texts: Sequence[str], embeddings: np.ndarray | None = None) -> np.ndarray:
        """Class probabilities (texts x labels, float64) in label order: rows sum to 1, or, for a
        multi-label model, each is the class's independent sigmoid. ``embeddings``: see bags."""
        if len(texts) <= _CLASSIFY_BATCH:
            return self._probabilities(texts, embeddings)
        chunks = range(0, len(texts), _CLASSIFY_BATCH)
        return np.concatenate(
            [
                self._probabilities(
                    texts[i : i + _CLASSIFY_BATCH],
                    None if embeddings is None else embeddings[i : i + _CLASSIFY_BATCH],
                )
                for i in chunks
            ]
        )

    def _probabilities(self, texts: Sequence[str], embeddings: np.ndarray | None) -> np.ndarray:
        # Functional calls on detached tensors: no nn.Module dispatch and no autograd context to
        # enter, which is a third of the cost of a one-text call.
        ids, offsets, weights = bag_tensors(self.bags(texts, embeddings))
        logits = logits_of(ids, offsets, weights, *self._params, *self._direct).to(torch.float64)
        return (torch.sigmoid(logits) if self.multi_label else torch.softmax(logits, dim=1)).numpy()

    def classify(
        self, texts: Sequence[str], top: int | None = None, embeddings: np.ndarray | None = None
    ) -> list[list[tuple[str, float]]]:
        """Per text: every class (or the ``top`` most confident) with its confidence, sorted
        descending, ties in label order (summing to 1 unless the model is multi-label).

        ``top`` is what a classify reply shows: sorting and listing all of 3,000 classes was
        twenty times the inference of 30 texts (79 ms of a collection call's 82). A multi-label
        model lists more than ``top`` for a text with more classes at or above its threshold,
        so that :meth:`labels_of` finds every label it predicts (the batcher ranked all 3,000
        classes of such a model for that: 32 ms for 30 texts against 10 ms). ``embeddings``:
        see bags."""
        return self.rank(self.probabilities(texts, embeddings), top)

    def rank(self, probabilities: np.ndarray, top: int | None = None) -> list[list[tuple[str, float]]]:
        """classify's answer from the ``probabilities`` of its texts. A model trained with
        out-of-scope examples never answers OUT_OF_SCOPE_CLASS: the other classes' confidences
        are renormalised without it."""
        labels = self.labels
        if self.negatives is not None:
            probabilities, labels = without_negatives(probabilities, self.negatives), self.classes
        if top is not None and top < probabilities.shape[1] and self.threshold is not None:
            chosen = np.count_nonzero(probabilities >= self.threshold, axis=1)
            return [
                [(labels[i], float(row[i])) for i in _ranked(row, max(top, int(above))).tolist()]
                for row, above in zip(probabilities, chosen, strict=True)
            ]
        if top is None or top >= probabilities.shape[1]:  # one sort of every row (the hot path)
            orders = np.argsort(-probabilities, axis=1, kind="stable")
        else:
            orders = np.array([_ranked(row, top) for row in probabilities], dtype=np.int64).reshape(-1, top)
        confidences = np.take_along_axis(probabilities, orders, axis=1).tolist()
        return [
            [(labels[i], confidence) for i, confidence in zip(order, row, strict=True)]
            for order, row in zip(orders.tolist(), confidences, strict=True)
        ]

    def in_scope_scores(
        self, probabilities: np.ndarray, embeddings: np.ndarray | None = None
    ) -> list[float] | None:
        """Per text, from its ``probabilities``, its in-scope score (trainer.in_scope), or None
        for a model without out-of-scope scoring. ``embeddings``: see bags."""
        if self.in_scope is None:
            return None
        if embeddings is None and self.in_scope.neighbours is not None:
            raise ValueError("an encoder model's in-scope scores need the texts' embeddings")
        scores = self.in_scope.scores(top_confidences(probabilities, self.negatives), embeddings)
        if self.negatives is not None:  # most like the out-of-scope examples
            scores[probabilities.argmax(axis=1) == self.negatives] = 0.0
        return scores.tolist()

    def labels_of(self, scores: Sequence[tuple[str, float]]) -> list[str]:
        """The predicted labels of one text, from its ``classify`` result: the top class for a
        single-label model; for a multi-label one, the classes at or above ``threshold``, and
        the top class when none is (trainer.evaluate.decide, the rule its metrics used)."""
        if self.threshold is None:
            return [scores[0][0]]
        chosen = decide(np.array([[confidence for _, confidence in scores]]), self.threshold)[0]
        return [label for (label, _), keep in zip(scores, chosen.tolist(), strict=True) if keep]


def _ranked(row: np.ndarray, top: int) -> np.ndarray:
    """The indices of ``row``'s ``top`` largest values, descending, ties in index order: the
    first ``top`` of a stable sort of the whole row, found in linear time."""
    if top >= row.size:
        return np.argsort(-row, kind="stable")
    kth = np.partition(row, row.size - top)[row.size - top]
    candidates = np.flatnonzero(row >= kth)  # ascending, so the stable sort keeps ties in order
    return candidates[np.argsort(-row[candidates], kind="stable")][:top]


def bag_tensors(bags: Bags) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, offsets, weights) tensors for TextClassifier.forward, sharing the numpy memory."""
    return torch.from_numpy(bags.ids), torch.from_numpy(bags.offsets), torch.from_numpy(bags.weights)

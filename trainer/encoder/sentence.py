"""SentenceEncoder: texts in, L2-normalised sentence embeddings out, on one shared model.

One instance per process (``shared_encoder``), shared by every tenant: it holds the weights
(all-MiniLM-L6-v2: 22.7 M parameters, 87 MiB in float32) and nothing of any tenant. ``encode``
tokenises with the model's own ``tokenizer.json`` (the Rust ``tokenizers`` library), sorts the
texts by length so that each batch pads to about its own length, runs the BERT forward
(trainer.encoder.bert) without gradients, and mean-pools the real tokens, as
sentence-transformers does for this model.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from tokenizers import Tokenizer

from trainer.encoder.bert import BertConfig, BertEncoder, mean_pool
from trainer.encoder.registry import EncoderSpec, EncoderUnavailable, encoder_spec

ENCODE_BATCH = 64  # texts per forward; padded to the batch's longest after sorting by length
_HASH_CHUNK = 1 << 20


class SentenceEncoder:
    """A loaded pretrained sentence encoder (see the module docstring)."""

    def __init__(self, spec: EncoderSpec, folder: Path | None = None) -> None:
        """Load ``spec``'s weights from its package (or from ``folder``). Raises
        EncoderUnavailable when the files are missing or are not a BERT this code runs."""
        started = time.perf_counter()
        folder = spec.files() if folder is None else folder
        self.spec = spec
        self.name = spec.name
        weights = folder / "model.safetensors"
        try:
            config = BertConfig.from_json(json.loads((folder / "config.json").read_text()))
            self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
            model = BertEncoder(config)
            model.load_hugging_face(load_file(weights))
        except Exception as exc:  # tokenizers raises a bare Exception for a bad file
            raise EncoderUnavailable(
                f"cannot load the sentence encoder {spec.name} from {folder}: {exc}"
            ) from exc
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(spec.max_tokens)
        self.model = model.eval().requires_grad_(False)
        self.dim = config.hidden_size
        self.layers = config.num_hidden_layers
        self.sha256 = _sha256(weights)
        self.nbytes = sum(t.numel() * t.element_size() for t in self.model.state_dict().values())
        self.load_seconds = time.perf_counter() - started
        # what it has done in this process: encode calls and texts (the metrics' counters)
        self.calls = 0
        self.texts = 0
        self._counting = threading.Lock()

    def tokens(self, texts: Sequence[str]) -> list[list[int]]:
        """Each text's token ids, [CLS] and [SEP] included, cut at ``spec.max_tokens``."""
        return [encoding.ids for encoding in self.tokenizer.encode_batch(list(texts))]

    def width(self, layers: Sequence[int]) -> int:
        """The width of ``encode``'s embeddings of those layers."""
        return self.dim * len(layers)

    def encode(
        self,
        texts: Sequence[str],
        layers: Sequence[int] | None = None,
        batch_size: int = ENCODE_BATCH,
        on_batch: Callable[[int], None] | None = None,
    ) -> np.ndarray:
        """Sentence embeddings (len(texts) x width(layers), float32), in the texts' order: for
        each of ``layers`` (default: the spec's), the mean of the text's tokens' outputs of that
        layer, L2-normalised, side by side. ``(num_layers,)`` is the encoder's own sentence
        embedding, as sentence-transformers gives it. ``on_batch(done)`` is called after each
        batch with the number of texts encoded so far (what it raises ends the call)."""
        layers = tuple(self.spec.layers if layers is None else layers)
        if not layers or not all(1 <= depth <= self.layers for depth in layers):
            raise ValueError(f"layers {layers}: each must be 1 to {self.layers}")
        out = np.zeros((len(texts), self.width(layers)), dtype=np.float32)
        if not texts:
            return out
        with self._counting:
            self.calls += 1
            self.texts += len(texts)
        ids = self.tokens(texts)
        order = np.argsort([len(row) for row in ids], kind="stable")
        # no lock: serving threads each run a forward at once (an API process runs torch on one
        # intra-op thread a call); the model is read-only and the tokenizer's calls are too
        with torch.inference_mode():
            for first in range(0, len(order), batch_size):
                rows = order[first : first + batch_size]
                out[rows] = self._forward([ids[i] for i in rows], layers).numpy()
                if on_batch is not None:
                    on_batch(first + len(rows))
        return out

    def _forward(self, ids: list[list[int]], layers: tuple[int, ...]) -> torch.Tensor:
        width = max(len(row) for row in ids)
        batch = torch.zeros((len(ids), width), dtype=torch.int64)
        attention = torch.zeros((len(ids), width), dtype=torch.int64)
        for i, row in enumerate(ids):
            batch[i, : len(row)] = torch.tensor(row)
            attention[i, : len(row)] = 1
        pooled = [mean_pool(hidden, attention) for hidden in self.model(batch, attention, layers)]
        return torch.cat([torch.nn.functional.normalize(p, dim=1) for p in pooled], dim=1)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


_loaded: dict[str, SentenceEncoder] = {}
_loading = threading.Lock()


def shared_encoder(name: str) -> SentenceEncoder:
    """This process's one copy of the encoder ``name``, loaded at the first call (thread-safe).

    Raises EncoderUnavailable (unknown name, package not installed, unreadable files)."""
    with _loading:
        encoder = _loaded.get(name)
        if encoder is None:
            encoder = _loaded[name] = SentenceEncoder(encoder_spec(name))
        return encoder


def loaded_encoders() -> dict[str, SentenceEncoder]:
    """The encoders this process has loaded so far, by name (for memory accounting and metrics)."""
    with _loading:
        return dict(_loaded)


@contextmanager
def encoder_threads(threads: int) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` for a block of encoding, restored after."""
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    try:
        yield
    finally:
        torch.set_num_threads(previous)

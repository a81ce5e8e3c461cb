"""The shared pretrained sentence encoder: load once per process, tokenise, embed in batches.

It knows nothing of tenants: a classifier's own weights (its head) live with the classifier,
and name the encoder they were trained on by name and sha256 (trainer.encoder.registry).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from trainer.encoder.registry import (
    ENCODERS,
    EncoderSpec,
    EncoderUnavailable,
    encoder_spec,
)

if TYPE_CHECKING:
    from trainer.encoder.sentence import SentenceEncoder, encoder_threads, loaded_encoders, shared_encoder

# torch's names load on first use: the registry alone (which encoders exist, whether their
# files are installed) is what `taas up` checks, and it should not import torch to do so
_SENTENCE = ("SentenceEncoder", "encoder_threads", "loaded_encoders", "shared_encoder")

__all__ = [
    "ENCODERS",
    "EncoderSpec",
    "EncoderUnavailable",
    "SentenceEncoder",
    "encoder_spec",
    "encoder_threads",
    "loaded_encoders",
    "shared_encoder",
]


def __getattr__(name: str) -> object:
    """The sentence module's names, loaded with it on first use."""
    if name not in _SENTENCE:
        raise AttributeError(f"module 'trainer.encoder' has no attribute {name!r}")
    value = getattr(importlib.import_module("trainer.encoder.sentence"), name)
    globals()[name] = value
    return value

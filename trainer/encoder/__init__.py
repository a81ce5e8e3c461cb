"""The shared pretrained sentence encoder: load once per process, tokenise, embed in batches.

It knows nothing of tenants: a classifier's own weights (its head) live with the classifier,
and name the encoder they were trained on by name and sha256 (trainer.encoder.registry).
"""

from trainer.encoder.registry import (
    ENCODERS,
    EncoderSpec,
    EncoderUnavailable,
    encoder_spec,
)
from trainer.encoder.sentence import SentenceEncoder, encoder_threads, loaded_encoders, shared_encoder

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

"""What makes stored weights unservable, checked before a model is built from them (a bundle's
weights.pt comes from outside)."""

from __future__ import annotations

import torch

_WEIGHT_BOUND = 1e6


def stores_every_value(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is dense and its storage holds as many values as it has elements.

    torch.save keeps a view's strides: a tensor expanded from one number (stride 0) claims any
    shape from a file of two kilobytes, and building the model from it allocated gigabytes in
    the API process (a forged bundle). A tensor whose storage holds its values is no larger
    than the file that held it, and that file is within the upload limit (its strides may be
    a transpose's: harmless)."""
    return (
        tensor.layout == torch.strided
        and tensor.untyped_storage().nbytes() >= tensor.numel() * tensor.element_size()
    )


def out_of_bounds(named: dict[str, torch.Tensor]) -> str | None:
    """What makes these weights unservable: the name of one holding a NaN, an infinity, or a
    value beyond ±``_WEIGHT_BOUND`` (with what it holds), or None. NaN weights answer every
    classify with NaN confidences, and so do finite ones large enough for a logit to overflow
    float32 (an embedding of 60,000s with an output row of 1e36, in a forged bundle). Within
    the bound a logit stays far below float32's range (64 × 2 normalised groups × 10⁶ × 10⁶),
    and no trained weight comes near it: SGD's are tens at most, an IDF about 20, a temperature
    divides by at most 20. ``aminmax`` carries a NaN through: 5 ms for 19 M values, where
    ``abs().max()`` takes 45. An empty tensor (no text had an n-gram: no embedding rows) holds
    nothing out of bounds."""
    for key, tensor in named.items():
        if tensor.numel() == 0:
            continue
        low, high = torch.aminmax(tensor)
        if not -_WEIGHT_BOUND <= float(low) <= float(high) <= _WEIGHT_BOUND:  # False for NaN
            return f"'{key}' holds NaN, infinite or values beyond ±{_WEIGHT_BOUND:g}"
    return None

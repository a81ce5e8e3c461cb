"""What makes text acceptable, whatever it names: a tenant, a classifier, a class, a text to
classify. Unpaired surrogates (no UTF-8 encoding), control characters, bidirectional
reordering ("Trojan Source" spoofing) and text with nothing visible are refused by the rooms
that take names and texts from callers (tenants, catalogue, serving).
"""

from __future__ import annotations

import re
import unicodedata

_SURROGATE = re.compile("[\ud800-\udfff]")
_REORDERING = re.compile("[\u202a-\u202e\u2066-\u2069]")  # bidi embeddings, overrides, isolates
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Cn", "Zs", "Zl", "Zp"})  # controls, formats, spaces


def has_surrogates(value: str) -> bool:
    """Whether ``value`` holds an unpaired surrogate (it cannot be encoded as UTF-8)."""
    return not value.isascii() and _SURROGATE.search(value) is not None


def unprintable(value: str) -> str | None:
    """Why ``value`` cannot be a name (a control character or line separator, an unpaired
    surrogate, a bidi reordering, nothing visible), or None."""
    if has_surrogates(value):
        return "is not valid Unicode (unpaired surrogate)"
    if value and not value.strip():
        return "is blank"
    if value and not visible(value):  # a tenant named U+200B listed as a blank
        return "has no visible character (only zero-width or format characters)"
    if any(unicodedata.category(ch) in ("Cc", "Zl", "Zp") for ch in value):  # Zl, Zp: U+2028, U+2029
        return "must not contain control characters (a tab or a line end, say)"
    if not value.isascii() and _REORDERING.search(value):  # "Trojan Source" display spoofing
        return (
            "must not contain bidirectional embeddings, overrides or isolates (U+202A-U+202E, U+2066-U+2069)"
        )
    return None


def visible(value: str) -> bool:
    """Whether ``value`` shows anything: a zero-width space or a direction mark alone does not."""
    return any(unicodedata.category(ch) not in _INVISIBLE for ch in value)

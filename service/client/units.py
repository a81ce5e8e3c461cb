"""Numbers as people read them: sizes in KiB, MiB and GiB, counts with thousands separators,
and how much of a quota is used, as a percentage."""

from __future__ import annotations

_SIZES = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB")
BYTE_QUOTAS = frozenset({"dataset_bytes"})  # the quotas that count bytes
RATE_QUOTAS = frozenset({"classify_rps"})  # the quotas that are rates, with no usage


def size(count: int) -> str:
    """``count`` bytes: ``512 bytes``, ``6.4 KiB``, ``1 GiB``."""
    value, unit = float(count), 0
    while value >= 1024 and unit < len(_SIZES) - 1:
        value, unit = value / 1024, unit + 1
    if unit == 0:
        return f"{count:,} bytes"
    return f"{value:.1f} {_SIZES[unit]}".replace(".0 ", " ")


def amount(quota: str, value: int) -> str:
    """A quota's limit or usage, in its unit."""
    if quota in BYTE_QUOTAS:
        return size(value)
    if quota in RATE_QUOTAS:
        return f"{value:,} texts/s"
    return f"{value:,}"


def share(used: int, limit: int) -> str:
    """How much of ``limit`` ``used`` is: ``3%``, ``<0.1%``, ``100%`` (or ``no room`` at a
    limit of 0)."""
    if limit <= 0:
        return "no room" if used == 0 else "over"
    percent = 100 * used / limit
    if 0 < percent < 0.1:
        return "<0.1%"
    return f"{percent:.1f}%".replace(".0%", "%")

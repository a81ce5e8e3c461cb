"""Page arithmetic shared by the paged listings (the admin API's tenants, the dashboard's)."""

from __future__ import annotations


def page_count(total: int, per_page: int) -> int:
    """How many pages of ``per_page`` items ``total`` items fill: one when there are none, so
    a listing always has a first page to show."""
    return max(1, -(-total // per_page))

"""Page arithmetic of the paged listings."""

from __future__ import annotations

import pytest

from service.tenants.accounts import page_count


@pytest.mark.parametrize(
    ("total", "per_page", "pages"),
    [(0, 25, 1), (1, 25, 1), (25, 25, 1), (26, 25, 2), (50, 25, 2), (51, 25, 3), (1000, 1, 1000)],
)
def test_a_listing_has_the_pages_its_items_fill_and_never_none(total: int, per_page: int, pages: int) -> None:
    assert page_count(total, per_page) == pages

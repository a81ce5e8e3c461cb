"""A page of a tenant's listing (``?limit=&offset=`` on ``GET /v1/classifiers`` and
``/v1/datasets``): the rows of an ordered query, and how many the whole listing has."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

T = TypeVar("T")

MAX_LIMIT = 1000  # the most rows one page may hold


@dataclass(frozen=True)
class Page(Generic[T]):
    """``items``, the rows asked for, and ``total``, the rows of the whole listing."""

    items: list[T]
    total: int


def page_of(session: Session, query: Select[T], *, limit: int | None, offset: int = 0) -> Page[T]:
    """Rows ``offset`` to ``offset + limit`` of ``query`` (which must be ordered, so that pages
    do not overlap); every row from ``offset`` on when ``limit`` is None. The count is a second
    query only when the page may not be the whole listing."""
    paged = query.offset(offset) if offset else query
    items = list(session.scalars(paged if limit is None else paged.limit(limit)))
    if offset == 0 and (limit is None or len(items) < limit):
        return Page(items, len(items))
    counted = select(func.count()).select_from(query.order_by(None).subquery())
    return Page(items, session.scalar(counted) or 0)

"""Training data with examples of out-of-scope text, under the reserved class: accepted for a
single-label classifier, refused (a 400 naming the row and rule) where it cannot work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from trainer.data import OUT_OF_SCOPE_CLASS

pytestmark = pytest.mark.dialect_neutral


def test_examples_of_out_of_scope_text_are_accepted_beside_two_classes(
    tenant: Any, create_classifier: Callable[..., httpx.Response]
) -> None:
    csv = f"is it hot,temperature\nwill it rain,conditions\nopen a bank account,{OUT_OF_SCOPE_CLASS}\n"

    reply = create_classifier(tenant, csv=csv)

    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize(
    ("csv", "expected"),
    [
        (
            f"is it hot,temperature\nis it cold,temperature\nopen a bank account,{OUT_OF_SCOPE_CLASS}\n",
            f"training data has 1 distinct class(es) besides {OUT_OF_SCOPE_CLASS}; at least 2 are required"
            " (min_classes)",
        ),
        (
            f"hot?,temperature\nrain?,conditions\nrain at my bank,conditions,{OUT_OF_SCOPE_CLASS}\n",
            f"row 3: a text under {OUT_OF_SCOPE_CLASS} (out of scope) cannot have another class",
        ),
    ],
    ids=["one-class-besides", "another-class-too"],
)
def test_out_of_scope_examples_that_cannot_work_are_400_naming_the_rule(
    tenant: Any,
    create_classifier: Callable[..., httpx.Response],
    nothing_left_behind: Callable[[str], None],
    csv: str,
    expected: str,
) -> None:
    reply = create_classifier(tenant, csv=csv)

    assert reply.status_code == 400, reply.text
    assert reply.json() == {"code": 400, "error": "Bad Request", "description": expected}
    nothing_left_behind(tenant.id)


def test_out_of_scope_examples_for_a_multi_label_classifier_are_400(
    tenant: Any,
    create_classifier: Callable[..., httpx.Response],
    nothing_left_behind: Callable[[str], None],
) -> None:
    csv = f"is it hot,temperature\nwill it rain,conditions\nopen a bank account,{OUT_OF_SCOPE_CLASS}\n"
    metadata = {"language": "en", "name": "topics", "mode": "multi_label"}

    reply = create_classifier(tenant, csv=csv, metadata=metadata)

    assert reply.status_code == 400, reply.text
    assert reply.json()["description"] == (
        f"{OUT_OF_SCOPE_CLASS} (examples of out-of-scope text) is for single-label classifiers only"
    )
    nothing_left_behind(tenant.id)

"""The admin listing's (and the dashboard's) tenant search by name, "in any case", on both
databases: the name a tenant was created with always finds it, typed in any case or form."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from fastapi.testclient import TestClient


def _found(client: TestClient, admin_headers: dict[str, str], name: str) -> list[str]:
    reply = client.get("/v1/admin/tenants", params={"name": name}, headers=admin_headers)
    assert reply.status_code == 200, reply.text
    return [t["tenant_id"] for t in reply.json()["tenants"]]


@pytest.mark.parametrize(
    ("created", "searched"),
    [
        ("İZMİR-{}", "İZMİR-{}"),  # Python's lower: 'i̇' (two code points); PostgreSQL's: 'i'
        ("ΟΔΟΣ-{}", "ΟΔΟΣ-{}"),  # Python's lower: final 'ς'; PostgreSQL's: 'σ'
        ("ΟΔΟΣΑ-{}", "ΟΔΟΣ"),  # as a part of a longer word: 'σ' in the name, 'ς' in the search
        ("café-{}", "cafe\u0301-{}"),  # NFD: the same tenant at create (a 409), not in a search
        ("ÉMILE-{}", "émile-{}"),
    ],
)
def test_a_tenant_is_found_by_its_own_name_in_any_case_or_form(
    client: TestClient, tenant_factory: Any, admin_headers: dict[str, str], created: str, searched: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    made = tenant_factory(created.format(tag))

    assert made.id in _found(client, admin_headers, searched.format(tag))
    assert made.id in _found(client, admin_headers, created.format(tag))


def test_percent_underscore_and_slash_in_a_search_are_taken_literally(
    client: TestClient, tenant_factory: Any, admin_headers: dict[str, str]
) -> None:
    tag = uuid.uuid4().hex[:8]
    literal = tenant_factory(f"a/b%c_d-{tag}")
    other = tenant_factory(f"a/bXcYd-{tag}")

    assert _found(client, admin_headers, f"A/B%C_D-{tag}") == [literal.id]
    assert _found(client, admin_headers, f"/bxcyd-{tag}") == [other.id]
    assert _found(client, admin_headers, f"%C_D-{tag}") == [literal.id]
    assert _found(client, admin_headers, f"%%c_d-{tag}") == []


def test_the_last_page_number_there_is_an_empty_page_not_an_error(
    client: TestClient, tenant: Any, admin_headers: dict[str, str]
) -> None:
    reply = client.get(
        "/v1/admin/tenants", params={"page": 2**31 - 1, "per_page": 1000}, headers=admin_headers
    )

    assert reply.status_code == 200, reply.text
    assert reply.json()["tenants"] == [] and reply.json()["page"] == 2**31 - 1

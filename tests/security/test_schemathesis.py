"""Property-based fuzzing of the whole API from its OpenAPI schema (schemathesis, in-process ASGI).

Every operation gets generated requests, valid and invalid, with a tenant's key (under
``/v1/admin``, the admin key); routes that name a classifier, a dataset or a tenant are fuzzed
twice, once with generated ids and once with real ones (an Available classifier), so that
generated bodies reach the model and the database. The run fails on any 5xx, and on any reply
that breaks the schema: an undocumented status code, a wrong content type or body, a missing
Retry-After. Bounded and reproducible: a fixed number of examples per operation, derandomised,
no example database.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from service.app import create_app
from service.core.settings import Settings
from tests.conftest import ADMIN_KEY

pytestmark = pytest.mark.slow

EXAMPLES_PER_OPERATION = 20
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def test_no_operation_answers_5xx_or_breaks_its_schema(
    settings: Settings, estate_factory: Callable[[], Any]
) -> None:
    estate = estate_factory()
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(settings))
    real_ids = {  # admin operations come last, so revoking the tenant's keys ends nothing early
        "classifier_id": estate.classifier["classifier_id"],
        "dataset_id": estate.dataset["dataset_id"],
        "tenant_id": estate.tenant.id,
    }
    failures: list[str] = []
    fuzzed = 0

    for result in schema.get_all_operations():
        operation = result.ok()
        key = ADMIN_KEY if operation.path.startswith("/v1/admin") else estate.tenant.api_key
        named = {p: v for p, v in real_ids.items() if "{" + p + "}" in operation.path}
        variants = [None] + ([named] if named and operation.method.upper() != "DELETE" else [])
        for mode in GenerationMode:
            for fixed in variants:
                strategy = operation.as_strategy(generation_mode=mode, path_parameters=fixed)
                try:
                    _fuzz(strategy, {"Authorization": f"Bearer {key}"})
                    fuzzed += 1
                except Unsatisfiable:
                    continue  # nothing in this operation can be made invalid (no body, no typed params)
                except Exception as exc:  # noqa: BLE001 - collected, reported together below
                    failures.append(f"{operation.label} [{mode.value}, ids={fixed}]: {exc}")

    assert not failures, "\n\n".join(failures)
    assert fuzzed >= 20  # every operation in positive mode, and the negative ones that exist


def _fuzz(strategy: Any, headers: dict[str, str]) -> None:
    @given(case=strategy)
    @hypothesis.settings(
        max_examples=EXAMPLES_PER_OPERATION,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)

    run()

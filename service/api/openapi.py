"""The OpenAPI document, ``/openapi.json``, as the API behaves, so that ``/docs`` can try every
route and a generated client can call it:

* every ``/v1`` operation takes a key in one of three forms (``securitySchemes``: Basic
  ``apikey:KEY`` as the ibm-watson SDK sends it, Bearer, ``X-API-Key``); ``/healthz`` and
  ``/readyz`` take none;
* the routes that read their body as a stream document it (:mod:`service.api.bodies`);
* errors are documented as :mod:`service.api.errors` sends them: the NLC body, 400 where
  FastAPI would say 422, 404 wherever a path names an id, and the codes particular to a route;
* operation ids are the route functions' names (``create_classifier``), which generated
  clients take for their functions' names (see :func:`operation_id`).
"""

from __future__ import annotations

from functools import partial
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from service.api import bodies

DESCRIPTION = """\
Text-classification training as a service. The `/v1/classifiers` routes are IBM Watson Natural
Language Classifier v1's, so NLC clients (the `ibm-watson` SDK's `NaturalLanguageClassifierV1`)
work unmodified; datasets, versions, bundles, webhooks and administration are taas extensions.

**Keys.** Every `/v1` route needs an API key, in any of three forms: HTTP Basic with the user
name `apikey` and the key as password (what the SDK's `BasicAuthenticator("apikey", KEY)` and
`curl -u apikey:$KEY` send), `Authorization: Bearer KEY`, or `X-API-Key: KEY`. `/v1/admin`
routes need the administrator key. **Authorize** above takes any of them.

**Errors** have NLC's body, `{"code": 404, "error": "Not Found", "description": "..."}`.
"""

TAGS = [
    {"name": "classifiers", "description": "NLC v1: create, list, read, delete; cancel and resume training."},
    {"name": "classify", "description": "NLC v1: classify one text or a collection."},
    {"name": "versions", "description": "Retrain while serving, promote, roll back (extension)."},
    {"name": "bundles", "description": "Export a model as one archive; import one (extension)."},
    {"name": "datasets", "description": "Labelled data stored once, trained on many times (extension)."},
    {"name": "webhooks", "description": "The secret that signs status webhooks (extension)."},
    {"name": "admin", "description": "Tenants, their keys and quotas: the administrator key only."},
    {"name": "health", "description": "Liveness and readiness probes; no key."},
]

SECURITY_SCHEMES = {
    "basicAuth": {
        "type": "http",
        "scheme": "basic",
        "description": "NLC's form: the user name `apikey`, the key as password.",
    },
    "bearerAuth": {"type": "http", "scheme": "bearer", "description": "`Authorization: Bearer KEY`."},
    "apiKeyHeader": {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "The key alone."},
}
KEY_REQUIRED: list[dict[str, list[str]]] = [{name: []} for name in SECURITY_SCHEMES]  # any one

ERROR_SCHEMA = {
    "title": "Error",
    "type": "object",
    "required": ["code", "error", "description"],
    "properties": {
        "code": {"type": "integer"},
        "error": {"type": "string"},
        "description": {"type": "string"},
    },
    "examples": [{"code": 404, "error": "Not Found", "description": "classifier 'x' not found"}],
}
# malformed, no key, wrong key or a quota, body over its limit, too many unknown keys sent
_ALWAYS = (400, 401, 403, 413, 429)
_EXTRA = {  # (method, path) -> statuses beyond those
    ("post", "/v1/classifiers"): (404, 503),  # a dataset_id unknown; the store refused the upload
    ("post", "/v1/classifiers/{classifier_id}/versions"): (503,),
    ("post", "/v1/classifiers/import"): (503,),
    ("post", "/v1/datasets"): (503,),
    ("post", "/v1/classifiers/{classifier_id}/classify"): (409, 503),
    ("get", "/v1/classifiers/{classifier_id}/classify"): (409, 503),
    ("post", "/v1/classifiers/{classifier_id}/classify_collection"): (409, 503),
    ("post", "/v1/classifiers/{classifier_id}/cancel"): (409,),
    ("post", "/v1/classifiers/{classifier_id}/resume"): (409,),
    ("delete", "/v1/datasets/{dataset_id}"): (409,),
    ("post", "/v1/admin/tenants"): (409,),
}


def operation_id(route: APIRoute) -> str:
    """An operation's id: its route function's name (FastAPI's default appends the path and
    method, which a generated client turns into ``create_classifier_v1_classifiers_post``)."""
    return route.name


def install(app: FastAPI) -> None:
    """Have ``app`` serve this document as its ``/openapi.json``."""
    app.openapi = partial(_document, app)  # type: ignore[method-assign]


def _document(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title,
        version=app.version,
        summary=app.summary,
        description=DESCRIPTION,
        routes=app.routes,
        tags=TAGS,
    )
    components = schema.setdefault("components", {})
    components["securitySchemes"] = SECURITY_SCHEMES
    schemas = components.setdefault("schemas", {})
    schemas.update(bodies.component_schemas())
    schemas["Error"] = ERROR_SCHEMA
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            operation.setdefault("responses", {}).pop("422", None)
            if path.startswith("/v1/"):
                operation["security"] = KEY_REQUIRED
                _document_errors(method, path, operation["responses"])
    app.openapi_schema = schema
    return schema


def _document_errors(method: str, path: str, responses: dict[str, Any]) -> None:
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    statuses = [*_ALWAYS, *_EXTRA.get((method, path), ())]
    if "{" in path:
        statuses.append(404)
    for status in statuses:
        responses[str(status)] = {"description": HTTPStatus(status).phrase, **error}
    responses["429"]["headers"] = {
        "Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}
    }

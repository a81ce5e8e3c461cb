"""The OpenAPI document, ``/openapi.json``, as the API behaves, so that ``/docs`` can try every
route and a generated client can call it. On top of the error replies that
:mod:`service.api.errors` documents (the NLC body, 400 where FastAPI would say 422, 404 wherever
a path names an id, the codes particular to a route):

* every ``/v1`` operation takes a key in one of three forms (``securitySchemes``: Basic
  ``apikey:KEY`` as the ibm-watson SDK sends it, Bearer, ``X-API-Key``); ``/healthz`` and
  ``/readyz`` take none;
* the routes that read their body as a stream document it (:mod:`service.api.bodies`);
* the document has a description, and its tags theirs;
* operation ids are the route functions' names (``create_classifier``), which generated
  clients take for their functions' names (see :func:`operation_id`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI
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

# Error replies beyond those service.api.errors documents: (method, path) -> statuses
_MORE_ERRORS = {
    ("post", "/v1/classifiers"): (404, 503),  # a dataset_id unknown; the store refused the upload
    ("post", "/v1/classifiers/{classifier_id}/versions"): (503,),
    ("post", "/v1/classifiers/import"): (503,),
    ("post", "/v1/datasets"): (503,),
}
_KEY_ERRORS = ("401", "403")  # what a route that takes no key never answers


def operation_id(route: APIRoute) -> str:
    """An operation's id: its route function's name (FastAPI's default appends the path and
    method, which a generated client turns into ``create_classifier_v1_classifiers_post``)."""
    return route.name


def install(app: FastAPI) -> None:
    """Have ``app`` serve this document as its ``/openapi.json`` (after ``errors.install``,
    whose document of the error replies it completes)."""
    app.openapi = partial(_document, app, app.openapi)  # type: ignore[method-assign]


def _document(app: FastAPI, with_errors: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    if app.openapi_schema:
        return app.openapi_schema
    schema = with_errors()  # the same dict is then app.openapi_schema: completed in place
    schema["info"]["description"] = DESCRIPTION
    schema["tags"] = TAGS
    components = schema.setdefault("components", {})
    components["securitySchemes"] = SECURITY_SCHEMES
    components.setdefault("schemas", {}).update(bodies.component_schemas())
    error = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            if not path.startswith("/v1/"):
                for refused in _KEY_ERRORS:
                    responses.pop(refused, None)
                continue
            operation["security"] = KEY_REQUIRED
            for status in _MORE_ERRORS.get((method, path), ()):
                responses[str(status)] = {"description": HTTPStatus(status).phrase, **error}
    app.openapi_schema = schema
    return schema

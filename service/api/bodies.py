"""The request bodies of the routes that read their body as a stream (an NLC create, a new
version, a bundle import, a dataset upload), described for the OpenAPI document.

Those routes take ``Request`` and parse the body themselves (:mod:`service.api.uploads`: limits
enforced while it arrives, parts spooled to files), so FastAPI sees no body parameter and
documented none: no generated client could create a classifier. :func:`request_body` gives a
route's ``openapi_extra`` from models that describe each content type it takes; the models are
documentation only (nothing validates a request with them), and :func:`component_schemas` puts
them in the document's ``components``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import JsonDict, models_json_schema

from service.api.schemas import CreateFromDataset, VersionFromDataset
from service.catalogue.classifiers import LANGUAGES
from service.core.models import ClassifierMode, Promote

_REF = "#/components/schemas/{model}"
_documented: dict[str, type[BaseModel]] = {}  # every model a request_body names, by name
_BINARY = {"type": "string", "format": "binary"}

_LANGUAGE: JsonDict = {"enum": list(LANGUAGES)}


class TrainingMetadata(BaseModel):
    """NLC's ``training_metadata`` part of a create (JSON); ``callback_url``, ``promote`` and
    ``mode`` are taas extensions. Fields it does not know are ignored, as NLC ignored them."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"name": "weather", "language": "en"}]},
    )

    name: str = Field(min_length=1, max_length=256, description="The classifier's name.")
    language: str = Field(description="One of NLC's language codes.", json_schema_extra=_LANGUAGE)
    callback_url: str | None = Field(None, description="Where each status change is POSTed (webhooks).")
    promote: Promote = Field(Promote.AUTO, description="When a newer version starts serving.")
    mode: ClassifierMode = Field(ClassifierMode.SINGLE_LABEL, description="One class per text, or many.")


class ClassifierUpload(BaseModel):
    """``POST /v1/classifiers`` as NLC's multipart form (what the ibm-watson SDK sends)."""

    training_data: bytes = Field(
        description="CSV without a header, each row `text,class[,class...]` (UTF-8).",
        json_schema_extra={"examples": ["How hot is it today?,temperature\nIs it raining?,conditions\n"]},
    )
    training_metadata: TrainingMetadata


class VersionMetadata(BaseModel):
    """The optional ``training_metadata`` part of a new version: only a ``callback_url`` (name,
    language, mode and promote are the classifier's)."""

    model_config = ConfigDict(
        json_schema_extra={"examples": [{"callback_url": "https://hooks.example.com/taas"}]}
    )

    callback_url: str | None = Field(None, description="Where the version's status changes are POSTed.")


class VersionUpload(BaseModel):
    """``POST /v1/classifiers/{id}/versions`` as NLC's multipart form."""

    training_data: bytes = Field(description="CSV without a header, each row `text,class[,class...]`.")
    training_metadata: VersionMetadata | None = None


class BundleUpload(BaseModel):
    """``POST /v1/classifiers/import`` as a multipart form."""

    bundle: bytes = Field(description="A model bundle (`GET /v1/classifiers/{id}/bundle`).")
    name: str | None = Field(None, description="The new classifier's name; default: the exporter's.")
    language: str | None = Field(
        None, description="Its language; default: the exporter's.", json_schema_extra=_LANGUAGE
    )


class DatasetUpload(BaseModel):
    """``POST /v1/datasets`` as a multipart form (the part may also be named ``file``)."""

    training_data: bytes = Field(
        description="CSV with a header naming `text` and `label`, or JSON Lines.",
        json_schema_extra={"examples": ["text,label\nhow hot is it,temperature\nis it raining,conditions\n"]},
    )
    name: str | None = Field(None, description="The dataset's name.")


class TestUpload(BaseModel):
    """``POST /v1/classifiers/{id}/evaluate`` as a multipart form (the part may also be named ``file``)."""

    test_data: bytes = Field(
        description="NLC's CSV without a header (`text,class[,class...]`), CSV with a header naming "
        "`text` and `label`, or JSON Lines.",
        json_schema_extra={
            "examples": ["text,label\nis it cold outside,temperature\nwill it snow,conditions\n"]
        },
    )


def request_body(
    *,
    multipart: type[BaseModel] | None = None,
    json: type[BaseModel] | None = None,
    raw: tuple[str, ...] = (),
    json_parts: tuple[str, ...] = (),
) -> dict[str, Any]:
    """A route's ``openapi_extra``: a body that is ``multipart`` (a form of those fields;
    ``json_parts`` are JSON documents), ``json`` (that model), or a raw body of one of the media
    types ``raw``.

    A body of several media types is documented as not required, though the route answers 400
    without one: openapi-python-client (0.29) writes ``body: A | B | Unset`` for one that is,
    without importing ``Unset`` (its issue 1451), and the generated module does not load."""
    content: dict[str, Any] = {}
    if multipart is not None:
        form: dict[str, Any] = {"schema": _ref(multipart)}
        if json_parts:
            form["encoding"] = {part: {"contentType": "application/json"} for part in json_parts}
        content["multipart/form-data"] = form
    if json is not None:
        content["application/json"] = {"schema": _ref(json)}
    for media_type in raw:
        content[media_type] = {"schema": dict(_BINARY)}
    return {"requestBody": {"required": len(content) == 1, "content": content}}


def component_schemas() -> dict[str, Any]:
    """The JSON schema of every model a :func:`request_body` names, and of the models they use,
    by name, for the document's ``components.schemas``."""
    if not _documented:
        return {}
    _, definitions = models_json_schema(
        [(model, "validation") for model in _documented.values()], ref_template=_REF
    )
    found: dict[str, Any] = definitions.get("$defs", {})
    return found


def _ref(model: type[BaseModel]) -> dict[str, str]:
    _documented[model.__name__] = model
    return {"$ref": _REF.format(model=model.__name__)}


NEW_CLASSIFIER = request_body(
    multipart=ClassifierUpload, json=CreateFromDataset, json_parts=("training_metadata",)
)
NEW_VERSION = request_body(
    multipart=VersionUpload, json=VersionFromDataset, json_parts=("training_metadata",)
)
BUNDLE_IMPORT = request_body(multipart=BundleUpload, raw=("application/gzip", "application/octet-stream"))
DATASET_UPLOAD = request_body(multipart=DatasetUpload, raw=("text/csv", "application/x-ndjson"))
TEST_UPLOAD = request_body(multipart=TestUpload, raw=("text/csv", "application/x-ndjson"))

"""The typed Python client of the taas API: one method per request, for the routes the
``ibm-watson`` SDK does not cover (datasets, versions and promote, bundles, webhooks, evaluation,
administration) as well as NLC's own; every failure a one-line :class:`ClientError`. The
``taas`` client commands are built on it::

    from service.client import Api

    with Api("http://127.0.0.1:8000", KEY) as taas:
        dataset = taas.upload_dataset(Path("weather.csv"), "weather")
        classifier = taas.create_classifier_from_dataset(dataset["dataset_id"], "weather")
        ...

Methods take whole ids; :meth:`Api.find_classifier` and :meth:`Api.find_dataset` turn a name or
the start of an id into one. Replies are the server's JSON, typed (:mod:`service.client.models`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from service.client import refs
from service.client.admin_calls import AdminCalls
from service.client.errors import ClientError
from service.client.models import (
    Classification,
    ClassifiedText,
    Classifier,
    ClassifierSummary,
    Dataset,
    DatasetReport,
    Evaluation,
    EvaluationList,
    Metrics,
    TrainingEvents,
    Version,
    VersionList,
)
from service.client.paths import segments

__all__ = ["Api", "ClientError", "segments"]

TIMEOUT = httpx.Timeout(30.0, read=300.0)  # an upload is validated before the reply comes
TENANTS_PER_CALL = 1000  # the most GET /v1/admin/tenants gives a page
ITEMS_PER_CALL = 1000  # the most GET /v1/classifiers and /v1/datasets give a page


class Api(AdminCalls):
    """The taas HTTP API at ``url`` as ``key`` (a tenant's key or the admin key)."""

    def __init__(self, url: str, key: str) -> None:
        self.url = url.rstrip("/")
        try:
            where = urlsplit(self.url)
        except ValueError as error:  # "http://[::1"
            raise ClientError(f"{url!r} is not a valid URL ({error})") from None
        if where.scheme not in {"http", "https"} or not where.netloc or where.query or where.fragment:
            raise ClientError(
                f"{url!r} is not the platform's URL: give http(s)://HOST[:PORT][/PATH], with no"
                " query or fragment"
            )
        if not key.isascii() or not key.isprintable() or " " in key:
            # an HTTP header cannot carry it, and httpx's error would print the key
            raise ClientError(
                "the key holds a character no API key has (a space, a line end or a non-ASCII"
                " character): check how it was copied"
            )
        try:
            self.http = httpx.Client(
                base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=TIMEOUT
            )
        except httpx.InvalidURL as error:
            raise ClientError(f"{url!r} is not a valid URL ({error})") from None

    def __enter__(self) -> Api:
        return self

    def __exit__(self, *_: object) -> None:
        self.http.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send one request; the decoded JSON reply, or ClientError naming what went wrong."""
        with self._sending(method, path, kwargs) as reply:
            reply.read()
            try:
                return reply.json()
            except ValueError:
                raise ClientError(
                    f"{self.url} answered {method} {path} with no JSON: is it a taas platform?"
                ) from None

    @contextmanager
    def _sending(self, method: str, path: str, kwargs: dict[str, Any]) -> Iterator[httpx.Response]:
        """The reply to one request, streamed, if it succeeded; ClientError otherwise."""
        try:
            with self.http.stream(method, path, **kwargs) as reply:
                if not reply.is_success:
                    reply.read()
                    raise ClientError(_describe(reply), reply.status_code)
                yield reply
        except httpx.InvalidURL as error:
            raise ClientError(f"{self.url!r} is not a valid URL ({error})") from None
        except UnicodeEncodeError:  # a surrogate-escaped byte from the command line
            raise ClientError("an argument is not valid UTF-8") from None
        except httpx.HTTPError as error:
            raise ClientError(f"cannot reach {self.url}: {error or type(error).__name__}") from None

    # --- classifiers (NLC v1, and the extensions on them) ------------------------------------

    def list_classifiers(self) -> list[ClassifierSummary]:
        """Every classifier of the tenant, oldest first (read a page at a time)."""
        found: list[ClassifierSummary] = self._all("classifiers")
        return found

    def get_classifier(self, classifier_id: str) -> Classifier:
        """A classifier's status, training progress and, once Available, metrics."""
        found: Classifier = self.call("GET", segments("classifiers", classifier_id))
        return found

    def set_out_of_scope_rate(self, classifier_id: str, rate: float | None) -> Classifier:
        """Serve the classifier with out-of-scope ``rate`` (strictly between 0 and 1), or with
        its model's own (None); no retraining."""
        changed: Classifier = self.call(
            "PATCH", segments("classifiers", classifier_id), json={"out_of_scope_rate": rate}
        )
        return changed

    def create_classifier(self, file: Path, name: str, language: str = "en", **extras: str) -> Classifier:
        """A new classifier trained on FILE, NLC's headerless ``text,class`` CSV; ``extras`` are
        more fields of its ``training_metadata`` (``callback_url``, ``promote``, ``mode``)."""
        metadata = {"name": name, "language": language, **extras}
        created: Classifier = self.post_nlc_csv("/v1/classifiers", file, metadata)
        return created

    def create_classifier_from_dataset(
        self, dataset_id: str, name: str, language: str = "en", **extras: str
    ) -> Classifier:
        """A new classifier trained on a stored dataset; ``extras`` as for :meth:`create_classifier`."""
        body = {"name": name, "language": language, "dataset_id": dataset_id, **extras}
        created: Classifier = self.call("POST", "/v1/classifiers", json=body)
        return created

    def delete_classifier(self, classifier_id: str) -> None:
        """Delete a classifier, its versions, models and training data (its training stops)."""
        self.call("DELETE", segments("classifiers", classifier_id))

    def cancel_training(self, classifier_id: str) -> Classifier:
        """Stop a training and keep its last checkpoint."""
        found: Classifier = self.call("POST", segments("classifiers", classifier_id, "cancel"))
        return found

    def resume_training(self, classifier_id: str) -> Classifier:
        """Continue a cancelled training from its last checkpoint."""
        found: Classifier = self.call("POST", segments("classifiers", classifier_id, "resume"))
        return found

    def training_events(self, classifier_id: str) -> TrainingEvents:
        """The training's timeline and the classifier's status events with their deliveries."""
        found: TrainingEvents = self.call("GET", segments("classifiers", classifier_id, "events"))
        return found

    def classify(self, classifier_id: str, text: str, *, version: int | None = None) -> Classification:
        """Classify one text (with ``version``, that version rather than the serving one)."""
        path = segments("classifiers", classifier_id, "classify")
        answer: Classification = self.call("POST", path, json={"text": text}, params=_version(version))
        return answer

    def classify_collection(
        self, classifier_id: str, texts: list[str], *, version: int | None = None
    ) -> list[ClassifiedText]:
        """Classify up to ``TAAS_MAX_COLLECTION`` texts in one call; one answer a text, in order."""
        path = segments("classifiers", classifier_id, "classify_collection")
        body = {"collection": [{"text": text} for text in texts]}
        answers: list[ClassifiedText] = self.call("POST", path, json=body, params=_version(version))[
            "collection"
        ]
        return answers

    def evaluation(self, classifier_id: str, *, version: int | None = None) -> Metrics | None:
        """The evaluation of the serving version (or of ``version``) on its held-out texts, once
        it is Available (None before): accuracy, macro F1, per-class figures, the confusion."""
        if version is None:
            return self.get_classifier(classifier_id)["metrics"]
        return self.get_version(classifier_id, version)["metrics"]

    # --- evaluations on a test file (extension) -----------------------------------------------

    def evaluate(
        self, classifier_id: str, file: Path, *, version: int | None = None, name: str | None = None
    ) -> Evaluation:
        """Score the serving version (or ``version``) on FILE (NLC's CSV, CSV with a text,label
        header, or JSON Lines) as a job on the workers; the reply is the queued evaluation."""
        params: dict[str, Any] = {"name": name or file.name[:256]}  # the most a name may hold
        if version is not None:
            params["version"] = version
        path = segments("classifiers", classifier_id, "evaluate")
        with _open(file) as data:
            queued: Evaluation = self.call(
                "POST", path, params=params, content=data, headers={"Content-Type": _media_type(file)}
            )
        return queued

    def get_evaluation(self, classifier_id: str, evaluation_id: str) -> Evaluation:
        """One evaluation, with its report once completed."""
        found: Evaluation = self.call(
            "GET", segments("classifiers", classifier_id, "evaluations", evaluation_id)
        )
        return found

    def list_evaluations(self, classifier_id: str, *, version: int | None = None) -> EvaluationList:
        """The classifier's evaluations, newest first, without their reports."""
        params = {} if version is None else {"version": version}
        path = segments("classifiers", classifier_id, "evaluations")
        found: EvaluationList = self.call("GET", path, params=params)
        return found

    def evaluation_page(self, classifier_id: str, evaluation_id: str) -> str:
        """A completed evaluation's report as one self-contained HTML page."""
        path = segments("classifiers", classifier_id, "evaluations", evaluation_id, "report.html")
        with self._sending("GET", path, {}) as reply:
            reply.read()
            return reply.text

    def delete_evaluation(self, classifier_id: str, evaluation_id: str) -> None:
        """Delete an evaluation and its report."""
        self.call("DELETE", segments("classifiers", classifier_id, "evaluations", evaluation_id))

    # --- versions (extension) ----------------------------------------------------------------

    def list_versions(self, classifier_id: str) -> VersionList:
        """Every version of a classifier, oldest first, and the serving one's number."""
        found: VersionList = self.call("GET", segments("classifiers", classifier_id, "versions"))
        return found

    def get_version(self, classifier_id: str, version: int) -> Version:
        """One version: its status, dataset, progress and, once Available, metrics."""
        found: Version = self.call("GET", segments("classifiers", classifier_id, "versions", version))
        return found

    def create_version(self, classifier_id: str, file: Path, *, callback_url: str | None = None) -> Version:
        """Train the next version on FILE (NLC's CSV) while the serving version keeps serving."""
        metadata = None if callback_url is None else {"callback_url": callback_url}
        path = segments("classifiers", classifier_id, "versions")
        created: Version = self.post_nlc_csv(path, file, metadata)
        return created

    def create_version_from_dataset(
        self, classifier_id: str, dataset_id: str, *, callback_url: str | None = None
    ) -> Version:
        """Train the next version on a stored dataset."""
        body = {"dataset_id": dataset_id}
        if callback_url is not None:
            body["callback_url"] = callback_url
        path = segments("classifiers", classifier_id, "versions")
        created: Version = self.call("POST", path, json=body)
        return created

    def promote_version(self, classifier_id: str, version: int) -> Version:
        """Serve ``version`` (an older one rolls back), on every API replica at once."""
        path = segments("classifiers", classifier_id, "versions", version, "promote")
        promoted: Version = self.call("POST", path)
        return promoted

    def delete_version(self, classifier_id: str, version: int) -> None:
        """Delete a version that does not serve."""
        self.call("DELETE", segments("classifiers", classifier_id, "versions", version))

    # --- bundles (extension) -----------------------------------------------------------------

    def export_bundle(self, classifier_id: str, dest: Path, *, version: int | None = None) -> Path:
        """Write the serving version's model (or ``version``'s) as a bundle file at ``dest``."""
        if version is None:
            path = segments("classifiers", classifier_id, "bundle")
        else:
            path = segments("classifiers", classifier_id, "versions", version, "bundle")
        with self._sending("GET", path, {}) as reply:
            try:
                with open(dest, "wb") as out:
                    for chunk in reply.iter_bytes():
                        out.write(chunk)
            except OSError as error:
                raise ClientError(f"cannot write {dest}: {error.strerror or error}") from None
        return dest

    def import_bundle(
        self, bundle: Path, *, name: str | None = None, language: str | None = None
    ) -> Classifier:
        """A new Available classifier from a bundle file (the exporter's name and language
        unless given)."""
        fields = {key: value for key, value in (("name", name), ("language", language)) if value is not None}
        with _open(bundle) as data:
            files = {"bundle": ("model.taas", data, "application/gzip")}
            created: Classifier = self.call("POST", "/v1/classifiers/import", files=files, data=fields)
        return created

    # --- datasets (extension) ----------------------------------------------------------------

    def upload_dataset(self, path: Path, name: str | None) -> Dataset:
        """Store a labelled file (CSV with a text,label header, or JSON Lines) as a dataset."""
        params = {"name": name} if name else {}
        with _open(path) as data:
            headers = {"Content-Type": _media_type(path)}
            stored: Dataset = self.call("POST", "/v1/datasets", params=params, content=data, headers=headers)
        return stored

    def list_datasets(self) -> list[Dataset]:
        """Every uploaded dataset of the tenant, oldest first (read a page at a time)."""
        found: list[Dataset] = self._all("datasets")
        return found

    def get_dataset(self, dataset_id: str) -> Dataset:
        """One stored dataset: rows, classes, size, SHA-256."""
        found: Dataset = self.call("GET", segments("datasets", dataset_id))
        return found

    def dataset_report(self, dataset_id: str) -> DatasetReport:
        """A stored dataset's report: class counts, duplicates, texts under several classes,
        confusable classes, and the warnings these call for."""
        found: DatasetReport = self.call("GET", segments("datasets", dataset_id, "report"))
        return found

    def delete_dataset(self, dataset_id: str) -> None:
        """Delete a dataset (refused while a classifier may still train on it)."""
        self.call("DELETE", segments("datasets", dataset_id))

    # --- webhooks (extension) ----------------------------------------------------------------

    def webhook_secret(self) -> str:
        """The secret that signs the tenant's status webhooks (see ``service.client.webhooks``)."""
        return str(self.call("GET", "/v1/webhook_secret")["secret"])

    def rotate_webhook_secret(self) -> str:
        """Replace the signing secret; the new one."""
        return str(self.call("POST", "/v1/webhook_secret")["secret"])

    # --- names and id prefixes ---------------------------------------------------------------

    def find_classifier(self, ref: str) -> str:
        """The id of the classifier ``ref`` names: its id, a unique start of it, or its name;
        ClientError when none or several match."""
        if refs.is_full_id(ref):
            return ref
        listed = ((c["classifier_id"], c["name"]) for c in self.list_classifiers())
        return refs.resolve("classifier", ref, listed)

    def find_dataset(self, ref: str) -> str:
        """As :meth:`find_classifier`, for a stored dataset."""
        if refs.is_full_id(ref):
            return ref
        return refs.resolve("dataset", ref, ((d["dataset_id"], d["name"]) for d in self.list_datasets()))

    # --- administration (the admin key) ------------------------------------------------------

    def is_admin(self) -> bool:
        """Whether the key is the admin key (True) or a tenant's (False); ClientError if neither,
        or if what answers is not a taas platform (each answer must have taas's shape)."""
        try:
            listed = self.call("GET", "/v1/admin/tenants", params={"per_page": 1})
        except ClientError as error:
            if error.status == 401:  # the admin route's own reply would blame the admin key alone
                raise ClientError(
                    "the key is neither a tenant's key nor the admin key (or it was revoked)", 401
                ) from None
            if error.status != 403:
                raise
            # 403: a tenant key on an admin route, if the tenant routes take it
            self._check_shape(self.call("GET", "/v1/classifiers"), "classifiers")
            return False
        self._check_shape(listed, "tenants")
        return True

    def all_tenants(self, name: str = "") -> list[dict[str, Any]]:
        """Every tenant (whose name contains ``name``, if given), oldest first, read a page at a
        time."""
        found: list[dict[str, Any]] = []
        page = 1
        while True:
            params = {"name": name, "page": page, "per_page": TENANTS_PER_CALL}
            listed = self.call("GET", "/v1/admin/tenants", params=params)
            if "pages" not in listed:  # a server from before paging: every tenant, unfiltered
                wanted = name.casefold()
                return [t for t in listed["tenants"] if wanted in t["name"].casefold()]
            found += listed["tenants"]
            if page >= listed["pages"]:
                return found
            page += 1

    # --- helpers -----------------------------------------------------------------------------

    def _all(self, listing: str) -> Any:
        """Every item of ``GET /v1/<listing>``, a page at a time (an older server, which sends
        no ``total``, answers the whole list at once)."""
        found: list[Any] = []
        while True:
            page = self.call("GET", f"/v1/{listing}", params={"limit": ITEMS_PER_CALL, "offset": len(found)})
            self._check_shape(page, listing)
            found += page[listing]
            if "total" not in page or not page[listing] or len(found) >= page["total"]:
                return found

    def _check_shape(self, reply: Any, key: str) -> None:
        if not (isinstance(reply, dict) and isinstance(reply.get(key), list)):
            raise ClientError(f"{self.url} does not answer as a taas platform (no {key!r} list)")

    def post_nlc_csv(self, path: str, file: Path, metadata: dict[str, str] | None) -> Any:
        """POST a headerless ``text,class`` CSV (and ``training_metadata``) as NLC's multipart
        upload: a create, or a new version."""
        with _open(file) as data:
            # the part's file name is not used, and a name that is not UTF-8 could not be sent
            files: dict[str, Any] = {"training_data": ("training_data.csv", data, "text/csv")}
            if metadata is not None:
                files["training_metadata"] = (None, json.dumps(metadata), "application/json")
            return self.call("POST", path, files=files)


def _version(version: int | None) -> dict[str, int]:
    return {} if version is None else {"version": version}


def _describe(reply: httpx.Response) -> str:
    try:
        body = reply.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        detail = body.get("description") or body.get("error") or body.get("detail")
    else:
        detail = reply.text.strip().splitlines()[0] if reply.text.strip() else None
    return f"{reply.status_code} {reply.reason_phrase}: {detail or reply.reason_phrase}"


def _media_type(path: Path) -> str:
    """The type a labelled file is sent as: JSON Lines by its name, else CSV (the server tells
    the two apart by the first line all the same)."""
    return "application/x-ndjson" if path.suffix.lower() in {".jsonl", ".ndjson"} else "text/csv"


def _open(path: Path) -> Any:
    try:
        return open(path, "rb")
    except OSError as error:
        raise ClientError(f"cannot read {path}: {error.strerror}") from None

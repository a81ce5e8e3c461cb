"""The client's HTTP calls: one method per request, every failure a one-line ClientError."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

TIMEOUT = httpx.Timeout(30.0, read=300.0)  # an upload is validated before the reply comes
TENANTS_PER_CALL = 1000  # the most GET /v1/admin/tenants gives a page


class ClientError(Exception):
    """A failure the user can read in one line (the command prints it and exits 1); ``status``
    is the HTTP status when the server answered."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Api:
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
        try:
            reply = self.http.request(method, path, **kwargs)
        except httpx.InvalidURL as error:
            raise ClientError(f"{self.url!r} is not a valid URL ({error})") from None
        except UnicodeEncodeError:  # a surrogate-escaped byte from the command line
            raise ClientError("an argument is not valid UTF-8") from None
        except httpx.HTTPError as error:
            raise ClientError(f"cannot reach {self.url}: {error or type(error).__name__}") from None
        if reply.is_success:
            try:
                return reply.json()
            except ValueError:
                raise ClientError(
                    f"{self.url} answered {method} {path} with no JSON: is it a taas platform?"
                ) from None
        raise ClientError(_describe(reply), reply.status_code)

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

    def _check_shape(self, reply: Any, key: str) -> None:
        if not (isinstance(reply, dict) and isinstance(reply.get(key), list)):
            raise ClientError(f"{self.url} does not answer as a taas platform (no {key!r} list)")

    def upload_dataset(self, path: Path, name: str | None) -> Any:
        """Store a labelled file (CSV with a text,label header, or JSON Lines) as a dataset."""
        params = {"name": name} if name else {}
        kind = "application/x-ndjson" if path.suffix.lower() in {".jsonl", ".ndjson"} else "text/csv"
        with _open(path) as data:
            return self.call(
                "POST", "/v1/datasets", params=params, content=data, headers={"Content-Type": kind}
            )

    def post_nlc_csv(self, path: str, file: Path, metadata: dict[str, str] | None) -> Any:
        """POST a headerless ``text,class`` CSV (and ``training_metadata``) as NLC's multipart
        upload: a create, or a new version."""
        with _open(file) as data:
            # the part's file name is not used, and a name that is not UTF-8 could not be sent
            files: dict[str, Any] = {"training_data": ("training_data.csv", data, "text/csv")}
            if metadata is not None:
                files["training_metadata"] = (None, json.dumps(metadata), "application/json")
            return self.call("POST", path, files=files)


def segments(*parts: str | int) -> str:
    """The API path ``/v1/<part>/<part>…``, each part percent-encoded: an id given on the
    command line is one segment, so ``../datasets/ID`` cannot reach another resource. A part
    of ``.`` or ``..`` is refused: encoding leaves dots as they are, and the URL's dot segments
    would be resolved (``tenants revoke TID ..`` sent ``DELETE /v1/admin/tenants/TID``)."""
    for part in map(str, parts):
        if part in {"", ".", ".."}:
            raise ClientError(f"{part!r} is not an id" if part else "an id cannot be empty")
    return "/v1/" + "/".join(quote(str(part), safe="") for part in parts)


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


def _open(path: Path) -> Any:
    try:
        return open(path, "rb")
    except OSError as error:
        raise ClientError(f"cannot read {path}: {error.strerror}") from None

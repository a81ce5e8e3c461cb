"""The service's error hierarchy: each error knows its HTTP status, its NLC title and its facts.

One handler (``service.api.errors``) renders any of them as the NLC v1 error body
``{"code": status, "error": title, "description": str(exc)}``::

    TaasError
    ├── BadRequest                 400  a request field breaks a rule
    │   └── InvalidTrainingData    400  a training row breaks a rule (names the row)
    ├── Unauthorized               401  no key, or a key that is unknown or revoked
    ├── Forbidden                  403  a valid key without the right (tenant key on admin routes)
    │   └── QuotaExceeded          403  the tenant is at one of its quotas (names it and its value)
    │       └── StagingOverQuota   403  stored and staged bytes over ``dataset_bytes``
    ├── NotFound                   404  unknown id, or one that belongs to another tenant
    ├── Conflict                   409  the resource is in the wrong state (classify while Training)
    ├── PayloadTooLarge            413  the request body is over the upload limit
    ├── UnsupportedMediaType       415  a body in a content type or coding the route does not read
    ├── Throttled                  429  refused for a while (carries Retry-After)
    │   ├── RateLimited            429  over the tenant's classify rate
    │   └── TooManyWrongKeys       429  the client's address sent too many unknown keys
    └── ServiceUnavailable         503  a dependency cannot serve (model files unreadable)
"""

from __future__ import annotations

import logging
import uuid

log = logging.getLogger(__name__)


class TaasError(Exception):
    """Base of every error the service reports to a client."""

    status: int = 500
    title: str = "Internal Server Error"


class BadRequest(TaasError):
    """A request field breaks a rule; the message names the field and the rule."""

    status, title = 400, "Bad Request"

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field, self.rule = field, rule


class InvalidTrainingData(BadRequest):
    """A training row breaks one of NLC's rules; ``row`` is 1-based (0 = the set as a whole)."""

    def __init__(self, row: int, rule: str) -> None:
        TaasError.__init__(self, f"row {row}: {rule}" if row else rule)
        self.field, self.row, self.rule = "training_data", row, rule


class Unauthorized(TaasError):
    """No API key was sent, or it is unknown or revoked."""

    status, title = 401, "Unauthorized"


class Forbidden(TaasError):
    """The key is valid but may not do this (a tenant key on an admin route)."""

    status, title = 403, "Forbidden"


class NotFound(TaasError):
    """No such resource for this caller: unknown, or owned by another tenant (never 403)."""

    status, title = 404, "Not Found"

    def __init__(self, kind: str, ident: str) -> None:
        super().__init__(f"{kind} '{ident}' not found")
        self.kind, self.ident = kind, ident


class Conflict(TaasError):
    """The resource exists but its state does not allow the request."""

    status, title = 409, "Conflict"


class RequestTimeout(TaasError):
    """The request body stopped arriving for ``Settings.body_idle_seconds``."""

    status, title = 408, "Request Timeout"

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the request body stalled: nothing arrived for {seconds:g} s")


class PayloadTooLarge(TaasError):
    """The request body exceeds ``Settings.max_upload_bytes``."""

    status, title = 413, "Payload Too Large"

    def __init__(self, limit: int) -> None:
        super().__init__(f"request body exceeds the limit of {limit} bytes")
        self.limit = limit


class UnsupportedMediaType(TaasError):
    """The request body comes in a form the service does not read (a content coding)."""

    status, title = 415, "Unsupported Media Type"


class ServiceUnavailable(TaasError):
    """Something the request needs cannot be used right now."""

    status, title = 503, "Service Unavailable"


def new_incident() -> str:
    """A reference that a reply names and the log line with the details carries."""
    return uuid.uuid4().hex[:12]


def unavailable(what: str, cause: BaseException) -> ServiceUnavailable:
    """A 503 that says what cannot be used and names the log line that says why: the why names
    the operator's storage (a path, a bucket), which is not the tenant's to read."""
    incident = new_incident()
    log.warning("%s (reference %s): %s", what, incident, cause)
    return ServiceUnavailable(f"{what}; reference {incident} in the server log")


class QuotaExceeded(Forbidden):
    """The tenant is at one of its quotas; the message names the quota, its value and the usage."""

    def __init__(self, quota: str, limit: int, usage: int, adding: int = 1) -> None:
        super().__init__(self.describe(quota, limit, usage, adding))
        self.quota, self.limit, self.usage, self.adding = quota, limit, usage, adding

    @staticmethod
    def describe(quota: str, limit: int, usage: int, adding: int) -> str:
        """The message: the quota, its value, what the tenant has and what the request adds."""
        return (
            f"quota '{quota}' exceeded: the limit is {limit}, the tenant has {usage} "
            f"and this request adds {adding}"
        )


class QuotaUsedUp(QuotaExceeded):
    """A data quota (rows, bytes) the tenant has used up: no upload can fit, whatever its size,
    so it is refused before it is read through."""

    @staticmethod
    def describe(quota: str, limit: int, usage: int, adding: int) -> str:
        """The message: the quota, its value and the usage, which leave no room."""
        return f"quota '{quota}' exceeded: the limit is {limit} and the tenant has {usage}, so no upload fits"


class StagingOverQuota(QuotaExceeded):
    """The tenant's stored datasets and the files its requests in flight hold in staging (spooled
    uploads, bundles on their way out) are over its ``dataset_bytes`` quota
    (``service.tenants.staging``)."""

    def __init__(self, limit: int, stored: int, staged: int) -> None:
        Forbidden.__init__(
            self,
            f"quota 'dataset_bytes' exceeded: the limit is {limit}, the tenant has {stored} stored and "
            f"{staged} in files its requests in flight hold (uploads, bundles being sent); retry once "
            "those requests have ended",
        )
        self.quota, self.limit, self.usage, self.adding = "dataset_bytes", limit, stored + staged, 0


class QuotaIsZero(QuotaExceeded):
    """A rate quota set to 0: the tenant may make no such call at all ("the limit is 0, the
    tenant has 0 and this request adds 1" read as a count, not a rate)."""

    def __init__(self, quota: str) -> None:
        super().__init__(quota, 0, 0)

    @staticmethod
    def describe(quota: str, limit: int, usage: int, adding: int) -> str:
        """The message: the quota is 0, so nothing is allowed."""
        return (
            f"quota '{quota}' is 0 for this tenant: no such call is allowed until an administrator raises it"
        )


class Throttled(TaasError):
    """Refused for a while; retry after ``retry_after`` seconds (whole, at least 1)."""

    status, title = 429, "Too Many Requests"

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RateLimited(Throttled):
    """Over the tenant's classify rate (texts a second, a long text counting several)."""

    def __init__(self, quota: str, limit: int, retry_after: int) -> None:
        super().__init__(
            f"rate limit '{quota}' exceeded: the limit is {limit} text{'' if limit == 1 else 's'} per"
            f" second (a text of over 512 characters counts one per 512); retry after {retry_after} s",
            retry_after,
        )
        self.quota, self.limit = quota, limit


class TooManyWrongKeys(Throttled):
    """The client's address presented too many unknown keys lately (``service.tenants.failed_keys``)."""

    def __init__(self, burst: int, per_second: float, retry_after: int) -> None:
        super().__init__(
            f"too many unknown API keys from this address ({burst} at once, then {per_second:g} a "
            f"second); retry after {retry_after} s",
            retry_after,
        )

"""An artifact store on S3-compatible object storage (AWS S3, MinIO, Ceph RGW, ...), via boto3.

For worker nodes without a shared file system. Objects live under ``s3://<bucket>/<prefix>/`` +
the store key. Credentials come the standard AWS ways (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``, an instance role); the endpoint
of a non-AWS server is ``TAAS_S3_ENDPOINT_URL``. boto3 is the ``s3`` extra of the distribution
(the images install it); it is imported when a store is built, not before.

Every failure of S3 (unreachable, a missing bucket, refused credentials, a throttled or failed
request) is raised as :class:`~service.storage.base.StoreUnavailable` naming the store, and a
missing object as FileNotFoundError: OSErrors, which the callers take for storage trouble (a
503 to a tenant; a worker's attempt waits for the store). botocore's own errors are no OSErrors
(raised as they were, a cold load, a bundle export or a delete answered a 500).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from service.storage.base import StoreUnavailable, TreeOps, check_key, check_prefix

_NOT_FOUND = {"404", "NoSuchKey", "NotFound"}
# What a HEAD of the bucket answered, in words an operator can act on.
_BUCKET_PROBLEMS = {
    "404": "there is no such bucket (create it, or correct TAAS_ARTIFACTS_URL)",
    "403": "access denied: check the credentials (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, "
    "AWS_PROFILE, the instance role) and the bucket's policy",
    "301": "the bucket is in another region: set TAAS_S3_REGION",
}


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/some/prefix`` -> ``("bucket", "some/prefix")``; raises ValueError."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"not an s3://bucket[/prefix] URL: {url!r}")
    return parts.netloc, check_prefix(parts.path.strip("/"))


class S3ArtifactStore(TreeOps):
    """The :class:`~service.storage.base.ArtifactBackend` on one bucket and key prefix."""

    def __init__(
        self,
        url: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        addressing_style: str = "auto",
        client: Any = None,
    ) -> None:
        self.bucket, self.prefix = parse_s3_url(url)
        self.url = url
        if client is None:
            import boto3
            from botocore.config import Config

            client = boto3.client(
                "s3",
                endpoint_url=endpoint_url,
                region_name=region,
                config=Config(
                    s3={"addressing_style": addressing_style},
                    retries={"max_attempts": 5, "mode": "standard"},
                    connect_timeout=5,
                    read_timeout=60,
                ),
            )
        self.client = client

    # --- the backend interface ------------------------------------------------------------
    def describe(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def check(self) -> None:
        try:
            with self._failures():
                self.client.head_bucket(Bucket=self.bucket)
        except StoreUnavailable as error:
            # HEAD replies have no body: botocore says only "Not Found" or "Forbidden"
            problem = _BUCKET_PROBLEMS.get(str(_code(error.__cause__)), str(error.__cause__))
            raise StoreUnavailable(
                f"artifact bucket {self.describe()} is not reachable: {problem}"
            ) from error

    def exists(self, key: str) -> bool:
        try:
            with self._failures(key):
                self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except FileNotFoundError:
            return False
        return True

    def put_bytes(self, key: str, data: bytes) -> None:
        with self._failures():
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)

    def get_bytes(self, key: str) -> bytes:
        with self._failures(key):
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()

    def upload(self, source: Path, key: str) -> None:
        # upload_file switches to a multipart upload for big files; S3 makes the object visible
        # only when the upload completes, so readers never see a part.
        with self._failures():
            self.client.upload_file(str(source), self.bucket, self._key(key))

    def download(self, key: str, dest: Path) -> None:
        full = self._key(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        staged = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.tmp")
        try:
            with self._failures(key):
                self.client.download_file(self.bucket, full, str(staged))
            with open(staged, "rb") as handle:
                os.fsync(handle.fileno())
            os.replace(staged, dest)
        finally:
            staged.unlink(missing_ok=True)

    def list_keys(self, prefix: str = "") -> list[str]:
        return sorted(self.modified(prefix))

    def modified(self, prefix: str = "") -> dict[str, float]:
        folder, root = self._folder(check_prefix(prefix)), len(self._folder(""))
        found: dict[str, float] = {}
        with self._failures():
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=folder
            ):
                found.update(
                    (item["Key"][root:], item["LastModified"].timestamp())
                    for item in page.get("Contents", ())
                )
        return found

    def delete(self, key: str) -> None:
        with self._failures():
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def delete_prefix(self, prefix: str) -> int:
        keys = self.list_keys(prefix)
        for start in range(0, len(keys), 1000):  # DeleteObjects takes at most 1000 keys
            batch = [{"Key": self._key(key)} for key in keys[start : start + 1000]]
            with self._failures():
                reply = self.client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True}
                )
            if errors := reply.get("Errors"):  # one reply for the batch, with a failure per key
                first = errors[0]
                raise StoreUnavailable(
                    f"{self.describe()}: {len(errors)} object(s) not deleted, e.g. {first.get('Key')!r}: "
                    f"{first.get('Code')} {first.get('Message')}"
                )
        return len(keys)

    # --- helpers ---------------------------------------------------------------------------
    @contextmanager
    def _failures(self, key: str | None = None) -> Iterator[None]:
        """S3's errors inside as StoreUnavailable naming the store; with ``key``, a missing
        object as FileNotFoundError (NoSuchBucket is no missing object)."""
        from boto3.exceptions import Boto3Error
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            yield
        except (BotoCoreError, ClientError, Boto3Error) as error:
            if key is not None and _is_not_found(error) and self._bucket_answers(error):
                raise FileNotFoundError(f"no artifact {key!r} in {self.describe()}") from error
            raise StoreUnavailable(f"artifact store {self.describe()}: {error}") from error

    def _bucket_answers(self, not_found: Exception) -> bool:
        """Whether a "not found" is the object's: a HEAD (a download's first request) answers a
        bare 404 for a missing bucket too, and a bucket deleted under a running node made every
        dataset "missing", each job failing its attempts instead of waiting for the store."""
        if _code(not_found) != "404":  # a GET names it: NoSuchKey, or NoSuchBucket
            return True
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except Exception:  # any answer but the bucket's is the store's trouble
            return False
        return True

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _folder(self, prefix: str) -> str:
        """The object-name prefix of a store folder, ending in ``/`` (``""`` at the bucket root)."""
        full = "/".join(part for part in (self.prefix, prefix) if part)
        return f"{full}/" if full else ""


def _is_not_found(error: Exception) -> bool:
    return _code(error) in _NOT_FOUND


def _code(error: BaseException | None) -> str | None:
    """S3's error code in a botocore ClientError (``"404"`` alone for a HEAD), else None."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return None
    return str(response.get("Error", {}).get("Code"))

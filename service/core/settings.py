"""Installation settings: the one place that reads the environment (prefix ``TAAS_``).

Build one :class:`Settings` per process with :func:`get_settings` and pass it down; tests build
their own (``Settings(database_url=..., data_dir=tmp_path)``).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy import URL

TRAINER_MAX_TEXT_CHARS = 4096  # trainer.data.MAX_TEXT_CHARS (importing it here would load torch)
# The admin key is the one key an operator chooses; tenants' keys and the generated admin key are
# 256-bit random. Nothing counts wrong guesses (a counter would let anyone lock the operator
# out), so a key must be too long to guess online instead: 32 random base64url characters are
# 192 bits, and a passphrase that long is out of reach of guessing too
ADMIN_KEY_MIN_CHARS = 32
SECRETS_KEY_MIN_CHARS = 32  # the key that seals secrets at rest (service.core.sealing)


def admin_key_problem(key: str) -> str | None:
    """Why ``key`` cannot be the administrator key (too short to be unguessable), or None."""
    if len(key) >= ADMIN_KEY_MIN_CHARS:
        return None
    return (
        f"the admin key is {len(key)} characters; it must be at least {ADMIN_KEY_MIN_CHARS}, since "
        "anyone who reaches the API may guess it (make one with: python3 -c 'import secrets; "
        'print("admin_" + secrets.token_urlsafe(32))\')'
    )


class Settings(BaseSettings):
    """Everything an operator may set. Tenants never see or change any of it."""

    model_config = SettingsConfigDict(env_prefix="TAAS_", env_file=None, extra="ignore")

    # --- where things live -------------------------------------------------------------
    data_dir: Path = Field(Path("./var"), description="Root for the embedded database, Redis and artifacts.")
    database_url: str | None = Field(
        None, description="SQLAlchemy URL; default: SQLite file taas.db in data_dir."
    )
    redis_url: str | None = Field(
        None,
        description="Broker URL; default: `taas up` starts an embedded redis-server in data_dir.",
    )
    artifacts_dir: Path | None = Field(
        None, description="Datasets, checkpoints, models; default data_dir/artifacts."
    )
    # stripped: a key from an env file or a mounted secret often ends in a newline, which no
    # presented key (stripped too) could ever match
    admin_key: Annotated[str, StringConstraints(strip_whitespace=True)] | None = Field(
        None,
        description="Administrator key (32 characters or more); default: made once into data_dir/admin.key.",
    )

    secrets_key: Annotated[str, StringConstraints(strip_whitespace=True)] | None = Field(
        None,
        description="Key (32 characters or more) that seals secrets at rest (tenants' webhook secrets); "
        "the API, the webhook worker and `taas migrate` need the same one; default: made once into "
        "data_dir/secrets.key.",
    )
    secrets_old_keys: str | None = Field(
        None,
        description="Former secrets keys, comma-separated, which still open what they sealed while "
        "`taas reseal` seals it again under TAAS_SECRETS_KEY (a rotation).",
    )

    # --- artifacts on S3-compatible object storage (nodes without a shared file system) ---
    artifacts_url: str | None = Field(
        None,
        description="s3://bucket/prefix: keep artifacts in S3-compatible storage; default: artifacts_dir.",
    )
    s3_endpoint_url: str | None = Field(
        None, description="Endpoint of a non-AWS S3 server (MinIO, Ceph), e.g. http://minio:9000."
    )
    s3_region: str | None = Field(None, description="S3 region; default: boto3's (AWS_DEFAULT_REGION).")
    s3_addressing_style: Literal["auto", "path", "virtual"] = Field(
        "auto", description="S3 bucket addressing; most self-hosted servers want 'path'."
    )

    # --- training-data rules (Watson NLC's) ---------------------------------------------
    max_upload_bytes: int = Field(32 * 1024 * 1024, gt=0, description="Largest request body for an upload.")
    max_training_rows: int = Field(20_000, gt=0, description="Most rows in one training set.")
    max_text_chars: int = Field(
        1024,
        gt=0,
        le=TRAINER_MAX_TEXT_CHARS,
        description="Longest text of a training row (at most the trainer's limit).",
    )
    max_classify_chars: int = Field(
        2048, gt=0, description="Longest text of a classify or classify_collection call (NLC's 2,048)."
    )
    min_classes: int = Field(2, ge=2, description="Fewest distinct classes in a training set.")
    max_classes: int = Field(3_000, gt=1, description="Most distinct classes in a training set.")
    max_name_chars: int = Field(
        256,
        gt=0,
        le=256,
        description="Longest classifier, dataset or tenant name (at most 256, the column's width).",
    )
    max_collection: int = Field(30, gt=0, description="Most texts in one classify_collection call.")
    max_class_chars: int = Field(1024, gt=0, description="Longest class name in a training set.")

    # --- training ------------------------------------------------------------------------
    learners: int = Field(
        0,
        ge=0,
        description="Learner processes per training job (K); 0 = auto: one per core, fewer for small data. "
        "Never more than an epoch has mini-batches (a 60-row set takes at most 4).",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="Where a worker trains: auto = CUDA when the node has a GPU, else the CPU; "
        "cuda fails each job (with a reason) on a node without one.",
    )
    sentence_encoder: bool = Field(
        True,
        description="Train classifiers in a language a shipped pretrained sentence encoder reads "
        "(English: all-MiniLM-L6-v2) on its embedding beside their n-grams; off: every classifier "
        "trains the n-gram model alone. Classifiers trained either way keep serving.",
    )
    lease_seconds: int = Field(
        10, gt=0, description="How long a worker's claim on a job lasts unrenewed (the crash detector)."
    )
    progress_every_seconds: float = Field(1.0, gt=0, description="How often a worker writes job progress.")
    max_attempts: int = Field(
        3, ge=1, description="Failed attempts (crash, lost lease, error) after which a job is Failed."
    )

    # --- reliability: leases, the reconciler, retries ------------------------------------
    heartbeat_seconds: float = Field(
        2.0, gt=0, description="How often a training worker renews its lease (keep it under lease_seconds/3)."
    )
    reconcile_every_seconds: float = Field(
        2.0, gt=0, description="How often the reconciler re-sends lost or expired jobs."
    )
    retry_backoff_seconds: float = Field(
        1.0, ge=0, description="Delay before a failed job's first retry; doubled at each further failure."
    )
    retry_backoff_max_seconds: float = Field(60.0, ge=0, description="Longest delay before a retry.")
    yield_to_fairer: bool = Field(
        True,
        description="A training job gives its slot back (checkpoint, queued again, resumed later) "
        "when another tenant waits holding at least two slots fewer than its tenant; off: a "
        "tenant that arrives while another holds every slot waits for a job to end.",
    )
    requeue_grace_seconds: float = Field(
        10.0, ge=0, description="A queued job whose message is absent from Redis this long is re-sent."
    )
    temp_max_age_seconds: float = Field(
        3600.0, gt=0, description="Staging files (half-received uploads) older than this are swept."
    )
    model_copy_max_age_seconds: float = Field(
        3600.0,
        gt=0,
        description="With an S3 store, a node removes its copies not used for this long: an API "
        "node a model folder not loaded (the model stays in memory while in use; a later load "
        "fetches it again), a worker the datasets, models and checkpoints of jobs not trained "
        "there since (as it starts each job).",
    )
    checkpoint_every_updates: int | None = Field(
        None, gt=0, description="Operator override of the trainer's checkpoint cadence in updates."
    )
    checkpoint_every_seconds: float | None = Field(
        None, gt=0, description="Operator override of the trainer's checkpoint cadence in seconds."
    )
    cross_fit_folds: int | None = Field(
        None,
        ge=0,
        description="Operator override of the folds that score data too small for a validation "
        "split (default 5: held-out metrics and calibration cost ~5x the training time there); "
        "0 or 1 = off: such data reports metrics on its training rows and is not calibrated.",
    )
    staleness_bound: int | None = Field(
        None,
        ge=0,
        description="Operator's bound on the parameter server's staleness: no gradient is applied "
        "more than this many updates after the version it was computed against; learners wait "
        "for slower ones to keep it (default: none; with K learners a bound under 2K - 2 makes "
        "even equally fast learners wait, docs/parameter-server.md).",
    )

    # --- status webhooks ------------------------------------------------------------------
    webhook_allow_private: bool = Field(
        False,
        description="Allow callback URLs on loopback, link-local, private and other non-public "
        "addresses (a receiver inside the operator's network; tests). Off: no SSRF through taas.",
    )
    webhook_ca_file: Path | None = Field(
        None,
        description=(
            "PEM file of the CAs that https receivers' certificates are checked against, for "
            "receivers behind a private CA (default: the public CAs of the certifi bundle)."
        ),
    )
    webhook_timeout_seconds: float = Field(
        5.0,
        gt=0,
        description=(
            "Longest one webhook delivery attempt may take, from resolving the host to the start of"
            " the reply; a receiver that trickles its reply is cut off there."
        ),
    )
    webhook_max_attempts: int = Field(
        12, ge=1, description="Delivery attempts of one event before it is given up (failed)."
    )
    webhook_backoff_seconds: float = Field(
        5.0, ge=0, description="Delay before an event's second attempt; doubled at each further one."
    )
    webhook_backoff_max_seconds: float = Field(3600.0, ge=0, description="Longest delay between attempts.")
    webhook_sweep_seconds: float = Field(
        1.0, gt=0, description="How often the webhook worker sends new events and re-sends lost ones."
    )
    webhook_resend_grace_seconds: float = Field(
        30.0, ge=0, description="An event overdue this long (its message lost with Redis) is re-sent."
    )
    webhook_concurrency: int = Field(4, gt=0, description="Deliveries one webhook worker makes at once.")
    webhook_tenant_concurrency: int = Field(
        1,
        gt=0,
        description=(
            "Delivery attempts one tenant may have in flight at once, across every webhook worker: its"
            " other events wait, so a slow receiver delays only its own tenant's events."
        ),
    )

    # --- serving -------------------------------------------------------------------------
    model_cache_bytes: int = Field(512 * 1024 * 1024, gt=0, description="Memory budget of the model LRU.")
    serving_threads: int = Field(
        2, gt=0, description="Worker threads running classify lookups and inference at once (~cores)."
    )

    # --- per-tenant quotas (defaults; the admin API overrides them per tenant) -------------
    quota_classifiers: int = Field(100, ge=0, description="Classifiers a tenant may have at once.")
    quota_versions: int = Field(
        1000,
        ge=0,
        description="Classifier versions (trained models) a tenant may keep, all classifiers together.",
    )
    quota_training_jobs: int = Field(
        10, ge=0, description="Training jobs (queued or training) a tenant may have at once."
    )
    quota_dataset_bytes: int = Field(
        1024 * 1024 * 1024, ge=0, description="Bytes of stored training data (canonical CSV) per tenant."
    )
    quota_dataset_rows: int = Field(1_000_000, ge=0, description="Rows of stored training data per tenant.")
    quota_datasets: int = Field(
        1000, ge=0, description="Datasets (uploads, NLC creates' training data) a tenant may store at once."
    )
    quota_classify_rps: int = Field(
        100,
        ge=0,
        description="Texts classified per second per tenant, a collection's each counted (0: none).",
    )
    max_json_bytes: int = Field(
        1024 * 1024, gt=0, description="Largest JSON request body (classify, admin; uploads excepted)."
    )
    body_idle_seconds: float = Field(
        60.0, gt=0, description="A request body that sends nothing for this long is refused (408)."
    )
    classify_burst_seconds: float = Field(
        2.0, gt=0, description="Burst a tenant may spend at once, in seconds of its classify rate."
    )
    wrong_key_burst: int = Field(
        20,
        gt=0,
        description="Unknown API keys (or wrong admin keys) a client address may send at once before "
        "its requests that need a key looked up are refused (429) (service.tenants.failed_keys).",
    )
    wrong_keys_per_second: float = Field(
        1.0, gt=0, description="Unknown API keys a client address may send a second after its burst."
    )
    basic_auth_challenge: bool = Field(
        False,
        description="Answer a request without a key with a Basic challenge (WWW-Authenticate: Basic), "
        "which makes a browser prompt for the key and then send it on every page's requests to taas; "
        "off: a Bearer challenge only (clients send Basic credentials unasked).",
    )
    trusted_origins: str = Field(
        "",
        description="Web origins (scheme://host[:port], comma-separated) besides taas's own whose pages "
        "may make requests that change something (a web front end of the operator's on another "
        "host); every other page's are refused (403).",
    )
    metrics_token: Annotated[str, StringConstraints(strip_whitespace=True)] | None = Field(
        None,
        description="Bearer token that GET /metrics requires (a Prometheus scrape's credentials); "
        "unset: /metrics answers only clients on this host (loopback).",
    )
    umask: str = Field(
        "077",
        pattern=r"^0?[0-7]{3}$",
        description="Permission bits (octal) that taas's processes clear on every file and folder they "
        "create: 077 keeps the database, the Redis files, tenants' data and keys this user's alone "
        "(files 0600, folders 0700); 027 lets the group read them (backups).",
    )
    access_log: bool = Field(
        False, description="Log a line per HTTP request (uvicorn's access log; costly at classify rates)."
    )

    @field_validator("admin_key")
    @classmethod
    def _admin_key_long_enough(cls, key: str | None) -> str | None:
        """An empty key is no key (the generated one is used); a short one is refused."""
        if not key:
            return None
        problem = admin_key_problem(key)
        if problem:
            raise ValueError(problem)
        return key

    @field_validator("secrets_key")
    @classmethod
    def _secrets_key_long_enough(cls, key: str | None) -> str | None:
        """An empty key is no key (the data dir's file is used); a short one is refused."""
        if not key:
            return None
        if len(key) < SECRETS_KEY_MIN_CHARS:
            raise ValueError(
                f"the secrets key is {len(key)} characters; it must be at least {SECRETS_KEY_MIN_CHARS} "
                "(make one with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
            )
        return key

    @field_validator("metrics_token")
    @classmethod
    def _metrics_token_long_enough(cls, token: str | None) -> str | None:
        """An empty token is none (/metrics answers this host only); a short one is refused."""
        if not token:
            return None
        if len(token) < SECRETS_KEY_MIN_CHARS:
            raise ValueError(
                f"the metrics token is {len(token)} characters; it must be at least {SECRETS_KEY_MIN_CHARS}"
            )
        return token

    @field_validator("max_classes")
    @classmethod
    def _max_classes_at_least_min(cls, most: int, info: ValidationInfo) -> int:
        """A maximum under the minimum started a platform that refused every training."""
        fewest = info.data.get("min_classes")
        if fewest is not None and most < fewest:
            raise ValueError(f"must be at least TAAS_MIN_CLASSES ({fewest})")
        return most

    def apply_umask(self) -> None:
        """Make ``umask`` this process's, and so its children's: every server command and worker
        calls it before it creates anything (the SQLite database, the embedded Redis's files and
        every tenant's data were created 0644, readable by any account on the host)."""
        os.umask(int(self.umask, 8))

    def resolved_database_url(self) -> str:
        """The database URL in force: the setting, or SQLite in the data dir.

        The path is percent-encoded where a URL would read it otherwise: in a data dir named
        ``run?2`` the database was ``run`` beside it (the rest taken for a query), shared by
        every ``run?N``; in ``100%41`` it was in ``100A``.
        """
        if self.database_url:
            return self.database_url
        path = str((self.data_dir / "taas.db").resolve())
        return URL.create("sqlite", database=path).render_as_string(hide_password=False)

    def resolved_artifacts_dir(self) -> Path:
        """The artifact root in force: the setting, or ``data_dir/artifacts``."""
        return (self.artifacts_dir or self.data_dir / "artifacts").resolve()

    def require_redis_url(self) -> str:
        """The broker URL; raises RuntimeError when none is set (only `taas up` supplies one)."""
        if not self.redis_url:
            raise RuntimeError(
                "TAAS_REDIS_URL is not set: run the platform with `taas up` (which starts an "
                "embedded Redis) or point TAAS_REDIS_URL at a Redis server"
            )
        return self.redis_url


@lru_cache
def get_settings() -> Settings:
    """The process's settings, read from the environment once."""
    return Settings()

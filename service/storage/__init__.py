"""The artifact store: datasets, checkpoints and models under one root, scoped by tenant.
``store`` is the node's store (:class:`~service.storage.store.ArtifactStore`, a local folder or
shared volume, optionally a working copy of a remote) and :func:`~service.storage.store.open_backend`
picks the backend that the settings name; ``base`` is the key-based interface every backend
shares, ``s3`` the S3-compatible backend (``TAAS_ARTIFACTS_URL=s3://bucket/prefix``), ``layout``
the store's layout as keys, and ``sweeper`` the API node's sweep of its own disk. docs/deploy.md
("Artifacts across nodes") says how the API and the workers use it on nodes without a shared
file system."""

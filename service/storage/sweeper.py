"""What an API node with an S3 store leaves on its own disk: staging leftovers and model copies.

The reconciler sweeps the staging area (``tmp/`` of the artifact root) of its own disk, which
is every node's where the root is a shared volume. With an S3 remote each node has a root of
its own, so an API process sweeps its node's itself, every ``reconcile_every_seconds``:

* staging entries untouched for ``temp_max_age_seconds`` (an upload cut off by a crash);
* model folders it fetched to load, once not loaded for ``model_copy_max_age_seconds``: the
  model is served from memory, and a later load fetches it again, so without this sweep the
  node's disk would hold every model it ever served, deleted classifiers' included.

Workers sweep their staging area as they start each job and drop their copies after each
success (``workers.training_run``).
"""

from __future__ import annotations

import logging
import threading

from service.storage.store import ArtifactStore

log = logging.getLogger(__name__)


class LocalSweeper:
    """A daemon thread sweeping ``store``'s node-local leftovers; does nothing without a remote."""

    def __init__(
        self,
        store: ArtifactStore,
        *,
        staging_max_age_seconds: float,
        model_copy_max_age_seconds: float,
        every_seconds: float,
    ) -> None:
        self._store, self._every = store, every_seconds
        self._staging_max_age, self._model_max_age = staging_max_age_seconds, model_copy_max_age_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="local-sweeper", daemon=True)

    def start(self) -> None:
        if self._store.remote is not None:
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            try:
                if swept := self._store.sweep_staging(self._staging_max_age):
                    log.info("local sweep: removed %d staging leftover(s)", swept)
                if swept := self._store.sweep_model_copies(self._model_max_age):
                    log.info("local sweep: removed %d model copies not loaded lately", swept)
            except OSError as error:
                log.warning("local sweep: %s", error)

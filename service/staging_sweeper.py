"""Staging leftovers on nodes without a shared file system.

The reconciler sweeps the staging area (``tmp/`` of the artifact root) of its own disk, which
is every node's where the root is a shared volume. With an S3 remote each node has a root of
its own, so an API process sweeps its node's staging area itself: every
``reconcile_every_seconds``, entries untouched for ``temp_max_age_seconds`` (an upload cut off
by a crash) go. Workers sweep theirs as they start each job (``workers.training_run``).
"""

from __future__ import annotations

import logging
import threading

from service.store import ArtifactStore

log = logging.getLogger(__name__)


class StagingSweeper:
    """A daemon thread sweeping ``store``'s staging area; does nothing without a remote."""

    def __init__(self, store: ArtifactStore, *, max_age_seconds: float, every_seconds: float) -> None:
        self._store, self._max_age, self._every = store, max_age_seconds, every_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="staging-sweeper", daemon=True)

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
                if swept := self._store.sweep_staging(self._max_age):
                    log.info("staging sweep: removed %d leftover(s)", swept)
            except OSError as error:
                log.warning("staging sweep: %s", error)

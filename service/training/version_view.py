"""Which version a classifier's NLC view shows, and when a version starts serving.

A classifier row carries the NLC view (status, model, metrics) of one version: the serving one
once a version has been Available, and before that the newest one (its training is what an
NLC client waits for). These rules are shared by the job state machine (``service.training.jobs``),
which moves a version's status, and ``service.catalogue.versions``, which promotes and deletes versions.
"""

from __future__ import annotations

from service.core.models import Promote


def shows(serving_version: int | None, latest_version: int, number: int) -> bool:
    """Whether the classifier's view shows version ``number``."""
    if serving_version is not None:
        return number == serving_version
    return number == latest_version


def promotes_on_available(
    serving_version: int | None, newest_available: int | None, promote: str, number: int
) -> bool:
    """Whether version ``number``, just Available, starts serving: always when none serves yet,
    else with ``promote`` ``auto`` if it is newer than the serving one and than every other
    Available one (``newest_available``). An older version that finishes late never replaces
    a newer one, serving or not: after a rollback from version 3 to 1, version 2 finishing
    served, undoing the tenant's choice."""
    if serving_version is None:
        return True
    return promote == Promote.AUTO.value and number > max(serving_version, newest_available or 0)

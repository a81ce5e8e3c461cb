"""``--wait``: follow a training to its end with a progress bar, riding out a platform that
restarts meanwhile, and exit 1 unless the classifier or version ends Available."""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn

from service.client.api import Api, ClientError
from service.client.terminal import err, out, print_json

POLL_SECONDS = 1.0
# How long --wait keeps asking a platform that does not answer: `taas up` restarted on the same
# data dir takes about 20 s, and the training goes on after it.
UNREACHABLE_SECONDS = 120.0
# What --wait asks again through: no answer at all (None), or a proxy's or an overloaded
# platform's "not now" (a reverse proxy before a restarting `taas up`; no database slot free)
PASSING_TROUBLE = frozenset({None, 502, 503, 504})
ENDED = {"Available": 0, "Failed": 1, "Unavailable": 1}  # end states (classifier, version), exit codes


def settle(api: Api, path: str, started: Any, label: str, *, wait: bool, as_json: bool) -> None:
    """After a training starts (``started``: the API's reply): with ``wait``, follow the
    classifier or version at ``path`` to its end and exit 1 unless it is Available; with
    ``as_json``, print its last state."""
    final = follow(api, path, show=not as_json) if wait else started
    if as_json:
        print_json(final)
    if wait:
        ended(final, label, quiet=as_json)


def follow(api: Api, path: str, *, show: bool) -> Any:
    """Poll the classifier or version at ``path`` until it ends, drawing a progress bar when
    ``show``; its last state."""
    columns = (
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[detail]}"),
    )
    with Progress(*columns, console=err, disable=not show) as bar:
        task = bar.add_task("queued", total=None, detail="")
        unreachable_since: float | None = None
        while True:
            try:
                found = api.call("GET", path)
            except ClientError as error:  # a `taas up` restarted while it was followed ended --wait
                now = time.monotonic()
                unreachable_since = now if unreachable_since is None else unreachable_since
                if error.status not in PASSING_TROUBLE or now - unreachable_since > UNREACHABLE_SECONDS:
                    raise
                bar.update(task, detail="the platform does not answer; asking again")
                time.sleep(POLL_SECONDS)
                continue
            unreachable_since = None
            progress = found.get("progress") or {}
            total = progress.get("total_steps")
            bar.update(
                task,
                description=str(progress.get("phase") or found["status"]),
                total=total or None,
                completed=total if found["status"] == "Available" and total else progress.get("step") or 0,
                detail=progress_line(progress),
            )
            if found["status"] in ENDED:
                return found
            time.sleep(POLL_SECONDS)


def progress_line(progress: dict[str, Any]) -> str:
    parts = []
    if progress.get("epoch") is not None:
        parts.append(f"epoch {progress['epoch']}")
    if progress.get("step") is not None:
        parts.append(f"step {progress['step']}/{progress.get('total_steps') or '?'}")
    if progress.get("loss") is not None:
        parts.append(f"loss {progress['loss']:.4f}")
    if progress.get("phase") == "training" and progress.get("eta_seconds") is not None:
        parts.append(f"ETA {_duration(progress['eta_seconds'])}")
    return "  ".join(parts)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def ended(final: Any, label: str, *, quiet: bool) -> None:
    """Exit 1 with the reason unless the classifier or version (``label``) ended Available."""
    status = final["status"]
    if ENDED[status]:
        err.print(f"error: {label} is {status}: {final['status_description']}", markup=False)
        raise typer.Exit(ENDED[status])
    if not quiet:
        out.print(f"{label} is Available")

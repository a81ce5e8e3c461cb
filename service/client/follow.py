"""``--wait``: follow a training to its end with a progress bar, riding out a platform that
restarts meanwhile, and exit 1 unless the classifier or version ends Available (when it is, say
how well it did: its accuracy on the held-out texts).

The bar has a row per phase the trainer reports (``encoding``, ``preparing``, ``training``,
``evaluating``, ``saving``): the training's row fills with its steps and the encoding's with its
texts; the others, whose length nobody knows, pulse until the next phase starts. (One row
filled by the steps sat at 100 % through the evaluation, which can take as long as the
training.)"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import typer
from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn

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
# the phases whose length is known: the training counts its updates, the encoding its texts
_COUNTED = ("training", "encoding")


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
        TextColumn("{task.description:<10}", style="bold", markup=False),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[detail]}", markup=False),
    )
    with Progress(*columns, console=err, disable=not show) as bar:
        rows = _PhaseRows(bar)
        unreachable_since: float | None = None
        while True:
            try:
                found = api.call("GET", path)
            except ClientError as error:  # a `taas up` restarted while it was followed ended --wait
                now = time.monotonic()
                unreachable_since = now if unreachable_since is None else unreachable_since
                if error.status not in PASSING_TROUBLE or now - unreachable_since > UNREACHABLE_SECONDS:
                    raise
                rows.note("the platform does not answer; asking again")
                time.sleep(POLL_SECONDS)
                continue
            unreachable_since = None
            rows.show(found)
            if found["status"] in ENDED:
                return found
            time.sleep(POLL_SECONDS)


@dataclass(frozen=True)
class PhaseView:
    """What a classifier's or version's state shows on the bar: the phase's row, its length
    (None: unknown, the row pulses) and how much of it is done, and the detail line."""

    phase: str
    total: int | None
    completed: int
    detail: str


def phase_view(found: Any) -> PhaseView:
    """The bar's view of one reply (a classifier or a version)."""
    progress = found.get("progress") or {}
    phase = str(progress.get("phase") or found["status"])
    total = progress.get("total_steps")
    if phase in _COUNTED and total:
        return PhaseView(phase, int(total), int(progress.get("step") or 0), progress_line(progress))
    return PhaseView(phase, None, 0, progress_line(progress))


class _PhaseRows:
    """The bar's rows: one per phase, in the order they came; the last is the live one, and a
    row is filled once its phase has ended."""

    def __init__(self, bar: Progress) -> None:
        self.bar = bar
        self.phase: str | None = None
        self.row: TaskID | None = None

    def show(self, found: Any) -> None:
        if found["status"] in ENDED:  # the last phase shown is over (or failed: left as it was)
            if found["status"] == "Available":
                self._finish()
            return
        view = phase_view(found)
        if view.phase != self.phase:
            self._finish()
            self.phase = view.phase
            self.row = self.bar.add_task(view.phase, total=view.total, detail="")
        assert self.row is not None
        self.bar.update(self.row, total=view.total, completed=view.completed, detail=view.detail)

    def note(self, detail: str) -> None:
        if self.row is not None:
            self.bar.update(self.row, detail=detail)

    def _finish(self) -> None:
        if self.row is not None:
            done = next(task.total for task in self.bar.tasks if task.id == self.row) or 1
            self.bar.update(self.row, total=done, completed=done)


def progress_line(progress: dict[str, Any]) -> str:
    parts = []
    if progress.get("epoch") is not None:
        parts.append(f"epoch {progress['epoch']}")
    if progress.get("step") is not None:
        parts.append(f"step {progress['step']}/{progress.get('total_steps') or '?'}")
    if progress.get("loss") is not None:
        parts.append(f"loss {progress['loss']:.4f}")
    if progress.get("phase") in _COUNTED and progress.get("eta_seconds") is not None:
        parts.append(f"ETA {_duration(progress['eta_seconds'])}")
    return "  ".join(parts)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def ended(final: Any, label: str, *, quiet: bool) -> None:
    """Exit 1 with the reason unless the classifier or version (``label``) ended Available;
    when it did, say so with its evaluation."""
    status = final["status"]
    if ENDED[status]:
        err.print(f"error: {label} is {status}: {final['status_description']}", markup=False)
        raise typer.Exit(ENDED[status])
    if not quiet:
        scores = metrics_line(final.get("metrics") or {})
        out.print(f"{label} is Available" + (f": {scores}" if scores else ""))


def metrics_line(metrics: dict[str, Any]) -> str:
    """A trained model's evaluation in a line: accuracy and macro F1 (a multi-label model's
    micro and macro F1) and the number of held-out texts they were measured on."""
    shown = [
        f"{label} {metrics[key]:.3f}"
        for key, label in (("accuracy", "accuracy"), ("micro_f1", "micro F1"), ("macro_f1", "macro F1"))
        if isinstance(metrics.get(key), int | float)
    ]
    line = ", ".join(shown)
    if shown and isinstance(metrics.get("n"), int):
        line += f" on {metrics['n']:,} held-out texts"
    return line

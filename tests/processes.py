"""Processes as /proc shows them, for tests that kill a process and check what it leaves."""

from __future__ import annotations

from pathlib import Path


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (read from /proc: children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        stat = _stat(int(entry.name)) if entry.name.isdigit() else None
        if stat is not None and stat[0] != "Z":
            children.setdefault(stat[1], []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie has ended: only its exit status waits to be read)."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def command_line(pid: int) -> str:
    """``pid``'s command line, its arguments joined by spaces ("" once it has gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _stat(pid: int) -> tuple[str, int] | None:
    """``pid``'s state letter and parent pid from /proc (None: no such process)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1])

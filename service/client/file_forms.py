"""How a training or test file's form is told, the same in the ``taas`` commands and the server:
by its first line that is not blank. Pure, so that the server's rooms may share it (client is
the lowest room)."""

from __future__ import annotations

import csv
import json

SNIFF_BYTES = 64 * 1024  # what is read of a file to find its first line


def is_labelled_head(head: bytes) -> bool:
    """Whether a file beginning with ``head`` holds labelled rows (JSON Lines, or CSV whose
    header names text and label) rather than NLC's headerless ``text,class`` CSV: told by its
    first line that is not blank (JSON: a JSON object, or an array, which the server names).
    (Told by the first CSV record, a ``.json`` file of JSON Lines went as NLC CSV and trained
    classes such as ``"label": "music"}``; told by a first ``{`` or ``[``, NLC data such as
    ``[URGENT] disk full,alerts`` went as JSON.)"""
    text = head.decode("utf-8-sig", errors="replace")
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if first.startswith(("{", "[")):
        try:
            if isinstance(json.loads(first), dict | list):
                return True
        except (ValueError, RecursionError):
            pass
    try:
        header = next(csv.reader([first]), [])
    except csv.Error:  # an unclosed quote: no header; the server names the row
        return False
    return {"text", "label"} <= {cell.strip().lower() for cell in header}

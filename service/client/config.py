"""Where ``taas login`` keeps the platform URL and key: one JSON file readable only by its owner.

The file is ``<config dir>/taas/client.json`` (``$XDG_CONFIG_HOME`` or ``~/.config`` on Linux,
as ``click.get_app_dir`` finds it), written atomically with mode 0600.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import typer

from service.client.api import ClientError


@dataclass(frozen=True)
class Login:
    """The platform and the key the commands use; ``admin`` says which kind of key it is."""

    url: str
    key: str
    admin: bool


def config_file() -> Path:
    """The config file's path (it may not exist yet)."""
    return Path(typer.get_app_dir("taas")) / "client.json"


def save(login: Login) -> Path:
    """Write ``login`` to the config file (mode 0600, replacing it atomically); returns its path."""
    path = config_file()
    staging = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        staging.unlink(missing_ok=True)
        fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(asdict(login), out)
        os.replace(staging, path)
    except OSError as error:
        raise ClientError(f"cannot save the login in {path}: {error.strerror or error}") from None
    return path


def load() -> Login:
    """The saved login; ClientError when there is none or it cannot be read."""
    path = config_file()
    try:
        saved = json.loads(path.read_text())
        return Login(url=str(saved["url"]), key=str(saved["key"]), admin=bool(saved["admin"]))
    except FileNotFoundError:
        raise ClientError("not logged in: run `taas login URL KEY` first") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ClientError(f"cannot read {path} ({error}); run `taas login URL KEY` again") from None

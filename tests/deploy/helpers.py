"""Paths of the deployment files, and docker/install_check.py loaded by path (``docker`` is
also the name of the Docker SDK package, so it cannot be imported as ``docker.install_check``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKER_DIR = REPO_ROOT / "docker"
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DOCKERFILES = [DOCKER_DIR / "Dockerfile.api", DOCKER_DIR / "Dockerfile.worker"]


def _load_install_check() -> ModuleType:
    name = "taas_docker_install_check"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, DOCKER_DIR / "install_check.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


install_check = _load_install_check()

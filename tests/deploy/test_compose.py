"""docker-compose.yml: valid against the Compose Specification's JSON schema (the copy that
check-jsonschema vendors, no network), and shaped as docs/deploy.md says (checked here on the
parsed file, with Compose's variable interpolation, because this machine has no Compose engine)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.helpers import COMPOSE_FILE, REPO_ROOT

_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``${VAR:?err}`` and ``$$``."""
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name, op, arg = match.group("name"), match.group("op"), match.group("arg")
        current = env.get(name)
        if op in (":-", "-"):
            unset = current is None or (op == ":-" and current == "")
            return arg if unset else str(current)
        if op in (":?", "?"):
            if current is None or (op == ":?" and current == ""):
                raise KeyError(f"{name}: {arg}")
            return current
        return current or ""

    return _VARIABLE.sub(one, value)


def load(env: dict[str, str]) -> dict[str, Any]:
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    return interpolate({key: item for key, item in raw.items() if not key.startswith("x-")}, env)


KEYS = {"TAAS_ADMIN_KEY": "k", "TAAS_SECRETS_KEY": "s"}  # the two the file requires


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load(KEYS)


def _check_jsonschema() -> str:
    found = Path(sys.executable).parent / "check-jsonschema"
    return str(found) if found.exists() else (shutil.which("check-jsonschema") or "check-jsonschema")


def test_compose_file_validates_against_the_compose_spec_schema() -> None:
    run = subprocess.run(
        [_check_jsonschema(), "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_schema_check_catches_a_broken_file(tmp_path: Path) -> None:
    """The validator is live: a typo'd key is refused."""
    broken = tmp_path / "compose.yml"
    broken.write_text(COMPOSE_FILE.read_text().replace("healthcheck:", "healthchek:", 1))
    run = subprocess.run(
        [_check_jsonschema(), "--builtin-schema", "vendor.compose-spec", str(broken)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode != 0


@pytest.mark.parametrize("key", KEYS)
def test_the_admin_key_and_the_secrets_key_are_required(key: str) -> None:
    with pytest.raises(KeyError, match=key):
        load({k: v for k, v in KEYS.items() if k != key})


def test_each_key_goes_only_to_the_services_that_use_it(compose: dict[str, Any]) -> None:
    """The training workers run tenants' data through the trainer and the webhook worker talks
    to tenants' receivers: the admin key was in the environment of each of them."""
    taas = {
        n: s["environment"]
        for n, s in compose["services"].items()
        if "TAAS_DATA_DIR" in s.get("environment", {})
    }
    holders = {key: sorted(n for n, env in taas.items() if env.get(key)) for key in KEYS}

    assert sorted(taas) == ["api", "migrate", "reconciler", "webhooks", "worker", "worker-cpu"]
    assert holders == {"TAAS_ADMIN_KEY": ["api"], "TAAS_SECRETS_KEY": ["api", "migrate", "webhooks"]}


def test_metrics_are_scraped_on_the_compose_network_not_through_the_published_port(
    compose: dict[str, Any],
) -> None:
    config = (REPO_ROOT / "docker" / "nginx.conf").read_text()
    blocked = re.search(r"location ~ (\S+) \{\s*return 404;\s*\}", config)
    assert (
        blocked is not None
        and re.fullmatch(blocked.group(1), "/metrics")
        and re.fullmatch(blocked.group(1), "/metrics/")
    )
    assert config.index("location ~ ^/metrics") < config.index("location / {")
    assert compose["services"]["api"]["environment"]["TAAS_METRICS_TOKEN"] == ""
    with_token = load({**KEYS, "TAAS_METRICS_TOKEN": "t" * 40})["services"]["api"]["environment"]
    assert with_token["TAAS_METRICS_TOKEN"] == "t" * 40


def test_every_reference_resolves(compose: dict[str, Any]) -> None:
    services = compose["services"]
    volumes = set(compose.get("volumes") or {})
    for name, service in services.items():
        for dependency in service.get("depends_on") or {}:
            assert dependency in services, f"{name} depends on unknown {dependency}"
        for mount in service.get("volumes") or []:
            source = mount.split(":")[0]
            if source.startswith("."):
                assert (REPO_ROOT / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in volumes, f"{name} mounts undeclared volume {source}"
        build = service.get("build")
        if build:
            assert (REPO_ROOT / build["context"] / build["dockerfile"]).is_file()
        assert "image" in service, f"{name} has no image"


def test_datastores_persist_and_report_health(compose: dict[str, Any]) -> None:
    postgres, redis = compose["services"]["postgres"], compose["services"]["redis"]
    assert "postgres:/var/lib/postgresql/data" in postgres["volumes"]
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"
    assert "redis:/data" in redis["volumes"]
    assert "ping" in redis["healthcheck"]["test"]


def test_migrations_run_once_before_everything_that_uses_the_database(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["migrate"]["command"] == ["taas", "migrate"]
    assert services["migrate"]["restart"] == "no"
    for name in ["api", "reconciler", "worker", "worker-cpu"]:
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_api_replicas_behind_one_port(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert int(services["api"]["deploy"]["replicas"]) == 2
    assert "ports" not in services["api"], "replicas cannot share a host port; the proxy publishes"
    assert services["proxy"]["ports"] == ["0.0.0.0:8000:8080"]
    assert "api:8000" in (REPO_ROOT / "docker" / "nginx.conf").read_text()
    scaled = load({**KEYS, "TAAS_API_REPLICAS": "5"})["services"]["api"]
    assert int(scaled["deploy"]["replicas"]) == 5


def test_the_proxy_forwards_the_address_it_saw_not_the_clients_list(compose: dict[str, Any]) -> None:
    """The API trusts X-Forwarded-For from any peer and counts wrong keys by its first entry:
    appended to ($proxy_add_x_forwarded_for), that entry was whatever the client wrote, so a
    guesser changed it at every try and could lock the operator's address out."""
    assert compose["services"]["api"]["environment"]["FORWARDED_ALLOW_IPS"] == "*"
    config = (REPO_ROOT / "docker" / "nginx.conf").read_text()
    forwarded = re.findall(r"^\s*proxy_set_header\s+X-Forwarded-For\s+(\S+);", config, re.MULTILINE)
    assert forwarded == ["$remote_addr"]


def test_workers_gpu_reservation_and_cpu_profile(compose: dict[str, Any]) -> None:
    services = compose["services"]
    gpu = services["worker"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    assert gpu["build"]["dockerfile"] == "docker/Dockerfile.worker"
    assert "profiles" not in gpu
    cpu = services["worker-cpu"]
    assert cpu["profiles"] == ["cpu"]
    assert cpu["build"]["dockerfile"] == "docker/Dockerfile.api"
    assert "resources" not in cpu.get("deploy", {})
    for worker in (gpu, cpu):
        assert worker["command"] == ["taas", "worker"]
        assert worker["stop_grace_period"] == "60s"  # time to checkpoint and requeue
    no_gpu = load({**KEYS, "TAAS_GPU_WORKERS": "0"})["services"]["worker"]
    assert int(no_gpu["deploy"]["replicas"]) == 0


def test_shared_artifacts_and_optional_flower(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ["api", "worker", "worker-cpu", "reconciler"]:  # the reconciler sweeps staging files
        assert "artifacts:/var/lib/taas" in services[name]["volumes"]
        assert services[name]["environment"]["TAAS_DATA_DIR"] == "/var/lib/taas"
    assert services["reconciler"]["command"] == ["taas", "reconcile"]
    assert services["flower"]["profiles"] == ["flower"]
    assert all(port.startswith("127.0.0.1:") for port in services["flower"]["ports"])


def test_third_party_images_are_pinned(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        image = service["image"]
        if image.startswith("taas-"):
            continue  # built here
        tag = image.partition(":")[2]
        assert re.match(r"\d+\.\d+(\.\d+)?", tag), f"{name}: {image} is not pinned to a release"


def test_nginx_config_parses(tmp_path: Path) -> None:
    """``nginx -t`` on the proxy's config where an nginx binary exists (skipped otherwise)."""
    nginx = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
    if nginx is None:
        pytest.skip("no nginx binary on this machine")
    config = (REPO_ROOT / "docker" / "nginx.conf").read_text()
    # Outside Docker there is no resolver at 127.0.0.11; syntax is what is checked here.
    (tmp_path / "nginx.conf").write_text(config.replace("pid /tmp/nginx.pid;", f"pid {tmp_path}/nginx.pid;"))
    conf, err = str(tmp_path / "nginx.conf"), str(tmp_path / "error.log")
    run = subprocess.run(
        [nginx, "-t", "-q", "-p", str(tmp_path), "-c", conf, "-e", err],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode == 0, run.stdout + run.stderr

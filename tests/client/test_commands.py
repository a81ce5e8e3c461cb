"""`taas` client commands against a running `taas up`: the admin makes a tenant, the tenant
trains with --wait, classifies and manages its classifiers; errors are one line and exit 1."""

from __future__ import annotations

import csv
import json
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import Result

from service.client.api import Api
from tests.e2e.conftest import Platform

pytestmark = pytest.mark.e2e


def _json(result: Result) -> object:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_admin_and_tenant_work_through_the_client(
    taas: Callable[..., Result],
    embedded_platform: Platform,
    intents_nlc: Path,
    config_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = embedded_platform.base_url
    # the admin logs in, the key piped in as from `< var/admin.key`, and makes a tenant
    admin_login = taas("login", url, input=embedded_platform.admin_key + "\n")
    assert "as the administrator" in admin_login.stdout, admin_login.output
    assert stat.S_IMODE((config_home / "taas" / "client.json").stat().st_mode) == 0o600
    created = _json(taas("tenants", "create", "cli-acme", "--json"))
    assert isinstance(created, dict)
    assert taas("tenants", "create", "cli-other").exit_code == 0
    monkeypatch.setattr("service.client.api.TENANTS_PER_CALL", 1)  # a page a tenant: every page read
    listed = _json(taas("tenants", "list", "--json"))
    assert [t["name"] for t in listed] == ["cli-acme", "cli-other"]  # type: ignore[union-attr, index]
    assert [t["name"] for t in _json(taas("tenants", "list", "--name", "CLI-AC", "--json"))] == ["cli-acme"]  # type: ignore[union-attr, index]
    assert taas("tenants", "list", "--name", "nobody").stdout == "no tenant's name contains 'nobody'\n"
    # the plain listing shows whole ids (`taas tenants revoke` takes them), however narrow
    key_id = next(t for t in listed if t["name"] == "cli-acme")["keys"][0]["key_id"]  # type: ignore[union-attr, index]
    plain = taas("tenants", "list").stdout
    assert f"{created['tenant_id']}  cli-acme" in plain and f"  key {key_id}  " in plain  # type: ignore[index]
    # the tenant logs in, uploads a dataset and trains from a labelled CSV, waiting for the end
    assert "as a tenant" in taas("login", url, created["api_key"]).stdout
    labelled = tmp_path / "labelled.csv"
    with open(intents_nlc, newline="") as source, open(labelled, "w", newline="") as out:
        csv.writer(out).writerows([["text", "label"], *csv.reader(source)])
    dataset = _json(taas("datasets", "upload", str(labelled), "--json"))
    assert dataset["rows"] == 60  # type: ignore[index]
    trained = _json(taas("train", str(labelled), "--name", "cli-intents", "--wait", "--json"))
    assert trained["status"] == "Available"  # type: ignore[index]
    classifier_id = trained["classifier_id"]  # type: ignore[index]
    # classify one and several texts
    one = _json(taas("classify", classifier_id, "book a flight to rome", "--json"))
    assert one[0]["top_class"] == "flights"  # type: ignore[index]
    assert set(one[0]) == {"text", "top_class", "classes"}  # type: ignore[index]  # as for several
    table = taas("classify", classifier_id, "book a flight to rome", "play some jazz in rome")
    assert table.exit_code == 0 and "flights" in table.stdout and "music" in table.stdout
    # and offline, from the classifier's bundle: the same answer without the service
    bundle = tmp_path / "intents.taas"
    exported = httpx.get(
        f"{url}/v1/classifiers/{classifier_id}/bundle", headers={"X-API-Key": created["api_key"]}
    )
    bundle.write_bytes(exported.raise_for_status().content)
    offline = _json(taas("classify", str(bundle), "book a flight to rome", "--json"))
    assert offline[0]["top_class"] == one[0]["top_class"]  # type: ignore[index]
    assert offline[0]["classes"][0]["confidence"] == pytest.approx(
        one[0]["classes"][0]["confidence"], abs=1e-6
    )  # type: ignore[index]
    assert set(offline[0]) == set(one[0])  # type: ignore[arg-type, index]
    (tmp_path / "junk.taas").write_bytes(b"not a bundle")
    junk = taas("classify", str(tmp_path / "junk.taas"), "hello")
    assert (
        junk.exit_code == 1 and junk.stderr.count("\n") == 1 and "not a complete taas bundle" in junk.stderr
    )
    # evaluation on a test file of the tenant's own, run by the platform's worker
    test_file = tmp_path / "holdout.csv"
    test_file.write_text("book a flight to lima,flights\nplay some jazz in lima,music\norder a pizza,food\n")
    page = tmp_path / "report.html"
    scored = taas("eval", "cli-intents", str(test_file), "--html", str(page))
    assert scored.exit_code == 0, scored.output
    assert "version 1 on holdout.csv: 3 rows; accuracy" in scored.stdout
    assert "! food: 1 rows of a class the version never saw" in scored.stdout
    assert "weakest classes" in scored.stdout and "order a pizza" in scored.stdout  # its confused pair
    assert f"report page saved to {page}" in scored.stdout and "order a pizza" in page.read_text()
    evaluation = _json(taas("eval", classifier_id, str(test_file), "--json"))
    assert evaluation["status"] == "completed" and evaluation["report"]["rows"] == 3  # type: ignore[index]
    assert evaluation["report"]["per_class"][0]["class_name"] == "flights"  # type: ignore[index]
    missing_file = taas("eval", classifier_id, str(tmp_path / "nope.csv"))
    assert missing_file.exit_code == 1 and "cannot read" in missing_file.stderr
    # versions: retrain on the NLC CSV (waiting), list them, roll back to version 1
    retrained = _json(taas("classifiers", "retrain", classifier_id, str(intents_nlc), "--wait", "--json"))
    assert (retrained["version"], retrained["status"], retrained["serving"]) == (2, "Available", True)  # type: ignore[index]
    listing = taas("classifiers", "versions", classifier_id)
    assert listing.exit_code == 0 and "Available" in listing.stdout and "*" in listing.stdout
    assert "version 1 serves" in taas("classifiers", "promote", classifier_id, "1").stdout
    versions = _json(taas("classifiers", "versions", classifier_id, "--json"))
    assert [(v["version"], v["serving"]) for v in versions["versions"]] == [(1, True), (2, False)]  # type: ignore[index]
    refused = taas("classifiers", "promote", classifier_id, "7")
    assert refused.exit_code == 1 and "404" in refused.stderr
    # classifiers: list, show, cancel (not training: a readable 409), delete
    assert [c["name"] for c in _json(taas("classifiers", "list", "--json"))] == ["cli-intents"]  # type: ignore[union-attr]
    assert "Available" in taas("classifiers", "show", classifier_id).stdout
    refused = taas("classifiers", "cancel", classifier_id)
    assert refused.exit_code == 1 and refused.stderr.startswith("error: 409 Conflict:")
    assert taas("classifiers", "delete", classifier_id).exit_code == 0
    missing = taas("classifiers", "show", classifier_id)
    assert missing.exit_code == 1 and missing.stderr.count("\n") == 1 and "404" in missing.stderr
    # a headerless NLC CSV goes to NLC create; without --wait the command returns at once
    started = _json(taas("train", str(intents_nlc), "--name", "nlc-intents", "--json"))
    assert started["status"] == "Training"  # type: ignore[index]
    cancelled = taas("classifiers", "cancel", started["classifier_id"])  # type: ignore[index]
    assert cancelled.exit_code == 0 and "Unavailable" in cancelled.stdout
    # … and resume it from its checkpoint, following it to its end
    resumed = _json(taas("classifiers", "resume", started["classifier_id"], "--wait", "--json"))  # type: ignore[index]
    assert resumed["status"] == "Available"  # type: ignore[index]
    # a classifier deleted between the list and its own GET is left out (it failed the listing)
    listed_now = _json(taas("classifiers", "list", "--json"))
    real_call = Api.call

    def deleting_after_the_list(api: Api, method: str, path: str, **kwargs: Any) -> Any:
        reply = real_call(api, method, path, **kwargs)
        if path == "/v1/classifiers":
            real_call(api, "DELETE", f"/v1/classifiers/{started['classifier_id']}")  # type: ignore[index]
        return reply

    with monkeypatch.context() as patched:
        patched.setattr(Api, "call", deleting_after_the_list)
        assert _json(taas("classifiers", "list", "--json")) == [
            c for c in listed_now if c["name"] != "nlc-intents"
        ]
    # datasets: the uploaded one is listed, whole id and all, and can be deleted
    assert dataset["dataset_id"] in {d["dataset_id"] for d in _json(taas("datasets", "list", "--json"))}  # type: ignore[union-attr, index]
    assert dataset["dataset_id"] in taas("datasets", "list").stdout  # type: ignore[index]
    assert taas("datasets", "delete", dataset["dataset_id"]).exit_code == 0  # type: ignore[index]
    assert dataset["dataset_id"] not in {d["dataset_id"] for d in _json(taas("datasets", "list", "--json"))}  # type: ignore[union-attr, index]
    # a tenant is not the admin
    denied = taas("tenants", "list")
    assert denied.exit_code == 1 and denied.stderr.startswith("error: 403 Forbidden:")
    # a labelled file whose create is refused leaves no dataset uploaded for it
    stored = httpx.get(f"{url}/v1/datasets", headers={"X-API-Key": created["api_key"]}).json()
    refused = taas("train", str(labelled), "--name", "x", "--language", "klingon")
    assert refused.exit_code == 1 and "language" in refused.stderr
    assert httpx.get(f"{url}/v1/datasets", headers={"X-API-Key": created["api_key"]}).json() == stored
    # … nor does a retrain of a classifier that does not exist
    refused = taas("classifiers", "retrain", "no-such-classifier", str(labelled))
    assert refused.exit_code == 1 and "404" in refused.stderr
    assert httpx.get(f"{url}/v1/datasets", headers={"X-API-Key": created["api_key"]}).json() == stored
    # names are printed as written (rich markup is not interpreted), and an id is one path
    # segment: "../datasets/ID" is no classifier, and the dataset stays
    kept = _json(taas("datasets", "upload", str(labelled), "--name", "[/x]", "--json"))
    listing = taas("datasets", "list")  # was a MarkupError once such a name was stored
    assert listing.exit_code == 0 and "[/x]" in listing.stdout, listing.output
    gone = taas("classifiers", "delete", f"../datasets/{kept['dataset_id']}")  # type: ignore[index]
    assert gone.exit_code == 1 and "404" in gone.stderr
    assert kept["dataset_id"] in taas("datasets", "list").stdout  # type: ignore[index]
    # an unknown key is named as such, not as a wrong admin key
    unknown = taas("login", url, "taas_no-such-key")
    assert (
        unknown.stderr == "error: the key is neither a tenant's key nor the admin key (or it was revoked)\n"
    )
    # the admin deletes the tenant: asked first, and its key is refused from then on
    assert "as the administrator" in taas("login", url, input=embedded_platform.admin_key + "\n").stdout
    declined = taas("tenants", "delete", created["tenant_id"], input="n\n")  # type: ignore[index]
    assert declined.exit_code == 1 and declined.stderr == "error: nothing deleted\n"
    deleted = taas("tenants", "delete", created["tenant_id"], "--yes")  # type: ignore[index]
    assert deleted.exit_code == 0 and "0 classifier(s), 2 dataset(s)" in deleted.stdout, deleted.output
    assert httpx.get(f"{url}/v1/classifiers", headers={"X-API-Key": created["api_key"]}).status_code == 401
    assert "cli-acme" not in taas("tenants", "list").stdout

"""Classify on an Available classifier whose model the real trainer produced."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.api.routes.classify import CLASSES_SHOWN
from service.serving.model_cache import ModelCache
from service.storage.store import ArtifactStore
from tests.conftest import METRICS_HEADERS
from tests.service.helpers import WEATHER, make_available, train_tiny_model
from trainer.encoder import shared_encoder
from trainer.encoder.registry import MINILM
from trainer.inference import LoadedModel

pytestmark = pytest.mark.dialect_neutral
OUT_OF_SCOPE_FIELDS = ("in_scope_score", "out_of_scope")  # taas's extension, which NLC's SDK ignores


def test_classify_answers_nlc_shape_with_confidences_summing_to_one(
    client: TestClient, tenant: Any, available: str
) -> None:
    reply = client.post(
        f"/v1/classifiers/{available}/classify", json={"text": "is it snowing"}, headers=tenant.headers
    )

    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert set(body) == {"classifier_id", "url", "text", "top_class", "classes", *OUT_OF_SCOPE_FIELDS}
    confidences = [c["confidence"] for c in body["classes"]]
    assert {c["class_name"] for c in body["classes"]} == set(WEATHER)
    assert confidences == sorted(confidences, reverse=True)
    assert math.isclose(sum(confidences), 1.0, abs_tol=1e-6)
    assert body["top_class"] == body["classes"][0]["class_name"]


@pytest.fixture(scope="module")
def twelve_class_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model of twelve classes: more than NLC's reply shows."""
    classes = {f"class{i}": [f"word{i} thing", f"thing word{i}", f"word{i} stuff"] for i in range(12)}
    return train_tiny_model(tmp_path_factory.mktemp("twelve-classes"), classes)


def test_classify_answers_with_the_ten_most_confident_classes_as_nlc(
    client: TestClient,
    tenant: Any,
    create_classifier: Callable[..., Any],
    session: Session,
    store: ArtifactStore,
    twelve_class_model: Path,
) -> None:
    cid = create_classifier(tenant).json()["classifier_id"]
    make_available(session, store, tenant.id, cid, twelve_class_model)
    text = "word3 thing"
    expected = [
        {"class_name": name, "confidence": confidence}
        for name, confidence in LoadedModel.load(twelve_class_model).classify([text])[0][:CLASSES_SHOWN]
    ]
    url = f"/v1/classifiers/{cid}"

    replies = [
        client.post(f"{url}/classify", json={"text": text}, headers=tenant.headers).json(),
        client.post(f"{url}/classify", json={"text": text}, headers=tenant.headers).json(),  # cached
        client.get(f"{url}/classify", params={"text": text}, headers=tenant.headers).json(),
        client.post(
            f"{url}/classify_collection", json={"collection": [{"text": text}]}, headers=tenant.headers
        ).json()["collection"][0],
    ]

    assert CLASSES_SHOWN == 10
    for reply in replies:
        assert reply["classes"] == expected and reply["top_class"] == "class3"


def test_classify_collection_answers_each_text(client: TestClient, tenant: Any, available: str) -> None:
    texts = ["how warm is it", "will it rain"]

    reply = client.post(
        f"/v1/classifiers/{available}/classify_collection",
        json={"collection": [{"text": t} for t in texts]},
        headers=tenant.headers,
    )

    assert reply.status_code == 200, reply.text
    collection = reply.json()["collection"]
    assert [item["text"] for item in collection] == texts
    assert all(set(item) == {"text", "top_class", "classes", *OUT_OF_SCOPE_FIELDS} for item in collection)


def test_classify_says_which_texts_belong_to_none_of_the_classes(
    client: TestClient, tenant: Any, available: str, tiny_model: Path
) -> None:
    texts = ["is it cold outside today", "will it rain", "book me a flight to Lisbon", "xqzv plomk", "?!"]
    model = LoadedModel.load(tiny_model)
    expected = model.in_scope_scores(model.probabilities(texts))

    reply = client.post(
        f"/v1/classifiers/{available}/classify_collection",
        json={"collection": [{"text": t} for t in texts]},
        headers=tenant.headers,
    )

    assert reply.status_code == 200, reply.text
    collection = reply.json()["collection"]
    scores = [item["in_scope_score"] for item in collection]
    assert scores == pytest.approx(expected)
    # ten training rows: the texts of other things are ranked below, though not below 2 %; a
    # text without a word is answered by the classes' prior alone, as no training text was
    assert min(scores[:2]) > max(scores[2:])
    assert model.in_scope is not None
    assert [item["out_of_scope"] for item in collection] == [s < model.in_scope.rate for s in scores]
    assert collection[-1]["out_of_scope"] is True
    # the model now cached, one more text is answered before routing (service.api.fast_classify)
    again = client.post(f"/v1/classifiers/{available}/classify", json={"text": "?!"}, headers=tenant.headers)
    assert again.json()["out_of_scope"] is True
    # /metrics counts them by classifier, from either path
    metrics = client.get("/metrics", headers=METRICS_HEADERS).text
    assert f'taas_classify_scoped_texts_total{{classifier_id="{available}"}} 6.0' in metrics
    rejected = sum(item["out_of_scope"] for item in collection) + 1
    assert f'taas_classify_out_of_scope_texts_total{{classifier_id="{available}"}} {rejected:.1f}' in metrics
    assert all(item["top_class"] in WEATHER for item in collection)  # NLC's answer, all the same


def test_a_model_trained_before_out_of_scope_detection_answers_as_before(
    client: TestClient,
    tenant: Any,
    create_classifier: Callable[..., Any],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
    tmp_path: Path,
) -> None:
    old = tmp_path / "old-model"
    shutil.copytree(tiny_model, old)
    meta = json.loads((old / "model.json").read_text())
    del meta["in_scope"]
    (old / "model.json").write_text(json.dumps(meta))
    cid = create_classifier(tenant).json()["classifier_id"]
    make_available(session, store, tenant.id, cid, old)

    reply = client.post(
        f"/v1/classifiers/{cid}/classify", json={"text": "will it rain"}, headers=tenant.headers
    )

    assert reply.status_code == 200, reply.text
    assert set(reply.json()) == {"classifier_id", "url", "text", "top_class", "classes"}


def test_classify_by_query_answers_as_the_json_body_does(
    client: TestClient, tenant: Any, available: str
) -> None:
    # NLC v1 took GET .../classify?text= besides the JSON body; clients of its time use it.
    text = "will it rain & snow? 100%"

    by_query = client.get(
        f"/v1/classifiers/{available}/classify", params={"text": text}, headers=tenant.headers
    )
    by_body = client.post(
        f"/v1/classifiers/{available}/classify", json={"text": text}, headers=tenant.headers
    )

    assert by_query.status_code == 200, by_query.text
    assert by_query.json() == by_body.json()
    assert by_query.json()["text"] == text


@pytest.mark.parametrize(
    ("params", "description"),
    [
        ({}, "query.text: Field required"),
        ({"text": "  "}, "text: text must not be empty"),
        ({"text": "x" * 2049}, "text: text has 2049 characters; the limit is 2048 (max_classify_chars)"),
    ],
)
def test_classify_by_query_keeps_nlcs_rules(
    client: TestClient, tenant: Any, available: str, params: dict[str, str], description: str
) -> None:
    reply = client.get(f"/v1/classifiers/{available}/classify", params=params, headers=tenant.headers)

    assert reply.status_code == 400
    assert reply.json()["description"] == description


def test_a_query_whose_escapes_are_not_utf8_is_400_as_such_a_body_is(
    client: TestClient, tenant: Any, available: str
) -> None:
    url = f"/v1/classifiers/{available}/classify"

    refused = client.get(f"{url}?text=rain%ff", headers=tenant.headers)
    replacement_character = client.get(f"{url}?text=rain%EF%BF%BD", headers=tenant.headers)  # U+FFFD itself

    assert refused.status_code == 400
    assert refused.json()["description"] == "text: not UTF-8 once percent-decoded (invalid start byte)"
    assert replacement_character.status_code == 200 and replacement_character.json()["text"] == "rain\ufffd"


def test_a_classify_text_may_be_as_long_as_nlcs_2048_characters(
    client: TestClient, tenant: Any, available: str
) -> None:
    # NLC took training texts of 1,024 characters and classify texts of 2,048.
    text = ("rain " * 410)[:2048]

    reply = client.post(f"/v1/classifiers/{available}/classify", json={"text": text}, headers=tenant.headers)

    assert reply.status_code == 200, reply.text
    assert reply.json()["text"] == text


def test_available_classifier_reports_metrics(client: TestClient, tenant: Any, available: str) -> None:
    body = client.get(f"/v1/classifiers/{available}", headers=tenant.headers).json()

    assert body["status"] == "Available"
    assert body["metrics"] == {"accuracy": 1.0}


def test_a_version_trained_before_encoders_reads_n_grams(
    client: TestClient, tenant: Any, available: str
) -> None:
    body = client.get(f"/v1/classifiers/{available}", headers=tenant.headers).json()
    [version] = client.get(f"/v1/classifiers/{available}/versions", headers=tenant.headers).json()["versions"]

    assert body["model"] == version["model"] == {"kind": "n-grams"}
    assert client.post(
        f"/v1/classifiers/{available}/classify", json={"text": "will it rain"}, headers=tenant.headers
    ).json()["top_class"]


def test_an_encoder_classifier_says_what_it_reads_and_classifies(
    client: TestClient,
    tenant: Any,
    create_classifier: Callable[..., Any],
    session: Session,
    store: ArtifactStore,
    encoder_model: Path,
) -> None:
    cid = create_classifier(tenant).json()["classifier_id"]
    metrics = json.loads((encoder_model / "model.json").read_text())["metrics"]
    make_available(session, store, tenant.id, cid, encoder_model, metrics=metrics)

    body = client.get(f"/v1/classifiers/{cid}", headers=tenant.headers).json()
    classified = client.post(
        f"/v1/classifiers/{cid}/classify", json={"text": "is a downpour on the way"}, headers=tenant.headers
    )

    assert body["model"] == {
        "kind": "sentence-encoder+n-grams",
        "encoder": MINILM.name,
        "encoder_sha256": shared_encoder(MINILM.name).sha256,
        "encoder_layers": list(MINILM.layers),
    }
    assert classified.status_code == 200 and classified.json()["classes"]


def test_unreadable_model_is_503_without_naming_the_store(
    client: TestClient, tenant: Any, available: str, store: ArtifactStore
) -> None:
    shutil.rmtree(store.model_dir(tenant.id, available, 1))

    reply = client.post(
        f"/v1/classifiers/{available}/classify", json={"text": "rain?"}, headers=tenant.headers
    )

    assert reply.status_code == 503 and reply.json()["code"] == 503
    description = reply.json()["description"]
    assert description.startswith(f"the model of classifier '{available}' cannot be loaded; reference ")
    assert str(store.root) not in description and "tenants/" not in description  # the operator's storage
    exported = client.get(f"/v1/classifiers/{available}/bundle", headers=tenant.headers)
    assert exported.status_code == 503, exported.text  # was a 500
    assert exported.json()["description"].startswith(f"the model of classifier '{available}' cannot be read")


def test_lru_keeps_the_most_recently_used_models_within_the_budget(tiny_model: Path, tmp_path: Path) -> None:
    dirs = [shutil.copytree(tiny_model, tmp_path / name) for name in "abc"]
    one = LoadedModel.load(tiny_model).nbytes
    cache = ModelCache(budget_bytes=2 * one)

    async def use(*names: str) -> None:
        for name in names:
            await cache.aget("t", name, tmp_path / name)

    try:
        asyncio.run(use("a", "b", "a", "c"))  # b is the least recently used when c arrives

        assert len(cache) == 2 and cache.nbytes <= 2 * one
        loads: list[Path] = []
        real = LoadedModel.load
        LoadedModel.load = classmethod(lambda cls, d: loads.append(d) or real(d))  # type: ignore[method-assign]
        try:
            asyncio.run(use("a", "c", "b"))
        finally:
            LoadedModel.load = real  # type: ignore[method-assign]
        assert loads == [dirs[1]]
    finally:
        cache.close()


def test_the_shared_encoder_counts_once_against_the_budget(encoder_model: Path, tmp_path: Path) -> None:
    """Two encoder models hold the encoder's 87 MB once between them; a budget with room for
    the encoder and one model keeps one."""
    dirs = [shutil.copytree(encoder_model, tmp_path / name) for name in "ab"]
    one = LoadedModel.load(encoder_model)
    encoder = shared_encoder(MINILM.name).nbytes
    cache = ModelCache(budget_bytes=encoder + one.nbytes + one.nbytes // 2)

    async def use(*names: str) -> None:
        for name in names:
            await cache.aget("t", name, tmp_path / name)

    try:
        asyncio.run(use("a"))
        assert cache.nbytes == encoder + one.nbytes
        asyncio.run(use("b"))
        assert len(cache) == 1 and cache.peek("t", "b", dirs[1]) is not None
        assert cache.nbytes == encoder + one.nbytes
    finally:
        cache.close()


def test_a_tenant_cycling_its_models_evicts_its_own_not_another_tenants(
    tiny_model: Path, tmp_path: Path
) -> None:
    """Budget for three models: tenant B's one model, then tenant A loads four in turn. Plain
    LRU evicted B's (the least recently used) for A's third; A, over an equal share, now pays."""
    for name in ("b1", "a1", "a2", "a3", "a4"):
        shutil.copytree(tiny_model, tmp_path / name)
    one = LoadedModel.load(tiny_model).nbytes
    cache = ModelCache(budget_bytes=3 * one)

    async def use(tenant: str, *names: str) -> None:
        for name in names:
            await cache.aget(tenant, name, tmp_path / name)

    try:
        asyncio.run(use("B", "b1"))
        asyncio.run(use("A", "a1", "a2", "a3", "a4"))

        assert cache.peek("B", "b1", tmp_path / "b1") is not None
        assert [name for name in ("a1", "a2", "a3", "a4") if cache.peek("A", name, tmp_path / name)] == [
            "a3",
            "a4",
        ]
        asyncio.run(use("C", "a1"))  # a third tenant: A, at two of three, is over its share of one
        assert cache.peek("B", "b1", tmp_path / "b1") is not None
        assert cache.peek("A", "a3", tmp_path / "a3") is None and len(cache) == 3
    finally:
        cache.close()


def test_a_model_copy_dropped_between_fetch_and_load_is_fetched_again(
    tiny_model: Path, tmp_path: Path
) -> None:
    """With a remote store, a worker sharing this node's root drops its model folder once it is
    published; a load that fetched the folder just before finds it gone and fetches it again."""
    remote = ArtifactStore(tmp_path / "remote")
    node = ArtifactStore(tmp_path / "node", remote)
    folder = node.model_dir("t", "c", 1) / "epoch-1"
    remote.upload_tree(tiny_model, node.relative(folder))
    fetches: list[Path] = []

    def fetch_then_dropped_once(model_dir: Path) -> Path:
        fetched = node.fetch(model_dir, folder=True)
        if not fetches:
            node.drop_local(fetched)  # the worker's drop, right after this fetch
        fetches.append(model_dir)
        return fetched

    cache = ModelCache(budget_bytes=1 << 30, fetch=fetch_then_dropped_once)
    try:
        model = asyncio.run(cache.aget("t", "c", folder))
        assert model.classify(["is it snowing"])[0][0][0] in WEATHER
        assert fetches == [folder, folder]
        remote.delete_prefix(node.relative(folder))  # gone everywhere: the load still fails
        node.drop_local(folder)
        with pytest.raises(OSError):
            asyncio.run(cache.aget("t", "other", folder))
    finally:
        cache.close()


def test_concurrent_requests_for_one_model_share_one_load(tiny_model: Path) -> None:
    cache = ModelCache(budget_bytes=1 << 30)
    loads: list[Path] = []
    real = LoadedModel.load

    def counted(cls: type[LoadedModel], path: Path) -> LoadedModel:
        loads.append(path)
        time.sleep(0.2)
        return real(path)

    async def many() -> list[LoadedModel]:
        return await asyncio.gather(*(cache.aget("t", "x", tiny_model) for _ in range(20)))

    LoadedModel.load = classmethod(counted)  # type: ignore[method-assign, assignment]
    try:
        models = asyncio.run(many())
    finally:
        LoadedModel.load = real  # type: ignore[method-assign]
        cache.close()
    assert loads == [tiny_model] and len({id(m) for m in models}) == 1


def test_a_tenants_cold_models_do_not_queue_another_tenants_first_load_behind_them(tiny_model: Path) -> None:
    """One loader thread; tenant A's first load held, two more queued, then B's one. First come,
    first served loaded B's last, behind A's whole backlog; the tenants take turns."""
    started, release, order = threading.Event(), threading.Event(), []

    def fetch(model_dir: Path) -> Path:
        if model_dir.name == "a0":
            started.set()
            release.wait(10)
        order.append(model_dir.name)
        return tiny_model

    cache = ModelCache(1 << 30, loaders=1, fetch=fetch)

    async def load_all() -> None:
        first = asyncio.ensure_future(cache.aget("A", "ca0", Path("/models/a0")))
        await asyncio.to_thread(started.wait, 10)
        rest = [asyncio.ensure_future(cache.aget("A", f"ca{i}", Path(f"/models/a{i}"))) for i in (1, 2)]
        rest.append(asyncio.ensure_future(cache.aget("B", "cb0", Path("/models/b0"))))
        await asyncio.sleep(0.1)  # every load submitted
        release.set()
        await asyncio.gather(first, *rest)

    try:
        asyncio.run(load_all())
    finally:
        cache.close()
    assert order == ["a0", "a1", "b0", "a2"]


def test_a_slow_model_load_blocks_no_other_request(
    client: TestClient,
    tenant: Any,
    available: str,
    create_classifier: Callable[..., Any],
    session: Session,
    store: ArtifactStore,
    tiny_model: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    warm = create_classifier(tenant).json()["classifier_id"]
    make_available(session, store, tenant.id, warm, tiny_model)
    assert client.post(
        f"/v1/classifiers/{warm}/classify", json={"text": "rain"}, headers=tenant.headers
    ).is_success
    release = threading.Event()
    real = LoadedModel.load

    def stuck(cls: type[LoadedModel], path: Path) -> LoadedModel:
        release.wait(30)
        return real(path)

    monkeypatch.setattr(LoadedModel, "load", classmethod(stuck))
    slow: list[int] = []
    waiting = [
        threading.Thread(
            target=lambda: slow.append(
                client.post(
                    f"/v1/classifiers/{available}/classify", json={"text": "rain"}, headers=tenant.headers
                ).status_code
            )
        )
        for _ in range(8)
    ]
    for thread in waiting:
        thread.start()

    started = time.monotonic()
    for _ in range(20):
        reply = client.post(f"/v1/classifiers/{warm}/classify", json={"text": "snow"}, headers=tenant.headers)
        assert reply.status_code == 200
    assert client.get("/v1/classifiers", headers=tenant.headers).status_code == 200
    elapsed = time.monotonic() - started
    release.set()
    for thread in waiting:
        thread.join(30)

    assert elapsed < 5 and slow == [200] * 8

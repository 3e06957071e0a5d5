"""The recall service against a live `dkilab serve`: the user comes from the key only, another user's
data is a 404 exactly like a missing id, bad input is a 422 naming the field, and the client returns
what the in-process view returns (so agents and strategies run unchanged over HTTP)."""
import re
import threading

import httpx
import pytest
from dkilab.memory.view import MessageNotFoundError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

USERS = ["u_maya", "u_tom", "u_lin", "u_chen"]


def post(service, path, body, user=None, key=None):
    headers = {"X-API-Key": key if key is not None else service.keys[user]} if (user or key is not None) else {}
    return httpx.post(service.url + path, json=body, headers=headers, timeout=30)


def ids(page):
    return [(h.message_id, None if h.score is None else round(h.score, 4)) for h in page.items]


def test_no_key_or_an_unknown_key_is_401_and_a_key_binds_its_user(service):
    for key in (None, "", "dk_not-a-key", "x" * 300):
        r = post(service, "/v1/lexical_search", {"query_text": "cat"}, key=key)
        assert r.status_code == 401 and r.headers.get("www-authenticate") == "X-API-Key", (key, r.text)
    assert httpx.get(service.url + "/api/session-list").status_code == 401
    for user in USERS:
        assert service.client(user).user_id == user
    r = post(service, "/v1/lexical_search", {"query_text": "cat", "user_id": "u_tom"}, user="u_maya")
    assert r.status_code == 422 and "user_id" in r.text  # no endpoint takes a user id: a 422, not ignored


def test_another_users_message_or_session_is_a_404_exactly_like_a_missing_one(service):
    tom_msg = service.store.for_user("u_tom").recent(1)[0].message_id
    for path, body in (("/v1/get", {}), ("/v1/neighbors", {"before": 1, "after": 1})):
        theirs = post(service, path, {"message_id": tom_msg, **body}, user="u_maya")
        missing = post(service, path, {"message_id": "no-such-id", **body}, user="u_maya")
        assert theirs.status_code == missing.status_code == 404 and theirs.json() == missing.json()
        assert tom_msg not in theirs.text
    assert post(service, "/v1/get", {"message_id": tom_msg}, user="u_tom").json()["message_id"] == tom_msg
    history = service.url + "/api/conversation-history"
    headers = {"X-API-Key": service.keys["u_maya"]}
    theirs = httpx.get(history, params={"session_id": service.sessions["u_tom"]}, headers=headers)
    missing = httpx.get(history, params={"session_id": "sess_nobody_1_abc"}, headers=headers)
    assert theirs.status_code == missing.status_code == 404 and theirs.json() == missing.json()
    own = httpx.get(history, params={"session_id": service.sessions["u_maya"]}, headers=headers).json()
    assert [t["role"] for t in own] == ["user", "assistant"] and own[0]["content"] == "押品怎么创建？"
    sessions = httpx.get(service.url + "/api/session-list", headers=headers).json()
    assert [s["session_id"] for s in sessions] == [service.sessions["u_maya"]]
    with pytest.raises(MessageNotFoundError):
        service.client("u_maya").get(tom_msg)
    session = service.store.for_user("u_tom").get(tom_msg).session_id
    assert service.client("u_maya").session_messages(session) == []


def test_bad_parameters_are_422_naming_the_field(service):
    cases = [("/v1/lexical_search", {"query_text": "x", "page_size": 0}, "page_size"),
             ("/v1/lexical_search", {"query_text": "x" * 5000}, "query_text"),
             ("/v1/lexical_search", {"query_txt": "x"}, "query_txt"),
             ("/v1/lexical_search", {"query_text": "x", "filter": {"rol": "user"}}, "rol"),
             ("/v1/semantic_search", {"query_text": "x", "top_k": 10_000}, "top_k"),
             ("/v1/semantic_search", {"query_embedding": [0.5] * 384}, "query_embedding"),  # not unit length
             ("/v1/semantic_search", {}, "query_text"),
             ("/v1/messages_list", {"since": "yesterday"}, "since"),
             ("/v1/neighbors", {"message_id": "m", "before": -1}, "before")]
    for path, body, field in cases:
        r = post(service, path, body, user="u_lin")
        assert r.status_code == 422, (body, r.text)
        assert field in r.text, (field, r.text)


def test_hostile_query_text_is_matched_literally_and_equals_the_in_process_result(service):
    lin = service.store.for_user("u_lin")
    client = service.client("u_lin")
    for text in ('"不吃辣" OR *', "NEAR(a b)", "'; DROP TABLE messages; --", "a\x00b", "辣 AND 1=1", "{}[]()^$",
                 "🐱" * 100, "\u202e\u200b不吃辣"):
        assert ids(client.lexical_search(text)) == ids(lin.lexical_search(text)), text
        assert ids(client.semantic_search(text, top_k=3)) == ids(lin.semantic_search(text, top_k=3)), text
    r = httpx.post(service.url + "/v1/lexical_search", content=b'{"query_text": "\\ud800"}',  # a lone surrogate
                   headers={"X-API-Key": service.keys["u_lin"], "content-type": "application/json"})
    assert r.status_code == 422 and "query_text" in r.text
    assert service.store.count() > 0  # still there


def test_cursor_tampering_is_refused_and_never_leaks(service):
    client = service.client("u_maya")
    page = client.messages_list(page_size=2)
    assert page.next_cursor
    second = client.messages_list(page_size=2, cursor=page.next_cursor)
    assert ids(second) == ids(service.store.for_user("u_maya").messages_list(page_size=4))[2:]
    c = page.next_cursor
    mid = len(c) // 2  # (a character after the base64 padding is ignored by the decoder: the same token)
    tampered = [c[:mid] + ("A" if c[mid] != "A" else "B") + c[mid + 1:], c[:20], c[:-8], "", "not-a-cursor", "%00"]
    for bad in tampered:
        r = post(service, "/v1/messages_list", {"page_size": 2, "cursor": bad}, user="u_maya")
        assert r.status_code == 422 and "cursor" in r.text, (bad, r.text)
    r = post(service, "/v1/messages_list", {"page_size": 2, "cursor": c}, user="u_tom")  # maya's cursor, tom's key
    assert r.status_code == 422 and "cursor" in r.text and "maya" not in r.text
    r = post(service, "/v1/messages_list", {"page_size": 3, "role": "user", "cursor": c}, user="u_maya")
    assert r.status_code == 422  # another query's cursor


def test_size_limits_and_the_openapi_page(service):
    big = httpx.post(service.url + "/v1/lexical_search", content=b"{" + b" " * 70_000 + b"}",
                     headers={"X-API-Key": service.keys["u_lin"], "content-type": "application/json"})
    assert big.status_code == 413

    def chunks():  # no Content-Length: the limit is counted while reading
        yield b'{"query_text": "'
        for _ in range(40):
            yield b"x" * 2048
        yield b'"}'

    chunked = httpx.post(service.url + "/v1/lexical_search", content=chunks(),
                         headers={"X-API-Key": service.keys["u_lin"], "content-type": "application/json"})
    assert chunked.status_code == 413
    small = httpx.post(service.url + "/v1/lexical_search", content=iter([b'{"query_text": ', b'"cat"}']),
                       headers={"X-API-Key": service.keys["u_lin"], "content-type": "application/json"})
    assert small.status_code == 200 and "items" in small.json()  # a small chunked body is read and handed on
    assert post(service, "/v1/lexical_search", {"query_text": "cat"}, user="u_lin").status_code == 200  # still serving
    long_url = httpx.get(service.url + "/v1/recent", params={"session_id": "x" * 5000},
                         headers={"X-API-Key": service.keys["u_lin"]})
    assert long_url.status_code == 414
    spec = httpx.get(service.url + "/openapi.json").json()
    for path in ("/v1/messages_list", "/v1/lexical_search", "/v1/semantic_search", "/v1/neighbors", "/v1/get",
                 "/api/session-list", "/api/conversation-history"):
        assert path in spec["paths"], path
    assert spec["components"]["securitySchemes"]["APIKeyHeader"]["name"] == "X-API-Key"
    params = [p["name"] for item in spec["paths"].values() for op in item.values() for p in op.get("parameters", [])]
    assert "user_id" not in params and "user_id" not in str(spec["components"]["schemas"].get("LexicalBody"))
    docs = httpx.get(service.url + "/docs")
    assets = re.findall(r'(?:src|href)="([^"]+)"', docs.text)
    assert docs.status_code == 200 and assets and all(a.startswith("/") for a in assets)  # no CDN: works offline
    assert all(httpx.get(service.url + a).status_code == 200 for a in assets)


QUERIES = ["cat", "不吃辣", "marathon", "新房", "Pixel", "云南", "team lead", "coffee"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(USERS), st.sampled_from(["lexical", "semantic", "list", "recent"]),
                          st.sampled_from(QUERIES)), min_size=1, max_size=12))
def test_isolation_over_interleaved_users_through_http(service, calls):
    """Whatever the interleaving of users and tools, each answer holds only the caller's messages and
    equals the in-process answer for that user."""
    clients = {}
    for user, tool, q in calls:
        client = clients.setdefault(user, service.client(user))
        local = service.store.for_user(user)
        if tool == "lexical":
            got, want = client.lexical_search(q, page_size=5), local.lexical_search(q, page_size=5)
        elif tool == "semantic":
            got, want = client.semantic_search(q, top_k=5), local.semantic_search(q, top_k=5)
        elif tool == "list":
            got, want = client.messages_list(page_size=5), local.messages_list(page_size=5)
        else:
            got, want = client.recent(4), local.recent(4)
        got_msgs = [getattr(h, "message", h) for h in got]
        assert all(m.user_id == user for m in got_msgs)
        assert [m.message_id for m in got_msgs] == [getattr(h, "message", h).message_id for h in want]
        assert got_msgs == [getattr(h, "message", h) for h in want]  # the same Message, field for field


def test_concurrent_clients_get_their_own_answers(service):
    errors, done = [], []
    expected = {u: ids(service.store.for_user(u).lexical_search(q, page_size=5)) for u in USERS for q in QUERIES[:1]}

    def worker(n):
        user = USERS[n % len(USERS)]
        client = service.client(user)
        try:
            for i in range(15):
                page = client.lexical_search(QUERIES[0], page_size=5)
                if ids(page) != expected[user] or any(h.user_id != user for h in page.items):
                    errors.append((user, i, ids(page)))
                cursor = client.messages_list(page_size=3).next_cursor
                client.messages_list(page_size=3, cursor=cursor)  # pages of several users at once
            done.append(n)
        except Exception as e:  # noqa: BLE001 - every failure is reported below
            errors.append((user, repr(e)))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and sorted(done) == list(range(8))


def test_the_recall_agent_over_http_equals_the_in_process_agent(service):
    from datetime import datetime, timezone

    from dkilab.agents.recall_agent import RecallAgent
    from dkilab.eval.data import load_dataset

    now = datetime(2026, 6, 1, tzinfo=timezone.utc)
    cases = load_dataset("agent_recall")
    for conv in cases:
        q = conv.questions[0].question
        local = RecallAgent(service.store.for_user(conv.user_id)).recall(q, now=now)
        remote = RecallAgent(service.client(conv.user_id)).recall(q, now=now)
        assert remote.output.model_dump() == local.output.model_dump(), conv.user_id
        assert remote.steps == local.steps and remote.tool_calls == local.tool_calls, conv.user_id
    assert len(cases) == 40


def test_recall_v4_strategy_over_http_recalls_what_it_recalls_in_process(service):
    from dkilab.eval.data import load_dataset
    from dkilab.strategies import create_strategy

    strategy = create_strategy("recall_only", {"max_results": 10})
    seed = create_strategy("recall_only", {"max_results": 10, "recall": {"preset": "seed"}})  # its whole-memory range
    # learned fusion picks the model part of the store's encoder, which the client learns from /v1/whoami
    assert service.client("u_maya").encoder_name == service.store.embedder.model_name
    for conv in load_dataset("fixtures"):
        for q in conv.questions[:4]:
            for s in (strategy, seed):
                for sid in (q.session_id, None):
                    local = s.answer(q.question, service.store.for_user(conv.user_id), None, session_id=sid)
                    remote = s.answer(q.question, service.client(conv.user_id), None, session_id=sid)
                    assert remote.recalled_ids == local.recalled_ids, q.question
                    # the seed's may be empty: no keyword, no cosine >= 0.5
                    assert remote.recalled_ids or s is seed, q.question


def test_a_server_that_went_away_is_a_connection_error_naming_the_url():
    from dkilab.service import Client

    from tests.conftest import _free_port

    url = f"http://127.0.0.1:{_free_port()}"
    with pytest.raises(ConnectionError, match=url.replace(".", r"\.")):
        Client(url, "dk_x").lexical_search("cat")


@pytest.mark.parametrize("name", ["peer_bm25", "peer_engram"])
def test_the_peer_strategies_run_against_the_service_as_against_the_store(service, name):
    from dkilab.strategies import STRATEGIES
    from dkilab.types import Memory

    client, local = service.client("u_tom"), service.store.for_user("u_tom")
    assert isinstance(client, Memory) and isinstance(local, Memory)
    assert client.count() == local.count() > 0 and client.source != local.source
    question = "Where did I say I was travelling?"
    remote = STRATEGIES[name]({"max_results": 5})
    over_http = remote.answer(question, client, None).recalled_ids
    assert over_http and over_http == STRATEGIES[name]({"max_results": 5}).answer(question, local, None).recalled_ids
    # the index is cached per source, user and count: the same strategy on the local view builds its own
    assert remote.answer(question, local, None).recalled_ids == over_http and len(remote._indexes) == 2

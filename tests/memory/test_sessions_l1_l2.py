"""Sessions, session records, L1 and L2 — the same tests on the SQLite and the Redis backend."""
import re
import time
import warnings

import pytest

from dkilab.memory import MemoryManager


class Clock:
    def __init__(self, t=1_767_225_600.0):
        self.t = t

    def __call__(self):
        return self.t


@pytest.fixture(params=["sqlite", "redis"])
def env(request, store):
    """(manager, clock, advance): advance(s) moves the injected clock; on Redis it also sleeps (real TTL)."""
    clock = Clock()
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        mm = MemoryManager(store, backend="redis", redis_url=url, strict=True, ttl=1.0, clock=clock)
        mm.backend.client.flushdb()
    else:
        mm = MemoryManager(store, backend="sqlite", ttl=1.0, clock=clock)

    def advance(seconds):
        clock.t += seconds
        if request.param == "redis":
            time.sleep(seconds)
    return mm, clock, advance


def test_session_ids_follow_the_seed_format_and_are_unique_within_a_second(env):
    mm, clock, _ = env
    a, b, c = (mm.sessions.create_session("10000") for _ in range(3))
    assert a == f"sess_10000_{int(clock.t)}"
    assert re.fullmatch(r"sess_10000_\d+_\d+", b) and len({a, b, c}) == 3
    info = mm.sessions.get_session(a)
    assert info["user_id"] == "10000" and info["session_id"] == a


def test_ttl_expiry_and_touch(env):
    mm, clock, advance = env
    sid = mm.sessions.create_session("u1")
    advance(0.6)
    assert mm.sessions.is_valid(sid)
    assert mm.sessions.touch(sid)  # activity restarts the idle timer
    advance(0.6)
    assert mm.sessions.is_valid(sid)
    advance(1.2)
    assert not mm.sessions.is_valid(sid) and mm.sessions.get_session(sid) is None
    assert not mm.sessions.touch(sid)


def test_get_or_create_session(env):
    mm, clock, advance = env
    sid = mm.sessions.get_or_create_session("u1")
    assert mm.sessions.get_or_create_session("u1", sid) == sid
    assert mm.sessions.get_or_create_session("u2", sid) != sid  # another user's session is not continued
    advance(1.5)
    clock.t += 1
    new = mm.sessions.get_or_create_session("u1", sid)
    assert new != sid and new.startswith("sess_u1_")


def test_l1_turns_records_and_store(env):
    mm, clock, _ = env
    sid = mm.sessions.create_session("u1")
    assert mm.l1.save_user_query(sid, content="押品怎么创建？", user_id="u1") == 1
    assert mm.l1.save_assistant_answer(sid, content="在押品管理页面点击新建即可。") == 1
    clock.t += 5
    assert mm.l1.save_user_query(sid, content="那入库呢？") == 2
    assert mm.l1.save_assistant_answer(sid, content="入库需要先完成评估。") == 2
    hist = mm.l1.get_conversation_history(sid)
    assert [(h["turn_id"], h["role"]) for h in hist] == [(1, "user"), (1, "assistant"), (2, "user"), (2, "assistant")]
    assert [h["turn_id"] for h in mm.l1.get_conversation_history(sid, limit=2)] == [2, 2]
    rec = mm.records.get_session_record(sid)
    assert rec["title"] == rec["first_question"] == "押品怎么创建？" and rec["user_id"] == "u1"
    # what L1 saves is searchable through the store
    hits = mm.store.for_user("u1").lexical_search("押品")
    assert {h.message_id for h in hits.items} >= {f"{sid}:1:user"}
    with pytest.raises(ValueError, match="belongs to user"):
        mm.l1.save_user_query(sid, content="hi", user_id="u2")


def test_session_records_newest_first(env):
    mm, clock, _ = env
    made = []
    for q in ["first question", "second question", "third question"]:
        sid = mm.sessions.create_session("u9")
        mm.l1.save_user_query(sid, content=q, user_id="u9")
        made.append(sid)
        clock.t += 60
    recs = mm.records.list_session_records("u9")
    assert [r["session_id"] for r in recs] == made[::-1]
    assert [r["title"] for r in mm.records.list_session_records("u9", limit=2)] == ["third question", "second question"]
    assert mm.records.list_session_records("nobody") == []


def test_l2_four_rules_and_audit(env):
    mm, clock, _ = env
    sid = mm.sessions.create_session("u1")
    l2 = mm.l2
    s1 = l2.update_l2_state(sid, "system_operation", {"active_domain": ["system"], "business_object": "押品",
                                                      "operation_stage": "创建", "last_action": "查询押品创建流程"})
    assert s1["operation_chain"][-1]["business_object"] == "押品"
    # rule 2: same intent, object absent -> inherited
    s2 = l2.update_l2_state(sid, "system_operation", {"operation_stage": "入库", "last_action": "入库"})
    top = s2["operation_chain"][-1]
    assert (top["business_object"], top["operation_stage"], top["active_domain"]) == ("押品", "入库", ["system"])
    assert len(s2["operation_chain"]) == 2
    # rule 4: the stage never moves backwards
    s3 = l2.update_l2_state(sid, "system_operation", {"operation_stage": "创建"})
    assert s3["operation_chain"][-1]["operation_stage"] == "入库"
    s4 = l2.update_l2_state(sid, "system_operation", {"operation_stage": "审批"})
    assert s4["operation_chain"][-1]["operation_stage"] == "审批"
    # rule 3: an explicitly different object overwrites (new chain, stage not inherited)
    s5 = l2.update_l2_state(sid, "system_operation", {"business_object": "客户"})
    assert [e["business_object"] for e in s5["operation_chain"]] == ["客户"]
    assert s5["operation_chain"][-1]["operation_stage"] is None
    # rule 1: a different intent overwrites everything
    s6 = l2.update_l2_state(sid, "policy_question", {"active_domain": ["policy"]})
    assert s6["operation_chain"] == [{**s6["operation_chain"][0]}] and s6["operation_chain"][0]["business_object"] is None
    assert l2.get_l2_state(sid) == s6
    hist = l2.history(sid)
    assert [h["rule"] for h in hist] == ["new", "inherit", "inherit", "inherit", "overwrite_object", "overwrite_intent"]
    assert hist[1]["state"] == s2


def test_l2_previous_state_custom_order_and_expiry(env, store):
    mm, clock, advance = env
    sid = "sess_x_1"
    prev = {"session_id": sid, "current_customer_id": "C7", "operation_chain": [
        {"intent": "loan", "business_object": "贷款", "operation_stage": "放款"}]}
    from dkilab.memory.l2 import L2Memory

    l2 = L2Memory(mm.backend, store.conn, stage_order=["申请", "审批", "放款"], ttl=1.0, clock=clock)
    s = l2.update_l2_state(sid, "loan", {"operation_stage": "申请"}, previous_l2=prev)
    assert s["operation_chain"][-1]["operation_stage"] == "放款" and s["current_customer_id"] == "C7"
    with pytest.raises(ValueError, match="intent"):
        l2.update_l2_state(sid, "", {})
    with pytest.raises(ValueError, match="entities"):
        l2.update_l2_state(sid, "loan", ["not", "a", "dict"])
    advance(1.5)
    assert l2.get_l2_state(sid) is None  # expires with the session ttl
    assert len(l2.history(sid)) == 1  # the audit trail stays


def test_unreachable_redis_falls_back_to_sqlite(store):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mm = MemoryManager(store, backend="redis", redis_url="redis://127.0.0.1:1/0")
    assert any("unreachable" in str(w.message) for w in caught)
    sid = mm.sessions.create_session("u1")
    assert mm.sessions.is_valid(sid) and mm.backend.name == "sqlite"
    with pytest.raises(ConnectionError, match="127.0.0.1:1"):
        MemoryManager(store, backend="redis", redis_url="redis://127.0.0.1:1/0", strict=True)
    with pytest.raises(ValueError, match="backend"):
        MemoryManager(store, backend="elasticsearch")


def test_redis_dying_mid_run_falls_back(store, redis_url):
    mm = MemoryManager(store, backend="redis", redis_url=redis_url)
    assert mm.backend.name == "redis"
    mm.backend.primary.client = __import__("redis").Redis(port=1, socket_connect_timeout=0.2)  # server "goes away"
    with pytest.warns(RuntimeWarning, match="continuing on SQLite"):
        sid = mm.sessions.create_session("u1")
    assert mm.backend.name == "sqlite" and mm.sessions.is_valid(sid)

"""Sessions, session records, L1 and L2 — the same tests on the SQLite and the Redis backend."""
import multiprocessing as mp
import re
import threading
import time
import warnings

import pytest
from dkilab.memory import MemoryManager, SessionNotFoundError


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


def test_session_ids_keep_the_seed_prefix_and_are_unguessable(env):
    mm, clock, _ = env
    a, b, c = (mm.sessions.create_session("10000") for _ in range(3))
    assert all(re.fullmatch(rf"sess_10000_{int(clock.t)}_[0-9a-f]{{12}}", x) for x in (a, b, c)) and len({a, b, c}) == 3
    info = mm.sessions.get_session(a, "10000")
    assert info["user_id"] == "10000" and info["session_id"] == a
    assert mm.sessions.get_session(a, "10001") is None  # another user's session looks like no session
    for bad in (None, "", "a b", True, 1.5):
        with pytest.raises(ValueError, match="user_id"):
            mm.sessions.create_session(bad)


def test_ttl_expiry_and_touch(env):
    mm, clock, advance = env
    sid = mm.sessions.create_session("u1")
    advance(0.6)
    assert mm.sessions.is_valid(sid, "u1")
    assert not mm.sessions.touch(sid, "u2")  # nobody else can keep it alive
    assert mm.sessions.touch(sid, "u1")  # activity restarts the idle timer
    advance(0.6)
    assert mm.sessions.is_valid(sid, "u1")
    advance(1.2)
    assert not mm.sessions.is_valid(sid, "u1") and mm.sessions.get_session(sid, "u1") is None
    assert not mm.sessions.touch(sid, "u1")


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
    u1 = mm.for_user("u1")
    sid = u1.create_session()
    assert u1.save_user_query(sid, content="押品怎么创建？") == 1
    assert u1.save_assistant_answer(sid, content="在押品管理页面点击新建即可。") == 1
    clock.t += 0.5
    assert u1.save_user_query(sid, content="那入库呢？") == 2
    assert u1.save_user_query(sid, 2, "那入库呢？") == 2  # a retry with the turn id is a no-op
    assert u1.save_assistant_answer(sid, content="入库需要先完成评估。") == 2
    hist = u1.get_conversation_history(sid)
    assert [(h["turn_id"], h["role"]) for h in hist] == [(1, "user"), (1, "assistant"), (2, "user"), (2, "assistant")]
    assert [h["turn_id"] for h in u1.get_conversation_history(sid, limit=2)] == [2, 2]
    rec = mm.records.get_session_record(sid, "u1")
    assert rec["title"] == rec["first_question"] == "押品怎么创建？" and rec["user_id"] == "u1"
    assert mm.records.get_session_record(sid, "u2") is None
    # what L1 saves is searchable through the store
    hits = mm.store.for_user("u1").lexical_search("押品")
    assert {h.message_id for h in hits.items} >= {f"{sid}:1:user"}
    with pytest.raises(ValueError, match="no user query at turn 5"):
        u1.save_assistant_answer(sid, 5, "an answer to nothing")


def test_another_users_session_is_reported_like_an_unknown_one(env):
    """Holding alice's session id gives bob nothing: no read, no write, no L2, and the same error as
    for an id that does not exist."""
    mm, clock, _ = env
    alice, bob = mm.for_user("alice"), mm.for_user("bob")
    sid = alice.create_session()
    alice.save_user_query(sid, content="my account number is 12345")
    alice.update_l2_state(sid, "loan", {"business_object": "贷款"})
    calls = [lambda s: bob.save_user_query(s, content="hi"), lambda s: bob.save_assistant_answer(s, content="x"),
             lambda s: bob.get_conversation_history(s), lambda s: bob.get_l2_state(s),
             lambda s: bob.update_l2_state(s, "loan", {"business_object": "押品"}), lambda s: bob.l2_history(s)]
    for call in calls:
        errors = []
        for s in (sid, "sess_alice_1_000000000000"):
            with pytest.raises(SessionNotFoundError) as info:
                call(s)
            errors.append(str(info.value).replace(s, "<id>"))
        assert errors[0] == errors[1] == "no session '<id>' for this user"
    assert bob.get_or_create_session(sid) != sid
    assert [h["content"] for h in alice.get_conversation_history(sid)] == ["my account number is 12345"]
    assert alice.get_l2_state(sid)["operation_chain"][-1]["business_object"] == "贷款"


def test_an_expired_session_takes_no_more_writes_but_keeps_its_history(env):
    mm, clock, advance = env
    alice = mm.for_user("alice")
    sid = alice.create_session()
    alice.save_user_query(sid, content="first")
    advance(1.5)
    with pytest.raises(SessionNotFoundError, match="expired"):
        alice.save_user_query(sid, content="too late")
    with pytest.raises(SessionNotFoundError, match="expired"):
        alice.update_l2_state(sid, "loan", {})
    assert [h["content"] for h in alice.get_conversation_history(sid)] == ["first"]


@pytest.mark.parametrize("how", ["threads", "processes"])
def test_concurrent_saves_in_one_session_get_distinct_turns(env, how, tmp_path):
    mm, clock, _ = env
    if how == "processes":
        mm.sessions.ttl = 60.0  # the children take seconds to start; keep the session alive meanwhile
    alice = mm.for_user("alice")
    sid = alice.create_session()
    if how == "threads":
        turns, errors = [], []

        def save(i):
            try:
                turns.append(alice.save_user_query(sid, content=f"question {i}"))
            except Exception as exc:
                errors.append(exc)
        threads = [threading.Thread(target=save, args=(i,)) for i in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert not errors and sorted(turns) == [1, 2, 3, 4]
    else:
        url = getattr(mm.backend, "url", None)  # the redis env: the processes share its sessions
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        procs = [ctx.Process(target=_save_in_process, args=(str(mm.store.path), sid, clock.t, p, q, url))
                 for p in range(2)]
        [p.start() for p in procs]
        turns = [t for _ in procs for t in q.get(timeout=180)]
        [p.join(timeout=60) for p in procs]
        assert all(isinstance(t, int) for t in turns), turns  # a child's error, as text
        assert sorted(turns) == list(range(1, 9)), turns
    hist = alice.get_conversation_history(sid)
    assert sorted(h["turn_id"] for h in hist) == sorted(turns) and len({h["content"] for h in hist}) == len(turns)
    assert mm.records.get_session_record(sid, "alice") is not None


def test_a_turn_taken_between_allocation_and_insert_is_allocated_again_not_a_conflict(env):
    """Issue 28 item 5: the race where another writer stores the allocated turn (with other content) after
    this writer read max(turn) used to raise "already stored ... with different content"."""
    mm, _, _ = env
    alice = mm.for_user("alice")
    sid = alice.create_session()
    assert alice.save_user_query(sid, content="first writer") == 1
    store, real, stale = mm.store, type(mm.store)._max_turn, [True]

    def racing_max_turn(c, user, session):  # the first read happens before the other writer's insert
        if stale:
            stale.clear()
            return real(c, user, session) - 1
        return real(c, user, session)
    store._max_turn = racing_max_turn
    try:
        assert alice.save_user_query(sid, content="second writer") == 2
    finally:
        del store._max_turn
    assert [h["content"] for h in alice.get_conversation_history(sid)] == ["first writer", "second writer"]


def _save_in_process(path, sid, now, p, q, redis_url):
    from dkilab.memory import MemoryManager, MemoryStore

    with MemoryStore.open(path) as store:
        mm = MemoryManager(store, backend="redis" if redis_url else "sqlite", redis_url=redis_url, strict=True,
                           ttl=3600, clock=lambda: now)
        out = []

        def save(i):
            try:
                out.append(mm.l1.save_user_query(sid, content=f"process {p} question {i}", user_id="alice"))
            except Exception as exc:  # the parent's assertion shows it
                out.append(repr(exc))
        threads = [threading.Thread(target=save, args=(i,)) for i in range(4)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        q.put(out)


def test_session_records_newest_first(env):
    mm, clock, _ = env
    made = []
    for q in ["first question", "second question", "third question"]:
        sid = mm.sessions.create_session("u9")
        mm.l1.save_user_query(sid, content=q, user_id="u9")
        made.append(sid)
        clock.t += 0.1
    recs = mm.records.list_session_records("u9")
    assert [r["session_id"] for r in recs] == made[::-1]
    assert [r["title"] for r in mm.records.list_session_records("u9", limit=2)] == ["third question", "second question"]
    assert mm.records.list_session_records("nobody") == []


def test_l2_four_rules_and_audit(env):
    mm, clock, _ = env
    l2 = mm.for_user("u1")
    sid = l2.create_session()
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
    assert s6["operation_chain"] == [{**s6["operation_chain"][0]}]
    assert s6["operation_chain"][0]["business_object"] is None
    assert l2.get_l2_state(sid) == s6
    hist = l2.l2_history(sid)
    assert [h["rule"] for h in hist] == ["new", "inherit", "inherit", "inherit", "overwrite_object", "overwrite_intent"]
    assert hist[1]["state"] == s2


def test_l2_previous_state_custom_order_and_expiry(env, store):
    mm, clock, advance = env
    sid = mm.sessions.create_session("x")
    mm.l1.save_user_query(sid, content="贷款放款了吗", user_id="x")
    prev = {"session_id": sid, "current_customer_id": "C7", "operation_chain": [
        {"intent": "loan", "business_object": "贷款", "operation_stage": "放款"}]}
    from dkilab.memory.l2 import L2Memory

    l2 = L2Memory(mm.sessions, store.conn, stage_order=["申请", "审批", "放款"], clock=clock)
    s = l2.update_l2_state(sid, "loan", {"operation_stage": "申请"}, previous_l2=prev, user_id="x")
    assert s["operation_chain"][-1]["operation_stage"] == "放款" and s["current_customer_id"] == "C7"
    with pytest.raises(ValueError, match="intent"):
        l2.update_l2_state(sid, "", {}, user_id="x")
    with pytest.raises(ValueError, match="entities"):
        l2.update_l2_state(sid, "loan", ["not", "a", "dict"], user_id="x")
    assert mm.sessions.touch(sid, "x")
    advance(0.6)
    assert mm.sessions.touch(sid, "x")  # the session's use keeps its L2 alive past L2's own timer
    advance(0.6)
    assert l2.get_l2_state(sid, user_id="x") is not None and mm.sessions.is_valid(sid, "x")
    advance(1.5)
    assert l2.get_l2_state(sid, user_id="x") is None  # expires with the session
    assert len(l2.history(sid, user_id="x")) == 1  # the audit trail stays


def test_concurrent_l2_updates_are_all_kept(env):
    """Five concurrent same-intent updates: every one lands in the live chain (compare-and-set)."""
    mm, clock, _ = env
    alice = mm.for_user("alice")
    sid = alice.create_session()
    alice.update_l2_state(sid, "system_operation", {"business_object": "押品", "operation_stage": "创建"})
    errors = []

    def update(i):
        try:
            alice.update_l2_state(sid, "system_operation", {"last_action": f"step {i}"})
        except Exception as exc:
            errors.append(exc)
    threads = [threading.Thread(target=update, args=(i,)) for i in range(5)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    chain = alice.get_l2_state(sid)["operation_chain"]
    assert not errors and sorted(e["last_action"] for e in chain[1:]) == [f"step {i}" for i in range(5)]
    assert len(alice.l2_history(sid)) == 6 and alice.get_l2_state(sid)["version"] == 6
    # issue 28 item 9: each audit row is the state of its own version (written in the update's transaction)
    assert all(h["version"] == h["state"]["version"] for h in alice.l2_history(sid))


def test_unreachable_redis_falls_back_to_sqlite(store):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mm = MemoryManager(store, backend="redis", redis_url="redis://127.0.0.1:1/0")
    assert any("unreachable" in str(w.message) for w in caught)
    sid = mm.sessions.create_session("u1")
    assert mm.sessions.is_valid(sid, "u1") and mm.backend.name == "sqlite"
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
    assert mm.backend.name == "sqlite" and mm.sessions.is_valid(sid, "u1")

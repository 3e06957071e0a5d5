"""The session-memory flow (seed session-l1-l2-memory §5): each step alone, whole turns on the rules,
the TTLs, the LLM path on SmolLM2 with its fallbacks, and a model that goes away mid-dialogue."""
from __future__ import annotations

import threading

import pytest
from dkilab.agents.session_flow import SessionFlow
from dkilab.agents.session_flow.intent import extract_by_rules, parse_extraction
from dkilab.agents.session_flow.rewrite import check_rewrite, rewrite_by_rules
from dkilab.agents.session_flow.routing import retrieve, route_filter
from dkilab.agents.session_flow.schema import DomainSchema
from dkilab.memory import MemoryManager, MemoryStore
from dkilab.recall import create_reference_resolver

SCHEMA = DomainSchema.load()
RULES = {"rewriter": "rules", "extractor": "rules", "answer": False}


class Clock:
    def __init__(self):
        self.t = 1_800_000_000.0

    def __call__(self):
        return self.t


@pytest.fixture(scope="module")
def kb_store(embedder):
    from dkilab.eval.data.session_flow import load_session_flow

    store = MemoryStore.open(None, embedder=embedder)
    for conv in load_session_flow():
        store.add_messages(conv.messages)
    yield store
    store.close()


def _flow(kb_store, lang="zh", model=None, clock=None, **cfg):
    store = MemoryStore.open(None, embedder=kb_store.embedder)
    kw = {"clock": clock} if clock else {}
    manager = MemoryManager(store, ttl=cfg.pop("ttl", 1800.0), l2_ttl=cfg.pop("l2_ttl", None), **kw)
    return SessionFlow(manager, kb_store.for_user(f"session-kb-{lang}"), model, {**RULES, **cfg}), manager


# --- the vocabulary ---------------------------------------------------------------------------
def test_schema_finds_intent_object_and_stage_as_written():
    assert SCHEMA.find_intent("审批权限怎么规定的？") == "policy_query"  # policy words outrank "怎么"
    assert SCHEMA.find_intent("那审批呢？") is None
    assert SCHEMA.find_object("资产负债率高的客户申请授信有什么风险？") == "授信"  # the last object named
    assert SCHEMA.find_object("What is the maximum loan-to-value ratio?") is None  # not a loan
    assert SCHEMA.find_stage("How long do we have to store it after creating it?") == "入库"  # the first stage
    assert SCHEMA.normalise("object", "Collateral") == "押品" and SCHEMA.normalise("stage", "approval") == "审批"
    assert SCHEMA.normalise("object", "house") is None and SCHEMA.normalise("intent", "chitchat") is None


def test_a_bad_schema_is_refused_by_name(tmp_path):
    bad = tmp_path / "s.yaml"
    bad.write_text("intents: {a: {domain: d, zh: [x], en: [y]}}\ndefault_intent: b\nobjects: {o: {zh: [o], en: [o]}}\n"
                   "stages: {s: {zh: [s], en: [s]}}\n")
    with pytest.raises(Exception, match="default_intent 'b'"):
        DomainSchema.load(bad)


# --- step 4: the extraction -----------------------------------------------------------------
@pytest.mark.parametrize("reply", [
    '{"intent": "policy_query", "active_domain": ["policy"], "business_object": "押品", "operation_stage": "入库"}',
    'Sure!\n```json\n{"Intent": "policy_query", "business_object": "collateral", "operation_stage": "storage",}\n```',
    "{'intent': 'policy_query', 'active_domain': 'policy', 'business_object': '抵押物', 'operation_stage': '入库'}",
])
def test_llm_extractions_are_read_tolerantly_and_normalised(reply):
    assert parse_extraction(reply, SCHEMA) == {"intent": "policy_query", "active_domain": ["policy"],
                                               "business_object": "押品", "operation_stage": "入库"}


@pytest.mark.parametrize("reply", ["", "I think it is about collateral.", '{"intent": "chat"}', "{not json",
                                   '["policy_query"]', '{"intent": null}'])
def test_an_extraction_without_a_known_intent_is_no_extraction(reply):
    assert parse_extraction(reply, SCHEMA) is None


def test_unknown_values_are_dropped_not_stored():
    got = parse_extraction('{"intent": "risk_query", "active_domain": ["weather"], "business_object": "house",'
                           ' "operation_stage": "destroy"}', SCHEMA)
    assert got == {"intent": "risk_query", "active_domain": ["risk"], "business_object": None, "operation_stage": None}


def test_rule_extraction_keeps_the_l2_intent_when_the_query_names_none():
    l2 = {"intent": "risk_query", "business_object": "押品"}
    assert extract_by_rules("审批时呢？", SCHEMA, l2)["intent"] == "risk_query"
    assert extract_by_rules("审批时呢？", SCHEMA, None)["intent"] == SCHEMA.default_intent
    assert extract_by_rules("审批时呢？", SCHEMA, l2)["business_object"] is None  # inheritance is L2's rule 2


# --- step 2: the rewrite ----------------------------------------------------------------------
def _hist(*user_queries):
    out = []
    for n, q in enumerate(user_queries, 1):
        out += [{"turn_id": n, "role": "user", "content": q}, {"turn_id": n, "role": "assistant", "content": "好的。"}]
    return out


def test_rule_rewrite_fills_the_object_and_only_a_pointed_at_stage():
    resolver = create_reference_resolver()
    text, info = rewrite_by_rules("那审批呢？", _hist("押品怎么创建？"), SCHEMA, resolver, "cn")
    assert text == "押品 那审批呢？" and info["filled"] == {"object": "押品"}
    text, info = rewrite_by_rules("Is there a deadline for that?", _hist("How do I check collateral into storage?"),
                                  SCHEMA, resolver, "en")
    assert info["filled"] == {"object": "押品",
                              "stage": "入库"} and text == "collateral storage Is there a deadline for that?"
    # no pointing back: the stage of the last turn is not forced on a new question
    assert rewrite_by_rules("金额上限有什么政策？", _hist("授信怎么申请？", "谁来审批？"), SCHEMA, resolver,
                            "cn")[1]["filled"] == {"object": "授信"}
    assert rewrite_by_rules("客户怎么新建？", _hist("押品怎么创建？"), SCHEMA, resolver, "cn")[0] == "客户怎么新建？"


def test_rule_rewrite_follows_the_reference_resolver_to_older_turns():
    resolver = create_reference_resolver(last_few_turns=1)
    history = _hist("客户准入需要满足什么条件？", "天气怎么样？")
    text, info = rewrite_by_rules("刚才说的那个准入，审批要几天？", history, SCHEMA, resolver, "cn", window=1)
    assert info["reference"] == "刚才" and info["filled"] == {}  # 刚才 = the last turn only: nothing to take
    resolver = create_reference_resolver(last_few_turns=2)
    text, info = rewrite_by_rules("刚才说的那个准入，审批要几天？", history, SCHEMA, resolver, "cn", window=1)
    assert info["filled"] == {"object": "客户"} and info["reference_scope"] == "last_1_3_turns"


@pytest.mark.parametrize("candidate,expected", [
    ("改写后的问题：押品审批呢？", "押品审批呢？"), ("“押品审批呢？”\n解释：...", "押品审批呢？"),
    ("What about collateral approval?", None),  # another script
    ("用户：那审批呢？", None), ("", None), (None, None), ("押品" * 40, None)])
def test_a_model_rewrite_is_checked(candidate, expected):
    assert check_rewrite("那审批呢？", candidate) == expected


# --- step 6: routing ------------------------------------------------------------------------
def test_retrieval_is_filtered_by_l2_and_relaxed_when_the_filter_leaves_nothing(kb_store):
    kb = kb_store.for_user("session-kb-zh")
    flt = route_filter({"active_domain": ["policy"], "business_object": "押品", "operation_stage": "审批"})
    assert flt == {"metadata": {"domain": ["policy"], "object": "押品"}}  # the stage is left to the query
    docs, relaxed = retrieve(kb, "审批", flt, top_k=5)
    assert not relaxed and docs and all(d.metadata["domain"] == "policy" and d.metadata["object"] == "押品"
                                        for d in docs)
    docs, relaxed = retrieve(kb, "审批", {"metadata": {"object": "房子"}}, top_k=3)
    assert relaxed and len(docs) == 3
    assert route_filter(None) is None and route_filter({"active_domain": [], "business_object": None}) is None


# --- whole turns --------------------------------------------------------------------------------
def test_a_dialogue_on_the_rules_applies_the_four_l2_rules(kb_store):
    flow, manager = _flow(kb_store)
    queries = ["押品怎么创建？", "那入库呢？", "审批呢？", "创建押品要填什么？", "审批权限有什么规定？",
               "客户的审批权限呢？"]
    sid, results = None, []
    for q in queries:
        r = flow.turn("u1", sid, q)
        sid = r.session_id
        results.append(r)
    assert [r.l2_rule for r in results] == ["new", "inherit", "inherit", "inherit", "overwrite_intent",
                                            "overwrite_object"]
    stages = [r.l2_after["operation_stage"] for r in results]
    assert stages == ["创建", "入库", "审批", "审批", "审批", "审批"]  # "创建押品要填什么" does not move it back
    assert results[3].extraction["operation_stage"] == "创建"  # ...though the turn is about creation
    assert "system-collateral-create" in results[3].doc_ids  # the stage is not filtered on: the doc stays reachable
    assert results[5].l2_after["business_object"] == "客户" and results[4].filter == {
        "metadata": {"domain": ["policy"], "object": "押品"}}
    assert [r.turn_id for r in results] == [1, 2, 3, 4, 5, 6] and len({r.session_id for r in results}) == 1
    # L1 holds the user's own words (written before the rewrite), not the rewrites
    history = manager.l1.get_conversation_history(sid, user_id="u1")
    assert [h["content"] for h in history] == queries
    assert [v["rule"] for v in manager.l2.history(sid, user_id="u1")] == [r.l2_rule for r in results]
    assert set(results[1].latency_ms) == {"l1_write_query", "rewrite", "l2_read", "intent", "l2_update", "retrieval"}


def test_the_modes_differ_only_in_what_they_use(kb_store):
    out = {}
    for mode in ("query", "rewrite", "l2"):
        flow, _ = _flow(kb_store, "en", mode=mode)
        first = flow.turn("u", None, "How do I create a collateral record?")
        out[mode] = flow.turn("u", first.session_id, "And approval?")
    assert out["query"].rewritten == "And approval?" and out["query"].rewrite_method == "none"
    assert out["rewrite"].rewritten == out["l2"].rewritten == "collateral And approval?"
    assert out["query"].filter is None and out["rewrite"].filter is None
    assert out["l2"].filter == {"metadata": {"domain": ["system"], "object": "押品"}}
    assert out["l2"].doc_ids[0] == "system-collateral-approve"


def test_sessions_and_l2_expire_on_their_own_ttls(kb_store):
    clock = Clock()
    flow, manager = _flow(kb_store, clock=clock, ttl=100.0, l2_ttl=30.0)
    r1 = flow.turn("u", None, "押品怎么创建？")
    for _ in range(3):  # each turn within 30 s refreshes L2 with the session: it outlives 30 s in all
        clock.t += 20
        r = flow.turn("u", r1.session_id, "那入库呢？")
        assert r.session_id == r1.session_id and r.l2_rule == "inherit"
    clock.t += 40  # the session lives (100 s), its L2 has expired (30 s)
    r = flow.turn("u", r1.session_id, "那入库呢？")
    assert r.session_id == r1.session_id and r.l2_before is None and r.l2_rule == "new"
    # the object is found again through L1 (the conversation lives with the session), not inherited
    assert r.filled == {"object": "押品"} and r.l2_after["business_object"] == "押品"
    clock.t += 101  # now the session has expired too: the next turn starts a new one at turn 1
    r = flow.turn("u", r1.session_id, "审批呢？")
    assert r.new_session and r.session_id != r1.session_id and r.turn_id == 1 and r.l2_before is None
    assert manager.l1.get_conversation_history(r1.session_id, user_id="u")[-1]["content"] == "那入库呢？"


def test_one_users_session_is_not_anothers(kb_store):
    flow, _ = _flow(kb_store)
    mine = flow.turn("alice", None, "押品怎么创建？")
    theirs = flow.turn("bob", mine.session_id, "那入库呢？")  # bob cannot continue alice's session
    assert theirs.session_id != mine.session_id and theirs.l2_before is None and theirs.turn_id == 1


def test_a_flow_that_needs_a_model_says_so(kb_store):
    with pytest.raises(ValueError, match="needs a model"):
        _flow(kb_store, extractor="llm")
    store = MemoryStore.open(None, embedder=kb_store.embedder)
    with pytest.raises(ValueError, match="stage order"):
        SessionFlow(MemoryManager(store, stage_order=("a", "b")), kb_store.for_user("session-kb-zh"), None, RULES)
    flow, _ = _flow(kb_store)
    with pytest.raises(ValueError, match="non-empty"):
        flow.turn("u", None, "  ")


# --- the LLM path on a real model ------------------------------------------------------------------
class GoesAway:
    """The real model until `fail_after` generations, then the server is gone (ConnectionError)."""

    def __init__(self, model, fail_after: int):
        self.model, self.fail_after, self.calls = model, fail_after, 0

    def __getattr__(self, name):
        return getattr(self.model, name)

    def generate_full(self, messages, **kw):
        self.calls += 1
        if self.calls > self.fail_after:
            raise ConnectionError("model server went away")
        return self.model.generate_full(messages, **kw)


@pytest.mark.slow
def test_the_llm_path_on_smollm2_counts_its_fallbacks(kb_store, model):
    flow, manager = _flow(kb_store, "en", model=model, rewriter="llm", extractor="llm", answer=True, max_new_tokens=16,
                          rewrite_tokens=24, extraction_tokens=48)
    r1 = flow.turn("u", None, "How do I create a collateral record?")
    r2 = flow.turn("u", r1.session_id, "And approval?")
    for r in (r1, r2):
        assert r.rewrite_method in ("llm", "llm_fallback") and r.extraction_method in ("llm", "llm_fallback")
        assert set(r.raw) == {"rewrite", "intent"} and r.llm_calls == 3 and r.answer
        assert (r.extraction_method == "llm_fallback") == any(n.startswith("intent:") for n in r.notes)
        assert r.extraction["intent"] in SCHEMA.intents  # whatever the model wrote, L2 holds schema values only
    history = manager.l1.get_conversation_history(r1.session_id, user_id="u")
    assert [h["role"] for h in history] == ["user", "assistant", "user", "assistant"]


@pytest.mark.slow
def test_a_model_that_goes_away_mid_turn_loses_nothing(kb_store, model):
    flaky = GoesAway(model, fail_after=0)
    flow, manager = _flow(kb_store, "zh", model=flaky, rewriter="llm", extractor="llm", answer=False)
    r = flow.turn("u", None, "押品怎么创建？")  # rewrite and extraction fall back to the rules, with the reason
    assert r.rewrite_method == r.extraction_method == "llm_fallback"
    assert any("ConnectionError" in n for n in r.notes) and r.doc_ids
    flow2, manager2 = _flow(kb_store, "zh", model=GoesAway(model, fail_after=0), answer=True)
    with pytest.raises(ConnectionError):  # no answer can be made up: the turn fails...
        flow2.turn("u", None, "押品怎么创建？")
    sid = manager2.l1.store.for_user("u").messages_list().items[0].session_id
    assert [h["content"] for h in manager2.l1.get_conversation_history(sid, user_id="u")] == ["押品怎么创建？"]
    assert manager2.l2.get_l2_state(sid, user_id="u")["operation_chain"][-1]["business_object"] == "押品"
    flow2.model = model  # ...and the next turn, with the model back, goes on in the same session
    r = flow2.turn("u", sid, "那入库呢？")
    assert r.turn_id == 2 and r.answer and r.l2_rule == "inherit"


def test_dialogues_on_threads_do_not_see_each_other(kb_store):
    from dkilab.eval.data.session_flow import load_session_flow
    from dkilab.strategies import create_strategy

    strategy = create_strategy("session_l2", {**RULES, "mode": "l2"})
    items = [(c.user_id, q) for c in load_session_flow(limit=8) for q in c.questions]

    def run(uid, q):
        return strategy.answer(q.question, kb_store.for_user(uid), None, task=q.task).metadata["turns"]

    alone = {q.qid: run(uid, q) for uid, q in items}
    together: dict = {}
    threads = [threading.Thread(target=lambda uid=uid, q=q: together.__setitem__(q.qid, run(uid, q))) for uid,
               q in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    def key(turns):
        return [(t["rewritten"], t["l2_after"], t["l2_rule"], t["doc_ids"], t["turn_id"]) for t in turns]
    assert {k: key(v) for k, v in together.items()} == {k: key(v) for k, v in alone.items()}

"""The closed loop of seed recall-agent §4, step by step through the whole agent (issue 32 item 2): each
test builds a memory where only the named step reaches the right view, so removing the step fails it."""
from datetime import timedelta

from dkilab.agents.recall_agent import RecallAgent
from dkilab.agents.recall_agent.steps import STEPS, hypotheses

from tests.agents.conftest import T0, chat


def _ids(res) -> set[str]:
    return {i for item in res.output.memory_view.active() for i in item.evidence_ids}


def _steps(res) -> list[str]:
    return [s["name"] for s in res.steps if "tool" in s]


def test_hypotheses_have_their_own_queries():
    h = hypotheses("我有什么饮食偏好和忌口？")
    assert [x.kind for x in h] == ["preferences", "constraints"]
    assert h[0].query != h[1].query and "过敏" in h[1].query and "喜欢" in h[0].query
    en = hypotheses("What food preferences and allergies do I have?")
    assert {x.kind for x in en} == {"preferences", "constraints"} and len({x.query for x in en}) == 2


def test_relevance_is_judged_against_each_hypothesis(store):
    """The allergy found by the preference search is evidence for the constraint hypothesis: both have evidence,
    and no search is spent proving the constraint hypothesis empty."""
    store.add_messages(chat("u", [(0, "user", "我特别爱吃川菜，越辣越好。"), (0, "assistant", "记住了。"),
                                  (1, "user", "我对花生过敏，千万别给我推荐带花生的菜。"), (1, "assistant", "明白。")]))
    res = RecallAgent(store.for_user("u")).recall("我有什么饮食偏好和忌口？", now=T0 + timedelta(days=3))
    stop = res.steps[-1]
    assert stop["step"] == "stop" and stop["hypotheses"] == {"preferences": "evidence", "constraints": "evidence"}
    assert "cover_hypothesis" not in _steps(res)
    view = res.output.memory_view
    assert [i.evidence_ids for i in view.constraints] == [["u#2"]] and [i.evidence_ids
                                                                        for i in view.preferences] == [["u#0"]]


def test_a_hypothesis_without_evidence_gets_both_tools_before_it_counts_as_empty(store):
    store.add_messages(chat("u", [(0, "user", "我特别爱吃川菜，越辣越好。"), (0, "assistant", "记住了。")]))
    res = RecallAgent(store.for_user("u")).recall("我有什么饮食偏好和忌口？", now=T0 + timedelta(days=3))
    assert res.steps[-1]["hypotheses"] == {"preferences": "evidence", "constraints": "empty"}
    tools_for_constraints = {s["tool"] for s in res.steps if s.get("name") in ("search", "cover_hypothesis")
                             and s["args"].get("query_text", "").endswith(("过敏 忌口 不能", "忌口 不能"))}
    assert tools_for_constraints == {"lexical_search", "semantic_search"}
    assert "cover_hypothesis" in _steps(res) and res.stop_reason.startswith("every hypothesis has evidence or is shown "
                                                                            "empty")


def test_the_query_is_rewritten_from_what_the_last_round_found(store):
    """"那个项目" is named "Phoenix" in the first hit; only a search for Phoenix finds its latest news, which
    never says "项目"."""
    store.add_messages(chat("u", [(0, "user", "我最近在做一个新项目，代号叫 Phoenix，和李明一起负责。"),
                                  (0, "assistant", "听起来不错。"), (3, "user",
                                                               "Phoenix 上线推迟到5月3日了，测试环境还没好。"),
                                  (3, "assistant", "了解。"), (5, "user", "帮我查一下明天的天气。"),
                                  (5, "assistant", "明天晴。")]))
    res = RecallAgent(store.for_user("u")).recall("我们上次聊到的那个项目进展怎样了？", now=T0 + timedelta(days=10))
    rewrite = next(s for s in res.steps if s.get("name") == "rewrite_query")
    assert "Phoenix" in rewrite["args"]["query_text"]
    assert {"u#0", "u#2"} <= _ids(res) and "u#4" not in _ids(res)
    assert set(res.steps[-1]["rewrites"]["profile"]) == {"Phoenix", "李明"}


def test_too_many_hits_narrow_the_window_and_tighten_the_query(store):
    """Fourteen coffee statements in 30 days: the agent narrows to the last 7 days with "咖啡" required, and the
    statements that search finds again lead the view (without narrowing the older, wordier ones would)."""
    old = "早上喝了一杯加牛奶加糖的咖啡，配了甜点和茶。"
    turns = [(d, "user", f"第{d}天{old}") for d in range(0, 20, 2)] + [(d, "user", f"第{d}天喝的是黑咖啡。")
                                                                     for d in (22, 24, 26, 27)]
    store.add_messages(chat("u", turns))
    now = T0 + timedelta(days=28)
    res = RecallAgent(store.for_user("u")).recall("我喝咖啡有什么偏好？", now=now)
    narrow = next(s for s in res.steps if s.get("name") == "narrow_hits")
    assert narrow["args"]["query_text"].startswith('"咖啡"')
    assert narrow["args"]["filter"]["time_range"]["since"] == (now - timedelta(days=7)).isoformat()
    assert res.output.limits.narrowed == ['preferences: window 30d -> 7d, require "咖啡"']
    recent = {f"u#{i}" for i in range(10, 14)}
    assert recent <= _ids(res)


def test_every_call_names_a_known_step(store):
    store.add_messages(chat("u", [(0, "user", "我特别能吃辣。"), (9, "user", "我现在不吃辣了。"),
                                  (10, "user", "我朋友不吃香菜。")]))
    res = RecallAgent(store.for_user("u")).recall("我能吃辣吗？", now=T0 + timedelta(days=12))
    names = _steps(res)
    assert names and set(names) <= set(STEPS)
    assert {"conflict_lexical", "conflict_semantic"} <= set(names)
    read = [s["args"]["message_id"] for s in res.steps if s.get("tool") == "neighbors"]
    assert {"u#0", "u#1"} <= set(read)  # both sides of the conflict were read in context

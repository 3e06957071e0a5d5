"""Each step of the recall agent's loop alone (seed recall-agent §4): hypotheses, narrowing, tool choice,
relevance, context checks, conflicts and their adjudication, the stop decision."""
from datetime import timedelta

from dkilab.agents.recall_agent import cues
from dkilab.agents.recall_agent.adjudicate import adjudicate, context_flag, find_conflicts
from dkilab.agents.recall_agent.contract import RecallContext
from dkilab.agents.recall_agent.reflect import Reflection, candidate, decide
from dkilab.agents.recall_agent.state import AgentState, statement_of
from dkilab.agents.recall_agent.steps import choose_tool, hypotheses, narrow
from dkilab.agents.recall_agent.synthesis import synthesize
from dkilab.memory.view import TimeRange

from tests.agents.conftest import NOW, T0, chat


def _state(question, msgs=()):
    hyps = hypotheses(question)
    st = AgentState(question, NOW, hyps, narrow(question, None, NOW, hyps))
    for m in msgs:
        st.seen[m.message_id] = m
        c = candidate(st, m, 0, 0.5, "lexical_search")
        if c is not None:
            st.candidates[m.message_id] = c
    return st


def test_hypotheses_name_the_kind_and_what_counts_as_evidence():
    h = hypotheses("你记得我有什么饮食偏好吗？")
    assert [x.kind for x in h] == ["preferences"] and "辣" in h[0].terms and "role=user" in h[0].evidence_rule
    h = hypotheses("Did I mention any rules for my meeting schedule?")
    assert h[0].kind == "constraints" and 1 <= len(h) <= 3 and "meeting" in h[0].terms
    assert hypotheses("What is my name?")[0].kind == "profile"
    assert hypotheses('我是不是说过"不吃香菜"？')[0].phrases == ["不吃香菜"]
    assert not hypotheses("我朋友喜欢吃什么？")[0].about_user


def test_narrowing_maps_time_cues_to_windows_and_preferences_to_role_user():
    def window(q, ctx=None):
        n = narrow(q, ctx, NOW, hypotheses(q))
        return n.window, n.days, n.role

    assert window("我最近喜欢吃什么？") == ("short", 7, "user")
    assert window("What did I say last time about coffee?") == ("medium", 30, "user")
    assert window("我一直以来的饮食习惯是什么？") == ("long", 180, "user")
    assert window("Do you remember my hobbies?") == ("default", 30, "user")
    assert window("你上次答应我什么？")[2] == "user" and window("你说过要提醒我什么？")[2] is None
    n = narrow("2025年3月5日我说了什么？", None, NOW, hypotheses("x"))
    assert n.window == "date" and n.time_range.until - n.time_range.since == timedelta(days=1)
    assert narrow("in May 2024 what did I like?", None, NOW, hypotheses("x")).time_range.since.month == 5
    ctx = RecallContext(time_range=TimeRange(since=T0), role_pref="assistant")
    n = narrow("what do I like?", ctx, NOW, hypotheses("x"))
    assert (n.window, n.role, n.role_locked) == ("context", "assistant", True)


def test_tool_choice_lexical_semantic_listing():
    def tool(q):
        h = hypotheses(q)
        return choose_tool(q, h[0], narrow(q, None, NOW, h)).tool

    assert tool("我是不是说过我不吃辣？") == "lexical_search"
    assert tool('Did I say "no onions"?') == "lexical_search"
    assert tool("你记得我有什么饮食偏好吗？") == "semantic_search"
    assert tool("我最近有什么日程安排？") == "messages_list"


def test_relevance_keeps_the_users_lasting_statements():
    st = _state("你记得我的饮食偏好吗？", chat("u", [(0, "user", "我不吃香菜。"), (0, "assistant", "您不吃香菜。"),
                                                  (1, "user", "帮我点一份外卖。"), (1, "user", "今天天气真好。"),
                                                  (2, "user", "我朋友不吃辣。")]))
    assert set(st.candidates) == {"u#0", "u#4"}  # the assistant's turn, a request and noise are not evidence
    assert st.candidates["u#4"].flag == "third_party" and [c.message.message_id for c in st.relevant()] == ["u#0"]
    assert statement_of("对了，我不吃香菜。以后点菜注意。", ["香菜"]) == "对了，我不吃香菜。"
    assert cues.is_request("Book a table for two.") and not cues.is_request("Never book me on Mondays.")


def test_context_check_flags_hypotheticals_and_retractions():
    msgs = chat("u", [(0, "assistant", "如果你去四川，你会吃辣吗？"), (0, "user", "会，我肯定吃最辣的。"),
                      (1, "user", "I hate cats."), (1, "user", "Just kidding, I love cats.")])
    st = _state("我能吃辣吗？", msgs[:2])
    assert context_flag(st.candidates["u#1"], msgs[:2]) == "hypothetical"
    st = _state("How do I feel about cats?", msgs[2:])
    assert context_flag(st.candidates["u#2"], msgs[2:]) == "retracted"
    assert context_flag(st.candidates["u#3"], msgs[2:]) is None


def test_conflicts_are_adjudicated_by_context_source_time_or_left_unresolved():
    # change over time: the later explicit statement wins
    st = _state("我能吃辣吗？", chat("u", [(0, "user", "我特别能吃辣。"), (9, "user", "我现在不吃辣了。")]))
    assert [(x.older, x.newer) for x in find_conflicts(st.relevant())] == [("u#0", "u#1")]
    st.conflicts = find_conflicts(st.relevant())
    assert [(x.winner, x.reason) for x in adjudicate(st)] == [("u#1", "time")]
    out = synthesize(st)
    old = next(i for i in out.memory_view.items() if i.evidence_ids == ["u#0"])
    assert old.superseded_by == "u#1" and old.reason == "time"
    assert [i.statement for i in out.memory_view.active()] == ["我现在不吃辣了。"]
    # the user's words beat the assistant's paraphrase, whichever is later
    st = _state("Do I eat meat?", chat("u", [(0, "user", "I don't eat red meat."),
                                             (3, "assistant", "Since you love red meat, here is a grill.")]))
    st.narrowing.role = None
    st.candidates["u#1"] = candidate(st, st.seen["u#1"], 0, 0.5, "lexical_search")
    st.conflicts = find_conflicts(st.relevant())
    assert [(x.winner, x.reason) for x in adjudicate(st)] == [("u#0", "source")]
    # both sides only hedge: keep both, uncertain
    st = _state("Should I avoid gluten?", chat("u", [(0, "user", "Maybe I'm sensitive to gluten."),
                                                     (6, "user", "Probably not gluten then, not sure.")]))
    st.conflicts = find_conflicts(st.relevant())
    assert [(x.winner, x.reason) for x in adjudicate(st)] == [(None, "unresolved")]
    assert all(i.uncertain and i.active for i in synthesize(st).memory_view.items())
    # unrelated statements sharing only a generic word do not conflict
    st = _state("外卖要注意什么？", chat("u", [(0, "user", "我对花生过敏，千万别选带花生的。"),
                                       (1, "user", "我比较喜欢吃甜的。")]))
    assert find_conflicts(st.relevant()) == []


def test_decide_reads_context_then_works_both_sides_of_a_conflict_then_stops():
    """§4.6.1: the neighbours of *both* sides (older first), a lexical and a semantic search for a later
    statement, then the stop; each call names its step."""
    st = _state("我能吃辣吗？", chat("u", [(0, "user", "我特别能吃辣。"), (9, "user", "我现在不吃辣了。")]))
    st.searched.add(0)
    r = Reflection(needs_context=["u#1"])
    first = decide(st, r, 20)
    assert (first.tool, first.step, first.args["message_id"]) == ("neighbors", "read_context", "u#1")
    st.conflicts = find_conflicts(st.relevant())
    steps = []
    while (call := decide(st, Reflection(), 20)) is not None:
        steps.append((call.step, call.tool, call.args.get("message_id")))
        if call.tool == "neighbors":
            st.expanded.add(call.args["message_id"])
        elif call.step == "standing":  # then once what holds until the user says otherwise, before the window
            assert call.args["filter"]["time_range"] == {"until": st.narrowing.time_range.since}
        else:
            assert call.args["filter"]["time_range"]["since"] == st.seen["u#1"].timestamp
    assert steps == [("conflict_context", "neighbors", "u#0"), ("conflict_context", "neighbors", "u#1"),
                     ("conflict_lexical", "lexical_search", None), ("conflict_semantic", "semantic_search", None),
                     ("standing", "lexical_search", None)]
    assert st.stop_reason == "every hypothesis has evidence or is shown empty"
    st.calls = [first] * 8
    assert decide(st, Reflection(needs_context=["u#0"]), 8) is None and st.stop_reason == "call budget spent"


def test_widening_walks_the_ladder_then_drops_the_role_then_stops():
    st = _state("我养了什么宠物？")
    st.searched.add(0)
    tools = []
    while (call := decide(st, Reflection(coverage_low=True), 50)) is not None:
        st.calls.append(call)
        st.tried.add((call.tool, call.hypothesis, st.narrowing.days, st.narrowing.window, st.narrowing.role))
        tools.append(call.tool)
    assert st.widened == ["time_range -> 180d", "time_range -> all", "role -> any"]
    assert st.narrowing.time_range.since is None and st.narrowing.role is None
    assert st.stop_reason.startswith("nothing found") and len(tools) <= 6

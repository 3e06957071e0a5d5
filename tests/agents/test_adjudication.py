"""Issue 32 item 1: safe adjudication (seed recall-agent §4.6: the later *and more explicit* statement wins).
A hedged later statement never lifts an explicit constraint: both are kept, the conflict is flagged and a
follow-up search looks for a clearer statement; a later statement as explicit wins on time."""
from datetime import datetime, timedelta

import pytest
from dkilab.agents.recall_agent import RecallAgent, cues
from dkilab.agents.recall_agent.adjudicate import adjudicate, find_conflicts
from dkilab.agents.recall_agent.conflict_set import card, evaluate, load_cases, outcome

from tests.agents.conftest import T0, chat

PROBE_OLD, PROBE_NEW = "我对海鲜过敏，绝对不能吃海鲜。", "我现在好像也许可以吃点海鲜了吧。"


def test_explicitness_ranks_constraints_above_hedges_and_paraphrases():
    assert cues.explicitness(PROBE_OLD) > cues.explicitness("我特别能吃辣。") > cues.explicitness(PROBE_NEW)
    assert cues.is_constraint(PROBE_OLD) and not cues.is_constraint(PROBE_NEW) and cues.hedges(PROBE_NEW) >= 2
    assert cues.explicitness("I'm allergic to shellfish.") > cues.explicitness("Maybe I can have shellfish now?")
    assert cues.explicitness("I never eat pork.", "assistant") < cues.explicitness("I never eat pork.")  # a paraphrase
    assert cues.hedges("现在可以吃了吧。") == 1 and cues.hedges("我可以吃。") == 0  # a closing 吧 softens


def test_the_seafood_probe_keeps_the_allergy_and_flags_the_conflict():
    case = next(c for c in load_cases() if c.id == "zh-seafood-probe")
    assert (case.older, case.newer) == (PROBE_OLD, PROBE_NEW)
    assert outcome(case) == "keep_both"


def test_every_explicit_constraint_survives_a_weaker_later_statement():
    """The conflict set: >= 30 bilingual pairs; no explicit constraint superseded by a hedged statement, and a
    later statement as explicit (a cure confirmed, a move, a quit) still wins."""
    cases = load_cases()
    assert len(cases) >= 30 and {c.lang for c in cases} == {"cn", "en"}
    got = {c.id: outcome(c) for c in cases}
    superseded = [c.id for c in cases if c.expect == "keep_both" and got[c.id] == "newer"]
    assert superseded == []
    figures = evaluate(cases)
    assert figures["constraints_kept"] == 1.0 and figures["accuracy"] >= 0.95, figures
    assert all(got[c.id] == "newer" for c in cases if c.id in ("zh-seafood-cured", "en-shellfish-cured",
                                                               "zh-spicy-quit"))


def test_the_agent_keeps_both_searches_for_a_clearer_statement_and_then_follows_it(store):
    """End to end on a real store: the hedge is kept beside the allergy, flagged, and the loop searches
    after the hedge for a clearer statement; once the user states the cure explicitly, that wins on time."""
    store.add_messages(chat("sea", [(0, "user", PROBE_OLD), (0, "assistant", "记住了，不推荐海鲜。"),
                                    (30, "user", PROBE_NEW), (30, "assistant", "好的。")]))
    now = T0 + timedelta(days=40)
    res = RecallAgent(store.for_user("sea"), default_days=None).recall("我能吃海鲜吗？", now=now)
    items = {i.statement: i for i in res.output.memory_view.items()}
    assert items[PROBE_OLD].active and items[PROBE_NEW].active
    assert items[PROBE_OLD].uncertain and items[PROBE_NEW].uncertain and items[PROBE_OLD].superseded_by is None
    assert PROBE_OLD in [i.statement for i in res.output.memory_view.active()]
    follow = [s for s in res.steps if s.get("tool") == "lexical_search" and "later statement" in s.get("why", "")]
    since = follow[0]["args"]["filter"]["time_range"]["since"] if follow else None
    assert since is not None and datetime.fromisoformat(str(since)) > T0 + timedelta(days=29)  # after the hedge

    cured = "我的海鲜过敏已经治好了，医生确认我现在可以吃海鲜了。"
    store.add_messages(chat("sea", [(35, "user", cured)], prefix="sea2"))
    res = RecallAgent(store.for_user("sea"), default_days=None).recall("我能吃海鲜吗？", now=now)
    items = {i.statement: i for i in res.output.memory_view.items()}
    assert items[PROBE_OLD].superseded_by is not None and not items[PROBE_OLD].active
    assert items[cured].active and not items[cured].uncertain


def test_weaker_later_is_its_own_reason():
    from dkilab.agents.recall_agent.reflect import candidate
    from dkilab.agents.recall_agent.state import AgentState
    from dkilab.agents.recall_agent.steps import hypotheses, narrow

    now = T0 + timedelta(days=60)
    hyps = hypotheses("Can I eat peanuts?")
    st = AgentState("Can I eat peanuts?", now, hyps, narrow("Can I eat peanuts?", None, now, hyps, None))
    for m in chat("u", [(0, "user", "I have a severe peanut allergy, never give me peanuts."),
                        (20, "user", "I think peanuts might be fine for me these days.")]):
        st.seen[m.message_id] = m
        st.candidates[m.message_id] = candidate(st, m, 0, 0.5, "lexical_search")
    st.conflicts = find_conflicts(st.relevant())
    assert [(x.winner, x.reason) for x in adjudicate(st)] == [(None, "weaker_later")]


def test_recall_agent_cells_log_the_conflict_set_figures():
    from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict
    from dkilab.eval.tracking.runs import flatten

    cfg = experiment_from_dict({"name": "x", "strategies": [{"name": "recall_agent", "params": {"answer": False}},
                                                            {"name": "no_memory"}],
                                "datasets": [{"name": "agent_recall"}]}, "<test>")
    agent, plain = expand_cells(cfg)
    params = flatten(agent.resolved)
    assert params["strategy.cards.conflicts.pairs"] == len(load_cases())
    assert params["strategy.cards.conflicts.constraints_kept"] == card()["constraints_kept"] == 1.0
    assert not any(k.startswith("strategy.cards") for k in flatten(plain.resolved))


@pytest.mark.parametrize("bad", [{"expect": "older"}, {"days": 0}, {"extra": 1}])
def test_a_bad_conflict_case_is_refused_naming_it(tmp_path, bad):
    import yaml
    from dkilab.config import ConfigError

    case = {"id": "x", "lang": "en", "question": "q?", "older": "a", "newer": "b", "days": 3, "expect": "newer"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "cases": [case | bad]}))
    with pytest.raises(ConfigError, match=r"c.yaml.*conflict case 0"):
        load_cases(str(path))


PROBES = [  # issue 60: an explicit constraint, a hedge a month later, and a question that does not name the item
    ("pea", "I am severely allergic to peanuts and must never eat them.",
     "Maybe I could try a little peanut sauce sometime, I guess?", "What are my dietary restrictions?"),
    ("sea", PROBE_OLD, PROBE_NEW, "我有什么饮食禁忌？"),
    ("red", "我绝对不坐红眼航班，晚上飞我根本睡不着。", "红眼航班好像也还行吧，也许可以试试。", "我订机票有什么要求？"),
]


@pytest.mark.parametrize("user,old,new,question", PROBES, ids=[p[0] for p in PROBES])
def test_the_probe_pairs_keep_the_explicit_constraint_unsuperseded(store, user, old, new, question):
    store.add_messages(chat(user, [(0, "user", old), (0, "assistant", "OK."), (30, "user", new),
                                   (30, "assistant", "OK.")]))
    res = RecallAgent(store.for_user(user), default_days=None).recall(question, now=T0 + timedelta(days=40))
    items = {i.statement: i for i in res.output.memory_view.items()}
    assert old in items and items[old].active and items[old].superseded_by is None  # found, and not lifted
    assert new in items and items[old].uncertain and items[new].uncertain  # the hedge beside it, flagged


def test_a_later_statement_wins_only_when_more_explicit_or_announcing_a_change():
    from dkilab.agents.recall_agent.reflect import candidate
    from dkilab.agents.recall_agent.state import AgentState
    from dkilab.agents.recall_agent.steps import hypotheses, narrow

    def decide(question, older, newer):
        now = T0 + timedelta(days=60)
        hyps = hypotheses(question)
        st = AgentState(question, now, hyps, narrow(question, None, now, hyps, None))
        for m in chat("u", [(0, "user", older), (20, "user", newer)]):
            st.seen[m.message_id] = m
            st.candidates[m.message_id] = candidate(st, m, 0, 0.5, "lexical_search")
        st.conflicts = find_conflicts(st.relevant())
        return [(x.winner, x.reason) for x in adjudicate(st)]

    assert decide("Do I like jazz?", "I like jazz.", "I don't like jazz.") == [(None, "equally_explicit")]
    assert decide("我喜欢喝咖啡吗？", "我喜欢喝咖啡。", "我不喜欢喝咖啡。") == [(None, "equally_explicit")]
    assert decide("Where do I live?", "I live in Boston.", "I moved to Denver, I live in Denver now.") == [("u#1",
                                                                                                            "time")]
    assert decide("Do I like jazz?", "I like jazz.",
                  "I absolutely never listen to jazz anymore, I hate it.")[0][0] == "u#1"
    assert cues.is_request("Can you book me a flight?") and cues.is_request("Maybe you could book a flight?")
    assert not cues.is_request("Maybe I could try a little peanut sauce sometime, I guess?")  # a tentative statement

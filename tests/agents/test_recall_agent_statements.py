"""The recall agent keeps what the user stated (issue 87 item 3): an explicit constraint is never windowed away by
the default 30-day window, a plural in the question finds the singular in the memory, conflicts are found by slot
(the car one drives) as well as by shared words, "always" is as explicit as "never", and under the LLM policy the
model's adjudication stands. The cases are the issue's, as it wrote them."""
from datetime import timedelta

import pytest
from dkilab.agents.recall_agent import RecallAgent
from dkilab.agents.recall_agent.conflict_set import ConflictCase, evaluate, load_cases, outcome

from tests.agents.conftest import T0, chat

EGGS = [(0, "user", "I'm allergic to eggs, so please never put eggs in any recipe you give me."),
        (25, "user", "Eggs baked into a cake might be okay for me now, not totally sure though.")]
CAR = [(0, "user", "我开的是一辆白色丰田卡罗拉。"), (10, "user", "上周我把丰田卖了，换了一辆特斯拉Model 3。")]


def _view(store, turns, question, day):
    store.add_messages(chat("u", turns))
    res = RecallAgent(store.for_user("u")).recall(question, now=T0 + timedelta(days=day))
    return res, {i.evidence_ids[0]: i for i in res.output.memory_view.items()}


def test_an_allergy_older_than_the_window_is_kept_beside_the_hedge_that_came_later(store):
    res, items = _view(store, EGGS, "Can I eat eggs?", 45)  # the default window reaches back 30 days: to day 15
    assert res.output.limits.time_range.since == T0 + timedelta(days=15)
    assert set(items) == {"u#0", "u#1"}  # the allergy, from before the window, is in the view
    assert items["u#0"].active and items["u#0"].uncertain and items["u#1"].uncertain  # a conflict, neither lifted
    assert any(s.get("name") == "standing" for s in res.steps)


def test_a_hedge_older_than_the_window_is_left_out(store):
    """Only what holds until the user says otherwise is read from before the window."""
    res, items = _view(store, [(0, "user", "Maybe eggs are a bit heavy for me, I guess."),
                               (40, "user", "I had eggs for breakfast today.")], "Can I eat eggs?", 45)
    assert "u#0" not in items and "u#1" in items


def test_a_plural_in_the_question_finds_the_singular_in_the_memory(store):
    _, items = _view(store, EGGS, "Which ingredients should you leave out of my recipes?", 45)
    assert "u#0" in items and items["u#0"].active


def test_selling_the_car_supersedes_it_and_a_later_plain_statement_settles_it(store):
    _, items = _view(store, CAR, "我开什么车？", 20)
    assert items["u#0"].superseded_by == "u#1" and items["u#1"].active


def test_a_current_statement_after_the_change_is_the_one_left_active(store):
    _, items = _view(store, CAR + [(11, "user", "现在开特斯拉。")], "我开什么车？", 20)
    assert not items["u#0"].active and items["u#2"].active


def test_always_against_never_stays_a_conflict(store):
    _, items = _view(store, [(0, "user", "I always take two sugars in my tea."),
                             (10, "user", "I never put sugar in my tea.")], "How do I take my tea?", 20)
    assert items["u#0"].uncertain and items["u#1"].uncertain and items["u#0"].active and items["u#1"].active


def test_the_conflict_set_holds_under_the_rules_and_a_persona_view_stands_as_written():
    """The rule policy's accuracy on the whole set (the issue's cases and 24 more, zh and en); the LLM policy with a
    scripted persona that adjudicates every pair one way scores exactly that way's share of the set: the model's
    adjudication is not overwritten by the rules."""
    cases = load_cases()
    rules = evaluate()
    assert rules["pairs"] == len(cases) >= 64 and rules["accuracy"] >= 0.95 and rules["constraints_kept"] == 1.0
    assert {"zh-car-toyota", "en-tea-sugar", "en-eggs-hedge", "zh-cat-dog", "en-editor"} <= {c.id for c in cases}
    for persona, expect in (("newest_wins", "newer"), ("keep_both", "keep_both")):
        share = round(sum(c.expect == expect for c in cases) / len(cases), 3)
        assert evaluate(persona=persona)["accuracy"] == share
    move = next(c for c in cases if c.id == "zh-move")
    assert outcome(move) == "newer" and outcome(move, "keep_both") == "keep_both"


@pytest.mark.parametrize("older, newer, expect", [
    ("I have a cat named Luna.", "Luna passed away, now I have a dog called Max.", "newer"),
    ("I have a cat named Luna.", "I also have a dog called Max.", "no_conflict"),  # no change announced
    ("我写代码一直用Vim。", "上个月我换成VS Code了。", "newer"),
])
def test_slots_and_changes(older, newer, expect):
    q = "What pet do I have?" if older.startswith("I") else "我用什么编辑器写代码？"
    got = outcome(ConflictCase(id="t", lang="en" if older.isascii() else "cn", question=q, older=older, newer=newer,
                               days=30, expect="newer"))
    assert got == expect


def test_every_page_of_the_standing_search_keeps_its_rule(store):
    """Before the window only standing statements count, on the standing search's later pages too."""
    old = [(0, "user", "I'm allergic to eggs, never give me eggs.")]
    old += [(1 + i // 10, "user", f"I had eggs for breakfast on trip {i}.") for i in range(45)]
    res, items = _view(store, old + [(58, "user", "Maybe eggs are fine in cake, I guess.")], "Can I eat eggs?", 60)
    since = res.output.limits.time_range.since
    before = [i for i in res.output.memory_view.items() for e in res.output.evidence
              if e.message_id == i.evidence_ids[0] and e.timestamp < since]
    assert [i.evidence_ids for i in before] == [["u#0"]]
    later = [s for s in res.steps if "tool" in s and "cursor" in s["args"]
             and s["args"].get("filter", {}).get("time_range", {}).get("until") == since.isoformat()]
    assert later and all(s["name"] == "standing" for s in later)  # it read past the first page, by its rule

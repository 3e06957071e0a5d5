"""The LLM policy drives the recall loop (issue 32 item 3), proven with scripted models: the control flow
under test is the policy's (what it shows the model, what it accepts, when it falls back or stops), not a
model's quality. A real model (SmolLM2) runs the same path in tests/agents/test_recall_agent.py (slow)."""
import pytest
from dkilab.agents.recall_agent import RecallAgent
from dkilab.agents.recall_agent.skill import load_skill
from dkilab.recall import create_formatter

from tests.agents.conftest import NOW

F = create_formatter("generic", "cn")


class Scripted:
    """Replies written out in advance; records every prompt it was sent."""
    name = "scripted-generic"

    def __init__(self, outputs, repeat_last=False):
        self.outputs, self.repeat_last, self.prompts = list(outputs), repeat_last, []

    def generate(self, messages, max_new_tokens=64):
        self.prompts.append(messages[-1]["content"])
        if self.repeat_last and len(self.outputs) == 1:
            return self.outputs[0]
        return self.outputs.pop(0) if self.outputs else "STOP"


def _tool_steps(res):
    return [s for s in res.steps if "tool" in s]


def test_a_correct_plan_drives_the_whole_loop_and_may_cite_what_the_rules_rejected(alice_store):
    """Search -> context -> a second search -> STOP -> the view. The model is shown the skill and the raw
    results (the request the rules drop included); it cites the assistant's promise, which the rules'
    role=user filter rejects, and the evidence is the stored text verbatim."""
    view = ('{"preferences": [], "profile": [], "constraints": [{"statement": "现在不吃辣", "evidence_ids": ["a#6"], '
            '"confidence": 0.9}, {"statement": "助手答应以后推荐清淡的", "evidence_ids": ["a#7"], "confidence": 0.6}]}')
    model = Scripted([F.format_tool_call("semantic_search", {"query_text": "吃辣 饮食", "top_k": 10}),
                      F.format_tool_call("neighbors", {"message_id": "a#6", "before": 1, "after": 1}),
                      F.format_tool_call("lexical_search", {"query_text": "辣", "filter": {"role": "user"}}),
                      "STOP", view])
    res = RecallAgent(alice_store.for_user("alice"), "llm", model, F).recall("我能吃辣吗？", now=NOW)
    steps = _tool_steps(res)
    assert [s["tool"] for s in steps] == ["semantic_search", "neighbors", "lexical_search"]
    assert all(s["name"] == "planned" for s in steps) and res.policy_fallbacks == 0
    assert res.stop_reason == "the model stopped" and res.policy_steps == 5
    skill = load_skill()
    assert all(skill.instructions in p for p in model.prompts[:4])
    assert "(no call yet)" in model.prompts[0] and "a#4 | user" in model.prompts[1]  # raw hit: a request the rules drop
    assert "a#7 | assistant" in model.prompts[4]  # the synthesis sees every message seen, not the rules' candidates
    ids = [i.evidence_ids for i in res.output.memory_view.constraints]
    assert ids == [["a#6"], ["a#7"]] and res.evidence_problems == []
    assert [e.content for e in res.output.evidence] == ["医生说我胃不好，我现在不吃辣了。", "好的，以后推荐清淡的。"]


def test_a_malformed_plan_falls_back_to_the_rule_step_with_its_reason(alice_store):
    model = Scripted(['lexical_search({"query_text": "辣"', "我觉得应该先搜索一下", "{not a view"])
    res = RecallAgent(alice_store.for_user("alice"), "llm", model, F, max_calls=4).recall("我能吃辣吗？", now=NOW)
    reasons = [s["fallback"] for s in res.steps if "fallback" in s]
    assert reasons[:2] == ["no tool call in the model's plan"] * 2 and reasons[-1] == "invalid view"
    assert all(s["name"] != "planned" for s in _tool_steps(res))  # every call came from the rules
    assert res.output.memory_view.active() and res.evidence_problems == []  # the rule view stands


def test_a_model_that_repeats_its_call_is_caught_and_stopped(alice_store):
    call = F.format_tool_call("lexical_search", {"query_text": "辣", "filter": {"role": "user"}})
    model = Scripted([call], repeat_last=True)
    res = RecallAgent(alice_store.for_user("alice"), "llm", model, F, max_calls=12).recall("我能吃辣吗？", now=NOW)
    repeats = [s for s in res.steps if s.get("fallback") == "repeated call"]
    assert len(repeats) == 2 and res.stop_reason == "the model kept repeating a call"
    assert [s["name"] for s in _tool_steps(res)] == ["planned", _tool_steps(res)[1]["name"]]
    assert _tool_steps(res)[1]["name"] != "planned" and res.tool_calls == 2


def test_evidence_the_model_never_saw_is_refused(alice_store):
    view = '{"constraints": [{"statement": "对花生过敏", "evidence_ids": ["a#8"], "confidence": 0.9}]}'
    model = Scripted([F.format_tool_call("lexical_search", {"query_text": "天气"}), "STOP", view])
    res = RecallAgent(alice_store.for_user("alice"), "llm", model, F).recall("我能吃辣吗？", now=NOW)
    assert any("a#8" in s.get("invalid_view", "") for s in res.steps)  # a#8 was never returned by a call
    assert all("a#8" not in i.evidence_ids for i in res.output.memory_view.items())


def test_the_skill_file_is_versioned_validated_and_in_the_cell_hash(tmp_path):
    from dkilab.eval.harness.experiment import expand_cells, experiment_from_dict

    skill = load_skill()
    assert skill.name == "recall" and skill.version == "1" and "Conflicts" in skill.instructions

    def cell(**params):
        cfg = {"name": "s", "datasets": [{"name": "agent_recall"}],
               "strategies": [{"name": "recall_agent", "params": {"policy": "llm", **params}}]}
        return expand_cells(experiment_from_dict(cfg, "<test>"))[0]

    base = cell()
    assert base.prompts()["policy.skill"] == skill.text
    mine = tmp_path / "SKILL.md"
    mine.write_text(skill.text.replace("version: 1", "version: 2"), encoding="utf-8")
    assert cell(skill=str(mine)).config_hash != base.config_hash
    rule = {"name": "s", "datasets": [{"name": "agent_recall"}], "strategies": [{"name": "recall_agent"}]}
    assert "policy.skill" not in expand_cells(experiment_from_dict(rule, "<test>"))[0].prompts()
    bad = tmp_path / "BAD.md"
    bad.write_text("---\nname: recall\n---\nbody\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"BAD.md.*'version' is missing"):
        cell(skill=str(bad))
    with pytest.raises(ValueError, match="no such file"):
        cell(skill=str(tmp_path / "none.md"))


def test_a_prompt_over_the_window_shows_fewer_results_or_falls_back(alice_store):
    """SmolLM2's 1,024-token window in CI: the plan shows fewer raw results until it fits; a window too small for
    the skill itself falls back to the rules, counted, instead of failing the question."""

    class Small(Scripted):
        def __init__(self, outputs, window):
            super().__init__(outputs)
            self.context_window = window

        def count_tokens(self, text):
            return len(text) // 4

    call = F.format_tool_call("semantic_search", {"query_text": "吃辣 饮食", "top_k": 10})
    skill_only = len(load_skill().instructions) // 4
    fits = Small([call, "STOP"], skill_only + 420)
    res = RecallAgent(alice_store.for_user("alice"), "llm", fits, F, max_calls=3).recall("我能吃辣吗？", now=NOW)
    second = fits.prompts[1]
    assert "a#" in second and second.count(" | user | ") + second.count(" | assistant | ") < 10  # fewer rows shown
    assert all(len(p) // 4 + 96 + 16 <= fits.context_window for p in fits.prompts)
    tiny = Small([call], 200)
    res = RecallAgent(alice_store.for_user("alice"), "llm", tiny, F, max_calls=3).recall("我能吃辣吗？", now=NOW)
    assert tiny.prompts == [] and res.evidence_problems == [] and res.output.memory_view.active()
    assert {s.get("fallback") for s in res.steps if "fallback" in s} == {"plan prompt over the model's window",
                                                                       "view prompt over the model's window"}


def test_the_models_adjudication_stands_and_names_only_messages_it_saw(alice_store):
    """The rules would let "我现在不吃辣了" (a#6) supersede "我特别能吃辣" (a#2); the model keeps both, uncertain, and
    that is the view. A `superseded_by` naming a message it never saw is an invalid view: the rules' view stands."""
    call = F.format_tool_call("lexical_search", {"query_text": "辣"})
    both = ('{"preferences": [{"statement": "特别能吃辣", "evidence_ids": ["a#2"], "confidence": 0.5, '
            '"uncertain": true}, {"statement": "现在不吃辣", "evidence_ids": ["a#6"], "confidence": 0.5, '
            '"uncertain": true}]}')
    res = RecallAgent(alice_store.for_user("alice"), "llm", Scripted([call, "STOP", both]), F).recall(
        "我能吃辣吗？", now=NOW)
    items = {i.evidence_ids[0]: i for i in res.output.memory_view.items()}
    assert items["a#2"].active and items["a#2"].uncertain and items["a#6"].uncertain
    rules = RecallAgent(alice_store.for_user("alice")).recall("我能吃辣吗？", now=NOW)
    assert {i.evidence_ids[0]: i.superseded_by for i in rules.output.memory_view.items()}["a#2"] == "a#6"
    forged = both.replace('"uncertain": true}, {', '"superseded_by": "a#8"}, {', 1)
    assert forged != both
    res = RecallAgent(alice_store.for_user("alice"), "llm", Scripted([call, "STOP", forged]), F).recall(
        "我能吃辣吗？", now=NOW)
    assert any("a#8" in s.get("invalid_view", "") for s in res.steps)
    assert all(i.superseded_by != "a#8" for i in res.output.memory_view.items())

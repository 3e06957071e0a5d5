"""The recall agent end to end on a real store: the §2.2 contract, verbatim evidence, user isolation,
cursor paging, honest limits, tracing of every step, and both policies (the LLM policy on SmolLM2, and
its control flow on scripted plans)."""
import contextlib

import pytest
from dkilab.agents.recall_agent import RecallAgent, RecallOutput, validate_evidence
from dkilab.agents.recall_agent.contract import EvidenceItem
from dkilab.recall import create_formatter
from dkilab.tracing import tracing_to

from tests.agents.conftest import ALICE, NOW, chat


def test_view_with_adjudication_and_verbatim_evidence(alice_store):
    mem = alice_store.for_user("alice")
    res = RecallAgent(mem).recall("你记得我有什么饮食偏好吗？", now=NOW)
    out = RecallOutput.model_validate(res.output.model_dump(mode="json"))  # the contract round-trips
    active = {i.statement for i in out.memory_view.active()}
    assert active == {"医生说我胃不好，我现在不吃辣了。", "我对花生过敏，千万别推荐带花生的菜。"}
    assert [i.statement for i in out.memory_view.constraints] == ["我对花生过敏，千万别推荐带花生的菜。"]
    old = next(i for i in out.memory_view.items() if not i.active)
    assert old.evidence_ids == ["a#2"] and old.superseded_by == "a#6" and old.reason == "time"
    assert res.evidence_problems == [] and validate_evidence(out, mem) == []
    assert all(e.content == mem.get(e.message_id).content for e in out.evidence)
    assert out.limits.role == "user" and out.limits.messages_considered >= 3 and out.limits.time_range.until == NOW
    assert 1 <= res.tool_calls <= 8 and res.stop_reason


def test_validate_evidence_catches_paraphrased_or_foreign_evidence(alice_store):
    mem = alice_store.for_user("alice")
    out = RecallAgent(mem).recall("我能吃辣吗？", now=NOW).output
    bad = out.model_copy(deep=True)
    bad.evidence[0].content = bad.evidence[0].content + "（改写）"
    bad.evidence.append(EvidenceItem(message_id="nope", role="user", timestamp=NOW, content="x"))
    bad.memory_view.items()[0].evidence_ids.append("missing")
    problems = validate_evidence(bad, mem)
    assert any("content differs" in p for p in problems) and any("nope" in p for p in problems)
    assert any("missing" in p for p in problems)


def test_absent_memory_gives_an_empty_view_with_honest_limits(alice_store):
    res = RecallAgent(alice_store.for_user("alice")).recall("我养了什么宠物？", now=NOW)
    lim = res.output.limits
    assert res.output.empty and res.output.evidence == []
    assert lim.widened == ["time_range -> 180d", "time_range -> all", "role -> any"] and lim.role is None
    assert lim.messages_considered == 10 and "no evidence" in lim.note


def test_another_users_memory_never_appears(alice_store):
    alice_store.add_messages(chat("bob", [(0, "user", "我超级爱吃辣，无辣不欢。"), (1, "user", "我对芒果过敏。")], "b"))
    for uid, own in (("alice", "a#"), ("bob", "b#")):
        res = RecallAgent(alice_store.for_user(uid)).recall("你记得我的饮食偏好吗？", now=NOW)
        seen = [h for s in res.steps for h in s.get("hits", [])]
        assert seen and all(h.startswith(own) for h in seen), (uid, seen)
        assert all(e.message_id.startswith(own) for e in res.output.evidence)


def test_pages_through_a_long_result_by_cursor(store):
    turns = [(d, "user", f"I had coffee number {d} today, coffee is my fuel.") for d in range(30)]
    store.add_messages(chat("carol", turns, "c"))
    res = RecallAgent(store.for_user("carol"), max_items=50).recall('Did I say "coffee"?', now=NOW)
    lexical = [s for s in res.steps if s.get("tool") == "lexical_search"]
    assert len(lexical) >= 2 and lexical[1]["args"].get("cursor")  # the second page came by cursor
    assert 1 <= res.rounds < res.tool_calls  # a further page is not a new round
    assert len({h for s in lexical for h in s["hits"]}) == 25  # days 0-24: the rest is after `now`


class Recorder:
    """A tracer like mlflow: records span names, inputs and outputs."""

    def __init__(self):
        self.spans = []

    @contextlib.contextmanager
    def start_span(self, name):
        rec = {"name": name}
        self.spans.append(rec)

        class S:
            def set_inputs(self, x):
                rec["inputs"] = x

            def set_outputs(self, x):
                rec["outputs"] = x

        yield S()


def test_every_step_is_traced(alice_store):
    rec = Recorder()
    with tracing_to(rec):
        res = RecallAgent(alice_store.for_user("alice")).recall("我能吃辣吗？", now=NOW)
    steps = [s for s in rec.spans if s["name"] == "agent_step"]
    assert len(steps) == res.tool_calls
    assert all({"tool", "args"} <= set(s["inputs"]) and {"hits", "reflection"} <= set(s["outputs"]) for s in steps)
    from dkilab.agents.recall_agent.steps import STEPS

    assert all(s["inputs"]["step"] in STEPS for s in steps)  # each call names the §4 step that chose it
    tools = [s for s in rec.spans if s["name"].startswith("tool.")]
    assert len(tools) == res.tool_calls and all("text" in h for t in tools for h in t["outputs"]["hits"])
    decisions = [s["outputs"] for s in rec.spans if s["name"] == "agent_decide"]
    assert len(decisions) == res.tool_calls and decisions[-1] == {"stop": res.stop_reason}
    assert all("tool" in d and "why" in d for d in decisions[:-1])
    top = next(s for s in rec.spans if s["name"] == "recall_agent")
    assert top["outputs"]["memory_view"] and top["outputs"]["evidence_problems"] == []


class Scripted:
    """Plans written out in advance: the policy's control flow (not the model's quality) under test."""
    name = "scripted-generic"

    def __init__(self, outputs):
        self.outputs = list(outputs)

    def generate(self, messages, max_new_tokens=64):
        return self.outputs.pop(0) if self.outputs else "STOP"


def test_llm_policy_runs_valid_calls_and_falls_back_on_bad_ones(alice_store):
    f = create_formatter("generic", "cn")
    model = Scripted([f.format_tool_call("lexical_search", {"query_text": "辣", "filter": {"role": "user"}}),
                      'lexical_search({"query_text": "辣", "page_size": 9999})',  # invalid argument -> rule step
                      f.format_tool_call("neighbors", {"message_id": "b#404"}),  # an id it never saw -> rule step
                      # refused by the tool
                      f.format_tool_call("lexical_search", {"query_text": "辣", "cursor": "forged"}),
                      "STOP", "not json"])
    agent = RecallAgent(alice_store.for_user("alice"), "llm", model, f, max_calls=6)
    res = agent.recall("我能吃辣吗？", now=NOW)
    first = next(s for s in res.steps if s.get("tool"))
    assert first["tool"] == "lexical_search" and first["why"] == "planned by the model"
    assert res.policy_fallbacks == 4 and res.policy_steps == 6  # 3 bad calls + the unparsable view
    assert any("page_size" in s.get("invalid_call", "") for s in res.steps)
    assert any("cursor" in s.get("refused_call", "") for s in res.steps)
    assert res.evidence_problems == [] and res.output.memory_view.active()


@pytest.mark.slow
def test_llm_policy_on_smollm2_counts_fallbacks(alice_store, model):
    """The model's every plan is recorded; each fallback says why and is followed by the rule step, and the
    counts the cell logs agree with the trace (SmolLM2 rarely emits a valid call: the rules carry the loop)."""
    from dkilab.agents.recall_agent.policy import PLANNED

    res = RecallAgent(alice_store.for_user("alice"), "llm", model, max_calls=3).recall("我能吃辣吗？", now=NOW)
    asked = [s for s in res.steps if "plan_output" in s or "synthesis_output" in s]
    fell_back = [s for s in res.steps if s.get("fallback")]
    assert res.policy_steps == len(asked) >= 2 and res.policy_fallbacks == len(fell_back)
    tools = [s for s in res.steps if s.get("tool")]
    planned = sum(1 for s in tools if s["why"] == PLANNED)
    plan_fallbacks = sum(1 for s in fell_back if s["fallback"] != "invalid view")
    stopped = res.stop_reason == "the model stopped"
    # a call, a fallback or STOP
    assert planned + plan_fallbacks + stopped == sum(1 for s in asked if "plan_output" in s)
    looped = res.stop_reason == "the model kept repeating a call"  # its last fallback ends the loop instead
    assert len(tools) - planned >= plan_fallbacks - looped  # a rule step ran for every other plan that fell back
    assert res.evidence_problems == [] and isinstance(res.output, RecallOutput) and res.output.memory_view.active()


def test_bad_input_is_refused_clearly(alice_store):
    mem = alice_store.for_user("alice")
    with pytest.raises(ValueError, match="non-empty"):
        RecallAgent(mem).recall("  ")
    with pytest.raises(ValueError, match="policy"):
        RecallAgent(mem, policy="magic")
    with pytest.raises(ValueError, match="needs a model"):
        RecallAgent(mem, policy="llm")
    with pytest.raises(Exception, match="time_rang"):
        RecallAgent(mem).recall("x?", context={"time_rang": {}})
    with pytest.raises(Exception, match="role_pref"):
        RecallAgent(mem).recall("x?", context={"role_pref": ["user"]})
    assert mem.count() == len(ALICE)  # refused calls change nothing

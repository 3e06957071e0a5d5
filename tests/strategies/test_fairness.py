"""Strategies differ only in their memory design: one history renderer (the same time, speaker and role
fields everywhere, summaries and fact segments included), one matched history budget, flat_history =
stable, full_attention's history only in K/V, and context-only cells that build exactly what the model
would get."""
import re

import pytest
from dkilab.recall.formatters import FORMATTERS
from dkilab.strategies import create_strategy
from dkilab.text.history import render_line
from dkilab.types import FactResponse

from tests.strategies.test_strategies import PREFS, conversation, memory  # noqa: F401 (fixture)

QUESTION = "Where is my new flat?"
SMALL = {"max_new_tokens": 8, "max_prompt_tokens": 900}
V4 = {"recall": {"summary": {"per_message_threshold": 60}, "fact_call": {"max_rounds": 1, "max_fact_tokens": 120}}}
TEXT_STRATEGIES = {"full_history": {}, "stable": {"recent_turns": 4}, "recall_v4": V4, "full_attention": {},
                   "recall_agent": {"answer": True}}


def planned(name, params, memory, model, prefs=PREFS):
    s = create_strategy(name, {**SMALL, **params})
    s.context_only = True
    return s.answer(QUESTION, memory, model, preferences=prefs)


def test_every_strategy_renders_the_same_fields_within_the_same_budget(memory, model):
    by_id = {m.message_id: m for m in conversation()}
    totals = {}
    for name, params in TEXT_STRATEGIES.items():
        ans = planned(name, params, memory, model)
        assert ans.recalled_ids, name
        for mid in ans.recalled_ids:
            m = by_id[mid]
            if mid in ans.summary_ids:  # a summary carries its message's time and speaker
                assert f'trace_id="{mid}"' in ans.context_text and \
                       f'time="{m.timestamp:%Y-%m-%d %H:%M}" speaker="{m.speaker}"' in ans.context_text, (name, mid)
            else:
                assert f"[{m.timestamp:%Y-%m-%d %H:%M}] {m.speaker}: {m.content}" in ans.context_text, (name, mid)
        totals[name] = ans.budget.total
        assert ans.budget.used <= ans.budget.history, name
    assert len(set(totals.values())) == 1, totals  # one matched budget for every strategy
    v4 = planned("recall_v4", V4, memory, model)
    assert v4.summary_ids and v4.fact_calls_offered  # the summary path was exercised above
    assert v4.budget.room == {"fact_calls": 120 + 32, "constraint": 150} and v4.budget.reserved == {}  # beside it


def test_history_fields_turn_off_to_the_seeds_layout(memory, model):
    for name, params in TEXT_STRATEGIES.items():
        ans = planned(name, {**params, "history_fields": []}, memory, model)
        assert "Ana:" not in ans.context_text and not re.search(r"\[\d{4}-\d\d-\d\d", ans.context_text), name
        assert re.search(r"User: |role=User", ans.context_text), name
    only_time = planned("stable", {"history_fields": ["time"]}, memory, model)
    assert re.search(r"\[\d{4}-\d\d-\d\d \d\d:\d\d\] User: ", only_time.context_text)


def test_fact_segments_carry_time_and_speaker():
    m = conversation()[4]
    response = FactResponse([{"role": "user", "content": "In Lisbon.", "timestamp": m.timestamp.isoformat(),
                              "speaker": "Ana"}], m.message_id, 1, 0, False)
    for kind in FORMATTERS.names():
        seg = FORMATTERS[kind](language="en").format_fact_segment(response)
        assert render_line("In Lisbon.", "user", "en", m.timestamp, "Ana") in seg, kind
        assert f"[{m.timestamp:%Y-%m-%d %H:%M}] Ana: In Lisbon." in seg, kind


@pytest.mark.parametrize("turns", [1, 3])
def test_flat_history_is_exactly_stable(memory, model, turns):
    stable = planned("stable", {"recent_turns": turns}, memory, model)
    flat = planned("recall_v4", {"recall": {"strategy": "flat_history",
                                            "budget": {"min_recent_turns": 0, "max_recent_turns": turns}}},
                   memory, model)
    assert flat.prompt == stable.prompt and flat.recalled_ids == stable.recalled_ids
    assert flat.budget.as_dict() == stable.budget.as_dict() and flat.context_text == stable.context_text


def test_flat_history_keeps_the_newest_messages_when_the_budget_binds(memory, model):
    ids = [m.message_id for m in conversation()]
    flat = planned("recall_v4", {"history_budget": 60, "recall": {"strategy": "flat_history",
                                                                  "budget": {"max_recent_turns": 4}}}, memory, model)
    stable = planned("stable", {"history_budget": 60, "recent_turns": 4}, memory, model)
    assert flat.recalled_ids == stable.recalled_ids and flat.prompt == stable.prompt
    assert 0 < len(flat.recalled_ids) < 8 and flat.recalled_ids == ids[-len(flat.recalled_ids):]  # newest kept


def test_full_attention_shows_only_the_question(memory, model):
    ans = planned("full_attention", {}, memory, model)
    assert ans.recalled_ids and ans.injected_tokens > 0
    for m in conversation():
        if m.message_id in ans.recalled_ids:
            assert m.content not in ans.prompt and m.content in ans.context_text
    assert QUESTION in ans.prompt and PREFS[0] not in ans.prompt  # preferences are K/V too


@pytest.mark.parametrize("name", ["no_memory", "full_history", "stable", "recall_v4", "full_attention"])
def test_context_only_builds_exactly_what_the_model_gets(name, memory, model):
    """The planned prompt and K/V columns equal those of a real generation (with the fact loop held at one
    round, so both see the same prompt)."""
    params = {**SMALL, **({"recall": {"fact_call": {"enabled": False}}} if name == "recall_v4" else {})}
    real = create_strategy(name, params).answer(QUESTION, memory, model, preferences=PREFS)
    plan = planned(name, params, memory, model)
    assert plan.text == "" and plan.kind == "context" and plan.generated_tokens == 0
    assert (plan.prompt, plan.prompt_tokens, plan.injected_tokens, plan.recalled_ids) == \
           (real.prompt, real.prompt_tokens, real.injected_tokens, real.recalled_ids)
    assert plan.context_text == real.context_text and "generation" in plan.latency_ms


def test_context_only_needs_the_tokenizer_alone(model):
    from dkilab.models.loading import load_tokenizer_model

    tok = load_tokenizer_model("offline:smollm2", max_context=1024)
    assert tok.model is None and tok.context_window == 1024
    text = "[2023-05-08 13:56] Caroline: 我们明天去里斯本。"
    assert tok.count_tokens(text) == model.count_tokens(text)
    messages = [{"role": "user", "content": "hi"}]
    assert tok.render(messages) == model.render(messages)
    with pytest.raises(RuntimeError, match="without weights"):
        tok.generate_full(messages)


def test_an_explicit_formatter_wins_over_auto_protocol():
    from dkilab.models.chat import TransformersChatModel
    from dkilab.models.kv import prepare_model

    from tests.models.test_tool_calls import TEMPLATE
    from tests.models.tiny import tiny_model

    hf, tok = tiny_model("qwen3")
    tok.chat_template = TEMPLATE  # renders tools: `auto` would offer retrieve_fact natively
    m = TransformersChatModel(prepare_model(hf), tok, name="tiny-tools")
    auto = create_strategy("recall_v4", {})
    assert auto.protocol(m) == "native" and auto._builder(m, "en").formatter.name == "native"
    for kind in ("generic", "deepseek", "glm"):
        chosen = create_strategy("recall_v4", {"recall": {"prompt_formatter": kind}})
        assert chosen.protocol(m) == "text" and chosen._builder(m, "en").formatter.name == kind
        assert not any(k.startswith("formatter.native.") for k in chosen.prompts("tiny-tools"))
    native = create_strategy("recall_v4", {"recall": {"prompt_formatter": "glm", "fact_call": {"protocol": "native"}}})
    assert native.protocol(m) == "native"  # a protocol asked for by name is still honoured


IDENTIFIERS = {"retrieve_fact", "trace_id", "offset", "limit", "SUMMARY", "FACT_SEGMENT", "conf", "role", "has_more",
               "total", "true", "false", "json", "function", "tool_call", "observation", "string", "integer", "Tools"}


@pytest.mark.parametrize("kind", ["generic", "deepseek", "glm", "native"])
def test_chinese_prompt_texts_are_chinese(kind):
    """Every Chinese prompt text is Chinese: no English sentence inside (identifiers and tags aside)."""
    f = FORMATTERS[kind](language="cn")
    for key, text in f.templates("cn").items():
        if key == "tool_schema":
            continue  # the JSON schema the chat template renders, not prose
        prose = re.sub(r"<[｜|][^>]*[｜|]>|\{\w+\}", " ", text)  # a model's special tokens, template slots
        words = {w for w in re.findall(r"[A-Za-z][A-Za-z_]+", prose)} - IDENTIFIERS
        assert not words, (kind, key, words, text)


def test_context_text_holds_memory_only_never_the_question(memory, model):
    """`answer_in_context` reads context_text: recall_v4 put its whole suffix there, query and multiple-choice
    options included, so the gold option always "appeared" (0.995 on MemDaily). Every strategy keeps it to
    what memory supplied."""
    for name, params in TEXT_STRATEGIES.items():
        ans = planned(name, params, memory, model)
        assert ans.context_text and QUESTION not in ans.context_text, name
        assert QUESTION in ans.prompt, name  # the question is in the prompt, of course

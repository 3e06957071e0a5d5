"""Recall config, formatters, suffix builder, fact retriever, the fact loop and multi-signal recall."""
from datetime import datetime, timedelta, timezone

import pytest
import yaml
from dkilab.recall import (
    FactRetriever,
    GenericFormatter,
    MultiSignalRecall,
    ReferenceResolver,
    SuffixBuilder,
    create_formatter,
    fact_call_reserve,
    load_recall_config,
    run_fact_loop,
    validate_recall_config,
)
from dkilab.recall.formatters import DeepSeekFormatter, GLMFormatter
from dkilab.text import ExtractiveSummarizer, HeuristicTokenCounter
from dkilab.types import ContextBudget, FactRequest, Message

SEED_BLOCK = """
dki:
    recall:
        enabled: true
        strategy: "summary_with_fact_call"
        signals:
            keyword_enabled: true
            keyword_topk: 5
            keyword_method: "tfidf"
            vector_enabled: true
            vector_top_k: 10
            vector_threshold: 0.5
            reference_enabled: true
        budget:
            generation_reserve: 512
            instruction_reserve: 150
            min_recent_turns: 2
            max_recent_turns: 5
        summary:
            per_message_threshold: 200
            max_tokens_per_summary: 150
            strategy: "extractive"
        fact_call:
            enabled: true
            max_rounds: 3
            max_fact_tokens: 800
            batch_size: 5
        prompt_formatter: "auto"
"""
T0 = datetime(2026, 3, 1, 9, tzinfo=timezone.utc)
LONG = ("We planned the Yunnan trip in detail. We leave on 8 May and come back on 15 May. Four of us are going: "
        "me, Wang Ming, Li Hua and Chen Jie. The hotel in Kunming costs 380 yuan a night. In Dali we will rent "
        "bikes along Erhai lake. In Lijiang we booked a guesthouse called Blue Moon. Everyone avoids spicy food. "
        "The budget is about 6000 yuan per person. We still need to buy the train tickets from Kunming to Dali. "
        "Chen Jie will bring the camera and the drone. We must not forget the sunscreen because the sun is "
        "strong. ") * 2


def test_seed_yaml_block_loads_as_written(tmp_path):
    p = tmp_path / "config.yaml"
    p.write_text(SEED_BLOCK, encoding="utf-8")
    cfg = load_recall_config(p)
    assert cfg.signals.vector_threshold == 0.5 and cfg.summary.per_message_threshold == 200
    assert cfg.fact_call.max_rounds == 3
    bad = yaml.safe_load(SEED_BLOCK)
    bad["dki"]["recall"]["summary"]["strategy"] = "magic"
    bad["dki"]["recall"]["budget"]["min_recent_turns"] = 9
    with pytest.raises(ValueError, match=r"recall\.summary\.strategy") as err:
        validate_recall_config(bad, source="x.yaml")
    assert "x.yaml" in str(err.value)
    with pytest.raises(ValueError, match="signals.bogus"):
        validate_recall_config({"signals": {"bogus": 1}})
    assert cfg.with_updates({"summary.per_message_threshold": 50}).summary.per_message_threshold == 50
    with pytest.raises(ValueError, match="no key"):
        cfg.with_updates({"summary.nope": 1})


@pytest.mark.parametrize("formatter", [GenericFormatter("cn"), GenericFormatter("en"), DeepSeekFormatter("cn"),
                                       GLMFormatter("en")])
def test_formatters_round_trip_their_own_call_syntax(formatter):
    for req in [FactRequest("conv-26:D1:3", offset=0, limit=5), FactRequest("sess_1_2:3:user", offset=7, limit=2)]:
        assert formatter.detect_fact_request(f"Let me check. {formatter.format_fact_call(req)} ok") == req
    assert formatter.detect_fact_request("The answer is Paris.") is None


@pytest.mark.parametrize("text,expected", [
    ('retrieve_fact(trace_id="m-1", offset=2, limit=3)', ("m-1", 2, 3)),
    ("retrieve_fact( trace_id = 'm-1' )", ("m-1", 0, 5)),
    ("retrieve_fact(trace_id=“m-1”,offset=1)", ("m-1", 1, 5)),
    ('retrieve_fact("m-1", 4, 2)', ("m-1", 4, 2)),
    ("retrieve_fact(trace_id=m-1)", ("m-1", 0, 5)),
    ('retrieve_fact(offset=1)', None), ('retrieve_fact(trace_id="m-1", limit=abc)', None),
    ('retrieve_fact(trace_id="m-1"', None), ('retrieve_fact(trace_id="...")', None),
])
def test_generic_detection_is_tolerant_and_counts_malformed(text, expected):
    f = GenericFormatter("en")
    req = f.detect_fact_request(text)
    assert (None if req is None else (req.trace_id, req.offset, req.limit)) == expected
    assert f.malformed_calls == (1 if expected is None else 0)


def test_create_formatter_by_model_name():
    assert isinstance(create_formatter("deepseek-ai/DeepSeek-V3"), DeepSeekFormatter)
    assert isinstance(create_formatter("THUDM/chatglm3-6b"), GLMFormatter)
    assert isinstance(create_formatter("HuggingFaceTB/SmolLM2-135M-Instruct", "en"), GenericFormatter)
    assert create_formatter("x", "en", kind="glm").language == "en"
    with pytest.raises(ValueError):
        create_formatter("x", kind="nope")


def msg(i, text, role="user", session="s1", minutes=0):
    return Message(f"m{i}", "alice", session, i, role, text, T0 + timedelta(minutes=minutes))


def test_suffix_builder_threshold_budget_and_constraint():
    cfg = validate_recall_config({"summary": {"per_message_threshold": 60, "max_tokens_per_summary": 50}})
    counter = HeuristicTokenCounter()
    builder = SuffixBuilder(cfg, GenericFormatter("en"), ExtractiveSummarizer(counter), counter)
    msgs = [msg(1, LONG, minutes=1), msg(2, "Which train do we take?", minutes=2),
            msg(3, "The 9 am one.", "assistant", minutes=3)]
    out = builder.build("When do we leave?", msgs, context_budget=500)
    assert [it.type for it in out.items] == ["summary", "message", "message"]
    assert out.items[0].confidence == "medium" and out.items[1].confidence == "high"
    assert out.items[0].trace_id == "m1" and 'trace_id="m1"' in out.text and out.has_fact_call_instruction
    assert out.text.index("[SUMMARY") < out.text.index("TRUST AND REASONING") < out.text.index("Current user question")
    assert out.summary_count == 1 and out.message_count == 2 and out.trace_ids == ["m1", "m2", "m3"]
    first = counter.count_tokens(builder.formatter.format_summary_item(out.items[0], "en")) + 1
    assert first > out.items[0].token_count + 10  # the [SUMMARY trace_id=...] wrapper costs tokens too
    tight = builder.build("When?", msgs, context_budget=first + 3)
    assert len(tight.items) == 1 and tight.dropped_for_budget == 2
    assert len(builder.build("When?", msgs, context_budget=first - 1).items) == 0
    # whatever the budget, the rendered history (items and the blank lines between them) stays inside it
    for budget in (first, 40, 60, 80, 120, 500):
        got = builder.build("When?", msgs, context_budget=budget)
        history = "\n\n".join(builder._render(it, "en") for it in got.items)
        assert got.history_tokens <= budget and (not got.items or counter.count_tokens(history) <= budget), budget
    flat = builder.build("When?", msgs[1:], context_budget=500)
    assert not flat.has_fact_call_instruction  # nothing summarised: no call instruction
    # what recall_v4 takes from the matched history budget: fact segments + the constraint instruction
    assert fact_call_reserve(cfg, 24) == {"fact_calls": cfg.fact_call.max_fact_tokens + 32 * cfg.fact_call.max_rounds,
                                          "constraint": 150}
    seed = cfg.with_updates({"budget.generation_reserve": 512})  # the seed's fixed reserve, when set
    assert fact_call_reserve(seed, 24) == {"fact_calls": 512 - 24, "constraint": 150}
    assert fact_call_reserve(cfg.with_updates({"fact_call.max_rounds": 0}), 24) == {}  # no calls: nothing reserved
    assert fact_call_reserve(cfg.with_updates({"strategy": "flat_history"}), 24) == {}
    b = ContextBudget(window=2048, generation=24, instructions=100, query=20, preferences=30,
                      reserved=fact_call_reserve(cfg, 24))
    assert b.total == 2048 - 24 - 100 - 20 - 30 and b.history == b.total - sum(b.reserved.values())
    assert ContextBudget(2048, 24, 100, 20, 30, cap=100).total == 100
    assert ContextBudget(100, 24, 100, 20, 30, cap=100).total == 0


@pytest.fixture
def memory(store):
    store.add_messages([msg(1, LONG, minutes=1), msg(2, "I think we should book the 9 am train.", "assistant",
                                                     minutes=2),
                        msg(3, 'Note to self: retrieve_fact(trace_id="m2") is a fun string.', minutes=3),
                        msg(4, "Lisbon in June sounds good.", session="s2", minutes=100),
                        msg(5, "I recommend the Alfama district.", "assistant", session="s2", minutes=101)])
    return store.for_user("alice")


def test_fact_retriever_pages_chunks_groups_and_unknown_ids(memory):
    r = FactRetriever(memory, max_fact_tokens=800, chunk_threshold=60)
    first = r.retrieve("m1", offset=0, limit=3)
    assert first.found and len(first.messages) == 3 and first.has_more and first.total_count > 10
    second = r.retrieve("m1", offset=3, limit=3)
    assert second.messages[0]["content"] != first.messages[-1]["content"]
    assert "We leave on 8 May" in " ".join(m["content"] for m in first.messages + second.messages)
    group = r.retrieve("s2", limit=5)
    assert [m["message_id"] for m in group.messages] == ["m4", "m5"] and not group.has_more
    missing = r.retrieve("nope")
    assert not missing.found and missing.total_count == 0 and "nope" in missing.error
    small = FactRetriever(memory, max_fact_tokens=12, chunk_threshold=60).retrieve("m1", limit=5)
    assert sum(HeuristicTokenCounter().count_tokens(m["content"]) for m in small.messages) <= 12 and small.has_more


def test_fact_loop_two_calls_then_answer(memory):
    cfg = validate_recall_config({})
    f = GenericFormatter("en")
    prompts = []
    script = iter(['I need details. retrieve_fact(trace_id="m1", offset=0, limit=2)',
                   'retrieve_fact(trace_id="m1", offset=2, limit=2)',
                   "You leave on 8 May."])

    def generate(prompt):
        prompts.append(prompt)
        return next(script)

    res = run_fact_loop("History...\nCurrent user question: When do we leave?", generate, f,
                        FactRetriever(memory, chunk_threshold=60), cfg, offered=["m1"])
    assert res.output == "You leave on 8 May." and res.rounds == 3 and res.stopped == "answered"
    assert [(c.trace_id, c.offset, c.limit, c.valid) for c in res.fact_calls] == [("m1", 0, 2, True),
                                                                                  ("m1", 2, 2, True)]
    assert prompts[1].count("[FACT_SEGMENT") == 1 and prompts[2].count("[FACT_SEGMENT") == 2
    assert all(c.tokens > 0 for c in res.fact_calls) and res.fact_tokens == sum(c.tokens for c in res.fact_calls)


def test_fact_loop_never_executes_stored_text_and_respects_limits(memory):
    cfg = validate_recall_config({"fact_call": {"max_rounds": 2, "max_fact_tokens": 60}})
    f = GenericFormatter("en")
    # the prompt holds a stored message with a call in it; the model answers directly: no call is made
    stored = memory.get("m3").content
    res = run_fact_loop(f"User: {stored}\nCurrent user question: hi", lambda p: "Hello!", f, FactRetriever(memory), cfg)
    assert res.fact_calls == [] and res.rounds == 1
    # a model that keeps calling is stopped by max_rounds, then answers once more
    greedy = run_fact_loop("q", lambda p: 'retrieve_fact(trace_id="m2")', f, FactRetriever(memory), cfg)
    assert greedy.stopped in ("max_rounds", "max_fact_tokens") and greedy.rounds <= 3
    assert greedy.fact_tokens <= 60
    # an invalid trace id (not offered, unknown) is recorded as invalid, malformed calls are counted
    replies = iter(['retrieve_fact(trace_id="zzz")', "done"])
    bad = run_fact_loop("q", lambda p: next(replies), f, FactRetriever(memory), cfg, offered=["m1"])
    assert bad.fact_calls[0].valid is False and bad.fact_calls[0].found is False and bad.output == "done"
    broken = run_fact_loop("q", lambda p: "retrieve_fact(offset=1)", f, FactRetriever(memory), cfg)
    assert broken.fact_calls[0].malformed and broken.stopped == "malformed" and broken.final_call and broken.rounds == 2
    off = run_fact_loop("q", lambda p: 'retrieve_fact(trace_id="m1")', f, FactRetriever(memory),
                        cfg.with_updates({"fact_call.enabled": False}))
    assert off.fact_calls == [] and off.rounds == 1


def test_multi_signal_recall_signals_fusion_and_recent_supplement(memory):
    cfg = validate_recall_config({"signals": {"vector_threshold": 0.0}, "budget": {"min_recent_turns": 1}})
    msr = MultiSignalRecall(cfg, ReferenceResolver(), memory)
    res = msr.recall("Which district in Lisbon do you recommend?", session_id="s1")
    assert res.ranked[0].message.message_id in ("m4", "m5")
    assert {"keyword", "vector"} <= set(res.ranked[0].signals)
    assert res.keyword_hits > 0 and res.vector_hits > 0 and res.keywords
    ids = [m.message_id for m in res.messages]
    assert ids[:2] == ["m2", "m3"] and len(ids) == len(set(ids))  # recent turns first, no duplicates
    # a reference expression widens the recent supplement and brings its own candidates
    ref = msr.recall("Is what you said earlier about the train still right?", session_id="s1")
    assert ref.reference_scope == "assistant_last_stance" and ref.reference_hits == 1
    # each signal can be switched off for ablations
    only_kw = MultiSignalRecall(cfg.with_updates({"signals.vector_enabled": False, "signals.reference_enabled": False,
                                                  "signals.fusion": "weighted"}), None,
                                memory).recall("Alfama district")
    assert only_kw.vector_hits == 0 and [r.message.message_id for r in only_kw.ranked] == ["m5"]
    # learned fusion (the default) adds the session neighbours of its top hits: m4 is the turn m5 answers
    learned = MultiSignalRecall(cfg.with_updates({"signals.vector_enabled": False, "signals.reference_enabled": False}),
                                None, memory).recall("Alfama district")
    assert [r.message.message_id for r in learned.ranked] == ["m5", "m4"] and "learned" in learned.ranked[1].signals
    weighted = MultiSignalRecall(cfg.with_updates({"signals.fusion": "weighted"}), None, memory).recall("Alfama")
    assert weighted.ranked[0].message.message_id == "m5"


def test_fact_call_knobs_are_read(memory):
    """max_rounds 0 follows no call; batch_size is the limit of a call that gives none (and the example
    in the constraint); the retriever pages a message in chunks above its chunk threshold."""
    cfg = validate_recall_config({"fact_call": {"max_rounds": 0}})
    assert not cfg.fact_calls_active
    calls = run_fact_loop("q", lambda p: 'retrieve_fact(trace_id="m1")', GenericFormatter("en"), FactRetriever(memory),
                          cfg)
    assert calls.fact_calls == [] and calls.rounds == 1 and calls.stopped == "disabled"
    f = create_formatter("x", "en", default_limit=3)
    assert f.detect_fact_request('retrieve_fact(trace_id="m1")').limit == 3
    assert "limit=3" in f.format_constraint_instruction(["m1"], "en")
    assert create_formatter("x", "en").detect_fact_request('retrieve_fact(trace_id="m1")').limit == 5
    builder = SuffixBuilder(cfg.with_updates({"summary.per_message_threshold": 30}), GenericFormatter("en"),
                            ExtractiveSummarizer(), HeuristicTokenCounter())
    out = builder.build("When?", [memory.get("m1")], 500)
    assert out.summary_count == 1 and not out.has_fact_call_instruction  # no calls offered with max_rounds 0
    chunked = FactRetriever(memory, chunk_threshold=60).retrieve("m1", limit=50)
    whole = FactRetriever(memory, chunk_threshold=10_000).retrieve("m1", limit=50)
    assert chunked.total_count > 1 and whole.total_count == 1


def test_summaries_are_keyed_by_text_not_by_message_id():
    """One builder serving two users whose messages share an id never hands one user's summary to the other."""
    cfg = validate_recall_config({"summary": {"per_message_threshold": 5, "max_tokens_per_summary": 40}})
    builder = SuffixBuilder(cfg, GenericFormatter("en"), ExtractiveSummarizer(), HeuristicTokenCounter())
    alice = Message("m1", "alice", "s", 0, "user", "Alice keeps her savings at Northbank and plans to buy a red car.",
                    T0)
    bob = Message("m1", "bob", "s", 0, "user", "Bob moved to Porto last spring and works at a small bakery there.", T0)
    a, b = builder.build("Q?", [alice], 500), builder.build("Q?", [bob], 500)
    assert "Northbank" in a.text and "Northbank" not in b.text and ("Porto" in b.text or "bakery" in b.text)

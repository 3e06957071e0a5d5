"""Every registered strategy answers real questions on the offline model over a two-session history."""
from datetime import datetime, timedelta, timezone

import pytest
from dkilab.strategies import BUILTIN, STRATEGIES, create_strategy
from dkilab.strategies.base import HISTORY_HEAD, StarvedBudget
from dkilab.types import Message

T0 = datetime(2026, 5, 2, 18, 0, tzinfo=timezone.utc)
PREFS = ["The user is vegetarian."]
LONG = ("Here is the whole story of my move. " + "We packed boxes for days and the van was late twice. " * 12
        + "In the end the new flat is at 14 Rua Augusta in Lisbon, on the third floor.")


def conversation() -> list[Message]:
    turns = [
        ("s1", "user", "My cat is called Pixel. She is grey and very playful."),
        ("s1", "assistant", "Pixel sounds lovely! Grey cats are great."),
        ("s1", "user", "I work as a nurse at the city hospital."),
        ("s1", "assistant", "That is demanding work. Thank you for what you do."),
        ("s2", "user", LONG),
        ("s2", "assistant", "Congratulations on the new flat!"),
        ("s2", "user", "Tomorrow I will buy plants for the balcony."),
        ("s2", "assistant", "Nice, a balcony garden will brighten the flat."),
    ]
    out = []
    for i, (session, role, text) in enumerate(turns):
        day = 0 if session == "s1" else 7
        out.append(Message(f"u1:{i}", "u1", session, i // 2, role, text, T0 + timedelta(days=day, minutes=i),
                           speaker="Ana" if role == "user" else "Assistant"))
    return out


@pytest.fixture(scope="module")
def memory(embedder, tmp_path_factory):
    from dkilab.memory import MemoryStore

    store = MemoryStore.open(tmp_path_factory.mktemp("strategies") / "store", embedder=embedder)
    store.add_messages(conversation())
    yield store.for_user("u1")
    store.close()


SMALL = {"max_new_tokens": 12}


def test_registry_lists_every_strategy():
    assert set(BUILTIN) <= set(STRATEGIES)
    with pytest.raises(KeyError, match="unknown strategy 'nope'.*recall_v4"):
        create_strategy("nope")
    with pytest.raises(ValueError, match=r"stable\.preference_alpha"):
        create_strategy("stable", {"preference_alpha": -1})
    with pytest.raises(ValueError, match=r"recall_v4.*budget\.min_recent_turns|min_recent_turns"):
        create_strategy("recall_v4", {"recall": {"budget": {"min_recent_turns": 9, "max_recent_turns": 2}}})


# the seeds' and dkilab's own answering strategies; a peer system (peer_mem0) drives a third-party pipeline the
# 135M model cannot (mem0 wants JSON from it): tests/strategies/test_peer_mem0.py drives it through a served model
ANSWERING = sorted(n for n, cls in STRATEGIES.items() if cls.needs_model and not n.startswith("peer_"))


@pytest.mark.parametrize("name", ANSWERING)
def test_every_registered_strategy_answers(name, memory, model):
    strategy = create_strategy(name, SMALL)
    ans = strategy.answer("What is my cat called?", memory, model, preferences=PREFS)
    assert ans.strategy == name and ans.text.strip()
    assert ans.prompt_tokens > 0 and ans.generated_tokens > 0 and ans.rounds >= 1
    assert ans.latency_ms["generation"] > 0
    if strategy.uses_kv:  # the preference block (and full_attention's history) as K/V
        assert ans.injected_tokens > model.count_tokens("The user is vegetarian.")
        assert "vegetarian" in ans.context_text
    else:
        assert ans.injected_tokens == 0
    if name != "no_memory":
        assert "u1:0" in ans.recalled_ids and "Pixel" in ans.context_text


@pytest.mark.parametrize("name", ["full_history", "recall_v4"])
def test_memory_strategies_answer_from_memory(name, memory, model):
    # (full_attention gives SmolLM2-135M the same history as K/V, and the tiny model does not use it
    # to answer here; the K/V mechanics themselves are proven in tests/models/test_kv.py)
    ans = create_strategy(name, SMALL).answer("What is my cat called?", memory, model)
    assert "Pixel" in ans.text
    assert "Pixel" not in create_strategy("no_memory", SMALL).answer("What is my cat called?", memory, model).text


def test_full_history_drops_oldest_first(memory, model):
    full = create_strategy("full_history", SMALL).answer("Where is my new flat?", memory, model)
    capped = create_strategy("full_history", {**SMALL, "max_prompt_tokens": 260}).answer(
        "Where is my new flat?", memory, model)
    assert len(full.recalled_ids) == 8 and full.metadata["dropped_oldest"] == 0
    assert 0 < len(capped.recalled_ids) < 8 and capped.recalled_ids == full.recalled_ids[-len(capped.recalled_ids):]
    assert capped.prompt_tokens <= 260


def test_recall_v4_summarises_long_messages_with_trace_ids(memory, model):
    strategy = create_strategy("recall_v4", {**SMALL, "recall": {"summary": {"per_message_threshold": 60}}})
    ans = strategy.answer("Where is my new flat?", memory, model)
    assert ans.metadata["summaries"] >= 1 and "u1:4" in ans.recalled_ids
    assert "u1:4" in ans.prompt  # the summary names its trace id
    assert "retrieve_fact" in ans.prompt  # the constraint text offers the fact call
    assert ans.rounds == 1 + len(ans.fact_calls) or ans.metadata["fact_loop_stopped"] != "answered"


def test_recall_v4_fallbacks(memory, model):
    flat = create_strategy("recall_v4", {**SMALL, "recall": {"strategy": "flat_history",
                                                               "budget": {"min_recent_turns": 1,
                                                                          "max_recent_turns": 1}}})
    ans = flat.answer("Where is my new flat?", memory, model)
    assert ans.recalled_ids == ["u1:6", "u1:7"] and ans.fact_calls == [] and ans.summary_ids == []
    assert ans.metadata["recall_strategy"] == "flat_history"
    no_calls = create_strategy("recall_v4", {**SMALL, "recall": {"summary": {"per_message_threshold": 60},
                                                                 "fact_call": {"enabled": False}}})
    ans = no_calls.answer("Where is my new flat?", memory, model)
    assert ans.metadata["summaries"] >= 1 and "retrieve_fact" not in ans.prompt and ans.rounds == 1
    assert ans.summary_ids and not ans.fact_calls_offered and ans.budget.reserved == {}


def test_recall_v4_prompt_is_far_below_full_history_on_a_long_history(embedder, tmp_path):
    """A history longer than what recall returns (the two sessions + 80 days of chat): recall_v4 shows the
    recalled messages (the long one as a summary), full_history all of them. On the 8-message history alone
    recall returns every message, so there the constraint makes recall_v4's prompt the longer one. What is under
    test is the prompt, so a scripted model answers (SmolLM2's prefill of the long prompt took most of a minute)."""
    from dkilab.memory import MemoryStore
    from dkilab.models.backends.scripted import ScriptedModel

    (tmp_path / "script.yaml").write_text("default: Pixel.\n", encoding="utf-8")
    model = ScriptedModel(tmp_path / "script.yaml")

    filler = [Message(f"u1:f{i}", "u1", f"d{i}", 0, "user" if i % 2 == 0 else "assistant",
                      f"On day {i} we talked about the weather and the tram timetable, nothing else.",
                      T0 + timedelta(days=10 + i), speaker="Ana" if i % 2 == 0 else "Assistant") for i in range(80)]
    store = MemoryStore.open(tmp_path / "long", embedder=embedder)
    store.add_messages(conversation() + filler)
    memory = store.for_user("u1")
    question = "What is my cat called?"
    v4 = create_strategy("recall_v4", {**SMALL, "recall": {"summary": {"per_message_threshold": 60}}}
                         ).answer(question, memory, model)
    full = create_strategy("full_history", SMALL).answer(question, memory, model)
    assert "u1:0" in v4.recalled_ids and "Pixel" in full.prompt
    assert v4.prompt_tokens < 0.75 * full.prompt_tokens, (v4.prompt_tokens, full.prompt_tokens)
    store.close()


def test_kv_strategies_reuse_the_preference_block(memory, model):
    strategy = create_strategy("stable", SMALL)
    strategy.answer("What do I like?", memory, model, preferences=PREFS)
    cached = dict(strategy._kv_cache)
    strategy.answer("Where do I work?", memory, model, preferences=PREFS)
    assert len(strategy._kv_cache) == 1 and next(iter(strategy._kv_cache.values())) is next(iter(cached.values()))


def test_text_only_models_are_refused_by_kv_strategies(memory):
    from dkilab.models.backends.openai_client import OpenAIChatModel

    client = OpenAIChatModel("http://127.0.0.1:9", "none")
    with pytest.raises(TypeError, match="full_attention.*K/V"):
        create_strategy("full_attention", SMALL).answer("What is my cat called?", memory, client)
    with pytest.raises(TypeError, match="stable.*preferences.*K/V"):
        create_strategy("stable", SMALL).answer("What is my cat called?", memory, client, preferences=PREFS)


def test_recall_only_ranks_without_a_model(memory):
    strategy = create_strategy("recall_only", {"max_results": 3})
    ans = strategy.answer("What is my cat called?", memory, None)
    assert ans.text == "" and ans.kind == "ranking" and ans.prompt_tokens == 0
    assert ans.recalled_ids[0] == "u1:0" and len(ans.recalled_ids) <= 3
    assert ans.latency_ms["recall"] > 0


def test_the_history_budget_is_one_figure_recorded_with_every_answer(memory, model):
    """window - instructions - question - preferences - max_new_tokens, capped by history_budget: the
    same total for every strategy; recall_v4 keeps its fact-call room beside it (room), or takes it from
    that total with the seed's accounting (reserved)."""
    totals = {}
    off = {"recall": {"fact_call": {"enabled": False}}}  # its fact room (1,046 tokens) would not fit in 600
    for name in ("full_history", "stable", "recall_v4", "full_attention"):
        ans = create_strategy(name, {**SMALL, "max_prompt_tokens": 600, **(off if name == "recall_v4" else {})}
                              ).answer("Where is my new flat?", memory, model, preferences=PREFS)
        b = ans.budget
        assert b is not None and b.window == 600 and b.preferences > 0, name
        assert b.total == max(0, 600 - b.instructions - b.query - b.preferences - b.generation), name
        assert b.used is not None and b.used <= b.history, name
        totals[name] = b.total
    assert len(set(totals.values())) == 1, totals
    with pytest.raises(StarvedBudget, match=r"history 0 of the matched budget \d+ \(< half\).*fact_calls 896"):
        create_strategy("recall_v4", {**SMALL, "max_prompt_tokens": 600}).answer(  # it was a silent 0-token history
            "Where is my new flat?", memory, model, preferences=PREFS)
    room = {"fact_calls": 100 + 2 * 32, "constraint": 150}
    fc = {"fact_call": {"max_fact_tokens": 100, "max_rounds": 2}}
    v4 = create_strategy("recall_v4", {"max_new_tokens": 40, "history_budget": 300, "recall": fc})
    b = v4.answer("Where is my new flat?", memory, model).budget
    # the fact room is kept free beside the matched history budget, not taken from it
    assert b.generation == 40 and b.room == room and b.reserved == {} and b.total == 300 and b.history == 300
    assert b.window - b.instructions - b.query - b.generation - b.history >= sum(room.values())
    seed = create_strategy("recall_v4", {"max_new_tokens": 40, "history_budget": 800,
                                         "recall": fc | {"budget": {"reserve_from_history": True}}})
    b = seed.answer("Where is my new flat?", memory, model).budget  # the seed's §2.3 accounting, asked for
    assert b.reserved == room and b.room == {} and b.history == b.total - 100 - 64 - 150
    off = create_strategy("recall_v4", {"max_new_tokens": 40, "recall": {"fact_call": {"enabled": False}}})
    assert off.answer("Where is my new flat?", memory, model).budget.room == {}
    capped = create_strategy("recall_v4", {**SMALL, "history_budget": 50, "recall": {"fact_call": {"enabled": False}}}
                             ).answer("Where is my new flat?", memory, model)
    assert capped.budget.total == 50 and capped.metadata["history_tokens"] <= 50
    fa = create_strategy("full_attention", {**SMALL, "history_budget": 64}).answer("Where is my new flat?", memory,
                                                                                   model)
    # the K/V block is the history lines (within the budget) under the history heading, which every strategy
    # counts in `instructions` (text strategies have it in their prompt), plus its newline and the BOS sink
    head = model.count_tokens(HISTORY_HEAD["en"])
    assert fa.budget.total == 64 and fa.budget.used <= 64 and fa.injected_tokens <= 64 + head + 2
    with pytest.raises(ValueError, match="recall_v4.context_budget: unknown key; known keys: .*history_budget"):
        create_strategy("recall_v4", {"context_budget": 50})


def test_recall_knobs_from_yaml_reach_their_components(memory, model, tmp_path):
    from dkilab.text.summarize import ExtractiveSummarizer, LLMSummarizer

    llm = create_strategy("recall_v4", {**SMALL, "recall": {"summary": {"strategy": "llm"}}})
    assert isinstance(llm._builder(model, "en").summarizer, LLMSummarizer)
    assert isinstance(create_strategy("recall_v4", SMALL)._builder(model, "en").summarizer, ExtractiveSummarizer)
    ref = tmp_path / "ref.yaml"
    ref.write_text(
        "reference_resolver:\n  reference_mappings_en:\n    that gadget: {scope: last_1_3_turns, type: temporal}\n")
    strategy = create_strategy("recall_v4", {"reference": {"config": str(ref), "last_few_turns": 2}})
    assert strategy.resolver.config.last_few_turns == 2
    assert "that gadget" in strategy.resolver.config.reference_mappings_en
    assert strategy.identity("m")["reference_resolver"]["last_few_turns"] == 2


@pytest.mark.parametrize("name", ["recall_v4", "full_attention", "recall_agent"])  # the strategies with caches
def test_one_strategy_instance_over_two_users_with_colliding_ids_never_mixes_them(name, model, embedder, tmp_path):
    """Alice and Bob both have messages m0..m3 (ids are per user): one strategy instance answers for
    each in turn, and every cache it keeps (summaries, K/V blocks, query embeddings) stays with its user."""
    from dkilab.memory import MemoryStore

    story = {"alice": "Alice keeps bees on the roof of the Lisbon library and sells the honey on Fridays.",
             "bob": "Bob repairs old bicycles in a garage in Porto and rides to the coast every Sunday."}
    with MemoryStore.open(tmp_path / "s", embedder=embedder) as store:
        for user, text in story.items():
            store.add_messages([Message(f"m{i}", user, "s1", i, "user" if i % 2 == 0 else "assistant",
                                        text * 3 if i == 0 else f"{user} message {i}", T0 + timedelta(minutes=i))
                                for i in range(4)])
        strategy = create_strategy(name, {"max_new_tokens": 1, **({"recall": {"summary": {"per_message_threshold": 20}}}
                                                                   if name == "recall_v4" else {})})
        for user, other in (("alice", "bob"), ("bob", "alice"), ("alice", "bob")):
            answer = strategy.answer("Tell me about the bees, honey, bicycles, Lisbon or Porto.", store.for_user(user),
                                     model)
            seen = answer.prompt + answer.context_text
            assert story[user].split()[0] in seen, (user, seen[:300])
            marker = {"alice": "library", "bob": "garage"}  # words of each story the question does not contain
            assert story[other].split()[0] not in seen and marker[other] not in seen, (user, seen[:300])


@pytest.mark.parametrize("name,params", [
    ("no_memory", {}), ("full_history", {}), ("stable", {}),
    ("recall_v4", {"recall": {"fact_call": {"enabled": False}}}),
    ("recall_v4", {"recall": {"fact_call": {"max_rounds": 0}}}),
])
@pytest.mark.parametrize("reply", ['retrieve_fact(trace_id="u1:4", offset=0, limit=2)', "retrieve_",
                                   '<function=retrieve_fact>{"trace_id": "u1:4"}</function>'])
def test_a_call_left_in_any_strategys_reply_is_no_answer(name, params, reply, memory, tmp_path):
    """Issue 84: with no loop (or the loop off) the model's call text was its answer; `retrieve_` (a call cut at
    max_new_tokens) too. Now it is no answer: empty, `final_call`, the text kept for review."""
    import yaml
    from dkilab.models import load_model

    path = tmp_path / "calls.yaml"
    path.write_text(yaml.safe_dump({"answers": [], "default": reply}))
    ans = create_strategy(name, {**SMALL, **params}).answer("What is my cat called?", memory,
                                                            load_model(f"scripted:{path}", max_context=4096))
    assert ans.text == "" and ans.metadata["final_call"] is True and reply.startswith(ans.metadata["final_output"])
    assert ans.fact_calls == []

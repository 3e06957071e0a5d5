"""The fact loop ends in an answer (issue 57): once the rounds or the fact budget are spent the last
generation keeps the facts gathered and is told to answer now (text) or offered no tools (native); an
output that is still a call is a final_call, recorded as no answer and never as an abstention; retrieval
is scoped to the offered trace ids."""
import os

from dkilab.prompts import FINAL
from dkilab.recall import FactRetriever, GenericFormatter, run_fact_loop, validate_recall_config

from tests.conftest import ROOT
from tests.recall.test_pipeline import memory  # noqa: F401  (the fixture: a small store with a long message m1)


def test_a_spent_fact_budget_keeps_earlier_facts_and_asks_for_an_answer(memory):
    cfg = validate_recall_config({"fact_call": {"max_rounds": 3, "max_fact_tokens": 40}})
    prompts = []

    def generate(prompt):
        prompts.append(prompt)
        return 'retrieve_fact(trace_id="m1", offset=0, limit=1)'

    res = run_fact_loop("History...\nQuestion: when?", generate, GenericFormatter("en"),
                        FactRetriever(memory, chunk_threshold=60), cfg, offered=["m1"])
    assert res.stopped == "max_fact_tokens" and res.final_call
    assert FINAL["en"] in prompts[-1] and all(FINAL["en"] not in p for p in prompts[:-1])
    kept = prompts[-1].count("[FACT_SEGMENT")
    assert kept == len(res.fact_calls) - 1 and res.fact_tokens <= 40  # the facts that fit stay
    # the one that did not fit is marked: recall_v4 leaves it out of the context (answer_in_context)
    assert [c.kept for c in res.fact_calls] == [True] * kept + [False]


def test_an_answer_after_the_final_instruction_is_not_a_final_call(memory):
    cfg = validate_recall_config({"fact_call": {"max_rounds": 1}})

    def generate(prompt):
        return "Next Friday." if FINAL["cn"] in prompt else 'retrieve_fact(trace_id="m1")'

    res = run_fact_loop("历史……\n问题：什么时候？", generate, GenericFormatter("cn"), FactRetriever(memory), cfg,
                        offered=["m1"])
    assert res.stopped == "max_rounds" and not res.final_call and res.output == "Next Friday." and res.rounds == 2


def test_native_last_generation_is_offered_no_tools(memory):
    from dkilab.recall.formatters import NativeToolFormatter

    cfg = validate_recall_config({"fact_call": {"max_rounds": 2}})
    offered_tools = []

    def generate(prompt, turns, tools):
        offered_tools.append(tools)
        return '<tool_call>{"name": "retrieve_fact", "arguments": {"trace_id": "m1"}}</tool_call>'

    res = run_fact_loop("q", generate, NativeToolFormatter("en"), FactRetriever(memory), cfg, offered=["m1"],
                        native=True)
    assert offered_tools == [True, True, False] and res.final_call


def test_an_id_never_offered_is_not_served(memory):
    cfg = validate_recall_config({"fact_call": {"max_rounds": 1}})
    prompts = []
    replies = iter(['retrieve_fact(trace_id="m2")', "done"])

    def generate(prompt):
        prompts.append(prompt)
        return next(replies)

    res = run_fact_loop("q", generate, GenericFormatter("en"), FactRetriever(memory), cfg, offered=["m1"])
    call = res.fact_calls[0]
    assert memory.get("m2") is not None  # it exists in the store ...
    assert not call.valid and not call.found and memory.get("m2").content not in prompts[-1]  # ... but is not served
    assert res.output == "done" and not res.final_call


def test_a_tool_happy_model_never_has_a_call_recorded_as_its_answer(tmp_path):
    from dkilab.eval.harness.experiment import experiment_from_dict
    from dkilab.eval.harness.runner import run_experiment

    v4 = {"name": "recall_v4", "params": {"recall": {"summary": {"per_message_threshold": 20}}}}
    cfg = experiment_from_dict({
        "name": "tool-happy", "tracing": False,
        "model": {"spec": "scripted:tests/data/personas/tool_happy.yaml", "max_context": 4096},
        "defaults": {"history_budget": 2048},
        "datasets": [{"name": "scripted", "path": "tests/data/scripted/dialogues.json"}],
        "strategies": [
            v4 | {"label": "small_fact_budget", "params": {"recall": v4["params"]["recall"] | {
                "fact_call": {"max_fact_tokens": 20}}}},
            v4 | {"label": "two_rounds", "params": {"recall": v4["params"]["recall"]
                                                    | {"fact_call": {"max_rounds": 2}}}}]})
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        results = run_experiment(cfg, uri=f"sqlite:///{tmp_path / 'm.db'}", progress=False, echo=lambda *a: None)
    finally:
        os.chdir(cwd)
    assert len(results) == 2
    for r in results:
        assert len(r.rows) == 4 and all(row.get("final_call") == 1.0 for row in r.rows), r.rows
        assert all(row["prediction"] == "" for row in r.rows)  # no answer, and never the call
        assert r.metrics["final_call"] == 1.0 and r.metrics.get("abstention_rate_answerable") == 0.0


def test_a_page_over_the_room_once_formatted_is_cut_to_fit_and_read(memory):
    """The retriever fills a page to its content budget; each record's header then takes it over the loop's
    room. The loop asks for fewer records, so the model reads a page (and may ask for the next), never nothing."""
    cfg = validate_recall_config({"fact_call": {"max_rounds": 1, "max_fact_tokens": 60}})
    prompts = []

    def generate(prompt):
        prompts.append(prompt)
        return 'retrieve_fact(trace_id="m1", offset=0, limit=50)'

    retriever = FactRetriever(memory, chunk_threshold=20, max_fact_tokens=60)
    whole = retriever.retrieve("m1", offset=0, limit=50)
    assert len(whole.messages) > 1  # a page of several records within the content budget
    res = run_fact_loop("History...\nQuestion: when?", generate, GenericFormatter("en"), retriever, cfg,
                        offered=["m1"])
    (call,) = res.fact_calls
    assert call.kept and 0 < res.fact_tokens <= 60 and prompts[-1].count("[FACT_SEGMENT") == 1

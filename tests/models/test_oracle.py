"""scripted:oracle (dkilab/models/oracle.py): it answers the gold exactly when the evidence is shown
verbatim or fetched, calls retrieve_fact on a summarised evidence message while it may, and abstains
otherwise."""
import json
from datetime import datetime, timezone

import pytest
from dkilab.models import load_model
from dkilab.models.oracle import OracleModel
from dkilab.models.tool_calls import parse_tool_calls
from dkilab.prompts import ABSTAIN_PHRASE, FINAL
from dkilab.strategies.base import PlannedKV
from dkilab.types import Conversation, Message, QAItem

T = datetime(2026, 3, 2, tzinfo=timezone.utc)
EVIDENCE = "The shelter staff had been calling her Pixel, so we kept the name."


def _oracle(question="What is my cat called?", answer="Pixel", evidence=("c:1",), answerable=True):
    conv = Conversation("c", "u", [Message("c:1", "u", "s1", 0, "user", EVIDENCE, T),
                                   Message("c:2", "u", "s1", 1, "assistant", "Lovely name.", T)])
    oracle = OracleModel()
    oracle.expect(QAItem(question, answer, evidence_ids=list(evidence), answerable=answerable), conv)
    return oracle


def _ask(oracle, user, tools=None, turns=(), memories=None):
    msgs = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": user}, *turns]
    return oracle.generate_full(msgs, max_new_tokens=64, tools=tools, memories=memories).text


def test_it_is_loaded_by_its_spec_and_counts_what_it_reads():
    oracle = load_model("scripted:oracle", max_context=4096)
    assert isinstance(oracle, OracleModel) and oracle.context_window == 4096
    assert oracle.supports_kv and oracle.model is None


def test_visible_evidence_is_answered_and_missing_evidence_is_declined():
    shown = f"Conversation history:\n[2026-03-02] user: {EVIDENCE}\nQuestion: What is my cat called?"
    assert _ask(_oracle(), shown) == "Pixel"
    assert _ask(_oracle(), "Question: What is my cat called?") == ABSTAIN_PHRASE["en"]
    assert _ask(_oracle(answerable=False, answer=None), shown) == ABSTAIN_PHRASE["en"]
    assert _ask(_oracle(evidence=()), shown) == ABSTAIN_PHRASE["en"]  # no evidence ids: nothing to check
    kv = PlannedKV(f"[2026-03-02] user: {EVIDENCE}\n", 20)  # a K/V memory is read as its text
    assert _ask(_oracle(), "Question: What is my cat called?", memories=[(kv, 1.0)]) == "Pixel"
    assert _ask(_oracle(), "Question: What is my cat called?", memories=[(kv, 0.0)]) == ABSTAIN_PHRASE["en"]


def test_a_summarised_evidence_message_is_fetched_then_answered():
    prompt = ('[SUMMARY trace_id="c:1" conf=medium]\nuser adopted a cat\n[/SUMMARY]\n'
              'To check a summary call retrieve_fact(trace_id="c:1", limit=5)\nCurrent user question: What is my cat '
              'called?')
    call = _ask(_oracle(), prompt)
    assert call == 'retrieve_fact(trace_id="c:1", offset=0, limit=50)'
    fetched = prompt + f'\n[FACT_SEGMENT trace_id="c:1" offset=0]\n{EVIDENCE}\n[/FACT_SEGMENT]'
    assert _ask(_oracle(), fetched) == "Pixel"
    assert _ask(_oracle(), prompt + "\n" + FINAL["en"]) == ABSTAIN_PHRASE["en"]  # told to answer now: no call


def test_native_calls_go_through_tools_and_stop_when_tools_are_withdrawn():
    prompt = '[SUMMARY trace_id="c:1" conf=medium]\nuser adopted a cat\n[/SUMMARY]\nWhat is my cat called?'
    tool = {"type": "function", "function": {"name": "retrieve_fact"}}
    (call,) = parse_tool_calls(_ask(_oracle(), prompt, tools=[tool]))
    assert call.name == "retrieve_fact" and call.arguments["trace_id"] == "c:1"
    turns = [{"role": "assistant", "content": "", "tool_calls": [{"id": "x", "type": "function", "function": {
        "name": "retrieve_fact", "arguments": json.dumps({"trace_id": "c:1"})}}]},
        {"role": "tool", "tool_call_id": "x", "content": f'[FACT_SEGMENT trace_id="c:1" offset=0]\n{EVIDENCE}'}]
    assert _ask(_oracle(), prompt, tools=[tool], turns=turns) == "Pixel"
    assert _ask(_oracle(), prompt, turns=turns[:1]) == ABSTAIN_PHRASE["en"]


def test_a_question_it_was_not_told_of_is_an_error_not_a_guess():
    with pytest.raises(RuntimeError, match="not told the gold"):
        _ask(_oracle(), "Question: Where do I live?")
    with pytest.raises(RuntimeError, match="not told the gold"):
        _ask(OracleModel(), "Question: What is my cat called?")


def test_a_message_fetched_in_part_is_not_read_and_the_oracle_pages_on():
    """Issue 84: a segment's header counted as the whole message, `has_more=true` or not: the oracle answered
    after a page holding 2 of 9 sentences. Now it reads on from the first record it has not seen."""
    from dkilab.models.oracle import fetched

    prompt = ('[SUMMARY trace_id="c:1" conf=medium]\nuser adopted a cat\n[/SUMMARY]\n'
              'To check a summary call retrieve_fact(trace_id="c:1", limit=5)\nCurrent user question: What is my cat '
              'called?')
    page1 = '[FACT_SEGMENT trace_id="c:1" offset=0 total=3 has_more=true]\n[t] user: The shelter staff\n' \
            '[t] user: had been calling her\n[/FACT_SEGMENT]'
    page2 = '[FACT_SEGMENT trace_id="c:1" offset=2 total=3 has_more=false]\n[t] user: Pixel.\n[/FACT_SEGMENT]'
    assert fetched(page1) == {"c:1": 2} and fetched(page1 + "\n" + page2) == {"c:1": None}
    assert _ask(_oracle(), prompt + "\n" + page1) == 'retrieve_fact(trace_id="c:1", offset=2, limit=50)'
    assert _ask(_oracle(), prompt + "\n" + page1 + "\n" + FINAL["en"]) == ABSTAIN_PHRASE["en"]  # not read: declines
    assert _ask(_oracle(), prompt + "\n" + page1 + "\n" + page2) == "Pixel"

"""The question rule of the abstention detector (dkilab/text/abstention/asked.py): a reply that says the asked value
is absent from the record declines unless it gives a value of the asked kind; phrasings written here, and the
labelled GPT-4o-mini replies (datasets/fixtures/abstention/real_replies_labels.jsonl) when the data is present."""
import json
import os

import pytest
from dkilab.text.abstention.asked import asked_decision, question_kind

CASES = [
    # (question, reply, decision)
    ("When did Ana move to Lisbon?", "Ana moved to Lisbon, but the exact date is not specified in the notes.", True),
    ("When did Ana move to Lisbon?", "Around 3 March 2021, though she did not specify the exact day.", False),
    ("When did Ana move to Lisbon?", "About two years before her wedding; the exact date is not mentioned.", False),
    ("When did Ana move to Lisbon?", "The notes do not mention when Ana moved to Lisbon.", True),
    ("How long was the course?", "The duration of the course is not specified anywhere.", True),
    ("How long was the course?", "Nearly two weeks, although the exact length is not stated.", False),
    ("How many cats does Ana have?", "She has at least three, but the exact number is not mentioned.", False),
    ("How many cats does Ana have?", "There is no information about how many cats Ana has.", True),
    ("Did Ana go to Rome?", "No, there is no evidence that she went.", False),  # a no commits
    ("Did Ana go to Rome?", "Ana has not been to Rome, as there is no mention of it anywhere.", False),
    ("Did Ana go to Rome?", "There is no information about a trip to Rome.", True),
    ("Did Ana go to Rome?", "No evidence suggests that she did.", True),  # "no evidence" is no "No,"
    ("Which bakery does Ana like?", "Ana likes a bakery near her office, but its name is not mentioned.", True),
    ("Which bakery does Ana like?", "The name is not given; she may mean \"Pastelaria Alfama\" from the market.",
     None),  # a value: the detector decides
    ("Which bakery does Ana like?", "Pastelaria Alfama.", None),  # no absence statement: not this rule's
    ("你住在哪里？", "没有提到你住在哪里。", None),  # English only
    (None, "The exact date is not specified.", None),  # no question
]


@pytest.mark.parametrize("question,reply,expected", CASES)
def test_the_reply_is_read_with_its_question(question, reply, expected):
    assert asked_decision(question, reply) is expected


def test_question_kinds():
    assert [question_kind(q) for q in ("When did she go?", "What year was it?", "How long did it take?",
                                       "How old is Ana?", "Would Ana move abroad?", "Who is Jill?")] == [
        "when", "when", "duration", "count", "yes_no", "entity"]


def test_the_harness_scores_a_decline_that_tells_related_facts_as_a_decline():
    from dkilab.eval.scoring.base import Scored
    from dkilab.types import Answer, QAItem

    item = QAItem(question="When did Ana meet Jean?", answer=None, answerable=False, qid="q")
    reply = Answer("Ana met Jean at the shelter, but the exact date of their meeting is not specified.")
    scored = Scored(item, reply)
    assert scored.abstained and scored.abstention_path == "asked"
    # read alone the same reply is an answer (what every reply was before the question rule)
    from dkilab.text.abstention.learned import get_detector

    assert get_detector("structural").decide(reply.text)[0] is False


AUDIT = os.path.join(os.environ.get("DKILAB_DATA_DIR", "/nonexistent"), "locomo_audit", "fc-baseline")


@pytest.mark.skipif(not os.path.isdir(AUDIT), reason="needs the LoCoMo audit under $DKILAB_DATA_DIR")
def test_the_real_reply_figures_shipped_with_the_weights_are_what_the_labels_give():
    from dkilab.bench import abstention_real as ar
    from dkilab.text.abstention.learned import WEIGHTS, get_detector

    rows = ar.load(os.environ["DKILAB_DATA_DIR"])
    assert {r["key"] for r in rows} == {p["key"] for p in ar.pool(os.environ["DKILAB_DATA_DIR"])}  # as drawn
    held = ar.figures(ar.decide_with(get_detector("hybrid")), rows)["held_out"]
    shipped = json.loads(WEIGHTS.read_text(encoding="utf-8"))["figures"]["real_replies"]["en"]
    assert shipped["labels_sha1"] == ar.digest(ar.LABELS.read_text(encoding="utf-8"))
    assert (shipped["precision"], shipped["recall"]) == (round(held["precision"], 4), round(held["recall"], 4))
    assert held["precision"] >= 0.95 and held["recall"] >= 0.9
    alone = ar.figures(lambda q, a: get_detector("hybrid").decide(a)[0], rows)["held_out"]
    assert alone["recall"] < held["recall"]  # the question rule is what catches them

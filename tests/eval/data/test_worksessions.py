"""The generated work-sessions set (issue 59's long-message development data): long assistant answers,
questions about facts stated many sessions earlier whose evidence holds the answer, changed facts asked for
their current value, and the same conversations every time."""
from __future__ import annotations

import statistics

import pytest
from dkilab.eval.data import dataset_info, load_worksessions
from dkilab.eval.data import worksessions as ws


@pytest.fixture(scope="module")
def convs():
    return load_worksessions()


def test_it_is_registered_english_and_generated_the_same_every_time(convs):
    assert dataset_info("worksessions")["language"] == "en"
    again = load_worksessions(limit=2)
    assert [m.content for m in again[1].messages] == [m.content for m in convs[1].messages]
    assert len(convs) == ws.USERS and all(len(c.questions) == ws.QUESTIONS_PER_USER for c in convs)
    assert len({c.user_id for c in convs}) == ws.USERS


def test_assistant_answers_are_long_and_user_turns_short(convs):
    words = lambda role: [len(m.content.split()) for c in convs for m in c.messages if m.role == role]  # noqa: E731
    assert statistics.median(words("assistant")) > 150 and statistics.median(words("user")) < 40
    assert all("```python" in m.content for c in convs for m in c.messages if m.role == "assistant")


def test_every_answer_is_in_its_evidence_sessions_earlier_and_not_in_the_question(convs):
    for c in convs:
        by_id = {m.message_id: m for m in c.messages}
        last = c.messages[-1].session_id
        for q in c.questions:
            assert q.evidence_ids and q.session_id == last, q.qid
            said = [by_id[e] for e in q.evidence_ids]
            assert all(m.session_id != last for m in said), q.qid  # stated sessions before the question
            assert q.answer in said[-1].content, q.qid  # the latest statement holds the current value
            assert q.answer not in q.question, q.qid


def test_a_changed_fact_has_both_statements_as_evidence(convs):
    changed = [q for c in convs for q in c.questions if len(q.evidence_ids) == 2]
    assert len(changed) >= ws.USERS  # two per user, unless both changes hit one statement's session order
    for q in changed:
        first, later = q.evidence_ids
        assert int(first.split(":s")[1].split("#")[0]) < int(later.split(":s")[1].split("#")[0])


def test_each_kind_of_fact_is_stated_for_several_services(convs):
    """A question is told apart by its service and its kind: the same kind is asked about other services."""
    for c in convs[:4]:
        kinds = [q.category for q in c.questions]
        assert len(set(kinds)) == len(ws.FACTS)
        text = " ".join(m.content for m in c.messages)
        for q in c.questions:
            service = next(s for s in ws.SERVICES if s in q.question)
            assert text.count(service) >= 5

"""Datasets at session granularity: each session of a conversation is one memory item, its turns joined in order
("Caroline: ..." one per line), and each question's evidence is the sessions its evidence turns are in (the
session-level recall LongMemEval reports). A chat assistant's memory is made of long turns; the public dialogue
sets have short ones (LoCoMo's median turn is 28 tokens), and at session granularity LoCoMo's items are long:
median 704 tokens, 10th percentile 512, all 272 over MiniLM's 256-token window (datasets/locomo_sessions.md).

`granularity: session` on any dataset of an experiment applies the same transform; `locomo_sessions` is LoCoMo so
transformed, registered so that `dkilab bench retrieval` and the fitted-data checks know it by name.

What it is not: real long turns. A session is a dialogue of short turns by two people, so a question's words
still meet its evidence in one line of a long item, and with about 27 sessions a conversation, top-10 recall is
over a third of the items."""
from __future__ import annotations

from dataclasses import replace

from dkilab.eval.data.base import register_dataset
from dkilab.eval.data.locomo import FILE, load_locomo
from dkilab.types import Conversation, Message


def by_session(convs: list[Conversation]) -> list[Conversation]:
    """Each conversation with one message per session, in order, and its questions' evidence mapped to the
    sessions; new objects (a loader's cached conversations are left as they are)."""
    return [_one(c) for c in convs]


def _one(conv: Conversation) -> Conversation:
    sessions: dict[str, list[Message]] = {}
    for m in conv.messages:
        sessions.setdefault(m.session_id, []).append(m)
    messages, where = [], {}
    for n, (sid, turns) in enumerate(sessions.items(), start=1):
        first = turns[0]
        lines = [f"{m.speaker or m.role}: {m.content}" for m in turns]
        messages.append(Message(message_id=sid, user_id=conv.user_id, session_id=sid, turn_id=1, role="user",
                                content="\n".join(lines), timestamp=first.timestamp,
                                metadata={"granularity": "session", "turns": len(turns),
                                          **({"session_date": first.metadata["session_date"]}
                                             if "session_date" in first.metadata else {})}))
        where.update({m.message_id: sid for m in turns})
    line = {m.message_id: f"{m.speaker or m.role}: {m.content}" for m in conv.messages}
    # the evidence turns' own lines, by session: what a reader of a long item needs to have read of it
    questions = [replace(q, evidence_ids=list(dict.fromkeys(where[e] for e in q.evidence_ids if e in where)),
                         metadata={**q.metadata, "evidence_lines": {sid: [line[e] for e in q.evidence_ids
                                                                          if where.get(e) == sid]
                                                                    for sid in dict.fromkeys(where[e] for e in
                                                                                             q.evidence_ids
                                                                                             if e in where)}})
                 for q in conv.questions]
    return replace(conv, messages=messages, questions=questions, metadata={**conv.metadata, "granularity": "session"})


@register_dataset("locomo_sessions", language="en", scorer="locomo", version="2", sources=(FILE,),
                  description="LoCoMo at session granularity: each session one long memory item (median 704 tokens)")
def load_locomo_sessions(data: str | None = None, limit: int | None = None, question_limit: int | None = None):
    return by_session(load_locomo(data, limit=limit, question_limit=question_limit))

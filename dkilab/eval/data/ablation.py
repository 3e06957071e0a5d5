"""Evidence-ablation probes: take every other answerable question that has evidence, delete its
evidence messages from the history, and ask it again — the right answer is now "not in memory".

Questions whose evidence overlaps a probe's are dropped (they would lose their evidence too); the
rest stay answerable with their history intact. Works for any dataset with evidence ids, which
gives abstention tests in Chinese (MemDaily) and wherever a dataset has no unanswerable questions.
"""
from __future__ import annotations

from dataclasses import replace

from dkilab.types import Conversation, QAItem


def ablation_split(conversations: list[Conversation], every: int = 2) -> list[Conversation]:
    out = []
    for conv in conversations:
        candidates = [q for q in conv.questions if q.answerable and q.evidence_ids]
        probes = candidates[::every]
        removed = {e for q in probes for e in q.evidence_ids}
        questions: list[QAItem] = []
        for q in conv.questions:
            if any(q is p for p in probes):
                questions.append(replace(q, answer=None, answerable=False, category="ablation",
                                         qid=f"{q.qid or q.question}:ablated",
                                         metadata={**q.metadata, "probe_of": q.answer,
                                                   "removed": list(q.evidence_ids)}))
            elif not set(q.evidence_ids) & removed:
                questions.append(q)
        messages = [m for m in conv.messages if m.message_id not in removed]
        out.append(replace(conv, conversation_id=f"{conv.conversation_id}:ablation", messages=messages,
                           questions=questions, metadata={**conv.metadata, "ablated_messages": len(removed)}))
    return out

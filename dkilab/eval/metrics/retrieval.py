"""Retrieval metrics over a ranked list of message ids and the gold evidence ids."""
from __future__ import annotations

from dkilab.eval.metrics.base import metric


def evidence_recall(ranked_ids: list[str], evidence: list[str], k: int) -> float:
    """Share of the evidence messages among the top k."""
    return len(set(ranked_ids[:k]) & set(evidence)) / len(set(evidence))


def reciprocal_rank(ranked_ids: list[str], evidence: list[str]) -> float:
    gold = set(evidence)
    return next((1.0 / (i + 1) for i, mid in enumerate(ranked_ids) if mid in gold), 0.0)


RECALL_KS = (1, 5, 10, 20)  # evidence recall@k of retrieval-only answers (strategy recall_only)


def _recall_metric(k: int) -> None:
    def fn(q):
        ev = q.item.evidence_ids
        return evidence_recall(q.answer.recalled_ids, ev, k) if ev else None

    metric(f"recall_at_{k}", kind="retrieval", higher_is_better=True, per_category=k == 10,
           rank={5: 30, 10: 31, 20: 32}.get(k), headline=k == 10,
           description=f"share of a question's evidence messages in the top {k} recalled")(fn)


for _k in RECALL_KS:
    _recall_metric(_k)


@metric("mrr", kind="retrieval", higher_is_better=True, per_category=True, rank=33,
        description="reciprocal rank of the first evidence message")
def _mrr(q):
    return reciprocal_rank(q.answer.recalled_ids, q.item.evidence_ids) if q.item.evidence_ids else None

"""Retrieval metrics over a ranked list of message ids and the gold evidence ids."""
from __future__ import annotations


def evidence_recall(ranked_ids: list[str], evidence: list[str], k: int) -> float:
    """Share of the evidence messages among the top k."""
    return len(set(ranked_ids[:k]) & set(evidence)) / len(set(evidence))


def reciprocal_rank(ranked_ids: list[str], evidence: list[str]) -> float:
    gold = set(evidence)
    return next((1.0 / (i + 1) for i, mid in enumerate(ranked_ids) if mid in gold), 0.0)

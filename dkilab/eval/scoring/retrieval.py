"""Retrieval metrics over a ranked list of message ids and the gold evidence ids.

What each one corresponds to in published work:
- `recall_at_k` (evidence recall@k): the share of a question's evidence messages in the top k: LoCoMo's
  retrieval "recall accuracy" (Maharana et al. 2024, RAG tables, dialogue-turn granularity).
- `any_hit_at_k`: 1 if any evidence message is in the top k: LongMemEval's `recall_any@k` at turn level
  (Wu et al. 2025), also what most memory-system READMEs call "hit@k".
- `session_any_hit_at_k`: the ranking collapsed to sessions (each session at the rank of its best
  message), 1 if a session holding evidence is among the top k: LongMemEval's session-level
  `recall_any@k`.
- `ndcg_at_10`: binary-relevance NDCG@10 over messages: LongMemEval's `ndcg_any@10` (BEIR's nDCG@10).
- `mrr`: reciprocal rank of the first evidence message.
"""
from __future__ import annotations

import math

from dkilab.eval.scoring.base import metric


def evidence_recall(ranked_ids: list[str], evidence: list[str], k: int) -> float:
    """Share of the evidence messages among the top k."""
    return len(set(ranked_ids[:k]) & set(evidence)) / len(set(evidence))


def reciprocal_rank(ranked_ids: list[str], evidence: list[str]) -> float:
    gold = set(evidence)
    return next((1.0 / (i + 1) for i, mid in enumerate(ranked_ids) if mid in gold), 0.0)


def any_hit(ranked_ids: list[str], evidence: list[str], k: int) -> float:
    """1.0 if any evidence message is among the top k."""
    return float(bool(set(ranked_ids[:k]) & set(evidence)))


def session_ranking(ranked_sessions: list[str]) -> list[str]:
    """The sessions of a message ranking, each once, at the rank of its best message."""
    return list(dict.fromkeys(ranked_sessions))


def ndcg(ranked_ids: list[str], evidence: list[str], k: int) -> float:
    """Binary-relevance NDCG@k: DCG of the top k over the DCG of a ranking with every evidence message first."""
    gold = set(evidence)
    dcg = sum(1.0 / math.log2(i + 2) for i, mid in enumerate(ranked_ids[:k]) if mid in gold)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(len(gold), k)))
    return dcg / ideal if ideal else 0.0


RECALL_KS = (1, 5, 10, 20)  # evidence recall@k of retrieval-only answers (strategy recall_only)


def _recall_metric(k: int) -> None:
    def fn(q):
        ev = q.item.evidence_ids
        return evidence_recall(q.answer.recalled_ids, ev, k) if ev else None

    metric(f"recall_at_{k}", group="retrieval",
           kind="retrieval", higher_is_better=True, per_category=k == 10, rate=True,
           rank={5: 30, 10: 31, 20: 32}.get(k), headline=k == 10, plot=1 if k == 10 else None,
           label=f"recall@{k} (0-1)",
           description=f"share of a question's evidence messages in the top {k} recalled")(fn)


for _k in RECALL_KS:
    _recall_metric(_k)


@metric("mrr", group="retrieval", kind="retrieval", higher_is_better=True, per_category=True, rank=33,
        description="reciprocal rank of the first evidence message")
def _mrr(q):
    return reciprocal_rank(q.answer.recalled_ids, q.item.evidence_ids) if q.item.evidence_ids else None


@metric("any_hit_at_5", group="retrieval", kind="retrieval", higher_is_better=True, rank=34,
        description="1 if any evidence message is in the top 5 (LongMemEval recall_any@5, turn level)")
def _any5(q):
    return any_hit(q.answer.recalled_ids, q.item.evidence_ids, 5) if q.item.evidence_ids else None


@metric("any_hit_at_10", group="retrieval", kind="retrieval", higher_is_better=True, per_category=True, rank=35,
        description="1 if any evidence message is in the top 10 (LongMemEval recall_any@10, turn level)")
def _any10(q):
    return any_hit(q.answer.recalled_ids, q.item.evidence_ids, 10) if q.item.evidence_ids else None


@metric("session_any_hit_at_5", group="retrieval", kind="retrieval", higher_is_better=True, per_category=True, rank=36,
        description="1 if a session holding evidence is among the top 5 sessions of the ranking "
                    "(LongMemEval recall_any@5, session level)")
def _session_any5(q):
    gold = q.item.metadata.get("evidence_sessions")
    ranked = q.answer.metadata.get("recalled_sessions")
    if not gold or ranked is None:
        return None
    return float(bool(set(session_ranking(ranked)[:5]) & set(gold)))


@metric("ndcg_at_10", group="retrieval", kind="retrieval", higher_is_better=True, per_category=True, rank=37,
        description="binary-relevance NDCG@10 over the ranked messages (LongMemEval ndcg_any@10)")
def _ndcg10(q):
    return ndcg(q.answer.recalled_ids, q.item.evidence_ids, 10) if q.item.evidence_ids else None

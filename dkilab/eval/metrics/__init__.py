"""Metrics (ARCHITECTURE §6): answer quality, hallucination, fact calls, retrieval, cost."""
from dkilab.eval.metrics.abstention import is_abstention
from dkilab.eval.metrics.claims import claims, unsupported_claims, unsupported_rate
from dkilab.eval.metrics.qa import (choice_accuracy, exact_match, f1_multi, f1_score, locomo_score, normalize_answer,
                                    pick_choice, zh_exact_match, zh_f1, zh_tokens)
from dkilab.eval.metrics.retrieval import evidence_recall, reciprocal_rank
from dkilab.eval.metrics.score import (aggregate, aggregate_by_category, primary_metric, quality,
                                       score_answer)

__all__ = ["is_abstention", "claims", "unsupported_claims", "unsupported_rate", "choice_accuracy", "exact_match",
           "f1_multi", "f1_score", "locomo_score", "normalize_answer", "pick_choice", "zh_exact_match", "zh_f1",
           "zh_tokens", "evidence_recall", "reciprocal_rank", "aggregate", "aggregate_by_category", "primary_metric", "quality",
           "score_answer"]

"""Metrics (docs/architecture.md §4): answer quality, hallucination, fact calls, retrieval, cost — each declared
once (`base.metric` / `base.declare`) with its aggregation, direction and table position; scorers per
dataset (`base.scorer`); bootstrap intervals and paired comparisons (`bootstrap`)."""
from dkilab.eval.scoring.abstention import detector_card, evaluate_detector, is_abstention, load_phrasings
from dkilab.eval.scoring.base import (
                                      METRICS,
                                      SCORERS,
                                      Metric,
                                      Scored,
                                      aggregate,
                                      category_metrics,
                                      declare,
                                      declared,
                                      metric,
                                      metrics_version,
                                      primary_metric,
                                      scorer,
                                      table_metrics,
)
from dkilab.eval.scoring.bootstrap import aggregate_by_category
from dkilab.eval.scoring.claims import claims, unsupported_claims, unsupported_rate
from dkilab.eval.scoring.qa import (
                                      choice_accuracy,
                                      exact_match,
                                      f1_multi,
                                      f1_score,
                                      locomo_score,
                                      normalize_answer,
                                      pick_choice,
                                      zh_exact_match,
                                      zh_f1,
                                      zh_tokens,
)
from dkilab.eval.scoring.retrieval import RECALL_KS, evidence_recall, reciprocal_rank
from dkilab.eval.scoring.score import STAGES, score_answer

__all__ = ["METRICS", "SCORERS", "is_abstention", "detector_card", "evaluate_detector", "load_phrasings", "Metric",
           "Scored", "aggregate", "aggregate_by_category", "category_metrics", "declare", "declared", "metric",
           "metrics_version", "primary_metric", "scorer", "table_metrics", "claims", "unsupported_claims",
           "unsupported_rate", "choice_accuracy", "exact_match", "f1_multi", "f1_score", "locomo_score",
           "normalize_answer", "pick_choice", "zh_exact_match", "zh_f1", "zh_tokens", "RECALL_KS", "evidence_recall",
           "reciprocal_rank", "STAGES", "score_answer"]

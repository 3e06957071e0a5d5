"""The verdicts a published predictions file carries (imported cells, dkilab/eval/published/): the file's own
judge, as that pipeline counts it, beside dkilab's scores of the same replies."""
from __future__ import annotations

from dkilab.eval.metrics.base import Scored, metric


def _verdicts(q: Scored) -> list[bool] | None:
    return q.answer.metadata.get("published_verdicts") or None


@metric("published_judge", group="answers",
        rate=True, higher_is_better=True, per_category=True, rank=5, narrow=("answers",),
        paired=True, description="the published file's own judge: the majority of its verdicts on the reply "
                                 "(a tie counts as wrong)")
def _published_judge(q: Scored):
    v = _verdicts(q)
    return None if v is None else float(2 * sum(v) > len(v))


@metric("published_judge_mean", group="answers", rate=True, higher_is_better=True, rank=6,
        description="the published file's own judge: the share of its verdicts that accept the reply (the mean of "
                    "its runs' accuracies)")
def _published_judge_mean(q: Scored):
    v = _verdicts(q)
    return None if v is None else sum(v) / len(v)

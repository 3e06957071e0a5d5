"""The verdicts a published predictions file carries (imported cells, dkilab/eval/data/published/): the file's own
judge, as that pipeline counts it, beside dkilab's scores of the same replies. `scorers.PublishedScorer` fills
the fields of an imported cell's rows."""
from __future__ import annotations

from dkilab.eval.scoring.base import declare

declare("published_judge", group="answers", field="published_judge",
        rate=True, higher_is_better=True, per_category=True, rank=5, narrow=("answers",),
        paired=True, description="the published file's own judge: the majority of its verdicts on the reply "
                                 "(a tie counts as wrong)")
declare("published_judge_mean", group="answers", field="published_judge_mean", rate=True, higher_is_better=True,
        rank=6, description="the published file's own judge: the share of its verdicts that accept the reply (the "
                            "mean of its runs' accuracies)")

"""recall_only: the recall stage alone, no model. MultiSignalRecall's relevance ranking (`ranked`: every
signal fused, without the recent-turn supplement that recall_v4 and full_attention put in front of it
for a question asked inside a session) becomes the answer's `recalled_ids` and is scored by evidence
recall@k, any-hit, session any-hit, NDCG and MRR, so retrieval experiments
(experiments/retrieval_*.yaml) sweep signals and fusion through the same runner, MLflow logging and
report as the answering strategies. Nothing here sees gold evidence or answers.
"""
from __future__ import annotations

from pydantic import Field

from dkilab.strategies.base import RecallingStrategy, RecallParams, register
from dkilab.types import Answer


class RecallOnlyParams(RecallParams):
    max_results: int = Field(20, ge=1, le=1000)  # the deepest k the metrics look at


@register
class RecallOnly(RecallingStrategy):
    name = "recall_only"
    version = "2"  # 2: the relevance ranking, without the recent-turn supplement in front
    Params = RecallOnlyParams
    params: RecallOnlyParams
    needs_model = False
    output_kind = "ranking"  # a ranking, no answer

    def inert_params(self, has_preferences: bool = True, generate: bool = True) -> dict[str, str]:
        why = "recall_only scores the relevance ranking: the recent-turn supplement is not part of it"
        return super().inert_params(has_preferences, generate) | {
            "recall.budget.min_recent_turns": why, "recall.budget.max_recent_turns": why}

    def _answer(self, question, memory, model, *, session_id, preferences, stages, asked_at=None, task=None):
        with stages("recall", question=question) as trace:
            messages = [r.message for r in self.recall_result(question, memory, session_id, asked_at).ranked]
            ids = [m.message_id for m in messages]
            trace["recalled_ids"] = ids
        # the session of each ranked message: session-level metrics collapse the ranking to sessions
        return Answer("", recalled_ids=ids, rounds=0,
                      metadata={"recalled_sessions": [m.session_id for m in messages]})

"""recall_only: the recall stage alone, no model. MultiSignalRecall's ranking becomes the answer's
`recalled_ids` and is scored by evidence recall@k and MRR, so retrieval experiments
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
    Params = RecallOnlyParams
    needs_model = False

    def _answer(self, question, memory, model, *, session_id, preferences, stages):
        with stages("recall", question=question) as trace:
            ids = [m.message_id for m in self.recall_messages(question, memory, session_id)]
            trace["recalled_ids"] = ids
        return Answer("", recalled_ids=ids, rounds=0, metadata={"retrieval_only": True})

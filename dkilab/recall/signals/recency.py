"""`recency`: the user's latest messages, newest first (a prior for questions about what was said lately)."""
from __future__ import annotations

import math

import numpy as np

from dkilab.recall.signals.base import RecallSignal, register_signal
from dkilab.types import Memory, Message


@register_signal
class Recency(RecallSignal):
    name = "recency"
    features = ("log_recency_rank",)  # the candidate's rank by time among the candidates, newest 0

    def hits(self, query: str, memory: Memory, *, filter: dict | None = None, limit: int = 50
             ) -> list[tuple[Message, float]]:
        latest = memory.recent(limit)  # oldest first
        return [(m, 1.0 / (1 + k)) for k, m in enumerate(reversed(latest))]

    def feature_rows(self, query: str, messages: list[Message], scores: dict[str, float]) -> np.ndarray:
        order = sorted(range(len(messages)), key=lambda i: messages[i].timestamp, reverse=True)
        rank = {i: r for r, i in enumerate(order)}
        return np.array([[math.log1p(rank[i])] for i in range(len(messages))], dtype=np.float64).reshape(len(messages),
                                                                                                         1)

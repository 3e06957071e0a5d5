"""The recall-signal interface and its registry."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from dkilab.registry import Registry
from dkilab.types import Memory, Message


class RecallSignal(ABC):
    """A source of recall candidates. `hits` returns (message, score) pairs, best first; the weighted fusion
    min-max normalises the scores and adds them with the signal's weight. `features` names the signal's columns
    in the learned fusion's feature rows (default: one, its name, the hit score over the question's best, 0 where
    it found nothing); override `feature_rows` to compute others."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"  # part of a cell's identity through the config: bump it when the scores change
    features: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def feature_names(cls) -> tuple[str, ...]:
        return cls.features or (cls.name,)

    @abstractmethod
    def hits(self, query: str, memory: Memory, *, filter: dict | None = None, limit: int = 50
             ) -> list[tuple[Message, float]]:
        """Candidates for `query` from `memory` (within `filter`, the speaker or date focus, when given)."""

    def feature_rows(self, query: str, messages: list[Message], scores: dict[str, float]) -> np.ndarray:
        """One row per candidate message, one column per feature name; `scores`: this signal's hit scores by
        message id."""
        top = max(scores.values(), default=0.0) or 1.0
        return np.array([[scores.get(m.message_id, 0.0) / top] for m in messages], dtype=np.float64).reshape(
            len(messages), 1)


SIGNALS: Registry[type[RecallSignal]] = Registry("recall signal", discover="dkilab.recall.signals",
                                                 subclass_of=RecallSignal)


def register_signal(cls: type[RecallSignal]) -> type[RecallSignal]:
    """Class decorator: `@register_signal class Mine(RecallSignal): name = "mine" ...`."""
    if not getattr(cls, "name", None) or "_" in cls.name:
        raise TypeError(f"{cls.__name__} needs a `name` without '_' (the fusion reads '_' as a focus suffix)")
    SIGNALS.add(cls.name, cls, version=cls.version, features=cls.feature_names())
    return cls

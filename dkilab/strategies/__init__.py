"""Strategies, one file each, registered by name and discovered: no_memory, full_history, stable,
recall_v4, full_attention, and recall_only (the recall stage alone, for retrieval experiments).
A new strategy is a new file here (see `base.py`). `create_strategy(name, params)`; `STRATEGIES`
lists them."""
from __future__ import annotations

from dkilab.strategies.base import STRATEGIES, Strategy, StrategyParams, register

# the answering strategies of the seeds
BUILTIN = ("no_memory", "full_history", "stable", "recall_v4", "full_attention")


def create_strategy(name: str, params: dict | None = None, source: str = "<params>", **kw) -> Strategy:
    """A `name` strategy with `params`; `kw`: what it is built with besides (`kv_cache_bytes`, `response_cache`)."""
    return STRATEGIES[name](params, source=source, **kw)


__all__ = ["STRATEGIES", "Strategy", "StrategyParams", "register", "create_strategy", "BUILTIN"]

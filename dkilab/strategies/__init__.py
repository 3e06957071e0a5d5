"""Strategies, one file each, registered by name: no_memory, full_history, stable, recall_v4,
full_attention, and recall_only (the recall stage alone, for retrieval experiments).
`create_strategy(name, params)`; `STRATEGIES` lists them."""
from __future__ import annotations

from importlib import import_module

from dkilab.strategies.base import STRATEGIES, Strategy, StrategyParams, register

BUILTIN = ("no_memory", "full_history", "stable", "recall_v4", "full_attention")
for _name in (*BUILTIN, "recall_only"):
    import_module(f"dkilab.strategies.{_name}")


def create_strategy(name: str, params: dict | None = None, source: str = "<params>") -> Strategy:
    if name not in STRATEGIES:
        raise KeyError(f"unknown strategy {name!r}; registered: {', '.join(sorted(STRATEGIES))}")
    return STRATEGIES[name](params, source=source)


__all__ = ["STRATEGIES", "Strategy", "StrategyParams", "register", "create_strategy", "BUILTIN"]

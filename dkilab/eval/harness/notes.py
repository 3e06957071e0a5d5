"""What a run's results say besides their figures: a cell over its error budget, sweep points that changed
nothing, and `expect:` ranges missed."""
from __future__ import annotations

import itertools
from typing import Any

from dkilab.eval.harness.experiment import Cell, ExperimentConfig


def over_error_budget(metrics: dict[str, float], max_error_rate: float) -> str | None:
    """Why a cell's failed questions exceed `max_error_rate` (None when within it)."""
    asked, failed = int(metrics.get("questions", 0)), int(metrics.get("errors", 0))
    if failed and failed > max_error_rate * asked:
        return (f"{failed} of {asked} questions failed, over max_error_rate {max_error_rate:g} "
                f"(set it in the config to accept failed questions)")
    return None


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        return {k: v for key, val in d.items() for k, v in _flat(val, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): d}


def _what_differs(a: Cell, b: Cell) -> list[str] | None:
    """The one thing two cells of one strategy on one dataset differ in, as `key = x and y` parts: a sweep
    key, or the params of two labelled variants (e.g. `recall.signals.fusion`); None if they differ in more
    than one sweep key, or in model, embedder or dataset."""
    if (a.strategy.name, a.dataset, a.model, a.embedder) != (b.strategy.name, b.dataset, b.model, b.embedder):
        return None
    if a.strategy.key == b.strategy.key:
        diff = [k for k in a.point if a.point[k] != b.point.get(k)]
        return [f"{diff[0]} = {a.point[diff[0]]} and {b.point[diff[0]]}"] if len(diff) == 1 else None
    pa, pb = (_flat(c.params.model_dump() if hasattr(c.params, "model_dump") else dict(c.strategy.params))
              for c in (a, b))
    keys = sorted(k for k in pa.keys() | pb.keys() if pa.get(k) != pb.get(k))
    return [f"{k} = {pa.get(k)} and {pb.get(k)}" for k in keys] or None


def sweep_notes(results: list) -> list[str]:
    """Sweep values, or labelled variants of one strategy, that changed nothing: two cells that differ in one
    thing only and gave the same prompt, context and answer on every question (e.g. a threshold no message
    reaches, or a recall knob whose ranking never reaches a budget the recent turns fill)."""
    done = [r for r in results if r.done]
    signatures: dict[int, dict] = {}

    def signature(res) -> dict:  # per question: what the model saw and said (once per cell)
        if id(res) not in signatures:
            signatures[id(res)] = {r["qid"]: (r.get("prompt_digest"), r.get("prediction"),
                                              tuple(r.get("recalled_ids") or ()))
                                   for r in res.load_rows()}
        return signatures[id(res)]

    notes = []
    for a, b in itertools.combinations(done, 2):
        what = _what_differs(a.cell, b.cell)
        if not what:
            continue
        ra, rb = signature(a), signature(b)
        if ra and ra == rb:
            ka, kb = a.cell.strategy.key, b.cell.strategy.key
            who = ka if ka == kb else f"{ka} and {kb}"
            notes.append(f"{who}: {'; '.join(what)} gave the same prompts, contexts and answers on all {len(ra)} "
                         f"questions of {a.cell.dataset.name}")
    return notes


def check_expectations(cfg: ExperimentConfig, results: list) -> list[str]:
    """`expect:` ranges a run missed, and failed cells (empty = all good); skipped cells are checked on
    the metrics read back from MLflow."""
    problems = [f"{r.cell.label}: cell failed ({r.error})" for r in results if r.error]
    for res in results:
        if not res.done:
            continue
        key = res.cell.strategy.key
        ranges = cfg.expect.get(key, {}) | cfg.expect.get(f"{key}@{res.cell.dataset.key}", {})
        for metric, (lo, hi) in ranges.items():
            value = res.metrics.get(metric)
            if value is None or not (lo <= value <= hi):
                problems.append(f"{res.cell.label}: {metric} = {value} not in [{lo}, {hi}]")
    return problems

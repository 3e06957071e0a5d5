"""Uncertainty: 95% bootstrap confidence intervals for every aggregate, and paired comparisons of two
cells on the same questions.

Questions of one conversation are not independent (one user, one history), so resampling draws whole
conversations (clusters, by `user_id`) when there are at least `MIN_CLUSTERS` of them, else single
questions. Seeded: the same rows give the same interval. A paired difference resamples the per-question
differences of the questions both cells answered; it is called *real* when its interval excludes 0
(no correction for the number of comparisons: with many, expect about 1 in 20 false calls).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from dkilab.eval.scoring.base import (
    Metric,
    _finite,
    _in_subset,
    aggregate,
    aggregate_metric,
    category_metrics,
    category_of,
    declared,
)

CI = "ci95"  # interval keys: <metric>_ci95_low|_high (unprefixed: MLflow charts them beside the metric)
B = 1000  # resamples
LEVEL = 0.95
MIN_CLUSTERS = 5
CI_AGGREGATIONS = ("mean", "ratio", "p50", "p95")
CELLS = 4_000_000  # the most draw x value entries a percentile resampling holds at once


def _groups(rows: list[dict], cluster: str) -> tuple[np.ndarray, int, str]:
    keys = [str(r.get(cluster)) for r in rows]
    uniq = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    if len(uniq) >= MIN_CLUSTERS:
        return np.array([uniq[k] for k in keys], dtype=np.int64), len(uniq), "conversation"
    return np.arange(len(rows), dtype=np.int64), len(rows), "question"


def _interval(stats: np.ndarray) -> tuple[float, float]:
    stats = stats[np.isfinite(stats)]
    if not len(stats):
        return math.nan, math.nan
    lo, hi = np.quantile(stats, [(1 - LEVEL) / 2, 1 - (1 - LEVEL) / 2])
    return float(lo), float(hi)


def _draws(n_groups: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n_groups, size=(B, n_groups))


def metric_ci(m: Metric, rows: list[dict[str, Any]], cluster: str = "user_id", seed: int = 0
              ) -> tuple[float, float] | None:
    """(low, high) of a metric's 95% interval over these rows; None if it has no interval."""
    if m.aggregation not in CI_AGGREGATIONS:
        return None
    ok = [r for r in rows if not r.get("error") and _in_subset(r, m.subset)]
    if m.aggregation == "ratio":
        assert m.ratio_of is not None  # Metric refuses a ratio without it
        num, den = m.ratio_of
        ok = [r for r in ok if _finite(r.get(den))]
        x = np.array([float(r.get(num) or 0) for r in ok]), np.array([float(r[den]) for r in ok])
    else:
        ok = [r for r in ok if _finite(r.get(m.field))]
        x = np.array([float(r[m.field]) for r in ok]), np.ones(len(ok))
    if len(ok) < 2 or aggregate_metric(m, rows) is None:
        return None
    groups, n, _ = _groups(ok, cluster)
    idx = _draws(n, seed)
    if m.aggregation in ("mean", "ratio"):
        num_g, den_g = np.bincount(groups, x[0], n), np.bincount(groups, x[1], n)
        with np.errstate(invalid="ignore", divide="ignore"):
            return _interval(num_g[idx].sum(1) / den_g[idx].sum(1))
    return _interval(_resampled_percentiles(x[0], groups, n, idx, 50 if m.aggregation == "p50" else 95))


def _resampled_percentiles(values: np.ndarray, groups: np.ndarray, n: int, idx: np.ndarray, q: float) -> np.ndarray:
    """The nearest-rank `q`-th percentile (numpy's method="nearest") of each resample: draw b holds group g's
    values as many times as `idx[b]` names g. One sort and one cumulative count over all draws, instead of
    concatenating and sorting every draw's values."""
    order = np.argsort(values, kind="stable")
    ranked, owner = values[order], groups[order]
    out = np.empty(len(idx), dtype=ranked.dtype)
    step = max(1, CELLS // max(1, len(values)))  # draws per block: a block's matrix stays near CELLS entries
    for lo in range(0, len(idx), step):
        counts = np.stack([np.bincount(draw, minlength=n) for draw in idx[lo:lo + step]])  # (draws, groups)
        weights = np.cumsum(counts[:, owner], axis=1)  # (draws, values): copies at or before each value
        rank = np.around((weights[:, -1] - 1) * (q / 100.0)).astype(np.int64)  # numpy's "nearest" index
        out[lo:lo + step] = ranked[(weights > rank[:, None]).argmax(axis=1)]
    return out


def intervals(rows: list[dict[str, Any]], names: list[str] | None = None, seed: int = 0) -> dict[str,
                                                                                                 tuple[float, float]]:
    """name -> 95% interval for every declared metric (or `names`) the rows give one for."""
    out = {}
    for m in declared():
        if names is not None and m.name not in names:
            continue
        ci = metric_ci(m, rows, seed=seed)
        if ci is not None and all(math.isfinite(v) for v in ci):
            out[m.name] = ci
    return out


def paired(m: Metric, rows_a: list[dict], rows_b: list[dict], key: str = "qid", cluster: str = "user_id",
           seed: int = 0) -> dict[str, Any] | None:
    """B - A on the questions both answered: {n, a, b, diff, low, high, p, real}; None if not comparable."""
    if m.aggregation != "mean":
        return None
    a = {r[key]: r for r in rows_a if not r.get("error") and _in_subset(r, m.subset) and _finite(r.get(m.field))}
    pairs = [(a[r[key]], r) for r in rows_b if r.get(key) in a and not r.get("error") and _finite(r.get(m.field))]
    if len(pairs) < 2:
        return None
    va = np.array([float(x[m.field]) for x, _ in pairs])
    vb = np.array([float(y[m.field]) for _, y in pairs])
    d = vb - va
    groups, n, method = _groups([x for x, _ in pairs], cluster)
    idx = _draws(n, seed)
    sums, counts = np.bincount(groups, d, n), np.bincount(groups, None, n)
    stats = sums[idx].sum(1) / counts[idx].sum(1)
    lo, hi = _interval(stats)
    p = min(1.0, 2 * min(float((stats <= 0).mean()), float((stats >= 0).mean())))
    real = bool(lo > 0 or hi < 0)
    return {"n": float(len(pairs)), "a": float(va.mean()), "b": float(vb.mean()), "diff": float(d.mean()),
            "low": lo, "high": hi, "p": p, "real": real, "resampled": method}


def ci_keys(name: str) -> tuple[str, str]:
    return f"{name}_{CI}_low", f"{name}_{CI}_high"


def with_intervals(rows: list[dict[str, Any]], names: list[str] | None = None, only: bool = False) -> dict[str, float]:
    """Aggregates (only `names` if `only`) plus the 95% intervals of `names` (default: all) as
    `<metric>_ci95_low|high` keys."""

    metrics = aggregate(rows)
    if only and names is not None:
        metrics = {k: v for k, v in metrics.items() if k in names}
    for name, (lo, hi) in intervals(rows, [n for n in metrics if names is None or n in names]).items():
        metrics[ci_keys(name)[0]], metrics[ci_keys(name)[1]] = lo, hi
    return metrics


def aggregate_by_category(rows: list[dict[str, Any]], names: list[str] | None = None,
                          intervals: bool = False) -> dict[str, dict[str, float]]:
    """Per category (by name where the dataset gives one): the per-category metrics (or `names`) and the
    question count, with their 95% intervals (`<m>_ci95_low|high` keys) if asked."""
    wanted = sorted(set(names or category_metrics()) | {"questions"})
    cats: dict[str, list] = {}
    for r in rows:
        cats.setdefault(category_of(r), []).append(r)
    if intervals:
        return {c: with_intervals(rs, wanted, only=True) for c, rs in sorted(cats.items())}
    return {c: {k: v for k, v in aggregate(rs).items() if k in wanted} for c, rs in sorted(cats.items())}

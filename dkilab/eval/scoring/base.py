"""Declared metrics: each metric says what it is, and the rows, aggregates, tables, per-category lists
and confidence intervals follow from the declarations.

A metric is a per-question function plus its declaration (lm-evaluation-harness `register_metric`,
inspect_ai `@scorer(metrics=...)`):

    @metric("hallucination_rate", field="hallucinated", higher_is_better=False, per_category=True, rank=30)
    def hallucinated(q: Scored) -> float | None:            # None: the question does not count
        return None if q.item.answerable else float(not q.abstained)

The function fills `row[field]` of every question it applies to (`kind`: answers, retrieval, agent
outputs or any); the aggregate is the mean of that field over the questions that have it (or p50/p95, a
ratio of two fields' sums, a count). Several aggregates may read one field: `declare(...)` adds an
aggregate without a function. A new metric is one module in this package (discovered).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from functools import cached_property
from typing import Any, Callable, Literal

import numpy as np

from dkilab.registry import Registry
from dkilab.text.abstention.asked import asked_decision
from dkilab.text.abstention.learned import get_detector
from dkilab.types import Answer, QAItem

Aggregation = Literal["mean", "p50", "p95", "ratio", "count", "cell"]


@dataclass(frozen=True)
class Metric:
    name: str
    field: str  # the per-question row key it aggregates
    aggregation: Aggregation = "mean"
    higher_is_better: bool | None = None  # None: a cost or a count, neither better nor worse
    subset: Literal["all", "answerable", "unanswerable"] = "all"  # the questions it is aggregated over
    per_category: bool = False  # also logged per category (the cell's by_category.json table)
    rank: float | None = None  # position in the comparison table; None = not in the table
    headline: bool = False  # a cell's main figure (console line, plots): the first headline metric it has
    # the rows its function runs on: answers (generated), context (what a strategy put before the model:
    # answers and context-only cells alike), retrieval rankings, agent outputs, or any
    kind: Literal["answer", "context", "retrieval", "agent", "any"] = "answer"
    ratio_of: tuple[str, str] | None = None  # ratio: (numerator field, denominator field), sums over rows
    version: str = "1"
    depends_on: str | None = None  # a component whose version it inherits, e.g. the abstention detector
    description: str = ""
    # --- how the views show it (not part of its identity: changing these re-runs nothing) -----------
    label: str = ""  # axis and panel label (plots); default: the name
    rate: bool = False  # a share in [0, 1]: three decimals, axes from 0 to 1
    plot: float | None = None  # position in the comparison plot of the parent run; None = not plotted
    # the report's default (narrow) columns it belongs to, beside the headline: "answers" for cells that
    # generate, "context" for context-only cells; ordered by `rank`
    narrow: tuple[str, ...] = ()
    paired: bool = False  # in the default paired table (beside the headline) when the cells have it
    # its family: the cell's MLflow metric is `<group>/<name>` (MLflow's chart views make a section of each
    # prefix, in name order: agent, answers, context, fact, judge, retrieval, session, uncertainty, usage)
    group: str = ""
    fn: Callable[["Scored"], Any] | None = dataclass_field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.aggregation == "ratio" and self.ratio_of is None:
            raise ValueError(f"metric {self.name!r}: a ratio needs ratio_of=(numerator field, denominator field)")
        if self.group and self.group not in METRIC_GROUPS:  # refused when declared, not when a cell logs it
            raise ValueError(f"metric {self.name!r}: group {self.group!r} is not one of {', '.join(METRIC_GROUPS)}")

    @property
    def identity(self) -> str:
        dep = ""
        if self.depends_on == "abstention":  # the default detector; a cell's own choice is in its detector card

            det = get_detector()
            dep = f"+{det.name}-{det.version}"
        return f"{self.name}@{self.version}{dep}"


# a cell's MLflow metric keys are `<group>/<metric>` (the declared `Metric.group`), interval bounds
# `uncertainty/<metric>_ci95_low|high`: MLflow's chart views make a section of each, in name order
METRIC_GROUPS = ("agent", "answers", "context", "fact", "judge", "retrieval", "session", "uncertainty", "usage")

METRICS: Registry[Metric] = Registry("metric", discover="dkilab.eval.scoring", instance_of=Metric)
# a dataset's answer scorer: (item, prediction, abstained) -> {score, f1, ...}
SCORERS: Registry[Callable[..., dict[str, Any]]] = Registry("scorer", discover="dkilab.eval.scoring")


def metric(name: str, *, field: str | None = None, **decl: Any) -> Callable:
    """Decorator: declare a metric whose per-question value the function computes."""

    def deco(fn: Callable[["Scored"], Any]) -> Callable:
        METRICS.add(name, Metric(name, field or name, fn=fn, **decl))
        return fn

    return deco


def declare(name: str, *, field: str, **decl: Any) -> Metric:
    """Declare an aggregate over a row field another metric (or the runner) fills."""
    return METRICS.add(name, Metric(name, field, **decl))


def scorer(name: str, *, version: str = "1", description: str = "") -> Callable:
    """Decorator: a dataset's answer scorer `fn(item, prediction, abstained) -> {score, f1, ...}`."""

    def deco(fn: Callable) -> Callable:
        SCORERS.add(name, fn, version=version, description=description)
        return fn

    return deco


@dataclass
class Scored:
    """One answered question as metric functions see it."""

    item: QAItem
    answer: Answer
    scorer: str = "auto"
    abstained_label: bool | None = None  # an LLM judge's abstention label, when one was asked
    detector: str = "hybrid"  # the abstention detector when no judge label decides (DETECTOR_NAMES)
    abstention: tuple[bool, str] | None = None  # decided before (scorers.AbstentionScorer); None: decided here

    @property
    def retrieval_only(self) -> bool:
        """A ranking: the strategy recalled messages and answered nothing (Answer.kind)."""
        return self.answer.kind == "ranking"

    @property
    def context_only(self) -> bool:
        """A context-only cell's answer: the prompt and K/V blocks were built, nothing was generated."""
        return self.answer.kind == "context"

    @property
    def imported(self) -> bool:
        """An answer read from a published file (strategy `imported`): what the model was shown and what it cost
        are not known, so the context and cost metrics (kinds context and any) do not apply."""
        return bool(self.answer.metadata.get("imported"))

    @property
    def task(self) -> str | None:
        """None for an answer or a ranking; `memory_view` / `pointer` for an agent's output (its own metrics)."""
        return self.answer.kind if self.answer.kind in ("memory_view", "pointer") else None

    @cached_property
    def _abstention(self) -> tuple[bool, str]:
        """(abstained, which path decided: judge | asked (the question rule, text/abstention/asked.py) | rules |
        learned | final_call)."""
        if self.abstention is not None:
            return self.abstention
        return abstention_of(self.item, self.answer, self.abstained_label, self.detector)

    @property
    def abstained(self) -> bool:
        return self._abstention[0]

    @property
    def abstention_path(self) -> str:
        return self._abstention[1]

    @cached_property
    def quality(self) -> dict[str, float]:
        return SCORERS[self.scorer](self.item, self.answer.text, self.abstained)


def abstention_of(item: QAItem, answer: Answer, label: bool | None = None, detector: str = "hybrid"
                  ) -> tuple[bool, str]:
    """Whether an answer declines, and which path decided: a final call never does; else an LLM judge's label
    where it gave one; else the question rule; else the detector."""
    if answer.metadata.get("final_call"):
        return False, "final_call"  # a call, not an answer and never a decline
    if label is not None:
        return label, "judge"
    asked = asked_decision(item.question, answer.text)  # the reply read with its question
    if asked is not None:
        return asked, "asked"
    return get_detector(detector).decide(answer.text)


def declared() -> list[Metric]:
    return list(METRICS.values())


def table_metrics() -> list[str]:
    """The comparison table's columns, in declared order."""
    return [m.name for m in sorted((m for m in declared() if m.rank is not None), key=lambda m: m.rank or 0.0)]


def category_metrics() -> list[str]:
    return [m.name for m in declared() if m.per_category]


def plotted() -> list[Metric]:
    """The comparison plot's panels, in order."""
    return sorted((m for m in declared() if m.plot is not None), key=lambda m: m.plot or 0.0)


def narrow_metrics(view: str) -> list[str]:
    """The report's default columns for `view` ("answers" or "context"), in table order."""
    return [m.name for m in sorted((m for m in declared() if view in m.narrow),
                                   key=lambda m: (m.rank is None, m.rank or 0))]


def headline_metrics(metrics, counts: tuple[str, ...] = ("questions", "errors")) -> list[str]:
    """A cell's few deciding metrics, those of `metrics` (a dict or table columns) among: its headline, the
    declared `narrow` ones of its kind (a context-only cell, headed by evidence_visible: coverage and cost;
    else answers), and `counts`: the report's default columns."""
    head = primary_metric(metrics)
    narrow = narrow_metrics("context" if head == "evidence_visible" else "answers")
    return [c for c in dict.fromkeys([head or "", *narrow, *counts]) if c and c in metrics]


def counted(m: Metric, rows: list[dict]) -> int | None:
    """How many questions `m` aggregates over in `rows` (its n); None for counts and cell-level figures."""
    if m.aggregation in ("count", "cell"):
        return None
    if m.aggregation == "ratio":
        assert m.ratio_of is not None
        return sum(1 for r in rows if not r.get("error") and _in_subset(r, m.subset) and _finite(r.get(m.ratio_of[1])))
    return len(values(m, rows))


def paired_by_default() -> list[str]:
    return [m.name for m in declared() if m.paired]


def label_of(name: str) -> str:
    m = METRICS.get(name)
    return (m.label or m.name) if m is not None else name


def is_rate(name: str) -> bool:
    m = METRICS.get(name)
    return bool(m is not None and m.rate)


def lower_is_better(name: str) -> bool:
    m = METRICS.get(name)
    return bool(m is not None and m.higher_is_better is False)


def primary_metric(metrics) -> str | None:
    """The headline metric of a cell's metrics (a dict or table columns): the first declared one present
    (with a value, for a dict: a metric no question of the cell had is NaN there, not a headline)."""
    heads = sorted((m for m in declared() if m.headline), key=lambda m: m.rank if m.rank is not None else 1e9)

    def present(name: str) -> bool:
        if name not in metrics:
            return False
        value = metrics[name] if isinstance(metrics, dict) else None
        return not (isinstance(value, float) and math.isnan(value))
    return next((m.name for m in heads if present(m.name)), None)


def metrics_version() -> str:
    """A digest of every declared metric and scorer with its version (part of a cell's identity)."""
    parts = sorted(m.identity for m in declared()) + sorted(f"{n}@{SCORERS.meta(n)['version']}" for n in SCORERS)
    return hashlib.sha1("|".join(parts).encode()).hexdigest()[:12]


def score_row(item: QAItem, answer: Answer, scorer: str = "auto", abstained: bool | None = None,
              detector: str = "hybrid", abstention: tuple[bool, str] | None = None) -> dict[str, Any]:
    """One question's row: every declared metric's per-question value that applies to it (`abstention`: the
    verdict and its path, decided before)."""
    q = Scored(item, answer, scorer, abstained, detector, abstention)
    row: dict[str, Any] = {"answerable": item.answerable}
    for m in declared():
        if (m.fn is None or (m.kind == "answer" and (q.retrieval_only or q.task or q.context_only)) or
                (m.kind == "context" and (q.retrieval_only or q.task)) or
                (m.kind in ("context", "any") and q.imported) or
                (m.kind == "retrieval" and not q.retrieval_only) or (m.kind == "agent" and not q.task)):
            continue
        value = m.fn(q)
        if value is not None:
            row[m.field] = value
    return row


# --- aggregation ------------------------------------------------------------------------------
def _finite(x) -> bool:
    return isinstance(x, bool) or (isinstance(x, (int, float)) and math.isfinite(x))


def _in_subset(row: dict, subset: str) -> bool:
    return subset == "all" or (bool(row.get("answerable")) if subset == "answerable" else not row.get("answerable"))


def percentile(xs, p: float, empty=None):
    """The nearest-rank p-th percentile of `xs` (one of its values, as its own type), `empty` when there
    are none: the one percentile of the project (latency aggregates, benchmarks, length checks)."""
    return np.percentile(np.asarray(xs), p, method="nearest").item() if len(xs) else empty


def values(m: Metric, rows: list[dict]) -> list[float]:
    """The per-question values a mean/percentile metric aggregates (error rows excluded)."""
    return [float(r[m.field]) for r in rows
            if not r.get("error") and _in_subset(r, m.subset) and _finite(r.get(m.field))]


def aggregate_metric(m: Metric, rows: list[dict]) -> float | None:
    ok = [r for r in rows if not r.get("error")]
    if m.aggregation == "count":
        return float(len(rows)) if m.field == "questions" else float(len(rows) - len(ok))
    if m.aggregation == "cell":
        return None  # computed by the runner from the cell as a whole
    if m.aggregation == "ratio":
        assert m.ratio_of is not None  # Metric refuses a ratio without it
        num, den = m.ratio_of
        sub = [r for r in ok if _in_subset(r, m.subset) and _finite(r.get(den))]
        total = sum(float(r[den]) for r in sub)
        return sum(float(r.get(num) or 0) for r in sub) / total if total else None
    xs = values(m, rows)
    if not xs:
        return None
    if m.aggregation == "mean":
        return sum(xs) / len(xs)
    return percentile(xs, 50 if m.aggregation == "p50" else 95)


def aggregate(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Every declared metric that the rows give a value for (error rows count in `errors` only)."""
    out = {}
    for m in declared():
        v = aggregate_metric(m, rows)
        if v is not None:
            out[m.name] = float(v)
    return out


def category_of(row: dict[str, Any]) -> str:
    """A row's category as reports show it: its name where the dataset gives one (LoCoMo: not 1-5)."""
    return str(row.get("category_name") or row.get("category"))

"""Tables and paired statistics of finished cells, with no MLflow in them: the comparison frame and its
printed form with intervals, paired differences between cells on the same questions, per-category
tables, and the console line of a cell. `tracking.py` logs them; `report.py` rebuilds them from runs."""
from __future__ import annotations

import itertools
import math
from typing import Any

from dkilab.eval.scoring import METRICS, primary_metric, table_metrics
from dkilab.eval.scoring.base import category_of, declared, headline_metrics, lower_is_better, paired_by_default
from dkilab.eval.scoring.bootstrap import aggregate_by_category, ci_keys, paired


def results_table(results, intervals: bool = False):
    """One row per finished or skipped cell (runner.CellResult), in config order; the declared table
    columns that at least one cell has (`intervals=True` adds `<metric>_low` / `<metric>_high` beside each)."""
    return metrics_frame([(r.cell.label, r.metrics) for r in results if r.done], intervals=intervals)


def _fmt(metrics: dict[str, float], name: str) -> str:
    v = metrics.get(name)
    if v is None:
        return "nan"
    lo, hi = (metrics.get(k) for k in ci_keys(name))
    return f"{v:.3f}" + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else "")


def cell_line(cell, metrics: dict[str, float], n: int, total: int, wall_s: float) -> str:
    main = primary_metric(metrics) or "score"
    asked, failed = int(metrics.get("questions", 0)), int(metrics.get("errors", 0))
    over = f"{asked - failed} of {asked} answered ({failed} failed)" if failed else f"{asked} questions"
    return f"[{n}/{total}] {cell.label}: {main} {_fmt(metrics, main)} over {over} in {wall_s:.0f} s"


# --- tables ------------------------------------------------------------------------------------
def metrics_frame(cells: list[tuple[str, dict[str, float]]], intervals: bool = False, extra: list[str] | None = None):
    """label -> declared table columns (those at least one cell has; `extra` metrics after them), in the
    given order."""
    import pandas as pd


    cols = [m for m in dict.fromkeys([*table_metrics(), *(extra or [])]) if any(m in metrics for _, metrics in cells)]
    data = {}
    for label, metrics in cells:
        row = {}
        for m in cols:
            row[m] = metrics.get(m)
            if intervals:
                row[f"{m}_low"], row[f"{m}_high"] = (metrics.get(k) for k in ci_keys(m))
        data[label] = row
    frame = pd.DataFrame.from_dict(data, orient="index")
    frame.index.name = "cell"
    return frame.dropna(axis=1, how="all") if not frame.empty else frame


def format_table(frame) -> str:
    """Console text: `value ±half-width` where the table has intervals."""
    if frame.empty:
        return "(no cells)"
    return with_pm(frame).to_string()


INTERVAL_NOTE = "± = half the 95% bootstrap interval; [low, high] where the interval is skewed"


def fmt_interval(v: float, lo: float, hi: float) -> str:
    """`v ±half` when the interval sits about evenly around v, else `v [lo, hi]` (a p50 latency of 0.9 ms
    whose interval reaches 3,459 ms is not "0.919 ±1729")."""
    half = (hi - lo) / 2
    if lo <= v <= hi and abs((hi - v) - (v - lo)) <= 0.5 * half:
        return f"{v:.3f} ±{half:.3f}"
    return f"{v:.3f} [{lo:.3f}, {hi:.3f}]"


def with_pm(frame):
    """The table as strings `value ±half-width` where it has intervals (`<m>_low` / `<m>_high` columns)."""
    out = frame[[c for c in frame.columns if not c.endswith(("_low", "_high"))]].copy().astype(object)
    for col in out.columns:
        for idx in out.index:
            v = frame.at[idx, col]
            lo, hi = frame.get(f"{col}_low", {}).get(idx), frame.get(f"{col}_high", {}).get(idx)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                out.at[idx, col] = ""
            elif col in ("questions", "errors"):
                out.at[idx, col] = f"{int(v)}"
            elif lo is not None and hi is not None and not (math.isnan(lo) or math.isnan(hi)):
                out.at[idx, col] = fmt_interval(v, lo, hi)
            else:
                out.at[idx, col] = f"{v:.3f}"
    return out


def pairwise(cells: list[tuple[str, str, list[dict]]], metrics: list[str] | None = None, by_category: bool = False):
    """Paired differences (b - a) between cells on the same dataset, per metric (and category):
    cells are (label, dataset key, rows). Columns: dataset, a, b, metric, [category], n, a_value,
    b_value, diff, low, high, p, real."""
    import pandas as pd


    out = []
    by_dataset: dict[str, list] = {}
    for c in cells:
        by_dataset.setdefault(c[1], []).append(c)  # config order within a dataset
    for dataset, group in by_dataset.items():
        for (la, _, ra), (lb, _, rb) in itertools.combinations(group, 2):
            primary = "score" if any("score" in r for r in ra) else "recall_at_10"
            # the headline, then every metric declared `paired` that these cells have (metrics/base.py)
            names = metrics or [primary, *(m for m in paired_by_default() if m != primary
                                           and any(METRICS[m].field in r for r in (*ra, *rb)))]
            splits: list[tuple[Any, list, list]] = [(None, ra, rb)]
            if by_category:
                cats = sorted({category_of(r) for r in ra})
                splits = [(c, [r for r in ra if category_of(r) == c], [r for r in rb if category_of(r) == c])
                          for c in cats]
            for name in names:
                if name not in METRICS:
                    continue
                for cat, xa, xb in splits:
                    res = paired(METRICS[name], xa, xb)
                    if res is None:
                        continue
                    out.append({"dataset": dataset, "a": la, "b": lb, "metric": name,
                                **({"category": cat} if by_category else {}), "n": int(res["n"]),
                                "a_value": res["a"], "b_value": res["b"], "diff": res["diff"], "low": res["low"],
                                "high": res["high"], "p": res["p"], "real": "yes" if res["real"] else "no"})
    columns = ["dataset", "a", "b", "metric", *(["category"] if by_category else []), "n", "a_value", "b_value", "diff",
               "low", "high", "p", "real"]
    return pd.DataFrame(out, columns=columns)


def metric_counts(rows_by_cell: dict[str, list[dict]]) -> dict[str, dict[str, int]]:
    """{metric: {cell: how many questions the metric counts}} for every declared metric: the rows that have
    its field (a metric's function gives no value for a question it does not apply to)."""
    out: dict[str, dict[str, int]] = {}
    for m in declared():
        if m.aggregation not in ("mean", "p50", "p95"):
            continue
        for cell, rows in rows_by_cell.items():
            n = sum(1 for r in rows if r.get(m.field) is not None and not r.get("error")
                    and (m.subset == "all" or r.get("answerable") == (m.subset == "answerable")))
            if n:
                out.setdefault(m.name, {})[cell] = n
    return out


PAIRED_ORDER = ("dataset", "metric", "category", "a", "b", "diff", "low", "high", "real", "n", "a_value", "b_value",
                "p")


def paired_csv(pairs) -> str:
    """paired.csv as a reader (and MLflow's artifact preview) wants it: what differs and whether it is
    real first, then the values; numbers rounded to 3 decimals."""
    cols = [c for c in PAIRED_ORDER if c in pairs.columns]
    return pairs[cols].round(3).to_csv(index=False)


def category_table(rows_per_cell: list[tuple[str, list[dict] | dict]], metrics: list[str] | None = None):
    """Long table: cell, category, metric, value, low, high, n (per-category values with 95% intervals).
    Each cell gives its rows, or their `aggregate_by_category(..., intervals=True)` if already computed."""
    import pandas as pd


    out = []
    for label, rows in rows_per_cell:
        by_cat = rows if isinstance(rows, dict) else aggregate_by_category(rows, names=metrics, intervals=True)
        for cat, agg in by_cat.items():
            n = int(agg.get("questions", 0))
            for m, v in agg.items():
                if m == "questions" or m.endswith(("_ci95_low", "_ci95_high")) or (metrics and m not in metrics):
                    continue
                lo, hi = (agg.get(k) for k in ci_keys(m))
                out.append({"cell": label, "category": cat, "metric": m, "value": v, "low": lo, "high": hi, "n": n})
    return pd.DataFrame(out, columns=["cell", "category", "metric", "value", "low", "high", "n"])


def _md(header: list[str], rows: list[list[str]]) -> str:
    cell = lambda s: str(s).replace("|", "\\|")  # noqa: E731
    return "\n".join(["| " + " | ".join(map(cell, header)) + " |", "|" + "---|" * len(header),
                      *("| " + " | ".join(map(cell, r)) + " |" for r in rows)])


def overview_markdown(table, pairs, counts: dict[str, dict[str, int]], max_pairs: int = 40,
                      max_cells: int | None = None) -> str:
    """The parent run's first page (its description, Markdown): each cell's headline metrics with their 95%
    intervals, which way is better and n, then the paired differences, rounded, `real` as yes/no. Rows past
    `max_cells` / `max_pairs` are left out with a line that says how many and where they are."""
    cols = headline_metrics(table.columns, counts=())
    header = ["cell"]
    for m in cols:
        arrow = "" if m not in METRICS or METRICS[m].higher_is_better is None else (" ↓" if lower_is_better(m)
                                                                                    else " ↑")
        ns = set(counts.get(m, {}).values())
        header.append(f"{m}{arrow}" + (f" (n={ns.pop()})" if len(ns) == 1 else ""))
    header.append("questions")
    rows = []
    for label in table.index[:max_cells]:
        row = [str(label)]
        for m in cols:
            v, lo, hi = (table.at[label, c] if c in table.columns else None for c in (m, f"{m}_low", f"{m}_high"))
            if v is None or (isinstance(v, float) and math.isnan(v)):
                row.append("–")
                continue
            text = fmt_interval(v, lo, hi) if lo is not None and hi is not None and not (
                math.isnan(lo) or math.isnan(hi)) else f"{v:.3f}"
            n = counts.get(m, {}).get(str(label))
            row.append(text + (f" (n={n})" if n is not None and len(set(counts.get(m, {}).values())) > 1 else ""))
        q = table.at[label, "questions"] if "questions" in table.columns else None
        row.append("" if q is None or (isinstance(q, float) and math.isnan(q)) else str(int(q)))
        rows.append(row)
    parts = ["### Comparison", "", _md(header, rows), "", "Each cell's headline metrics: value with half its 95% "
             "bootstrap interval (`[low, high]` where skewed); ↑ higher is better, ↓ lower is better; n = the "
             "questions a metric counts. Every metric of a cell is its run's `metrics.json`."]
    if max_cells is not None and len(table) > max_cells:
        parts.append(f"\n… {len(table) - max_cells} more cells in `comparison.csv` (too many for this page).")
    if pairs is not None and not pairs.empty and max_pairs == 0:
        parts += ["", f"Paired differences: {len(pairs)} rows in `paired.csv` (too many for this page)."]
    elif pairs is not None and not pairs.empty:
        prow = []
        for r in pairs.head(max_pairs).itertuples(index=False):
            better = "" if r.metric not in METRICS or METRICS[r.metric].higher_is_better is None else (
                "lower" if lower_is_better(r.metric) else "higher")
            prow.append([r.metric, r.a, r.b, f"{r.diff:+.3f}", f"[{r.low:+.3f}, {r.high:+.3f}]", r.real, better,
                         str(r.n)])
        parts += ["", "### Paired differences (b − a on the questions both answered)", "",
                  _md(["metric", "a", "b", "b − a", "95% interval", "real", "better", "n"], prow), "",
                  "`real`: the 95% interval of the difference excludes 0. `better`: the direction in which the "
                  "metric improves."]
        if len(pairs) > max_pairs:
            parts.append(f"\n… {len(pairs) - max_pairs} more rows in `paired.csv`.")
    return "\n".join(parts)

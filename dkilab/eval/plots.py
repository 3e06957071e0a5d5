"""The comparison plots a reviewing team reads on the parent run (and `dkilab report --plots`, notebooks):
every headline metric per cell with its 95% interval and the value on the bar, and the headline metric
per category with question counts. matplotlib `Figure`s only (no pyplot: a notebook's backend stays)."""
from __future__ import annotations

import math

# (metric, axis label); shown when at least one cell has it
HEADLINES = (
    ("score", "answer score (0-1)"), ("recall_at_10", "recall@10 (0-1)"), ("view_recall", "view recall (0-1)"),
    ("pointer_accuracy", "pointer accuracy (0-1)"), ("routed_recall_at_1", "routed recall@1 (0-1)"),
    ("hallucination_rate", "hallucination rate (0-1, lower is better)"),
    ("unsupported_claim_rate", "unsupported claims (share, lower is better)"),
    ("fact_call_rate", "fact-call rate (share of questions)"), ("prompt_tokens", "prompt tokens (mean)"),
    ("injected_tokens", "injected K/V tokens (mean)"), ("latency_total_p50_ms", "latency p50 (ms)"),
)
RATES = {"score", "recall_at_10", "view_recall", "pointer_accuracy", "routed_recall_at_1", "hallucination_rate",
         "unsupported_claim_rate", "fact_call_rate"}


def _cjk_font() -> None:
    """Chinese category names and labels render (Noto CJK when installed)."""
    from matplotlib import font_manager, rcParams

    names = {f.name for f in font_manager.fontManager.ttflist}
    for cand in ("Noto Sans CJK SC", "Noto Serif CJK SC", "WenQuanYi Zen Hei"):
        if cand in names:
            rcParams["font.sans-serif"] = [cand, *rcParams["font.sans-serif"]]
            rcParams["axes.unicode_minus"] = False
            return


def _fmt(v: float, metric: str) -> str:
    return f"{v:.3f}" if metric in RATES else f"{v:,.0f}"


def _valid(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def headline_figure(table, title: str = ""):
    """One panel per headline metric the cells have: a bar per cell, 95% interval, value on the bar, n in
    the cell label. `table`: metrics_frame(..., intervals=True) with a `questions` column if known."""
    from matplotlib.figure import Figure

    _cjk_font()
    metrics = [(m, label) for m, label in HEADLINES if m in table.columns and table[m].map(_valid).any()
               and (m in RATES or table[m].fillna(0).abs().sum() > 0)]  # e.g. no K/V injected anywhere: no panel
    if not metrics:
        return None
    n = table["questions"] if "questions" in table.columns else None
    labels = [f"{c} (n={int(n[c])})" if n is not None and _valid(n[c]) else str(c) for c in table.index]
    cols = 2 if len(metrics) > 1 else 1
    rows = math.ceil(len(metrics) / cols)
    longest = max(len(s) for s in labels)
    fig = Figure(figsize=(cols * (4.2 + 0.06 * longest), rows * max(1.6, 0.45 * len(labels) + 0.9)))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, (m, axis) in zip(axes, metrics):
        vals = [table.at[c, m] if _valid(table.at[c, m]) else 0.0 for c in table.index]
        lo = [table.at[c, f"{m}_low"] if f"{m}_low" in table and _valid(table.at[c, f"{m}_low"]) else v
              for c, v in zip(table.index, vals)]
        hi = [table.at[c, f"{m}_high"] if f"{m}_high" in table and _valid(table.at[c, f"{m}_high"]) else v
              for c, v in zip(table.index, vals)]
        err = [[max(0.0, v - low) for v, low in zip(vals, lo)], [max(0.0, high - v) for v, high in zip(vals, hi)]]
        ax.barh(range(len(vals)), vals, xerr=err, capsize=3, color="#4C72B0")
        ax.set_yticks(range(len(vals)), labels, fontsize=8)
        ax.invert_yaxis()
        top = max([*hi, *vals])
        ax.set_xlim(0, 1.0 if (m in RATES and top <= 1) or top <= 0 else top * 1.25)
        ax.set_xlabel(axis + " · 95% CI", fontsize=8)
        for i, (v, h) in enumerate(zip(vals, hi)):
            ax.text(max(v, h) + ax.get_xlim()[1] * 0.01, i, _fmt(v, m), va="center", fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def category_figure(by_cell: dict[str, dict[str, dict[str, float]]], metric: str, title: str = ""):
    """Grouped bars: `metric` per category (x) for each cell (colour), 95% intervals, n under each
    category. `by_cell`: cell -> aggregate_by_category(rows, intervals=True)."""
    from matplotlib.figure import Figure

    from dkilab.eval.metrics.bootstrap import ci_keys

    _cjk_font()
    cats = sorted({c for agg in by_cell.values() for c, m in agg.items() if _valid(m.get(metric))})
    if not cats:
        return None
    cells = list(by_cell)
    width = 0.8 / max(1, len(cells))
    fig = Figure(figsize=(max(5.0, 1.1 * len(cats) * max(1, len(cells)) * 0.6 + 2), 3.6))
    ax = fig.subplots()
    for k, cell in enumerate(cells):
        xs, vals, errs = [], [], [[], []]
        for i, cat in enumerate(cats):
            m = by_cell[cell].get(cat, {})
            v = m.get(metric)
            if not _valid(v):
                continue
            lo, hi = (m.get(key, v) for key in ci_keys(metric))
            xs.append(i + (k - (len(cells) - 1) / 2) * width)
            vals.append(v)
            errs[0].append(max(0.0, v - (lo if _valid(lo) else v)))
            errs[1].append(max(0.0, (hi if _valid(hi) else v) - v))
        ax.bar(xs, vals, width=width * 0.95, yerr=errs, capsize=2, label=cell)
        for x, v, up in zip(xs, vals, errs[1]):  # above the whisker, never on it
            ax.text(x, v + up + 0.015, f"{v:.2f}", ha="center", va="bottom", fontsize=6,
                    rotation=90 if len(cells) > 3 else 0)
    counts = [max(int(by_cell[c].get(cat, {}).get("questions", 0) or 0) for c in cells) for cat in cats]
    ax.set_xticks(range(len(cats)), [f"{c}\n(n={n})" for c, n in zip(cats, counts)], fontsize=7)
    ax.set_ylim(0, 1.2 if metric in RATES else None)
    ax.set_ylabel(f"{metric} · 95% CI", fontsize=8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig

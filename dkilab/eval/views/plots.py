"""The comparison plots a reviewing team reads on the parent run (and `dkilab report --plots`, notebooks):
every headline metric per cell with its 95% interval and the value on the bar, and the headline metric
per category with question counts. matplotlib `Figure`s only (no pyplot: a notebook's backend stays)."""
from __future__ import annotations

import math
import textwrap

from dkilab.eval.scoring.base import is_rate, label_of, lower_is_better, plotted
from dkilab.eval.scoring.bootstrap import ci_keys


def _cjk_font() -> None:
    """Chinese category names and labels render (Noto CJK or WenQuanYi when installed). A font installed
    after matplotlib built its font cache is not in it: such files are added from the system font dirs."""
    from matplotlib import font_manager, rcParams

    wanted = ("Noto Sans CJK SC", "Noto Serif CJK SC", "WenQuanYi Zen Hei")
    names = {f.name for f in font_manager.fontManager.ttflist}
    if not names & set(wanted):
        for path in font_manager.findSystemFonts():
            if any(k in path for k in ("NotoSansCJK", "NotoSerifCJK", "wqy-zenhei")):
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):  # an unreadable font file: skip it
                    continue
        names = {f.name for f in font_manager.fontManager.ttflist}
    for cand in wanted:
        if cand in names:
            if rcParams["font.sans-serif"][:1] != [cand]:
                rcParams["font.sans-serif"] = [cand, *rcParams["font.sans-serif"]]
            rcParams["axes.unicode_minus"] = False
            return


def _fmt(v: float, metric: str) -> str:
    return f"{v:.3f}" if is_rate(metric) else f"{v:,.0f}"


def _valid(v) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def headline_figure(table, title: str = "", counts: dict[str, dict[str, int]] | None = None):
    """One panel per headline metric the cells have: a bar per cell, 95% interval, value on the bar. n is
    per metric where `counts` ({metric: {cell: questions it counts}}) gives it, beside each value (the
    hallucination rate of 12 questions may rest on 4 unanswerable ones); else the cell's question count
    in its label. `table`: metrics_frame(..., intervals=True) with a `questions` column if known."""
    from matplotlib.figure import Figure

    _cjk_font()
    shown = [d.name for d in plotted() if d.name in table.columns and table[d.name].map(_valid).any()
             and (d.rate or table[d.name].fillna(0).abs().sum() > 0)]  # e.g. no K/V injected anywhere: no panel
    metrics = [(m, label_of(m)) for m in shown]
    if not metrics:
        return None
    n = table["questions"] if "questions" in table.columns and not counts else None
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
        ax.set_xlim(0, 1.0 if (is_rate(m) and top <= 1) or top <= 0 else top * 1.25)
        ax.set_xlabel(axis + " · 95% CI", fontsize=8)
        per = (counts or {}).get(m, {})
        for i, (c, v, h) in enumerate(zip(table.index, vals, hi)):
            text = _fmt(v, m) + (f"  n={per[c]}" if c in per else "")
            ax.text(max(v, h) + ax.get_xlim()[1] * 0.01, i, text, va="center", fontsize=7)
        ax.tick_params(axis="x", labelsize=7)
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def category_figure(by_cell: dict[str, dict[str, dict[str, float]]], metric: str, title: str = "", min_n: int = 5):
    """Grouped bars: `metric` per category (x) for each cell (colour), 95% intervals, n under each
    category. `by_cell`: cell -> aggregate_by_category(rows, intervals=True). A category with fewer than
    `min_n` questions in every cell is left out (a bar over 1-2 questions says nothing), and the figure
    says how many were left out; if every category is that small, all are shown."""
    from matplotlib.figure import Figure


    _cjk_font()
    cats = sorted({c for agg in by_cell.values() for c, m in agg.items() if _valid(m.get(metric))})
    if not cats:
        return None
    size = {c: max(int(agg.get(c, {}).get("questions", 0) or 0) for agg in by_cell.values()) for c in cats}
    small = [c for c in cats if size[c] < min_n]
    if small and len(small) < len(cats):
        cats = [c for c in cats if c not in small]
    else:
        small = []
    cells = list(by_cell)
    width = 0.8 / max(1, len(cells))
    fig = Figure(figsize=(max(5.0, 1.1 * len(cats) * max(1, len(cells)) * 0.6 + 2), 3.6))
    ax = fig.subplots()
    for k, cell in enumerate(cells):
        xs: list[float] = []
        vals: list[float] = []
        errs: list[list[float]] = [[], []]
        for i, cat in enumerate(cats):
            m = by_cell[cell].get(cat, {})
            got = m.get(metric)
            if got is None or not _valid(got):
                continue
            v = float(got)
            lo, hi = (float(m.get(key, v)) for key in ci_keys(metric))
            xs.append(i + (k - (len(cells) - 1) / 2) * width)
            vals.append(v)
            errs[0].append(max(0.0, v - (lo if _valid(lo) else v)))
            errs[1].append(max(0.0, (hi if _valid(hi) else v) - v))
        ax.bar(xs, vals, width=width * 0.95, yerr=errs, capsize=2, label=cell)
        for x, v, up in zip(xs, vals, errs[1]):  # above the whisker, never on it
            ax.text(x, v + up + 0.015, f"{v:.2f}", ha="center", va="bottom", fontsize=6,
                    rotation=90 if len(cells) > 3 else 0)
    counts = [max(int(by_cell[c].get(cat, {}).get("questions", 0) or 0) for c in cells) for cat in cats]
    crowded = sum(len(c) for c in cats) * 6.5 > fig.get_figwidth() * 72 * 0.8  # labels would touch: slant them
    ax.set_xticks(range(len(cats)), [f"{c} (n={n})" if crowded else f"{c}\n(n={n})" for c, n in zip(cats, counts)],
                  fontsize=7, rotation=40 if crowded else 0, ha="right" if crowded else "center",
                  rotation_mode="anchor")
    if crowded:
        fig.set_figheight(3.6 + 0.06 * max(len(c) for c in cats))
    ax.set_ylim(0, 1.2 if is_rate(metric) else None)
    ax.set_ylabel(f"{metric} · 95% CI", fontsize=8)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    if small:
        fig.text(0.01, 0.01, f"not shown: {len(small)} categories with fewer than {min_n} questions "
                             f"({sum(size[c] for c in small)} questions in all)", fontsize=7, ha="left", va="bottom")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def sweep_heatmaps(table, x: str, y: str, metrics, labels: dict[str, str] | None = None, title: str = ""):
    """One heatmap per metric over two swept parameters (`x`, `y`: columns of `table`, e.g. a
    `load_runs` frame's `param.<key>`), the value written in every cell. Several rows at one grid point
    (e.g. several datasets) are averaged; pass one dataset's rows to avoid that."""
    from matplotlib.figure import Figure

    _cjk_font()
    labels = labels or {}
    metrics = [m for m in metrics if m in table.columns]
    if not metrics:
        return None
    fig = Figure(figsize=(4.2 * len(metrics), 3.4))
    for ax, m in zip(fig.subplots(1, len(metrics), squeeze=False)[0], metrics):
        grid = table.pivot_table(index=y, columns=x, values=m, aggfunc="mean").sort_index(ascending=False)
        im = ax.imshow(grid.to_numpy(dtype=float), cmap="viridis_r" if lower_is_better(m) else "viridis",
                       aspect="auto")
        ax.set_xticks(range(grid.shape[1]), [_tick(v) for v in grid.columns], fontsize=8)
        ax.set_yticks(range(grid.shape[0]), [_tick(v) for v in grid.index], fontsize=8)
        ax.set_xlabel(labels.get(x, x), fontsize=8)
        ax.set_ylabel(labels.get(y, y), fontsize=8)
        ax.set_title(labels.get(m, label_of(m)), fontsize=9)
        lo, hi = float(grid.min().min()), float(grid.max().max())
        for (i, j), v in _cells(grid):
            dark = (v - lo) / (hi - lo or 1) < 0.5 if not lower_is_better(m) else (v - lo) / (hi - lo or 1) >= 0.5
            ax.text(j, i, _fmt(v, m), ha="center", va="center", fontsize=8, color="white" if dark else "black")
        fig.colorbar(im, ax=ax, shrink=0.8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _tick(v) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) else str(v)


def _cells(grid):
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            v = grid.iat[i, j]
            if _valid(v):
                yield (i, j), float(v)


def pareto_front(table, cost: str, quality: str) -> list:
    """Rows (index labels) no other row beats on both: lower or equal cost and higher or equal quality,
    one strictly. Sorted by cost."""
    rows = [(label, float(table.at[label, cost]), float(table.at[label, quality])) for label in table.index
            if _valid(table.at[label, cost]) and _valid(table.at[label, quality])]
    front = [r for r in rows if not any(c <= r[1] and q >= r[2] and (c < r[1] or q > r[2]) for _, c, q in rows)]
    return [label for label, _, _ in sorted(front, key=lambda r: r[1])]


def frontier_figure(table, cost: str = "prompt_tokens", quality: str = "score", names: dict | None = None,
                    title: str = ""):
    """Quality against cost, one point per row with its 95% interval on quality, the Pareto front drawn."""
    from matplotlib.figure import Figure

    _cjk_font()
    fig = Figure(figsize=(6.4, 4.0))
    ax = fig.subplots()
    xs, ys = table[cost].astype(float), table[quality].astype(float)
    lo = table[f"{quality}_low"] if f"{quality}_low" in table else ys
    hi = table[f"{quality}_high"] if f"{quality}_high" in table else ys
    ax.errorbar(xs, ys, yerr=[(ys - lo).clip(lower=0), (hi - ys).clip(lower=0)], fmt="o", capsize=3,
                color="#4C72B0", label="sweep point (95% CI)")
    front = pareto_front(table, cost, quality)
    ax.plot([table.at[f, cost] for f in front], [table.at[f, quality] for f in front], "-", color="#DD8452",
            label="cost/quality frontier")
    span_x, span_y = (float(xs.max() - xs.min()) or 1.0), (float(ys.max() - ys.min()) or 1.0)
    placed: list[tuple[float, float]] = []
    for label in table.index:
        x, y = float(table.at[label, cost]), float(table.at[label, quality])
        near = sum(abs(x - px) / span_x < 0.12 and abs(y - py) / span_y < 0.08 for px, py in placed)
        placed.append((x, y))
        ax.annotate((names or {}).get(label, str(label)), (x, y), fontsize=7, xytext=(4, 4 + 10 * near),
                    textcoords="offset points")
    ax.set_xlabel(label_of(cost), fontsize=8)
    ax.set_ylabel(label_of(quality), fontsize=8)
    ax.legend(fontsize=7)
    ax.set_title(title or f"{label_of(quality).split(' (')[0]} against {label_of(cost).split(' (')[0]}",
                 fontsize=9)
    fig.tight_layout()
    return fig


def recall_curve_figure(table, ks=(1, 5, 10, 20), title: str = ""):
    """recall@k against k, one line per cell (`strategy` label), one panel per dataset. `table`: a
    `load_runs` frame with `recall_at_<k>` (and `_low`/`_high`) columns and a `dataset` column."""
    from matplotlib.figure import Figure

    _cjk_font()
    ks = [k for k in ks if f"recall_at_{k}" in table.columns]
    if not ks:
        return None
    datasets = list(dict.fromkeys(table["dataset"]))
    fig = Figure(figsize=(4.0 * len(datasets), 3.4))
    for ax, ds in zip(fig.subplots(1, len(datasets), squeeze=False)[0], datasets):
        part = table[table["dataset"] == ds]
        for label, row in part.iterrows():
            vals = [row[f"recall_at_{k}"] for k in ks]
            lo = [row.get(f"recall_at_{k}_low", v) for k, v in zip(ks, vals)]
            hi = [row.get(f"recall_at_{k}_high", v) for k, v in zip(ks, vals)]
            line = ax.plot(ks, vals, "o-", label=str(label).split("@")[0])[0]
            ax.fill_between(ks, lo, hi, alpha=0.15, color=line.get_color())
        ax.set_xscale("log")
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("k (messages recalled)", fontsize=8)
        ax.set_ylabel("evidence recall@k (0-1) · 95% CI", fontsize=8)
        ax.set_title(ds, fontsize=9)
        ax.legend(fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def alpha_figure(rows, title: str = ""):
    """KL to both ends and p(answer) as alpha moves 0 -> 1, one line per probe (`alpha_curve` rows)."""
    import pandas as pd
    from matplotlib.figure import Figure

    _cjk_font()
    frame = pd.DataFrame(rows)
    fig = Figure(figsize=(12, 3.4))
    panels = (("kl_to_none", "KL(p_α ‖ p_0), nats: distance from no memory"),
              ("kl_to_full", "KL(p_α ‖ p_1), nats: distance from full memory"),
              ("p_answer", "p(gold answer), mean per token"))
    for ax, (col, label) in zip(fig.subplots(1, 3), panels):
        for probe, part in frame.groupby("probe", sort=False):
            ax.plot(part["alpha"], part[col], "o-", label=probe, markersize=3)
        ax.set_xlabel("alpha (K/V memory weight)", fontsize=8)
        ax.set_ylabel(label, fontsize=8)
        if col == "p_answer":
            ax.set_ylim(0, 1)
    handles, names = fig.axes[0].get_legend_handles_labels()
    rows = math.ceil(len(names) / 2)
    fig.set_figheight(3.4 + 0.22 * rows)
    fig.legend(handles, names, loc="lower center", ncol=2, fontsize=7, frameon=False)  # below: lines stay visible
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.22 * rows / (3.4 + 0.22 * rows) + 0.02, 1, 1))
    return fig


def tree_figure(edges: list[tuple[str, str | None]], labels: dict[str, str] | None = None,
                highlight: str | None = None, notes: dict[str, str] | None = None, title: str = ""):
    """An agent tree drawn top-down: `edges` (agent, parent) pairs, `labels` the text in each box,
    `highlight` the asking agent (its path to the root in bold), `notes` text under a box (e.g. the
    pointer it resolved)."""
    from matplotlib.figure import Figure

    _cjk_font()
    parent = dict(edges)
    kids: dict[str | None, list[str]] = {}
    for agent, par in edges:
        kids.setdefault(par, []).append(agent)
    pos: dict[str, float] = {}
    depth: dict[str, int] = {}
    next_x = [0.0]

    def place(node: str, d: int) -> float:
        depth[node] = d
        children = kids.get(node, [])
        if not children:
            pos[node] = next_x[0]
            next_x[0] += 1
        else:
            xs = [place(c, d + 1) for c in children]
            pos[node] = sum(xs) / len(xs)
        return pos[node]

    for root in kids.get(None, []):
        place(root, 0)
    path = set()
    node = highlight
    while node is not None:
        path.add(node)
        node = parent.get(node)
    width, levels = max(1, next_x[0]), max(depth.values(), default=0) + 1
    fig = Figure(figsize=(max(6.5, 3.0 * width), 1.5 * levels + 0.8))
    ax = fig.subplots()
    for agent, par in edges:
        if par is not None:
            bold = agent in path and par in path
            ax.plot([pos[par], pos[agent]], [-depth[par], -depth[agent]], "-", color="#DD8452" if bold else "#999",
                    lw=2.5 if bold else 1, zorder=1)
    for agent in pos:
        text = "\n".join(textwrap.wrap((labels or {}).get(agent, agent), 18))
        ax.text(pos[agent], -depth[agent], text, ha="center", va="center", fontsize=7, zorder=2,
                bbox={"boxstyle": "round", "fc": "#FCE5D4" if agent == highlight else "#E8EEF7",
                      "ec": "#DD8452" if agent in path else "#4C72B0"})
        if notes and agent in notes:
            ax.text(pos[agent], -depth[agent] - 0.2, "\n".join(textwrap.wrap(notes[agent], 26)), ha="center",
                    va="top", fontsize=7, color="#333", zorder=3,
                    bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": "#ccc", "lw": 0.6})
    ax.set_xlim(-0.8, width - 0.2)
    ax.set_ylim(-levels + 0.05, 0.4)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def metric_lines_figure(table, x: str, metrics, labels: dict[str, str] | None = None, title: str = ""):
    """`metrics` against one swept parameter `x`, one panel per metric, a line per strategy/dataset
    (the `strategy` and `dataset` columns of a `load_runs` frame), with 95% intervals."""
    from matplotlib.figure import Figure

    _cjk_font()
    labels = labels or {}
    metrics = [m for m in metrics if m in table.columns]
    if not metrics:
        return None
    fig = Figure(figsize=(4.2 * len(metrics), 3.3))
    groups = table.groupby([c for c in ("strategy", "dataset") if c in table.columns], sort=False)
    for ax, m in zip(fig.subplots(1, len(metrics), squeeze=False)[0], metrics):
        for key, part in groups:
            part = part.sort_values(x)
            v = part[m].astype(float)
            lo = part[f"{m}_low"] if f"{m}_low" in part else v
            hi = part[f"{m}_high"] if f"{m}_high" in part else v
            ax.errorbar(part[x], v, yerr=[(v - lo).clip(lower=0), (hi - v).clip(lower=0)], fmt="o-", capsize=3,
                        label="@".join(map(str, key if isinstance(key, tuple) else (key,))))
        ax.set_xlabel(labels.get(x, x), fontsize=8)
        ax.set_ylabel(labels.get(m, label_of(m)) + " · 95% CI", fontsize=8)
        if is_rate(m):
            ax.set_ylim(-0.02, 1.05)
        ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig

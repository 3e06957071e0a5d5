"""The views on a run's MLflow page: a cell's per-category table and plot, and on the parent run the
methodology card, the comparison table with intervals and its plots, the paired differences and the
Overview text (`fit_overview`, under MLflow's description limit)."""
from __future__ import annotations

import re

from dkilab.eval.scoring import primary_metric
from dkilab.eval.scoring.bootstrap import aggregate_by_category, ci_keys
from dkilab.eval.tracking.runs import metric_key, provenance_tags
from dkilab.eval.views.card import CARD_FILE, markdown, methodology_card
from dkilab.eval.views.plots import category_figure, headline_figure
from dkilab.eval.views.tables import (
    category_table,
    format_table,
    metric_counts,
    overview_markdown,
    paired_csv,
    pairwise,
    results_table,
)


def log_cell_views(cell, rows: list[dict]) -> None:
    """On a cell's run: the metrics per category with intervals (`by_category.json`) and their plot."""
    import mlflow

    by_cat = aggregate_by_category(rows, intervals=True)
    if by_cat:  # a table, not `cat/<c>/<m>` metrics: MLflow would chart those groups before the overall ones
        mlflow.log_table(category_table([(cell.label, by_cat)]), "by_category.json")
    _plot_categories(by_cat, cell.label)


def _plot_categories(by_cat: dict[str, dict[str, float]], title: str) -> None:
    import mlflow
    from matplotlib.figure import Figure  # no pyplot: a notebook's backend stays as it is


    metric = primary_metric({k for agg in by_cat.values() for k in agg})
    cats = [c for c in by_cat if metric in by_cat[c]]
    if metric is None or not cats:
        return
    vals = [by_cat[c][metric] for c in cats]
    err = [[max(0.0, v - by_cat[c].get(ci_keys(metric)[0], v)) for c, v in zip(cats, vals)],
           [max(0.0, by_cat[c].get(ci_keys(metric)[1], v) - v) for c, v in zip(cats, vals)]]
    fig = Figure(figsize=(max(4, len(cats) * 0.9), 3))
    ax = fig.subplots()
    ax.bar(cats, vals, yerr=err, capsize=3)
    ax.set_ylim(0, 1)
    ax.set_ylabel(f"{metric} (95% CI)")
    ax.set_title(title, fontsize=8)
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    fig.tight_layout()
    mlflow.log_figure(fig, "score_by_category.png")


def _dataset_key(cell) -> str:
    d = cell.dataset
    return f"{d.name}:{d.split}" + (f":{d.path}" if d.path else "")


def log_card(cfg, results) -> dict:
    """The methodology card (`dkilab.eval.views.card`) on the parent run: `methodology.json`, and at the top of its
    Overview, after the experiment's description (the comparison follows it there). -> the card."""
    import mlflow


    card = methodology_card(cfg, results, provenance_tags())
    mlflow.log_dict(card, CARD_FILE)
    run = mlflow.active_run()
    assert run is not None  # the parent run, started by the runner
    intro = (mlflow.get_run(run.info.run_id).data.tags.get("mlflow.note.content") or "").split("\n### Methodology")[0]
    body, room = markdown(card), max(400, NOTE_LIMIT // 4 - len(intro) - 40)  # the Overview keeps that much of its head
    if len(body) > room:
        body = body[:room].rsplit("\n", 1)[0] + f"\n\n(every cell: `{CARD_FILE}`)"
    head = intro.rstrip() + "\n" if intro.strip() else ""
    mlflow.set_tag("mlflow.note.content", head + "\n### Methodology\n\n" + body)
    return card


def log_comparison(results) -> None:
    """On the parent run: the comparison table with intervals, its plot, and the paired differences."""
    import mlflow


    done = [r for r in results if r.done]
    table = results_table(done, intervals=True)
    if table.empty:
        return
    table["questions"] = [r.metrics.get("questions") for r in done]  # n
    mlflow.log_text(table.to_csv(), "comparison.csv")
    mlflow.log_text(format_table(table), "comparison.txt")
    pairs = pairwise([(r.cell.label, _dataset_key(r.cell), r.load_rows()) for r in done])
    if not pairs.empty:
        mlflow.log_text(paired_csv(pairs), "paired.csv")
    _log_parent_metrics(done)

    counts = metric_counts({r.cell.label: r.load_rows() for r in done})
    _describe_parent(lambda **cut: overview_markdown(table, pairs, counts, **cut))
    fig = headline_figure(table, f"{len(done)} cells · bars: 95% bootstrap intervals · n per metric", counts)
    if fig is not None:
        mlflow.log_figure(fig, "comparison.png")
    metric = primary_metric(table.columns)
    if metric is not None:
        by_cell = {r.cell.label: aggregate_by_category(r.load_rows(), intervals=True) for r in done}
        if any(len(agg) > 1 for agg in by_cell.values()):
            fig = category_figure(by_cell, metric, f"{metric} per category")
            if fig is not None:
                mlflow.log_figure(fig, "comparison_by_category.png")


# MLflow keeps a tag value (the description is the tag mlflow.note.content) up to this many characters and
# cuts the rest with a warning: the overview is fitted under it instead, dropping whole rows with a note
NOTE_LIMIT = 8000


def fit_overview(overview, intro: str, limit: int = NOTE_LIMIT) -> str:
    """The description: `intro` (the experiment's, if any) then `overview(**cut)`, with fewer paired rows, then
    fewer cells, until it fits `limit` characters; an intro that alone leaves no room is shortened."""
    head = intro.rstrip() + "\n\n" if intro.strip() else ""
    if len(head) > limit // 4:
        head = head[: limit // 4 - 2].rstrip() + "…\n\n"
    cuts = [{"max_pairs": k} for k in (40, 20, 10, 5, 0)]
    cuts += [{"max_pairs": 0, "max_cells": k} for k in (40, 20, 10, 5, 0)]
    text = ""
    for cut in cuts:
        text = head + overview(**cut)
        if len(text) <= limit:
            return text
    # even with no cell left it does not fit (an overview with a very long preamble): cut at a line and say so
    tail = "\n\n… the overview was cut here to fit MLflow's description limit; the whole comparison is in " \
           "`comparison.csv` and `paired.csv`."
    kept = text[: limit - len(tail)]
    return (kept[: kept.rfind("\n")] if "\n" in kept else kept).rstrip() + tail


def _describe_parent(overview) -> None:
    """The parent run's description (its Overview page) becomes the experiment's description, if any,
    followed by the comparison and the paired differences (fitted under MLflow's limit, `fit_overview`)."""
    import mlflow

    run = mlflow.active_run()
    assert run is not None  # the parent run, started by the runner
    intro = (mlflow.get_run(run.info.run_id).data.tags.get("mlflow.note.content") or "").split("\n### Comparison")[0]
    mlflow.set_tag("mlflow.note.content", fit_overview(overview, intro))


_KEY_CHARS = re.compile(r"[^\w.\- /:]")


def parent_metric_key(metric: str, label: str) -> str:
    """`answers/score/recall_v4_fixtures`: a cell's figure on the parent run, in its metric's group (the
    runs chart view's section, beside the cells' own charts; MLflow keys allow \\w . - space / :)."""
    return f"{metric_key(metric)}/{_KEY_CHARS.sub('_', label)}"[:250]


def _log_parent_metrics(done) -> None:
    """The parent run's Overview shows the answer, not "Metrics (0)": each cell's headline metric and, where
    it has one, its hallucination rate, keyed `metric/cell`."""
    import mlflow


    out = {}
    for r in done:
        head = primary_metric(r.metrics)
        for name in dict.fromkeys([head or "", "hallucination_rate"]):
            value = r.metrics.get(name) if name else None
            if isinstance(value, (int, float)) and value == value:
                out[parent_metric_key(name, r.cell.label)] = float(value)
    if out:
        mlflow.log_metrics(out)



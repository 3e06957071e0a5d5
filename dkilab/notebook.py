"""What a notebook needs to stay thin: an experiment's finished cells as a DataFrame, their per-question
rows, the standard plots (the same as the parent run's and `dkilab report --plots`), and HTML views of a
recall-v4 suffix and of a fact-call loop.

    from dkilab.notebook import load_runs, load_predictions, plot_headlines, render_suffix
    runs = load_runs("quickstart")                 # one row per cell, config order: metrics, intervals, params
    preds = load_predictions("quickstart")         # one row per question and cell
    plot_headlines(runs)                           # matplotlib Figure
"""
from __future__ import annotations

import html
import itertools
import os
import re
import warnings
from typing import Any

from dkilab.agents.semantic_pointer import AgentTree
from dkilab.eval.data import DATA_ENV, dataset_available
from dkilab.eval.scoring.bootstrap import aggregate_by_category, ci_keys
from dkilab.eval.views.plots import (
    alpha_figure,
    category_figure,
    frontier_figure,
    headline_figure,
    metric_lines_figure,
    recall_curve_figure,
    sweep_heatmaps,
    tree_figure,
)
from dkilab.eval.views.plots import pareto_front as front
from dkilab.eval.views.report import experiment_runs, provenance_notes, read_metrics, run_dataset_key, run_rows
from dkilab.eval.views.tables import category_table, metric_counts, pairwise

# tqdm's notebook bars need ipywidgets; without it they fall back to text, with a warning on every import
warnings.filterwarnings("ignore", message="IProgress not found")


def _show_figures_inline() -> None:
    """In IPython, a `matplotlib.figure.Figure` (what the plot functions return; they never touch pyplot)
    displays as a PNG when it is a cell's value, with or without `%matplotlib inline`."""
    try:
        from IPython import get_ipython
        from IPython.core.pylabtools import select_figure_formats
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "display_formatter"):
        select_figure_formats(shell, {"png"}, bbox_inches="tight")


_show_figures_inline()

__all__ = ["load_runs", "load_predictions", "plot_headlines", "plot_categories", "plot_sweep", "plot_frontier",
           "plot_recall_at_k", "plot_metric_vs", "paired_differences", "category_values", "plot_alpha", "plot_tree",
           "pareto_front", "retrieval_misses", "available_datasets", "render_suffix", "render_fact_calls"]


def _runs(experiment: str, tracking_uri: str | None):
    return experiment_runs(experiment, tracking_uri)


def load_runs(experiment: str, tracking_uri: str | None = None, params: bool = True):
    """One row per finished cell of `experiment` (the newest run per config hash), in config order, indexed
    by cell label: `strategy`, `dataset`, `run_id`, every metric with `<m>_low` / `<m>_high` beside it where
    it has an interval, and (with `params`) the strategy params and sweep values as `param.<key>`.
    `invocation` (the parent run) and `host` say where each cell ran; a warning says when they differ."""
    import pandas as pd




    rows = []
    runs = _runs(experiment, tracking_uri)
    for note in provenance_notes(runs):  # cells from several invocations: say so where the frame is shown
        warnings.warn(note.removeprefix("note: "), stacklevel=2)
    for run in runs:
        metrics = read_metrics(run)
        row: dict[str, Any] = {"cell": run.info.run_name, "strategy": run.data.params.get("strategy.name"),
                               "dataset": run.data.params.get("dataset.name"), "run_id": run.info.run_id,
                               "invocation": run.data.tags.get("mlflow.parentRunId"),
                               "host": run.data.tags.get("dkilab.host")}
        for name, value in metrics.items():
            if name.endswith(("_ci95_low", "_ci95_high")):
                continue
            row[name] = value
            lo, hi = ci_keys(name)
            if lo in metrics:
                row[f"{name}_low"], row[f"{name}_high"] = metrics[lo], metrics.get(hi)
        if params:
            for key, value in run.data.params.items():
                if key.startswith(("strategy.params.", "point.")):
                    row["param." + key.removeprefix("strategy.params.")] = _param(value)
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.set_index("cell") if not frame.empty else frame


def _param(text: str) -> Any:
    """A logged param back as a number where it is one (MLflow stores params as strings)."""
    for cast in (int, float):
        try:
            return cast(text)
        except (TypeError, ValueError):
            pass
    return None if text == "None" else text


def load_predictions(experiment: str, tracking_uri: str | None = None):
    """One row per question (per dialogue turn) and cell: the cell label, then everything the cell logged
    for the question (question, gold, prediction, score fields, recalled ids, fact-call log, ...)."""
    import pandas as pd


    out = []
    for run in _runs(experiment, tracking_uri):
        out += [{"cell": run.info.run_name, **row} for row in run_rows(run.info.run_id)]
    return pd.DataFrame(out)


def paired_differences(experiment: str, tracking_uri: str | None = None, metrics: list[str] | None = None,
                       by_category: bool = False):
    """Paired differences (b - a) between the cells of each dataset on the questions both answered, with
    95% bootstrap intervals, p and `real` (the interval excludes 0): `dkilab report --by category`'s pairs."""
    cells = [(run.info.run_name, run_dataset_key(run), run_rows(run.info.run_id))
             for run in _runs(experiment, tracking_uri)]
    return pairwise(cells, metrics, by_category)


def plot_headlines(runs, title: str = "", predictions=None):
    """Every headline metric per cell with its 95% interval and value (a `load_runs` frame). With the
    `load_predictions` frame, n is per metric (the questions each metric counts); else per cell."""
    counts = None
    if predictions is not None and len(predictions):
        counts = metric_counts({cell: [{k: v for k, v in r.items() if not (isinstance(v, float) and v != v)}
                                       for r in group.to_dict("records")]
                                for cell, group in predictions.groupby("cell", sort=False)})
    return headline_figure(runs, title, counts)


def plot_sweep(runs, x: str, y: str, metrics=("score", "hallucination_rate", "prompt_tokens"),
               labels: dict[str, str] | None = None, title: str = ""):
    """Heatmaps of `metrics` over two swept parameters (`load_runs` columns, e.g. `param.history_budget`)."""
    return sweep_heatmaps(runs, x, y, metrics, labels, title)


def plot_frontier(runs, cost: str = "prompt_tokens", quality: str = "score", names: dict | None = None,
                  title: str = ""):
    """Quality against cost per cell (95% intervals) with the Pareto front (`pareto_front`) drawn."""
    return frontier_figure(runs, cost, quality, names, title)


def pareto_front(runs, cost: str = "prompt_tokens", quality: str = "score") -> list:
    """The cells no other cell beats on both cost (lower) and quality (higher), cheapest first."""
    return front(runs, cost, quality)


def plot_recall_at_k(runs, title: str = ""):
    """recall@1/5/10/20 against k, a line per cell, a panel per dataset (recall_only cells)."""
    return recall_curve_figure(runs, title=title)


def plot_metric_vs(runs, x: str, metrics=("score", "hallucination_rate"), labels: dict[str, str] | None = None,
                   title: str = ""):
    """`metrics` (95% intervals) against one swept parameter, a line per strategy (a `load_runs` frame)."""
    return metric_lines_figure(runs, x, metrics, labels, title)


def plot_alpha(rows, title: str = ""):
    """`dkilab.models.kv_probe.alpha_curve` rows: KL to both ends and p(answer) against alpha."""
    return alpha_figure(rows, title)


def plot_tree(tree, highlight: str | None = None, notes: dict[str, str] | None = None, title: str = ""):
    """An `AgentTree` (or its rows: (agent_id, parent, description)) drawn top-down, the asking
    agent's path to the root in bold and `notes` (e.g. resolved pointers) under the boxes."""
    if not isinstance(tree, AgentTree):
        tree = AgentTree.from_rows(tree)
    nodes = [tree.node(a) for a in tree.ids()]
    labels = {n.agent_id: f"{n.agent_id}: {n.description}" if n.description else n.agent_id for n in nodes}
    return tree_figure([(n.agent_id, n.parent) for n in nodes], labels, highlight, notes, title)


def retrieval_misses(predictions, conversations, k: int = 10, n: int = 10):
    """Up to `n` questions whose gold evidence is not all in the top `k`, side by side: the question, the
    gold evidence (id: text) and the top hits (id: text, gold ones marked), from `load_predictions` rows
    of recall cells and the dataset's conversations (for the message texts)."""
    import pandas as pd

    text = {m.message_id: m.content for c in conversations for m in c.messages}
    by_cell: dict[str, list[dict]] = {}
    for row in predictions.to_dict("records"):
        gold, hits = list(row.get("evidence_ids") or []), list(row.get("recalled_ids") or [])[:k]
        if gold and not set(gold) <= set(hits):
            by_cell.setdefault(row["cell"], []).append(row)
    picked = [r for group in itertools.zip_longest(*by_cell.values()) for r in group if r is not None][:n]
    out = []
    for row in picked:  # round robin over the cells (datasets), so one dataset does not take all n
        gold, hits = list(row["evidence_ids"]), list(row["recalled_ids"])[:k]
        out.append({"cell": row["cell"], "question": row["question"],
                    "gold evidence": "\n".join(f"{g}: {text.get(g, '?')[:160]}" for g in gold),
                    f"top hits (of {k})": "\n".join(f"{'✓ ' if h in gold else ''}{h}: {text.get(h, '?')[:100]}"
                                                  for h in hits[:5])})
    return pd.DataFrame(out)


def available_datasets(names, data_dir=None) -> list[str]:
    """The datasets of `names` whose files are there, printing one line per dataset skipped and why."""
    where = data_dir or os.environ.get(DATA_ENV)
    there = [n for n in names if dataset_available(n, data_dir)]
    for name in names:
        if name not in there:
            print(f"skipped {name}: its files are not in the data dir "
                  f"({where or f'not set: set ${DATA_ENV} or DATA_DIR in the first cell'}; `dkilab datasets list` "
                  "shows what is there)")
    return there


def _rows_by_cell(predictions) -> dict[str, list[dict]]:
    """A `load_predictions` frame back to each cell's rows, without the NaN holes a DataFrame adds."""
    return {cell: [{k: v for k, v in r.items() if not _missing(v)} for r in group.to_dict("records")]
            for cell, group in predictions.groupby("cell", sort=False)}


def category_values(predictions, metric: str = "score"):
    """`metric` per cell and category with its 95% interval and n, as a table (what `plot_categories` draws;
    categories by name where the dataset has names)."""
    return category_table(list(_rows_by_cell(predictions).items()), [metric])


def plot_categories(predictions, metric: str = "score", title: str = ""):
    """`metric` per category and cell with 95% intervals and question counts (a `load_predictions` frame)."""
    by_cell = {cell: aggregate_by_category(rows, names=[metric], intervals=True)
               for cell, rows in _rows_by_cell(predictions).items()}
    return category_figure(by_cell, metric, title or f"{metric} per category")


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and v != v)


_BLOCK = re.compile(r"\[SUMMARY (?P<head>[^\]]*)\](?P<body>.*?)\[/SUMMARY\]", re.S)


def render_suffix(text: str, budget: dict | None = None) -> str:
    """HTML of a recall-v4 suffix: each `[SUMMARY trace_id=...]` block boxed with its trace id, verbatim
    lines as they are, and the budget the suffix was built in (`Answer.budget.as_dict()`)."""
    parts, pos = [], 0
    for m in _BLOCK.finditer(text):
        if m.start() > pos:
            parts.append(
                f"<pre style='margin:2px 0;white-space:pre-wrap'>{html.escape(text[pos:m.start()].strip())}</pre>")
        tid = re.search(r'trace_id="?([^"\s]+)"?', m.group("head"))
        parts.append("<div style='border:1px solid #4C72B0;border-radius:4px;margin:4px 0;padding:4px'>"
                     f"<b>SUMMARY</b> <code>{html.escape(tid.group(1) if tid else '?')}</code> "
                     f"<span style='color:#666'>{html.escape(m.group('head'))}</span>"
                     "<pre style='margin:2px "
                     f"0;white-space:pre-wrap'>{html.escape(m.group('body').strip())}</pre></div>")
        pos = m.end()
    if text[pos:].strip():
        parts.append(f"<pre style='margin:2px 0;white-space:pre-wrap'>{html.escape(text[pos:].strip())}</pre>")
    head = ""
    if budget:
        head = "<p><b>budget</b>: " + ", ".join(f"{html.escape(str(k))} {html.escape(str(v))}"
                                                 for k, v in budget.items()) + "</p>"
    return "<div class='dkilab-suffix'>" + head + "".join(parts) + "</div>"


def render_fact_calls(calls: list, facts: list[str] | None = None) -> str:
    """HTML table of a fact-call loop: round, trace id, offset, limit, valid, found, tokens, and what each
    call fetched (`facts`, in call order, if given). `calls`: FactCall objects or their dicts (the
    `fact_call_log` of a prediction row)."""
    cols = ("round", "trace_id", "offset", "limit", "valid", "found", "malformed", "tokens")
    rows = []
    for i, call in enumerate(calls):
        c = call if isinstance(call, dict) else call.__dict__
        cells = "".join(f"<td>{html.escape(str(c.get(k, '')))}</td>" for k in cols)
        fetched = html.escape(facts[i]) if facts and i < len(facts) else ""
        rows.append(f"<tr>{cells}<td><pre style='margin:0;white-space:pre-wrap'>{fetched}</pre></td></tr>")
    if not rows:
        return "<p>no fact calls</p>"
    head = "".join(f"<th>{k}</th>" for k in (*cols, "fetched"))
    return f"<table class='dkilab-facts'><tr>{head}</tr>{''.join(rows)}</table>"

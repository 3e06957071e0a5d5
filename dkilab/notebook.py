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
import re
from typing import Any

__all__ = ["load_runs", "load_predictions", "plot_headlines", "plot_categories", "render_suffix",
           "render_fact_calls"]


def _runs(experiment: str, tracking_uri: str | None):
    import mlflow

    from dkilab.eval import runstate
    from dkilab.eval.runner import tracking_uri as default_uri
    from dkilab.eval.tracking import UnknownExperimentError, config_ordered, existing_store

    uri = existing_store(default_uri(tracking_uri))
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        names = sorted(e.name for e in mlflow.MlflowClient().search_experiments(max_results=1000))
        raise UnknownExperimentError(f"no MLflow experiment named {experiment!r} at {uri}; there: {', '.join(names)}")
    return config_ordered(runstate.finished_runs(exp.experiment_id).values())


def load_runs(experiment: str, tracking_uri: str | None = None, params: bool = True):
    """One row per finished cell of `experiment` (the newest run per config hash), in config order, indexed
    by cell label: `strategy`, `dataset`, `run_id`, every metric with `<m>_low` / `<m>_high` beside it where
    it has an interval, and (with `params`) the strategy params and sweep values as `param.<key>`."""
    import pandas as pd

    from dkilab.eval.metrics.bootstrap import ci_keys
    from dkilab.eval.tracking import read_metrics

    rows = []
    for run in _runs(experiment, tracking_uri):
        metrics = read_metrics(run)
        row: dict[str, Any] = {"cell": run.info.run_name, "strategy": run.data.params.get("strategy.name"),
                               "dataset": run.data.params.get("dataset.name"), "run_id": run.info.run_id}
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

    from dkilab.eval.tracking import run_rows

    out = []
    for run in _runs(experiment, tracking_uri):
        out += [{"cell": run.info.run_name, **row} for row in run_rows(run.info.run_id)]
    return pd.DataFrame(out)


def plot_headlines(runs, title: str = ""):
    """Every headline metric per cell with its 95% interval, value and n (a `load_runs` frame)."""
    from dkilab.eval.plots import headline_figure

    return headline_figure(runs, title)


def plot_categories(predictions, metric: str = "score", title: str = ""):
    """`metric` per category and cell with 95% intervals and question counts (a `load_predictions` frame)."""
    from dkilab.eval.metrics.base import aggregate_by_category
    from dkilab.eval.plots import category_figure

    by_cell = {}
    for cell, group in predictions.groupby("cell", sort=False):
        rows = [{k: v for k, v in r.items() if not _missing(v)} for r in group.to_dict("records")]
        by_cell[cell] = aggregate_by_category(rows, names=[metric], intervals=True)
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
            parts.append(f"<pre style='margin:2px 0;white-space:pre-wrap'>{html.escape(text[pos:m.start()].strip())}</pre>")
        tid = re.search(r'trace_id="?([^"\s]+)"?', m.group("head"))
        parts.append("<div style='border:1px solid #4C72B0;border-radius:4px;margin:4px 0;padding:4px'>"
                     f"<b>SUMMARY</b> <code>{html.escape(tid.group(1) if tid else '?')}</code> "
                     f"<span style='color:#666'>{html.escape(m.group('head'))}</span>"
                     f"<pre style='margin:2px 0;white-space:pre-wrap'>{html.escape(m.group('body').strip())}</pre></div>")
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

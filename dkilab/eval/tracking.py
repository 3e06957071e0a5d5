"""What goes to MLflow: params (flattened resolved config), metrics overall and per category,
artifacts (resolved config, predictions.jsonl, errors.txt, plots), and the comparison report."""
from __future__ import annotations

import re
import statistics
from typing import Any

_KEY = re.compile(r"[^A-Za-z0-9_\-./ ]")


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            out |= flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return {prefix: data}


def metric_key(text: str) -> str:
    return _KEY.sub("_", str(text))


def log_experiment(cfg, cells, config_path: str | None) -> None:
    import mlflow

    mlflow.log_dict(cfg.model_dump(mode="json"), "experiment.yaml")
    mlflow.log_params({"experiment": cfg.name, "cells": len(cells), "seed": cfg.seed,
                       "config_path": config_path or "<dict>"})


def log_cell(cell, rows: list[dict], errors: list[str], wall_s: float) -> dict[str, float]:
    import mlflow

    from dkilab.eval.metrics import aggregate, aggregate_by_category
    from dkilab.eval.runner import dumps_rows

    params = {k: (str(v)[:5000] if v is not None else "None") for k, v in flatten(cell.resolved).items()}
    params["config_hash"] = cell.config_hash
    mlflow.log_params(params)
    metrics = aggregate(rows)
    ok = [r for r in rows if not r.get("error")]
    metrics["questions_per_minute"] = 60.0 * len(rows) / wall_s if wall_s > 0 else 0.0
    if ok:
        metrics["harness_overhead_p50_ms"] = statistics.median(r["overhead_ms"] for r in ok)
    mlflow.log_metrics(metrics)
    for cat, agg in aggregate_by_category(rows).items():
        mlflow.log_metrics({metric_key(f"cat/{cat}/{k}"): v for k, v in agg.items()
                            if k in ("score", "questions", "hallucination_rate", "f1", "fact_call_rate", "recall_at_10", "mrr",
                                     "judge_score")})
    mlflow.log_dict(cell.resolved, "resolved_config.yaml")
    if "judge" in cell.resolved:
        mlflow.log_text(cell.resolved["judge"]["prompt"], "judge_prompt.txt")
    mlflow.log_text(dumps_rows(rows), "predictions.jsonl")
    if errors:
        mlflow.log_text("\n".join(errors), "errors.txt")
    _plot_categories(rows, cell.label)
    return metrics


def _plot_categories(rows, title: str) -> None:
    import mlflow
    from matplotlib.figure import Figure  # no pyplot: a notebook's backend stays as it is

    from dkilab.eval.metrics import aggregate_by_category, primary_metric

    by_cat = aggregate_by_category(rows)
    metric = primary_metric({k for agg in by_cat.values() for k in agg})
    cats = [c for c in by_cat if metric in by_cat[c]]
    if not cats:
        return
    fig = Figure(figsize=(max(4, len(cats) * 0.9), 3))
    ax = fig.subplots()
    ax.bar(cats, [by_cat[c][metric] for c in cats])
    ax.set_ylim(0, 1)
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=8)
    ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    fig.tight_layout()
    mlflow.log_figure(fig, "score_by_category.png")


def log_comparison(results) -> None:
    """On the parent run: the comparison table (csv + markdown) and a plot of score per cell."""
    import mlflow
    from matplotlib.figure import Figure

    from dkilab.eval.metrics import primary_metric
    from dkilab.eval.runner import results_table

    table = results_table(results)
    if table.empty:
        return
    mlflow.log_text(table.to_csv(), "comparison.csv")
    mlflow.log_text(table.to_string(float_format=lambda x: f"{x:.3f}"), "comparison.txt")
    metric = primary_metric(table.columns)
    if metric is None:
        return
    fig = Figure(figsize=(6, max(2.5, 0.35 * len(table))))
    ax = fig.subplots()
    ax.barh(list(table.index), table[metric].fillna(0).tolist())
    ax.set_xlim(0, 1)
    ax.set_xlabel(metric)
    fig.tight_layout()
    mlflow.log_figure(fig, "comparison.png")


def report(experiment: str, uri: str | None = None):
    """A comparison table of the finished cells of an experiment (latest run per config hash)."""
    import mlflow
    import pandas as pd

    from dkilab.eval.runner import TABLE_COLUMNS, tracking_uri

    mlflow.set_tracking_uri(tracking_uri(uri))
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        raise KeyError(f"no MLflow experiment named {experiment!r} at {tracking_uri(uri)}")
    runs = mlflow.search_runs([exp.experiment_id], filter_string="tags.`dkilab.kind` = 'cell' and attributes.status = 'FINISHED'",
                              order_by=["attributes.start_time DESC"])
    if runs.empty:
        return pd.DataFrame()
    runs = runs.drop_duplicates("tags.dkilab.config_hash")
    cols = {"tags.mlflow.runName": "cell"}
    for m in TABLE_COLUMNS:
        if f"metrics.{m}" in runs and runs[f"metrics.{m}"].notna().any():
            cols[f"metrics.{m}"] = m
    return runs[list(cols)].rename(columns=cols).set_index("cell").sort_index()

"""What goes to MLflow and comes back from it.

Per cell: params (the flattened resolved config, every default filled in), every metric and its 95% bootstrap
interval as MLflow metrics by group (`answers/score`), each with its n as the metrics.json table, artifacts
(by_category.json, questions.json,
(resolved_config.yaml, prompts.yaml, predictions.jsonl, errors.txt, score_by_category.png), tags
(config hash, git commit, dkilab version). On the parent run: the comparison table with intervals
(comparison.csv/.txt/.png) and the paired differences between cells on the same questions (paired.csv).
`views/report.py` reads all of it back (`dkilab report`). What a person reads on these runs (the by-category table and
plot, the card, the comparison) is `views/logged.py`; the traces' feedback is `assessments.py`.
"""
from __future__ import annotations

import functools
import json
import math
import subprocess
from pathlib import Path
from typing import Any

from dkilab import __version__
from dkilab.eval.scoring import METRICS
from dkilab.eval.scoring.base import counted
from dkilab.eval.scoring.bootstrap import ci_keys, with_intervals
from dkilab.eval.tracking.runstate import on_conflict_retry
from dkilab.eval.tracking.store_uri import METRICS_TABLE, METRICS_TABLE_TAG


def dumps_rows(rows) -> str:
    """Per-question rows as JSON lines (predictions.jsonl)."""
    return "\n".join(json.dumps(r, ensure_ascii=False, default=str) for r in rows) + "\n"


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out |= flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return {prefix: data}


@functools.lru_cache(maxsize=1)
def provenance_tags() -> dict[str, str]:
    """dkilab version and the git commit of the code that ran (with `-dirty` for local changes)."""
    root = Path(__file__).resolve().parents[3]
    tags = {"dkilab.version": __version__}
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                               text=True, timeout=5)
        if commit.returncode == 0:
            tags["mlflow.source.git.commit"] = commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return tags


def cell_description(cell) -> str:
    """The child run's description: what the cell is, in one paragraph (Markdown)."""
    d, point = cell.dataset, getattr(cell, "point", None) or {}
    model = cell.model.spec if cell.needs_model else "no model"
    parts = [f"Cell **{cell.label}**: strategy `{cell.strategy.name}` on dataset `{d.name}` ({d.split}"
             + (f", {d.limit} conversations" if d.limit else "") + f") with `{model}`."]
    if point:
        parts.append("Sweep point: " + ", ".join(f"`{k}` = {v}" for k, v in point.items()) + ".")
    parts.append(f"Config hash `{cell.config_hash}`; per-question results in `questions.json`, traces in the "
                 "Traces tab.")
    return " ".join(parts)


def log_experiment(cfg, cells, config_path: str | None) -> None:
    import mlflow

    if cfg.description:  # the experiment page shows the YAML's current description
        run = mlflow.active_run()
        assert run is not None  # the parent run, started by the runner
        on_conflict_retry(mlflow.MlflowClient().set_experiment_tag, run.info.experiment_id, "mlflow.note.content",
                          cfg.description)

    mlflow.log_dict(cfg.model_dump(mode="json"), "experiment.yaml")
    mlflow.log_params({"experiment": cfg.name, "cells": len(cells), "seed": cfg.seed,
                       "config_path": config_path or "<dict>"})


def cell_metrics(rows: list[dict], wall_s: float, extra: dict[str, float] | None = None) -> dict[str, float]:
    """Aggregates with intervals, plus what only the cell as a whole knows."""
    metrics = with_intervals(rows)
    metrics["questions_per_minute"] = 60.0 * len(rows) / wall_s if wall_s > 0 else 0.0
    return metrics | (extra or {})


def log_cell(cell, rows: list[dict], errors: list[str], wall_s: float, extra: dict[str, float] | None = None
             ) -> dict[str, float]:
    import mlflow

    resolved = cell.resolved
    params = {k: (str(v)[:5000] if v is not None else "None") for k, v in flatten(resolved).items()}
    params["config_hash"] = cell.config_hash
    mlflow.log_params(params)
    metrics = cell_metrics(rows, wall_s, extra)
    log_cell_metrics(metrics, rows)
    mlflow.log_dict(resolved, "resolved_config.yaml")
    mlflow.log_dict(cell.prompts(), "prompts.yaml")
    protocols = sorted({r["fact_protocol"] for r in rows if r.get("fact_protocol")})
    if protocols:  # how retrieve_fact was offered (native tool in the chat template, or the text protocol)
        mlflow.set_tag("dkilab.fact_protocol", ",".join(protocols))
    formatters = sorted({r["formatter"] for r in rows if r.get("formatter")})
    if formatters:  # the formatter used: an explicit prompt_formatter, or what `auto` chose
        mlflow.set_tag("dkilab.formatter", ",".join(formatters))
    if cell.judge is not None:  # a published protocol's prompts (from the user's copy of its script), by kind
        prompts = cell.judge.prompts()
        mlflow.log_text(resolved["judge"]["prompt"] if prompts is None else "\n\n".join(
            f"## {kind}\n{text}" for kind, text in prompts.items()), "judge_prompt.txt")
    mlflow.log_text(dumps_rows(rows), "predictions.jsonl")
    log_questions(cell, rows)
    if errors:
        mlflow.log_text("\n".join(errors), "errors.txt")
    return metrics


def metrics_table(metrics: dict[str, float], rows: list[dict]):
    """Every metric of a cell, one row each: value, 95% interval, n (the questions it counts) and which way
    is better; cell-level figures (counters, throughput) after the declared ones."""
    import pandas as pd


    out = []
    for name, value in metrics.items():
        if name.endswith(("_ci95_low", "_ci95_high")):
            continue
        m = METRICS.get(name)
        lo, hi = (metrics.get(k) for k in ci_keys(name))
        better = "" if m is None or m.higher_is_better is None else ("higher" if m.higher_is_better else "lower")
        out.append({"metric": name, "value": value, "ci95_low": lo, "ci95_high": hi,
                    "n": counted(m, rows) if m is not None else None, "better": better,
                    "description": m.description if m is not None else ""})
    return pd.DataFrame(out, columns=["metric", "value", "ci95_low", "ci95_high", "n", "better", "description"])


def metric_key(name: str) -> str:
    """A cell metric's MLflow key: `<group>/<name>` (`answers/score`, `fact/final_call`), an interval bound
    `uncertainty/<name>_ci95_low|high`; a figure no metric declares (the runner's extras) keeps its name."""
    base = name.removesuffix("_ci95_low").removesuffix("_ci95_high")
    m = METRICS.get(base)
    group = "" if m is None else ("uncertainty" if base != name else m.group)  # Metric checks its group
    return f"{group}/{name}" if group else name


def log_cell_metrics(metrics: dict[str, float], rows: list[dict]) -> None:
    """Every metric the cell computed, with its interval bounds, as an MLflow metric under its group
    (`metric_key`): the run page and the runs chart view make a section of each group, in name order, so
    an answering cell opens on `answers` (score, hallucination_rate, ...), a context-only one on `context`,
    and the intervals come after every figure. The `metrics.json` table holds each with its n and which way
    is better. `store_uri.read_metrics` reads both back under the metrics' names."""
    import mlflow

    finite = {metric_key(k): float(v) for k, v in metrics.items()
              if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
    mlflow.log_metrics(finite)
    mlflow.log_table(metrics_table(metrics, rows), METRICS_TABLE)
    mlflow.set_tag(METRICS_TABLE_TAG, METRICS_TABLE)


TABLE_COLUMNS = ("qid", "category", "answerable", "question", "gold", "prediction", "score", "abstained",
                 "hallucinated", "unsupported_claim_rate", "evidence_in_context", "fact_calls", "error", "trace_id")


def log_questions(cell, rows: list[dict]) -> None:
    """The dataset as an MLflow input (name, digest of its questions, split) and the per-question results
    as an MLflow table (`questions.json`: the UI shows it as columns)."""
    import mlflow
    import pandas as pd

    if not rows:
        return
    table = pd.DataFrame([{c: row.get(c) for c in TABLE_COLUMNS} for row in rows])
    table = table.dropna(axis=1, how="all")
    for col in ("question", "gold", "prediction"):
        if col in table:
            table[col] = table[col].map(lambda v: v if v is None or isinstance(v, str)
                                        else json.dumps(v, ensure_ascii=False))
    mlflow.log_table(table, "questions.json")
    d = cell.dataset
    questions = table[[c for c in ("qid", "category", "answerable", "question", "gold") if c in table]]
    questions = questions.drop_duplicates("qid") if "qid" in questions else questions
    name = d.name + (f" ({d.label})" if getattr(d, "label", None) and d.label != d.name else "")
    source = mlflow.data.from_pandas(questions.astype(str), name=name,  # type: ignore[attr-defined]
                                     targets="gold" if "gold" in questions else None)
    on_conflict_retry(mlflow.log_input, source, context=d.split)  # another process may log the same dataset now



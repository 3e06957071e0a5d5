"""What goes to MLflow and comes back from it.

Per cell: params (the flattened resolved config, every default filled in), metrics overall with their
95% bootstrap intervals (`<metric>_ci95_low|_high`), artifacts (by_category.json, questions.json,
(resolved_config.yaml, prompts.yaml, predictions.jsonl, errors.txt, score_by_category.png), tags
(config hash, git commit, dkilab version). On the parent run: the comparison table with intervals
(comparison.csv/.txt/.png) and the paired differences between cells on the same questions (paired.csv).
`report` reads all of it back for `dkilab report`.
"""
from __future__ import annotations

import functools
import itertools
import json
import re
import subprocess
from pathlib import Path
from typing import Any

from dkilab.eval.metrics.base import category_of
from dkilab.eval.metrics.bootstrap import aggregate_by_category, ci_keys, with_intervals

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TRACKING_URI = f"sqlite:///{ROOT / 'mlflow' / 'mlflow.db'}"


def tracking_uri(uri: str | None = None) -> str:
    """The store to use: the one given, else $MLFLOW_TRACKING_URI, else mlflow/mlflow.db in the project."""
    import os

    return uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def dumps_rows(rows) -> str:
    """Per-question rows as JSON lines (predictions.jsonl)."""
    return "\n".join(json.dumps(r, ensure_ascii=False, default=str) for r in rows) + "\n"


def results_table(results, intervals: bool = False):
    """One row per finished or skipped cell (runner.CellResult), in config order; the declared table
    columns that at least one cell has (`intervals=True` adds `<metric>_low` / `<metric>_high` beside each)."""
    return metrics_frame([(r.cell.label, r.metrics) for r in results if r.done], intervals=intervals)


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            out |= flatten(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return {prefix: data}


SCRIPTED_TAG = "dkilab.scripted"
_OLD_CI = re.compile(r"^ci95/(.+?)(?:/|_)(low|high)$")


def read_metrics(run) -> dict[str, float]:
    """A run's metrics under today's names (runs logged before the interval keys became
    `<metric>_ci95_low|high` had `ci95/<metric>/low|high`)."""
    out = {}
    for k, v in run.data.metrics.items():
        m = _OLD_CI.match(k)
        out[f"{m.group(1)}_ci95_{m.group(2)}" if m else k] = v
    return out


@functools.lru_cache(maxsize=1)
def provenance_tags() -> dict[str, str]:
    """dkilab version and the git commit of the code that ran (with `-dirty` for local changes)."""
    from dkilab import __version__

    root = Path(__file__).resolve().parents[2]
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
        mlflow.MlflowClient().set_experiment_tag(mlflow.active_run().info.experiment_id, "mlflow.note.content",
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
    mlflow.log_metrics(metrics)
    by_cat = aggregate_by_category(rows, intervals=True)
    if by_cat:  # a table, not `cat/<c>/<m>` metrics: MLflow would chart those groups before the overall ones
        mlflow.log_table(category_table([(cell.label, by_cat)]), "by_category.json")
    mlflow.log_dict(resolved, "resolved_config.yaml")
    mlflow.log_dict(cell.prompts(), "prompts.yaml")
    protocols = sorted({r["fact_protocol"] for r in rows if r.get("fact_protocol")})
    if protocols:  # how retrieve_fact was offered (native tool in the chat template, or the text protocol)
        mlflow.set_tag("dkilab.fact_protocol", ",".join(protocols))
    formatters = sorted({r["formatter"] for r in rows if r.get("formatter")})
    if formatters:  # the formatter used: an explicit prompt_formatter, or what `auto` chose
        mlflow.set_tag("dkilab.formatter", ",".join(formatters))
    if cell.judge is not None:
        mlflow.log_text(resolved["judge"]["prompt"], "judge_prompt.txt")
    mlflow.log_text(dumps_rows(rows), "predictions.jsonl")
    log_questions(cell, rows)
    if errors:
        mlflow.log_text("\n".join(errors), "errors.txt")
    _plot_categories(by_cat, cell.label)
    return metrics


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
            table[col] = table[col].map(lambda v: v if v is None or isinstance(v, str) else json.dumps(v, ensure_ascii=False))
    mlflow.log_table(table, "questions.json")
    d = cell.dataset
    questions = table[[c for c in ("qid", "category", "answerable", "question", "gold") if c in table]]
    questions = questions.drop_duplicates("qid") if "qid" in questions else questions
    name = d.name + (f" ({d.label})" if getattr(d, "label", None) and d.label != d.name else "")
    source = mlflow.data.from_pandas(questions.astype(str), name=name, targets="gold" if "gold" in questions else None)
    mlflow.log_input(source, context=d.split)


def _fmt(metrics: dict[str, float], name: str) -> str:
    v = metrics.get(name)
    if v is None:
        return "nan"
    lo, hi = (metrics.get(k) for k in ci_keys(name))
    return f"{v:.3f}" + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else "")


def cell_line(cell, metrics: dict[str, float], n: int, total: int, wall_s: float) -> str:
    from dkilab.eval.metrics import primary_metric

    main = primary_metric(metrics) or "score"
    asked, failed = int(metrics.get("questions", 0)), int(metrics.get("errors", 0))
    over = f"{asked - failed} of {asked} answered ({failed} failed)" if failed else f"{asked} questions"
    return f"[{n}/{total}] {cell.label}: {main} {_fmt(metrics, main)} over {over} in {wall_s:.0f} s"


def _plot_categories(by_cat: dict[str, dict[str, float]], title: str) -> None:
    import mlflow
    from matplotlib.figure import Figure  # no pyplot: a notebook's backend stays as it is

    from dkilab.eval.metrics import primary_metric

    metric = primary_metric({k for agg in by_cat.values() for k in agg})
    cats = [c for c in by_cat if metric in by_cat[c]]
    if not cats:
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


# --- tables ------------------------------------------------------------------------------------
def metrics_frame(cells: list[tuple[str, dict[str, float]]], intervals: bool = False, extra: list[str] | None = None):
    """label -> declared table columns (those at least one cell has; `extra` metrics after them), in the
    given order."""
    import pandas as pd

    from dkilab.eval.metrics import table_metrics

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
    import math

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

    from dkilab.eval.metrics.base import paired_by_default
    from dkilab.eval.metrics.bootstrap import paired
    from dkilab.registry import METRICS

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
            splits = [(None, ra, rb)]
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


def _dataset_key(cell) -> str:
    d = cell.dataset
    return f"{d.name}:{d.split}" + (f":{d.path}" if d.path else "")


def log_comparison(results) -> None:
    """On the parent run: the comparison table with intervals, its plot, and the paired differences."""
    import mlflow

    from dkilab.eval.metrics import primary_metric

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
    from dkilab.eval.plots import category_figure, headline_figure

    counts = metric_counts({r.cell.label: r.load_rows() for r in done})
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


def metric_counts(rows_by_cell: dict[str, list[dict]]) -> dict[str, dict[str, int]]:
    """{metric: {cell: how many questions the metric counts}} for every declared metric: the rows that have
    its field (a metric's function gives no value for a question it does not apply to)."""
    from dkilab.eval.metrics.base import declared

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


PAIRED_ORDER = ("dataset", "metric", "category", "a", "b", "diff", "low", "high", "real", "n", "a_value", "b_value", "p")


def paired_csv(pairs) -> str:
    """paired.csv as a reader (and MLflow's artifact preview) wants it: what differs and whether it is
    real first, then the values; numbers rounded to 3 decimals."""
    cols = [c for c in PAIRED_ORDER if c in pairs.columns]
    return pairs[cols].round(3).to_csv(index=False)


_KEY_CHARS = re.compile(r"[^\w.\- /:]")


def parent_metric_key(metric: str, label: str) -> str:
    """`score/recall_v4_fixtures`: a cell's figure on the parent run (MLflow keys allow \\w . - space / :)."""
    return f"{metric}/{_KEY_CHARS.sub('_', label)}"[:250]


def _log_parent_metrics(done) -> None:
    """The parent run's Overview shows the answer, not "Metrics (0)": each cell's headline metric and, where
    it has one, its hallucination rate, keyed `metric/cell`."""
    import mlflow

    from dkilab.eval.metrics import primary_metric

    out = {}
    for r in done:
        head = primary_metric(r.metrics)
        for name in dict.fromkeys([head, "hallucination_rate"]):
            value = r.metrics.get(name) if name else None
            if isinstance(value, (int, float)) and value == value:
                out[parent_metric_key(name, r.cell.label)] = float(value)
    if out:
        mlflow.log_metrics(out)


# --- reading back ------------------------------------------------------------------------------
def run_rows(run_id: str) -> list[dict[str, Any]]:
    """The per-question rows a cell logged (predictions.jsonl); a fresh copy each call (the report's
    pairs, its category table and its plots read the same runs once)."""
    import mlflow

    return [dict(r) for r in _rows_of(mlflow.get_tracking_uri(), run_id)]


@functools.lru_cache(maxsize=256)
def _rows_of(uri: str, run_id: str) -> tuple[dict[str, Any], ...]:
    """Keyed by store and run: a logged artifact of a run never changes once written."""
    import os

    import mlflow

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    path = Path(mlflow.MlflowClient(uri).download_artifacts(run_id, "predictions.jsonl"))
    return tuple(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


def detector_notes(params_per_cell: list[dict[str, str]]) -> list[str]:
    """One line per abstention detector the cells used: name, version and measured test-half figures."""
    seen = {}
    for params in params_per_cell:
        card = {k.removeprefix("metrics.abstention_detector."): v for k, v in params.items()
                if k.startswith("metrics.abstention_detector.")}
        if card:
            seen.setdefault(json.dumps(card, sort_keys=True), card)
    notes = []
    for card in seen.values():
        figures = ", ".join(f"{k.removeprefix('test_')} {v}" for k, v in sorted(card.items()) if k.startswith("test_"))
        name = card.get("name", "?") + (f" ({card['model']})" if card.get("model") else "") + f"-v{card.get('version', '?')}"
        notes.append(f"hallucination_rate rests on the abstention detector {name}: held-out test half "
                     f"{figures or card.get('test_figures', 'not measured')} (`dkilab bench abstention`)")
    return notes


class UnknownExperimentError(KeyError):
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class TrackingStoreError(ValueError):
    """A tracking URI that names no existing store (a typo would otherwise create an empty one)."""


def existing_store(uri: str) -> str:
    """`uri` if it names an existing store: a SQLite file or file: folder that exists, or a server that
    answers (`/health`, 5 s timeout). Raises TrackingStoreError with one line otherwise."""
    from dkilab.eval import runstate

    local = runstate.local_store_dir(uri)
    if local is not None:
        path = Path(uri[len("sqlite:///"):]).expanduser() if uri.startswith("sqlite:///") else local
        if not path.exists():
            raise TrackingStoreError(f"no MLflow store at {uri} ({path} does not exist); runs go to "
                                     "$MLFLOW_TRACKING_URI or sqlite:///mlflow/mlflow.db by default")
        return uri
    if uri.startswith(("http://", "https://")):
        check_server(uri)
    return uri


def check_server(uri: str, timeout: float = 5.0) -> None:
    """Fail within `timeout` seconds, in one line, when a tracking server does not answer."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout) as resp:
            resp.read(64)
    except urllib.error.HTTPError as e:
        if e.code >= 500:
            raise TrackingStoreError(f"MLflow tracking server {uri} answered {e.code} on /health") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise TrackingStoreError(f"MLflow tracking server {uri} is not reachable ({reason}); start it, or pass "
                                 "--tracking-uri / set MLFLOW_TRACKING_URI to one that is") from None


def config_ordered(runs) -> list:
    """Cell runs in the order the config lists them (the `dkilab.cell_index` tag); by start time when
    some runs predate the tag."""
    runs = list(runs)
    idx = [r.data.tags.get("dkilab.cell_index", "") for r in runs]
    if all(i.isdigit() for i in idx):
        return [r for _, r in sorted(zip(idx, runs), key=lambda p: (int(p[0]), p[1].info.start_time))]
    return sorted(runs, key=lambda r: r.info.start_time)


def category_table(rows_per_cell: list[tuple[str, list[dict] | dict]], metrics: list[str] | None = None):
    """Long table: cell, category, metric, value, low, high, n (per-category values with 95% intervals).
    Each cell gives its rows, or their `aggregate_by_category(..., intervals=True)` if already computed."""
    import pandas as pd

    from dkilab.eval.metrics.bootstrap import ci_keys

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


class ScriptedRunsError(ValueError):
    """An experiment's cells ran on a `scripted:` model: its numbers measure the pipeline, not a model."""


def experiment_runs(experiment: str, uri: str | None = None) -> list:
    """The finished cells of an experiment (the newest completed run per cell label) in config order;
    a store that does not exist or an unknown experiment name is a one-line error (did-you-mean)."""
    import mlflow

    from dkilab.eval import runstate

    uri = existing_store(tracking_uri(uri))
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        import difflib

        names = [e.name for e in mlflow.MlflowClient().search_experiments(max_results=1000) if e.name != "Default"]
        close = difflib.get_close_matches(experiment, names, n=1)
        raise UnknownExperimentError(f"no MLflow experiment named {experiment!r} at {uri}"
                                     + (f"; did you mean {close[0]!r}?" if close else "")
                                     + (f" Experiments there: {', '.join(sorted(names))}" if names else " (it has none)"))
    return config_ordered(newest_per_cell(runstate.finished_runs(exp.experiment_id).values()))


def provenance_notes(runs) -> list[str]:
    """Say when the cells of a comparison come from different invocations, machines or code: scores still
    compare (same questions, same config hash), latencies and throughput only within one run."""
    import datetime as dt

    parents: dict[str, list] = {}
    for r in runs:
        parents.setdefault(r.data.tags.get("mlflow.parentRunId", r.info.run_id), []).append(r)
    hosts = sorted({r.data.tags.get("dkilab.host", "?") for r in runs})
    commits = sorted({r.data.tags.get("mlflow.source.git.commit", "?")[:12] for r in runs})
    if len(parents) < 2 and len(hosts) < 2 and len(commits) < 2:
        return []
    when = sorted(dt.datetime.fromtimestamp(min(x.info.start_time for x in group) / 1000).strftime("%m-%d %H:%M")
                  for group in parents.values())
    parts = [f"{len(parents)} invocations (started {', '.join(when)})"]
    if len(hosts) > 1:
        parts.append(f"{len(hosts)} machines ({', '.join(hosts)})")
    if len(commits) > 1:
        parts.append(f"{len(commits)} code versions ({', '.join(commits)})")
    return [f"note: these cells come from {' and '.join(parts)}. Scores compare (same questions, same config); "
            "latency and throughput compare only between cells of one invocation, which may have run under "
            "different load."]


def newest_per_cell(runs) -> list:
    """One run per cell label: the newest (a config edited between runs leaves older hashes behind, and two
    rows for one label made reports crash and notebooks double-count)."""
    best: dict[str, Any] = {}
    for r in runs:
        cur = best.get(r.info.run_name)
        if cur is None or r.info.start_time > cur.info.start_time:
            best[r.info.run_name] = r
    return list(best.values())


def run_dataset_key(run) -> str:
    """Which cells compare question by question: same dataset, split and file."""
    p = run.data.params
    return (f"{p.get('dataset.name')}:{p.get('dataset.split')}"
            + (f":{p['dataset.path']}" if p.get("dataset.path") not in (None, "None") else ""))


def report(experiment: str, uri: str | None = None, pairs: bool = True, by_category: bool = False,
           metrics: list[str] | None = None, allow_scripted: bool = False):
    """(table with intervals, paired differences, detector notes) of the finished cells of an experiment:
    the newest completed run per config hash, in the order the cells ran. Cells of a `scripted:` model
    are refused unless `allow_scripted` (their outputs come from a file, not a model)."""
    import pandas as pd

    runs = experiment_runs(experiment, uri)
    if not runs:
        return pd.DataFrame(), pd.DataFrame(), []
    scripted = [r.info.run_name for r in runs if r.data.tags.get(SCRIPTED_TAG) == "1"]
    if scripted and not allow_scripted:
        raise ScriptedRunsError(f"{len(scripted)} of {len(runs)} cells of {experiment!r} ran on a scripted model "
                                f"({', '.join(scripted[:3])}{', ...' if len(scripted) > 3 else ''}): their outputs "
                                "come from a file, so they compare pipelines, not models; pass --allow-scripted "
                                "to report them anyway")
    table = metrics_frame([(r.info.run_name, read_metrics(r)) for r in runs], intervals=True, extra=metrics)
    table["questions"] = [r.data.metrics.get("questions") for r in runs]  # n
    notes = detector_notes([r.data.params for r in runs]) if "hallucination_rate" in table.columns else []
    notes = provenance_notes(runs) + notes
    if not pairs:
        return table, pd.DataFrame(), notes
    keyed = [(r.info.run_name, run_dataset_key(r), run_rows(r.info.run_id)) for r in runs]
    return table, pairwise(keyed, metrics, by_category), notes


# --- per-question assessments on the traces ----------------------------------------------------
# MLflow draws a boolean feedback True as a green check and False as a red cross, so every boolean here
# reads "True = good"; what is neither good nor bad (whether a question was answered, an error's type) is
# a string, which MLflow shows as plain text.
ASSESSED = (  # row field -> feedback name (what the traces table shows as columns); numbers as they are
    ("score", "score"), ("unsupported_claim_rate", "unsupported_claims"),
    ("evidence_in_context", "evidence_in_context"), ("intent_accuracy", "intent_correct"),
    ("l2_state_accuracy", "l2_state_correct"),
)


def _assessments(row: dict) -> list[tuple[str, Any, str | None, str]]:
    """(name, value, rationale, source type) for one row; only what applies to the question."""
    out = []
    for field, name in ASSESSED:
        v = row.get(field)
        if v is not None and not (isinstance(v, float) and v != v):
            out.append((name, float(v), None, "CODE"))
    if row.get("abstained") is not None:
        out.append(("response", "abstained" if row["abstained"] else "answered", None, "CODE"))
    if row.get("hallucinated") is not None:  # an unanswerable question: abstaining is the good outcome
        out.append(("hallucination_free", not row["hallucinated"],
                    "abstained, as the history holds no answer" if not row["hallucinated"] else
                    "answered although the history holds no answer", "CODE"))
    if row.get("fact_calls"):
        out.append(("fact_call_validity", row.get("valid_calls", 0) / row["fact_calls"],
                    f"{row.get('valid_calls', 0)} of {row['fact_calls']} retrieve_fact calls valid", "CODE"))
    if row.get("judge") is not None:
        out.append(("judge", bool(row["judge"]), str(row.get("judge_reply") or "")[:2000] or None, "LLM_JUDGE"))
    if row.get("error"):
        text = str(row["error"])
        out.append(("error", text.split(":", 1)[0][:200], text[:2000], "CODE"))
    return out


def _expectations(row: dict) -> list[tuple[str, Any]]:
    """The dataset's gold for one question, as MLflow expectations (ground truth, not inputs)."""
    if row.get("answerable") is False:
        return [("expected_behavior", "abstain: the history holds no answer")]
    gold = row.get("gold")
    return [("expected_response", str(gold))] if gold not in (None, "") else []


ASSESSMENTS_TAG = "dkilab.assessments"  # "pending" until a cell's feedback is on its traces, then how many


def log_pending_assessments(experiment_id: str, rows_by_run: dict[str, list[dict]]) -> tuple[int, int]:
    """Put the feedback of every cell run tagged pending on its traces: after the cells, so no process
    of a multi-GPU run waits on the main one writing ~10k assessments per cell. A run this process just
    finished brings its rows; one left pending by a stopped run (Ctrl-C, kill -9) is read back from its
    predictions and only its missing assessments are added. -> (cells, assessments)."""
    import mlflow

    from dkilab.eval import runstate

    client = mlflow.MlflowClient()
    pending = client.search_runs([experiment_id], f"tags.`{ASSESSMENTS_TAG}` = 'pending'", max_results=50000)
    cells = n = 0
    for run in pending:
        rid, tags = run.info.run_id, run.data.tags
        rows = rows_by_run.get(rid)
        if rows is None:
            if run.info.status == "RUNNING" or runstate.writer_alive(tags):
                continue  # another live process's cell: it logs its own
            try:
                rows = run_rows(rid)
            except Exception:  # noqa: BLE001 - no predictions (the run died before them): nothing to assess
                continue
        logged = log_assessments(rows, only_missing=rid not in rows_by_run)
        client.set_tag(rid, ASSESSMENTS_TAG, str(logged))
        n += logged
        cells += 1
    return cells, n


def log_assessments(rows: list[dict], only_missing: bool = False) -> int:
    """Each traced question's scores as MLflow feedback on its trace (a dialogue's turns: one feedback
    per turn, named by turn, plus their mean). `only_missing`: skip names a trace already carries (a
    backfill after a stopped run). Returns how many were logged."""
    import mlflow
    from mlflow.entities import AssessmentSource

    by_trace: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("trace_id"):
            by_trace.setdefault(row["trace_id"], []).append(row)
    n = 0
    for trace_id, group in by_trace.items():
        items = []
        expected = _expectations(group[0]) if len(group) == 1 else []
        if len(group) == 1:
            items = _assessments(group[0])
        else:  # a dialogue: the mean per measure, and the turn-by-turn values in the rationale
            per: dict[str, list] = {}
            for row in group:
                for name, value, _, _ in _assessments(row):
                    per.setdefault(name, []).append(value)
            for name, vals in per.items():
                if all(isinstance(v, (int, float)) for v in vals):
                    items.append((name, sum(float(v) for v in vals) / len(vals), "per turn: " + ", ".join(
                        str(round(float(v), 3)) for v in vals), "CODE"))
                else:  # text values (response, error): the turns' values in order
                    items.append((name, ", ".join(map(str, vals))[:200], None, "CODE"))
        if only_missing:
            try:
                have = {a.name for a in (mlflow.get_trace(trace_id).info.assessments or [])}
            except Exception:  # noqa: BLE001 - the trace is gone: nothing to attach feedback to
                continue
            items = [it for it in items if it[0] not in have]
            expected = [e for e in expected if e[0] not in have]
        for name, value, rationale, source in items:
            mlflow.log_feedback(trace_id=trace_id, name=name, value=value, rationale=rationale,
                                source=AssessmentSource(source_type=source, source_id="dkilab"))
            n += 1
        for name, value in expected:
            mlflow.log_expectation(trace_id=trace_id, name=name, value=value,
                                   source=AssessmentSource(source_type="HUMAN", source_id="dataset gold"))
            n += 1
    return n

"""What goes to MLflow and comes back from it.

Per cell: params (the flattened resolved config, every default filled in), every metric and its 95% bootstrap
interval as MLflow metrics by group (`answers/score`), each with its n as the metrics.json table, artifacts
(by_category.json, questions.json,
(resolved_config.yaml, prompts.yaml, predictions.jsonl, errors.txt, score_by_category.png), tags
(config hash, git commit, dkilab version). On the parent run: the comparison table with intervals
(comparison.csv/.txt/.png) and the paired differences between cells on the same questions (paired.csv).
`report.py` reads all of it back (`dkilab report`); the tables and paired statistics are `tables.py`.
"""
from __future__ import annotations

import functools
import json
import math
import re
import subprocess
from pathlib import Path
from typing import Any

from dkilab import __version__
from dkilab.eval import runstate
from dkilab.eval.card import CARD_FILE, markdown, methodology_card
from dkilab.eval.metrics import METRICS, primary_metric
from dkilab.eval.metrics.base import counted
from dkilab.eval.metrics.bootstrap import aggregate_by_category, ci_keys, with_intervals
from dkilab.eval.plots import category_figure, headline_figure
from dkilab.eval.runstate import on_conflict_retry
from dkilab.eval.store_uri import METRICS_TABLE, METRICS_TABLE_TAG, run_rows
from dkilab.eval.tables import (
    category_table,
    format_table,
    metric_counts,
    overview_markdown,
    paired_csv,
    pairwise,
    results_table,
)


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
    if cell.judge is not None:  # a published protocol's prompts (from the user's copy of its script), by kind
        prompts = cell.judge.prompts()
        mlflow.log_text(resolved["judge"]["prompt"] if prompts is None else "\n\n".join(
            f"## {kind}\n{text}" for kind, text in prompts.items()), "judge_prompt.txt")
    mlflow.log_text(dumps_rows(rows), "predictions.jsonl")
    log_questions(cell, rows)
    if errors:
        mlflow.log_text("\n".join(errors), "errors.txt")
    _plot_categories(by_cat, cell.label)
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
    """The methodology card (`dkilab.eval.card`) on the parent run: `methodology.json`, and at the top of its
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
    out: list[tuple[str, Any, str | None, str]] = []
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

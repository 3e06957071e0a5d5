"""Run an experiment: cells = strategies x sweep points x datasets; per question an Answer and a
metric row; one MLflow parent run per invocation and one child run per cell.

- A strategy exception on one question becomes an error row (traceback in errors.txt, `errors`
  metric) and the run goes on.
- A cell whose config hash already has a FINISHED run in the experiment is skipped, so a killed
  sweep resumes where it stopped.
- Under `accelerate launch --num_processes N` the questions of each cell are split across the
  processes and gathered on the main process, which alone talks to MLflow.
"""
from __future__ import annotations

import json
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dkilab.eval.experiment import Cell, ExperimentConfig, expand_cells

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TRACKING_URI = f"sqlite:///{ROOT / 'mlflow' / 'mlflow.db'}"


@dataclass
class CellResult:
    cell: Cell
    metrics: dict[str, float] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: bool = False
    run_id: str | None = None


def tracking_uri(uri: str | None = None) -> str:
    import os

    return uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


@dataclass
class CellData:
    """A dataset as one cell sees it: the questions to ask and the store holding the histories."""
    items: list  # [(conversation, question)]
    store: Any


def load_cell_data(cell: Cell, data_dir, cache: dict | None = None) -> CellData:
    """Questions and store for the cell's dataset; cells sharing a dataset spec share one load."""
    from dkilab.eval.stores import store_for

    key = cell.dataset.model_dump_json()
    if cache is not None and key in cache:
        return cache[key]
    convs, items = _questions(cell, data_dir)
    data = CellData(items, store_for(convs, f"{cell.dataset.name}-{cell.dataset.split}"))
    if cache is not None:
        cache[key] = data
    return data


def _questions(cell: Cell, data_dir):
    """[(conversation, question)] of the cell's dataset, after split, categories and limits."""
    from dkilab.eval.datasets import load_dataset
    from dkilab.eval.datasets.ablation import ablation_split

    d = cell.dataset
    convs = load_dataset(d.name, data_dir=data_dir, limit=d.limit)
    if d.split == "ablation":
        convs = ablation_split(convs)
    out = []
    for conv in convs:
        qs = [q for q in conv.questions if (d.categories is None or q.category in d.categories)
              and (q.answerable or not d.answerable_only)]
        out += [(conv, q) for q in qs[:d.question_limit]]
    return convs, out


def _answer_row(strategy, item, conv, memory, model, dataset: str) -> tuple[dict[str, Any], str | None]:
    from dkilab.eval.metrics import score_answer

    base = {"qid": item.qid, "user_id": conv.user_id, "category": item.category, "question": item.question,
            "gold": item.answer, "answerable": item.answerable, "evidence_ids": item.evidence_ids}
    t = time.perf_counter()
    try:
        answer = strategy.answer(item.question, memory, model, session_id=item.metadata.get("session_id"),
                                 preferences=conv.preferences or None)
    except Exception as exc:  # one bad question must not stop the sweep
        return base | {"error": f"{type(exc).__name__}: {exc}", "wall_ms": (time.perf_counter() - t) * 1000}, \
            f"--- {item.qid}: {item.question}\n{traceback.format_exc()}"
    wall = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    row = base | score_answer(item, answer, dataset) | {
        "prediction": answer.text, "recalled_ids": answer.recalled_ids,
        "fact_call_log": [c.__dict__ for c in answer.fact_calls], "wall_ms": wall}
    # harness overhead: what the question cost beyond the strategy's own stages, scoring included
    row["overhead_ms"] = max(0.0, wall - sum(answer.latency_ms.values())) + (time.perf_counter() - t) * 1000
    return row, None


def run_cell(cell: Cell, model, data: CellData, state=None, trace: bool = False, progress: bool = True):
    """Answer and score every question of a cell -> (rows, error tracebacks). Shards across processes."""
    from tqdm.auto import tqdm

    from dkilab.strategies import create_strategy

    items, views = data.items, {}
    strategy = create_strategy(cell.strategy.name, cell.strategy.params, source=f"strategy {cell.strategy.key}")
    main = state is None or state.is_main_process
    idx = list(range(len(items)))
    rows, errors = [], []

    def work(my_idx):
        for i in tqdm(my_idx, desc=cell.label, disable=not (progress and main), leave=False):
            conv, item = items[i]
            if conv.user_id not in views:
                views[conv.user_id] = data.store.for_user(conv.user_id)
            memory = views[conv.user_id]
            if trace:
                import mlflow

                from dkilab.eval.tracing import tracing_to

                with tracing_to(mlflow), mlflow.start_span(name=f"question {item.qid}") as s:
                    s.set_inputs({"question": item.question, "gold": item.answer, "strategy": cell.label})
                    row, err = _answer_row(strategy, item, conv, memory, model, cell.dataset.name)
                    s.set_outputs({"prediction": row.get("prediction"), "score": row.get("score"), "error": row.get("error")})
            else:
                row, err = _answer_row(strategy, item, conv, memory, model, cell.dataset.name)
            rows.append((i, row))
            if err:
                errors.append(err)

    if state is not None and state.num_processes > 1:
        from accelerate.utils import gather_object

        with state.split_between_processes(idx) as mine:
            work(mine)
        rows = gather_object(rows)
        errors = gather_object(errors)
    else:
        work(idx)
    rows = [r for _, r in sorted(rows, key=lambda x: x[0])]
    return rows, errors


def judge_rows(rows: list[dict[str, Any]], items: list, spec) -> None:
    """Add the LLM judge's verdict (`judge`: 1/0/None) and raw reply to each answered row, in place."""
    from dkilab.eval.metrics.judge import LLMJudge
    from dkilab.models import load_model

    judge = LLMJudge(load_model(spec.model, max_context=spec.max_context), spec.prompt, spec.max_new_tokens)
    for row, (_, item) in zip(rows, items):
        if row.get("error") or "prediction" not in row:
            continue
        row["judge"], row["judge_reply"] = judge.judge(item, row["prediction"])


def _ensure_experiment(name: str, uri: str) -> None:
    """Artifacts of a local sqlite store go beside the database (not into the working directory)."""
    import mlflow

    if mlflow.get_experiment_by_name(name) is None and uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///"):])
        try:
            mlflow.create_experiment(name, artifact_location=(db.parent / "artifacts").resolve().as_uri())
        except mlflow.exceptions.MlflowException:
            pass  # created meanwhile
    mlflow.set_experiment(name)


def process_state():
    """accelerate's PartialState; on a machine without CUDA, processes started by `accelerate launch
    --multi_gpu --num_processes N` (or torchrun) join a gloo group on CPU."""
    import torch
    from accelerate import PartialState

    return PartialState(cpu=not torch.cuda.is_available())


def finished_hashes(experiment_name: str) -> set[str]:
    import mlflow

    exp = mlflow.get_experiment_by_name(experiment_name)
    if exp is None:
        return set()
    runs = mlflow.search_runs([exp.experiment_id], filter_string="tags.`dkilab.kind` = 'cell' and attributes.status = 'FINISHED'",
                              output_format="list")
    return {r.data.tags.get("dkilab.config_hash") for r in runs}


def run_experiment(cfg: ExperimentConfig, *, data_dir=None, uri: str | None = None, config_path: str | None = None,
                   progress: bool = True, echo=print) -> list[CellResult]:
    import mlflow

    from dkilab.eval import tracking
    from dkilab.eval.metrics import primary_metric
    from dkilab.models import load_model
    from dkilab.strategies import STRATEGIES

    state = process_state()
    main = state.is_main_process
    mlflow.set_tracking_uri(tracking_uri(uri))
    cells = expand_cells(cfg)
    done = finished_hashes(cfg.name) if main else set()
    if state.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        box = [done]
        broadcast_object_list(box)
        done = box[0]
    results: list[CellResult] = []
    datasets: dict[str, CellData] = {}
    parent = None
    if main:
        _ensure_experiment(cfg.name, tracking_uri(uri))
        parent = mlflow.start_run(run_name=f"{cfg.name} {time.strftime('%Y-%m-%d %H:%M:%S')}",
                                  tags={"dkilab.kind": "experiment"})
        tracking.log_experiment(cfg, cells, config_path)
    try:
        for n, cell in enumerate(cells, 1):
            if cell.config_hash in done:
                echo(f"[{n}/{len(cells)}] {cell.label}: finished before (config {cell.config_hash}), skipped")
                results.append(CellResult(cell, skipped=True))
                continue
            m = cell.model
            model = (load_model(m.spec, dtype=m.dtype, device=m.device, max_context=m.max_context)
                     if STRATEGIES[cell.strategy.name].needs_model else None)
            child = mlflow.start_run(run_name=cell.label, nested=True, tags={
                "dkilab.kind": "cell", "dkilab.config_hash": cell.config_hash, "strategy": cell.strategy.key,
                "dataset": cell.dataset.name}) if main else None
            t = time.perf_counter()
            data = load_cell_data(cell, data_dir, datasets)
            rows, errors = run_cell(cell, model, data, state,
                                    trace=cfg.tracing and main, progress=progress)
            wall = time.perf_counter() - t
            result = CellResult(cell, rows=rows)
            if main and cell.judge is not None:
                judge_rows(rows, data.items, cell.judge)
            if main:
                result.metrics = tracking.log_cell(cell, rows, errors, wall)
                result.run_id = child.info.run_id
                mlflow.end_run()
                main_metric = primary_metric(result.metrics) or "score"
                echo(f"[{n}/{len(cells)}] {cell.label}: {main_metric} {result.metrics.get(main_metric, float('nan')):.3f} "
                     f"over {len(rows)} questions in {wall:.0f} s")
            results.append(result)
        if main:
            tracking.log_comparison(results)
    finally:
        if main and parent is not None:
            while mlflow.active_run() is not None:
                mlflow.end_run()
    return results


def check_expectations(cfg: ExperimentConfig, results: list[CellResult]) -> list[str]:
    """Metric ranges of `expect:` that a run missed (empty = all good); skipped cells are not checked."""
    problems = []
    for res in results:
        if res.skipped:
            continue
        for metric, (lo, hi) in cfg.expect.get(res.cell.strategy.key, {}).items():
            value = res.metrics.get(metric)
            if value is None or not (lo <= value <= hi):
                problems.append(f"{res.cell.label}: {metric} = {value} not in [{lo}, {hi}]")
    return problems


TABLE_COLUMNS = ("score", "answer_score", "hallucination_rate", "unsupported_claim_rate", "fact_call_rate",
                 "evidence_in_context", "judge_score", "recall_at_5", "recall_at_10", "recall_at_20", "mrr", "prompt_tokens",
                 "injected_tokens", "latency_recall_p50_ms", "latency_total_p50_ms", "harness_overhead_p50_ms",
                 "questions_per_minute", "errors")


def results_table(results: list[CellResult]):
    """One row per finished cell; columns of TABLE_COLUMNS that at least one cell has."""
    import pandas as pd

    data = {r.cell.label: {c: r.metrics.get(c) for c in TABLE_COLUMNS} for r in results if not r.skipped}
    return pd.DataFrame.from_dict(data, orient="index").dropna(axis=1, how="all")


def dumps_rows(rows) -> str:
    return "\n".join(json.dumps(r, ensure_ascii=False, default=str) for r in rows) + "\n"

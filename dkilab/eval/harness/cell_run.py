"""One cell's MLflow run, as the runner hands it over: generated (`run_one`: prepare, ask, score, log), scored
again from a finished run's stored answers (`rescore_one`), or imported from a published file (`import_one`);
each ends FINISHED with the completion tag, FAILED with its reason, or KILLED (`close`, `end_failed`)."""
from __future__ import annotations

import contextlib
import time
import traceback
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from dkilab.eval.data import published
from dkilab.eval.harness import rescore
from dkilab.eval.harness.cell import load_cell_questions, run_cell
from dkilab.eval.harness.experiment import Cell
from dkilab.eval.harness.notes import over_error_budget
from dkilab.eval.harness.prepare import CellFailedOnARank, cell_scorers, prepare_cell
from dkilab.eval.harness.processes import broadcast
from dkilab.eval.scoring.scorers import score_rows
from dkilab.eval.tracking import assessments, runstate, store_uri
from dkilab.eval.tracking import runs as tracking
from dkilab.eval.tracking.journal import Journal
from dkilab.eval.tracking.store_uri import run_rows
from dkilab.eval.views import logged, tables


@dataclass
class CellResult:
    cell: Cell
    metrics: dict[str, float] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    skipped: bool = False  # finished in an earlier run: metrics read back from MLflow
    run_id: str | None = None
    error: str | None = None  # the cell failed (its run is FAILED)
    claimed_by: str | None = None  # `--claim`: another machine holds this cell; nothing ran here

    @property
    def status(self) -> str:
        return ("failed" if self.error else "claimed" if self.claimed_by else "skipped" if self.skipped
                else "finished")

    @property
    def done(self) -> bool:
        """Finished here or before (metrics available)."""
        return not self.error and not self.claimed_by

    def load_rows(self) -> list[dict[str, Any]]:
        """The per-question rows (for a skipped cell, read from its predictions.jsonl artifact)."""
        if not self.rows and self.run_id and not self.error:
            self.rows = run_rows(self.run_id)
        return self.rows


# the parent run a Ray task's cells nest under (the driver's, `open_parent`); None: this process's own
NEST_UNDER: ContextVar[str | None] = ContextVar("dkilab_nest_under", default=None)


def cell_tags(cell: Cell, n: int) -> dict[str, str]:
    return {"dkilab.kind": "cell", "dkilab.config_hash": cell.config_hash, "dkilab.cell_index": str(n),
            rescore.GENERATION_TAG: cell.generation_hash, rescore.SCORING_TAG: cell.scoring_hash,
            "strategy": cell.strategy.key, "dataset": cell.dataset.name, **tracking.provenance_tags(),
            **runstate.process_tags(), **({"mlflow.parentRunId": nest} if (nest := NEST_UNDER.get()) else {}),
            **({store_uri.SCRIPTED_TAG: "1"} if cell.needs_model and cell.model.spec.startswith("scripted:") else {})}


def log_cell(cell: Cell, rows: list[dict], errors: list[str], wall_s: float, extra: dict[str, float]
             ) -> dict[str, float]:
    """The cell's run: what tracking logs (params, metrics, predictions, questions) and the views of it (the
    per-category table and plot). -> its metrics."""
    metrics = tracking.log_cell(cell, rows, errors, wall_s, extra)
    logged.log_cell_views(cell, rows)
    return metrics


def rescore_one(cfg, cell: Cell, n: int, total: int, state, source: str, data_dir, datasets, echo
                 ) -> CellResult | None:
    """A cell scored from the stored answers of run `source` into a new run (no model under test loaded; the
    judge is, if the config has one). None when the answers no longer fit the questions: generate instead."""
    import mlflow


    if not state.is_main_process:
        return CellResult(cell, skipped=True)
    t = time.perf_counter()
    items = load_cell_questions(cell, data_dir, datasets)
    try:
        stored = rescore.read_answers(source, items)
    except rescore.StoredAnswersError as exc:
        echo(f"[{n}/{total}] {cell.label}: {exc}; generating")
        return None
    run = mlflow.start_run(run_name=cell.label, nested=True, tags=cell_tags(cell, n) | {rescore.RESCORED_TAG: source},
                           description=tracking.cell_description(cell)
                           + f" Re-scored from the answers of run `{source}`.")
    result = CellResult(cell, run_id=run.info.run_id)
    failed = f"[{n}/{total}] {cell.label}: re-scoring FAILED"
    with _failing(result, lambda e: echo(f"{failed} ({e}); the next run retries it")):
        result.rows = rescore.rescore_cell(stored, items, cell_scorers(cell))
        answers, trace_ids, header = stored
        errors, counters = list(header.get("errors") or []), dict(header.get("counters") or {})
        over = _log_and_close(cfg, result, answers, items, trace_ids, errors, float(header["wall_s"]), counters)
        if over:
            echo(f"[{n}/{total}] {cell.label}: FAILED ({over})")
            return result
        before = store_uri.read_metrics(mlflow.get_run(source))
        changed, new, gone = rescore.changed_metrics(before, result.metrics)
        what = ("; ".join(p for p in (f"changed: {', '.join(changed)}" if changed else "",
                                      f"new: {', '.join(new)}" if new else "",
                                      f"gone: {', '.join(gone)}" if gone else "")
                          if p) or "every metric as before")
        echo(tables.cell_line(cell, result.metrics, n, total, time.perf_counter() - t)
             + f" (re-scored from the answers of run {source[:8]}, no generation; {what})")
    return result


def import_one(cfg, cell: Cell, n: int, total: int, state, data_dir, datasets, echo) -> CellResult:
    """An imported cell (strategy `imported`): its answers read from the published file, matched to the cell's
    questions, scored and logged as a generated cell's; no model under test, no store, nothing generated."""
    import mlflow

    if not state.is_main_process:
        return CellResult(cell, skipped=True)
    t = time.perf_counter()
    try:  # a file that does not fit the dataset is refused before a run is logged, naming the entry
        items = load_cell_questions(cell, data_dir, datasets)
        answers, errors, found = published.answers(cell, items, data_dir)
    except Exception as exc:
        echo(f"[{n}/{total}] {cell.label}: import FAILED ({exc})")
        return CellResult(cell, error=f"{type(exc).__name__}: {exc}")
    echo(f"[{n}/{total}] {cell.label}: imported {found.summary(cell.instance.file)}")
    run = mlflow.start_run(run_name=cell.label, nested=True, tags=cell_tags(cell, n) | {
        published.SOURCE_TAG: str(cell.instance.file)}, description=tracking.cell_description(cell))
    result = CellResult(cell, run_id=run.info.run_id)
    with _failing(result, lambda e: echo(f"[{n}/{total}] {cell.label}: import FAILED ({e})")):
        result.rows = score_rows(cell_scorers(cell), answers, items, {})
        over = _log_and_close(cfg, result, answers, items, {}, errors, time.perf_counter() - t, found.counters())
        line = tables.cell_line(cell, result.metrics, n, total, time.perf_counter() - t)
        echo(f"{line}: FAILED ({over})" if over else line + " (imported, no generation)")
    return result


def run_one(cfg, cell: Cell, n: int, total: int, state, data_dir, datasets, progress, echo) -> CellResult:
    import mlflow


    if cell.instance.needs().answers_from_file:  # a published run: read, never generated
        return import_one(cfg, cell, n, total, state, data_dir, datasets, echo)
    main = state.is_main_process
    child = None
    if main:
        child = mlflow.start_run(run_name=cell.label, nested=True, tags=cell_tags(cell, n),
                                 description=tracking.cell_description(cell))
    run_id = broadcast(state, child.info.run_id if child else None)
    result = CellResult(cell, run_id=run_id if main else None)
    t = time.perf_counter()
    try:
        model, data, scorers = prepare_cell(cell, state, data_dir, datasets, cfg.max_error_rate)
        journal = Journal.for_cell(mlflow.get_tracking_uri(), cfg.name, cell.config_hash, state.process_index)
        resumed = len(journal.load(data.items))
        if resumed and main:
            echo(f"[{n}/{total}] {cell.label}: {resumed} of {len(data.items)} questions answered by a stopped run; "
                 "asking the rest")
        answers, errors, trace_ids = run_cell(cell, model, data, state, trace=cfg.tracing, progress=progress,
                                              run_id=run_id, journal=journal, scorers=scorers)
        if main:
            result.rows = score_rows(scorers, answers, data.items, trace_ids)
            stats = data.store.passage_stats()
            extra = {"query_embeddings": float(data.store.embedder.cache_misses), "resumed_questions": float(resumed),
                     "store_over_window": float(stats["over_window"]),
                     "store_vectors": float(stats["messages"] + stats["passages"])}
            if cell.model.cache and cell.needs_model:
                extra["response_cache_hits"] = float(cell.instance.response_cache.hits)
            wall_s = time.perf_counter() - t
            result.metrics = log_cell(cell, result.rows, errors, wall_s, extra)
            rescore.log_answers(cell, answers, data.items, trace_ids, errors, wall_s, extra)  # re-scored from later
            if any(r.get("trace_id") for r in result.rows):  # written after the cells (log_pending_assessments)
                mlflow.set_tag(assessments.ASSESSMENTS_TAG, "pending")
            over = close(cfg, result)
            if over and over.startswith(runstate.CLAIM_LOST):  # the claim went to another process meanwhile
                echo(f"{tables.cell_line(cell, result.metrics, n, total, time.perf_counter() - t)}: KILLED ({over})")
            elif over:  # partial failure is failure: never skipped as done, redone by the next run
                echo(f"{tables.cell_line(cell, result.metrics, n, total, time.perf_counter() - t)}: FAILED ({over}; "
                     "the error rows are kept in predictions.jsonl and errors.txt); the next run asks those questions "
                     "again")
            else:
                journal.clear()
                echo(tables.cell_line(cell, result.metrics, n, total, time.perf_counter() - t))
    except (KeyboardInterrupt, SystemExit):
        if main:
            mlflow.end_run(status="KILLED")
        raise
    except Exception as exc:
        if state.num_processes > 1 and not isinstance(exc, CellFailedOnARank):
            raise  # mid-cell, inside a collective: the other processes could not go on
        if not main:
            result.error = str(exc)
            return result  # every process agreed the cell failed: on to the next one together
        end_failed(result, f"{type(exc).__name__}: {exc}", traceback.format_exc())
        echo(f"[{n}/{total}] {cell.label}: FAILED ({result.error}); the next run retries it")
    return result


def _log_and_close(cfg, result: CellResult, answers, items, trace_ids, errors: list[str], wall_s: float,
                   extra: dict[str, float]) -> str | None:
    """Log a cell scored from answers it did not generate here (re-scored, imported): its metrics and views, the
    answers a later re-score reads, then close its run (-> why it failed, or None)."""
    result.metrics = log_cell(result.cell, result.rows, errors, wall_s, extra)
    rescore.log_answers(result.cell, answers, items, trace_ids, errors, wall_s, extra)
    return close(cfg, result)


@contextlib.contextmanager
def _failing(result: CellResult, say):
    """Around scoring and logging a cell's run: Ctrl-C ends it KILLED (and goes on up); an error ends it FAILED
    with the traceback, and `say(error)` tells the user."""
    import mlflow

    try:
        yield
    except (KeyboardInterrupt, SystemExit):
        mlflow.end_run(status="KILLED")
        raise
    except Exception as exc:
        end_failed(result, f"{type(exc).__name__}: {exc}", traceback.format_exc())
        say(result.error)


def close(cfg, result: CellResult) -> str | None:
    """End the active cell run, generated or re-scored, after every metric and artifact: FAILED when its error
    rows are over the config's budget (-> the reason), else tagged complete and FINISHED (-> None)."""
    import mlflow


    lost = runstate.claim_lost(cfg.name, result.cell.config_hash)  # a fencing check, not a clock: see runstate
    if lost:
        result.error = lost
        mlflow.set_tag("dkilab.ended_by", lost)
        mlflow.end_run(status="KILLED")
        return lost
    over = over_error_budget(result.metrics, cfg.max_error_rate)
    if over:
        end_failed(result, over)
        return over
    mlflow.set_tag(runstate.COMPLETE_TAG, "1")
    mlflow.end_run(status="FINISHED")
    return None


def end_failed(result: CellResult, error: str, trace: str | None = None) -> None:
    """End the active cell run FAILED with the reason as a tag (and the traceback as cell_error.txt): never
    counted as finished, so the next run does the cell again."""
    import mlflow

    result.error = error
    if trace:
        mlflow.log_text(trace, "cell_error.txt")
    mlflow.set_tag("dkilab.error", error[:5000])
    mlflow.end_run(status="FAILED")

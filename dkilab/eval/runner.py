"""Run an experiment: cells = strategies x sweep points x datasets; per question an Answer and a metric
row; one MLflow parent run per invocation and one child run per cell.

- A strategy exception on one question (an endpoint still failing after its retries) becomes an
  error row (traceback in errors.txt, `errors` metric) and the cell goes on; a cell whose failed
  questions exceed `max_error_rate` (default 0) then ends FAILED with its rows kept, and runs again.
- A cell that raises (data missing, model missing, a bug) ends FAILED with its traceback, the next
  cell runs, and `dkilab run` exits 1 naming it; Ctrl-C / SystemExit end the cell and the parent
  KILLED. Only a FINISHED run with the completion tag counts as done (see `runstate`), so a rerun
  redoes exactly what did not finish; cells that did are shown with their metrics read back.
- Every cell starts cold: its strategy object is new and the store's query-embedding cache is
  emptied after a warm-up (model, indexes), so latency does not depend on cell order.
- Under `accelerate launch --num_processes N` the questions of each cell are split across the
  processes and gathered on the main process, which alone scores and talks to MLflow.
"""
from __future__ import annotations

import hashlib
import itertools
import os
import time
import traceback
from contextlib import nullcontext
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Collection

from dkilab.config import ConfigError
from dkilab.eval import budgets, interrupt, published, rescore, runstate, store_uri, tables, tracking
from dkilab.eval.cell import load_cell_data, load_cell_questions, make_judge, question_text, run_cell, score_cell
from dkilab.eval.experiment import Cell, ExperimentConfig, check_config, model_weights_digest
from dkilab.eval.experiment.checks import missing_data
from dkilab.eval.journal import Journal
from dkilab.eval.metrics.judge_stress import judge_notes
from dkilab.eval.store_uri import check_server, run_rows, tracking_uri
from dkilab.eval.sweep_data import check_thresholds
from dkilab.models.loading import load_model, load_tokenizer_model, loaded_keys, release_models
from dkilab.models.response_cache import ResponseCache


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



def _ensure_experiment(cfg: ExperimentConfig, uri: str) -> str:
    """The experiment's id; artifacts of a local sqlite store go beside the database."""
    import mlflow

    exp = mlflow.get_experiment_by_name(cfg.name)
    if exp is None:
        location = None
        if uri.startswith("sqlite:///"):
            location = (Path(uri[len("sqlite:///"):]).parent / "artifacts").resolve().as_uri()
        try:
            mlflow.create_experiment(cfg.name, artifact_location=location,
                                     tags={"mlflow.note.content": cfg.description} if cfg.description else None)
        except mlflow.exceptions.MlflowException:
            pass  # created meanwhile
        exp = mlflow.get_experiment_by_name(cfg.name)
        if exp is None:
            raise RuntimeError(f"MLflow experiment {cfg.name!r} could not be created at {uri}")
    mlflow.set_experiment(experiment_id=exp.experiment_id)
    return exp.experiment_id


def process_state():
    """accelerate's PartialState; on a machine without CUDA, processes started by `accelerate launch
    --multi_gpu --num_processes N` (or torchrun) join a gloo group on CPU."""
    import torch
    from accelerate import PartialState

    # collectives wait this long for a slow process (the main one scoring and logging) before the job
    # stops with the rank that did not answer; NCCL's default 10 minutes is too short for a judged cell
    timeout = timedelta(seconds=float(os.environ.get("DKILAB_COLLECTIVE_TIMEOUT", 7200)))
    return PartialState(cpu=not torch.cuda.is_available(), timeout=timeout)


def _broadcast(state, value):
    if state.num_processes <= 1:
        return value
    from accelerate.utils import broadcast_object_list

    box = [value]
    broadcast_object_list(box)
    return box[0]


def run_experiment(cfg: ExperimentConfig, *, data_dir=None, uri: str | None = None, config_path: str | None = None,
                   progress: bool = True, echo=print, claim: bool = False, rescore: bool = False,
                   only: Collection[str] | None = None, parent_run_id: str | None = None) -> list[CellResult]:
    """Run (or resume) every cell; returns one CellResult per cell, finished, skipped or failed. With
    `claim`, a cell runs only if this process claims it in the tracking store (`runstate.claim_cell`):
    several machines running the same config each take different cells (claimed elsewhere: "claimed").
    A cell whose generation part is unchanged since a finished run is scored from that run's stored
    answers (dkilab.eval.rescore). With `rescore`, every cell is, finished or not, and nothing generates:
    a cell without stored answers fails, naming why (`dkilab rescore`). `only`: the config hashes of the
    cells to run, the others left out (one Ray task runs one cell: `ray_executor`). `parent_run_id`: the
    invocation's parent run, opened by `open_parent` (the Ray driver): where it is this process's active run,
    it is used and ended as the run's own; in another process (a Ray task), the cells nest under it and it is
    left to its owner."""
    import mlflow



    cells = check_config(cfg, config_path or "<config>")
    if only is not None:
        cells = [c for c in cells if c.config_hash in only]
    absent = missing_data(cells, data_dir, config_path or "<config>")
    if absent:  # refused before a run is created: nothing is left in the store
        raise ConfigError("\n".join(absent))
    state = process_state()
    main = state.is_main_process
    check_thresholds(cfg, cells, data_dir, config_path or "<config>", echo if main else (lambda _: None))
    uri = tracking_uri(uri)
    if main:
        _open_store(uri)
    else:
        mlflow.set_tracking_uri(uri)
    with runstate.store_lock(uri, cfg.name, echo) if main else nullcontext():
        exp_id = _broadcast(state, _ensure_experiment(cfg, uri) if main else None)
        if not main and cfg.tracing:  # every process traces its shard of the questions into the experiment
            mlflow.set_experiment(experiment_id=exp_id)
        if main:
            for run_id in runstate.mark_dead_runs_killed(exp_id):
                echo(f"run {run_id} was left RUNNING by a process that is gone: marked KILLED")
        owned = (active := mlflow.active_run()) is not None and active.info.run_id == parent_run_id
        token = _NEST_UNDER.set(parent_run_id if parent_run_id and not owned else None)
        try:
            return _run_cells(cfg, cells, state, exp_id, data_dir, config_path, progress, echo,
                              claim and not rescore, rescore, parent=active if owned else None)
        finally:
            _NEST_UNDER.reset(token)


# the parent run a Ray task's cells nest under (the driver's, `open_parent`); None: this process's own
_NEST_UNDER: ContextVar[str | None] = ContextVar("dkilab_nest_under", default=None)


def open_parent(cfg: ExperimentConfig, uri: str | None = None, config_path: str | None = None) -> str:
    """The Ray driver's parent run for the invocation, started and left active in this process (the
    experiment logged to it); its tasks' cells nest under it (`run_experiment(parent_run_id=...)`) and the
    driver's read-back ends it. -> its run id."""
    cells = check_config(cfg, config_path or "<config>")
    uri = tracking_uri(uri)
    _open_store(uri)
    with runstate.store_lock(uri, cfg.name, print):
        _ensure_experiment(cfg, uri)
    return _start_parent(cfg, cells, config_path, False).info.run_id


def _open_store(uri: str) -> None:
    if uri.startswith(("http://", "https://")):  # one line within seconds, not minutes of retries
        check_server(uri)
    runstate.open_store(uri)


def _start_parent(cfg, cells, config_path, rescore_all: bool):
    import mlflow

    what = "rescore " if rescore_all else ""
    parent = mlflow.start_run(run_name=f"{what}{cfg.name} {experiment_hash(cells)} {time.strftime('%m-%d %H:%M')}",
                              tags={"dkilab.kind": "experiment", **tracking.provenance_tags(),
                                    **runstate.process_tags(), **({"dkilab.rescore": "1"} if rescore_all else {})},
                              description=cfg.description or None)
    tracking.log_experiment(cfg, cells, config_path)
    return parent


def _run_cells(cfg, cells, state, exp_id, data_dir, config_path, progress, echo, claim=False,
               rescore_all=False, parent=None) -> list[CellResult]:
    import mlflow


    main = state.is_main_process
    results: list[CellResult] = []
    datasets: dict[str, Any] = {}
    nested_elsewhere = _NEST_UNDER.get() is not None  # a Ray task: the driver owns the parent
    if main and parent is None and not nested_elsewhere:
        parent = _start_parent(cfg, cells, config_path, rescore_all)
    status = "FINISHED"
    order = model_order(cells)
    by_index: dict[int, CellResult] = {}

    before = loaded_keys()  # models the caller loaded before the run (a notebook's) are not ours to free
    try:
        for n, i in enumerate(order, 1):
            interrupt.check()  # a Ctrl-C that Python swallowed stops the sweep before the next cell
            cell = cells[i]
            done = (runstate.finished_runs(exp_id, cell.config_hash).get(cell.config_hash) if main and not rescore_all
                    else None)  # re-checked per cell
            if done is not None and (over := over_error_budget(store_uri.read_metrics(done), cfg.max_error_rate)):
                echo(f"[{n}/{len(cells)}] {cell.label}: finished before, but {over}: running it again")
                done = None
            skip = _broadcast(state, None if done is None else done.info.run_id)
            if skip is not None:
                by_index[i] = CellResult(cell, skipped=True, run_id=skip,
                                         metrics=store_uri.read_metrics(done) if main else {})
                echo(f"[{n}/{len(cells)}] {cell.label}: finished before (config {cell.config_hash}), skipped")
            elif claim and (holder := _broadcast(state, _claim(exp_id, cfg, cell) if main else None)) is not None:
                by_index[i] = CellResult(cell, claimed_by=holder)
                echo(f"[{n}/{len(cells)}] {cell.label}: claimed by {holder}, left to it")
            elif claim and (since := _broadcast(state, _finished_since(exp_id, cfg, cell) if main else None)):
                by_index[i] = CellResult(cell, skipped=True, run_id=since[0], metrics=since[1])
                echo(f"[{n}/{len(cells)}] {cell.label}: finished by another machine meanwhile, skipped")
            else:
                beating = (runstate.claim_heartbeat(cfg.name, cell.config_hash) if claim and main
                           else nullcontext())
                try:
                    with beating:
                        source = _broadcast(state, _answered(exp_id, cell, rescore_all) if main else None)
                        got = None if source is None else _rescore_one(cfg, cell, n, len(cells), state, source,
                                                                       data_dir, datasets, echo)
                        if got is None and rescore_all:
                            got = CellResult(cell, error="no stored answers (never finished, or its generation part "
                                                         "changed since): `dkilab run` it")
                            echo(f"[{n}/{len(cells)}] {cell.label}: {got.error}")
                        by_index[i] = got if got is not None else _run_one(cfg, cell, n, len(cells), state,
                                                                           data_dir, datasets, progress, echo)
                except BaseException:
                    if claim and main:
                        runstate.release_claim(cfg.name, cell.config_hash)  # Ctrl-C: the cell goes back
                    raise
                if claim and main:  # failed: another run retries it; finished: the claim is no longer needed
                    runstate.release_claim(cfg.name, cell.config_hash)
            release_after(cell, [cells[j] for j in order[n:]], before)
        results = [by_index[i] for i in sorted(by_index)]  # config order again
        if main:
            t = time.perf_counter()
            n_cells, n = tracking.log_pending_assessments(exp_id, {r.run_id: r.rows for r in results
                                                                   if r.rows and r.run_id})
            if n:
                echo(f"feedback on the traces of {n_cells} cell(s): {n} assessments ({time.perf_counter() - t:.0f} s, "
                     "after the cells so no process waits on it)")
            if parent is not None:  # a Ray task leaves the card and the comparison to its driver
                tracking.log_card(cfg, results)
                tracking.log_comparison(results)
            for note in sweep_notes(results):
                echo(f"note: {note}")

            for flag in judge_notes([(r.cell.label, r.metrics) for r in results]):
                echo(f"flag: {flag}")
            if any(r.error for r in results):
                status = "FAILED"
    except (KeyboardInterrupt, SystemExit):
        status = "KILLED"
        raise
    except BaseException:
        status = "FAILED"
        raise
    finally:
        if main:
            while (active := mlflow.active_run()) is not None and (parent is None
                                                                  or active.info.run_id != parent.info.run_id):
                mlflow.end_run(status="KILLED" if status == "KILLED" else "FAILED")
            if parent is not None:
                mlflow.end_run(status=status)
    return results


def _claim(exp_id: str, cfg, cell: Cell) -> str | None:
    """None when this process claimed the cell, else who holds it. Runs of the cell an earlier holder left
    RUNNING (it died, or its claim went stale) are marked KILLED."""
    got, holder = runstate.claim_cell(cfg.name, cell.config_hash)
    if got:
        runstate.end_orphan_runs(exp_id, cell.config_hash)
    return None if got else holder


def _finished_since(exp_id: str, cfg, cell: Cell) -> tuple[str, dict] | None:
    """Just claimed: whether another machine finished the cell between our check and our claim (it then
    released its claim). (run id, metrics) of that run, with our claim given back; None otherwise."""
    done = runstate.finished_runs(exp_id, cell.config_hash).get(cell.config_hash)
    if done is None or over_error_budget(store_uri.read_metrics(done), cfg.max_error_rate):
        return None
    runstate.release_claim(cfg.name, cell.config_hash)
    return done.info.run_id, store_uri.read_metrics(done)


def _cell_tags(cell: Cell, n: int) -> dict[str, str]:
    return {"dkilab.kind": "cell", "dkilab.config_hash": cell.config_hash, "dkilab.cell_index": str(n),
            rescore.GENERATION_TAG: cell.generation_hash, rescore.SCORING_TAG: cell.scoring_hash,
            "strategy": cell.strategy.key, "dataset": cell.dataset.name, **tracking.provenance_tags(),
            **runstate.process_tags(), **({"mlflow.parentRunId": nest} if (nest := _NEST_UNDER.get()) else {}),
            **({store_uri.SCRIPTED_TAG: "1"} if cell.needs_model and cell.model.spec.startswith("scripted:") else {})}


def _answered(exp_id: str, cell: Cell, any_scoring: bool) -> str | None:
    """The run whose stored answers this cell can be scored from: same generation hash, and (for `dkilab
    run`) a different scoring part; None when the cell has to generate."""
    run = rescore.answered_runs(exp_id, cell.generation_hash).get(cell.generation_hash)
    if run is None or (not any_scoring and run.data.tags.get("dkilab.config_hash") == cell.config_hash):
        return None
    return run.info.run_id


def experiment_hash(cells) -> str:
    """Which cells an invocation ran: a digest of their config hashes (the parent run's name carries it, so
    two runs of one config read as the same comparison and an edited config as another)."""
    return hashlib.sha1("|".join(sorted(c.config_hash for c in cells)).encode()).hexdigest()[:8]


def _rescore_one(cfg, cell: Cell, n: int, total: int, state, source: str, data_dir, datasets, echo
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
    run = mlflow.start_run(run_name=cell.label, nested=True, tags=_cell_tags(cell, n) | {rescore.RESCORED_TAG: source},
                           description=tracking.cell_description(cell)
                           + f" Re-scored from the answers of run `{source}`.")
    result = CellResult(cell, run_id=run.info.run_id)
    try:
        judge = make_judge(cell.judge, cell.model) if cell.judge is not None else None
        result.rows = rescore.rescore_cell(cell, stored, items, judge)
        answers, trace_ids, header = stored
        errors, counters = list(header.get("errors") or []), dict(header.get("counters") or {})
        result.metrics = tracking.log_cell(cell, result.rows, errors, float(header["wall_s"]), counters)
        rescore.log_answers(cell, answers, items, trace_ids, errors, float(header["wall_s"]), counters)
        over = _close(cfg, result)
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
    except (KeyboardInterrupt, SystemExit):
        mlflow.end_run(status="KILLED")
        raise
    except Exception as exc:
        _end_failed(result, f"{type(exc).__name__}: {exc}", traceback.format_exc())
        echo(f"[{n}/{total}] {cell.label}: re-scoring FAILED ({result.error}); the next run retries it")
    return result


def _import_one(cfg, cell: Cell, n: int, total: int, state, data_dir, datasets, echo) -> CellResult:
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
    run = mlflow.start_run(run_name=cell.label, nested=True, tags=_cell_tags(cell, n) | {
        published.SOURCE_TAG: str(cell.instance.file)}, description=tracking.cell_description(cell))
    result = CellResult(cell, run_id=run.info.run_id)
    try:
        judge = make_judge(cell.judge, cell.model) if cell.judge is not None else None
        result.rows = score_cell(cell, answers, items, judge, {},
                                 judge_batch=cell.judge.batch_size if cell.judge else 8)
        wall_s, extra = time.perf_counter() - t, found.counters()
        result.metrics = tracking.log_cell(cell, result.rows, errors, wall_s, extra)
        rescore.log_answers(cell, answers, items, {}, errors, wall_s, extra)
        over = _close(cfg, result)
        line = tables.cell_line(cell, result.metrics, n, total, time.perf_counter() - t)
        echo(f"{line}: FAILED ({over})" if over else line + " (imported, no generation)")
    except (KeyboardInterrupt, SystemExit):
        mlflow.end_run(status="KILLED")
        raise
    except Exception as exc:
        _end_failed(result, f"{type(exc).__name__}: {exc}", traceback.format_exc())
        echo(f"[{n}/{total}] {cell.label}: import FAILED ({result.error})")
    return result


def _run_one(cfg, cell: Cell, n: int, total: int, state, data_dir, datasets, progress, echo) -> CellResult:
    import mlflow


    if cell.instance.answers_from_file:  # a published run: read, never generated
        return _import_one(cfg, cell, n, total, state, data_dir, datasets, echo)
    main = state.is_main_process
    child = None
    if main:
        child = mlflow.start_run(run_name=cell.label, nested=True, tags=_cell_tags(cell, n),
                                 description=tracking.cell_description(cell))
    run_id = _broadcast(state, child.info.run_id if child else None)
    result = CellResult(cell, run_id=run_id if main else None)
    t = time.perf_counter()
    cell.instance.kv_cache_bytes = cell.model.kv_cache_mb * 1024**2
    try:
        model, data, judge = _prepare(cell, state, data_dir, datasets, cfg.max_error_rate)
        journal = Journal.for_cell(mlflow.get_tracking_uri(), cfg.name, cell.config_hash, state.process_index)
        resumed = len(journal.load(data.items))
        if resumed and main:
            echo(f"[{n}/{total}] {cell.label}: {resumed} of {len(data.items)} questions answered by a stopped run; "
                 "asking the rest")
        if cell.model.cache and cell.needs_model:
            cell.instance.response_cache = response_cache()
        judge_batch = cell.judge.batch_size if cell.judge else 8
        answers, errors, trace_ids = run_cell(cell, model, data, state, trace=cfg.tracing, progress=progress,
                                              run_id=run_id, journal=journal, judge=judge, judge_batch=judge_batch)
        if main:
            result.rows = score_cell(cell, answers, data.items, judge, trace_ids,
                                     judge_batch=judge_batch)
            stats = data.store.passage_stats()
            extra = {"query_embeddings": float(data.store.embedder.cache_misses), "resumed_questions": float(resumed),
                     "store_over_window": float(stats["over_window"]),
                     "store_vectors": float(stats["messages"] + stats["passages"])}
            if cell.instance.response_cache is not None:
                extra["response_cache_hits"] = float(cell.instance.response_cache.hits)
            wall_s = time.perf_counter() - t
            result.metrics = tracking.log_cell(cell, result.rows, errors, wall_s, extra)
            rescore.log_answers(cell, answers, data.items, trace_ids, errors, wall_s, extra)  # re-scored from later
            if any(r.get("trace_id") for r in result.rows):  # written after the cells (log_pending_assessments)
                mlflow.set_tag(tracking.ASSESSMENTS_TAG, "pending")
            over = _close(cfg, result)
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
        _end_failed(result, f"{type(exc).__name__}: {exc}", traceback.format_exc())
        echo(f"[{n}/{total}] {cell.label}: FAILED ({result.error}); the next run retries it")
    return result


def _close(cfg, result: CellResult) -> str | None:
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
        _end_failed(result, over)
        return over
    mlflow.set_tag(runstate.COMPLETE_TAG, "1")
    mlflow.end_run(status="FINISHED")
    return None


def _end_failed(result: CellResult, error: str, trace: str | None = None) -> None:
    """End the active cell run FAILED with the reason as a tag (and the traceback as cell_error.txt): never
    counted as finished, so the next run does the cell again."""
    import mlflow

    result.error = error
    if trace:
        mlflow.log_text(trace, "cell_error.txt")
    mlflow.set_tag("dkilab.error", error[:5000])
    mlflow.end_run(status="FAILED")


class CellFailedOnARank(RuntimeError):
    """A cell could not start on some process (model, data, check); every process agrees and moves on."""


def _prepare(cell: Cell, state, data_dir, datasets, max_error_rate: float = 0.0):
    """(model, data, judge) of a cell. Under several processes each one's failure is gathered, so they all
    fail the cell together (naming the rank) and go on to the next cell, instead of the others waiting
    in a collective for one that raised."""
    error: str | None = None
    out: tuple[Any, Any, Any] = (None, None, None)
    try:
        data = load_cell_data(cell, data_dir, datasets)  # first: a missing dataset fails before a model loads
        model = cell_model(cell) if cell.needs_model else None
        if model is not None:  # e.g. K/V on an architecture that cannot take it: one clear failure, no error rows
            prefs = any(conv.preferences for conv, _ in data.items)
            cell.instance.check_model(model, preferences=prefs)
            budgets.starved(cell, model, [(q.qid, question_text(q), conv.preferences or []) for conv, q in data.items],
                            max_error_rate)  # counted with its tokenizer, before any question is asked
            if not cell.instance.needs_kv(prefs) and getattr(model, "model", None) is not None:
                from dkilab.models.kv import stock_attention

                stock_attention(model.model)  # nothing injected: the stock kernel (SDPA fast paths, flash)
        # every process loads the judge like its model (its own GPU) and judges its own answers (run_cell)
        out = (model, data, make_judge(cell.judge, cell.model) if cell.judge is not None else None)
    except Exception as exc:
        if state.num_processes <= 1:
            raise
        error = f"{type(exc).__name__}: {exc}"
    if state.num_processes > 1:
        from accelerate.utils import gather_object

        failed = [(rank, e) for rank, e in gather_object([(state.process_index, error)]) if e]
        if failed:
            raise CellFailedOnARank("; ".join(f"process {rank} (of {state.num_processes}): {e}" for rank, e in failed))
    return out


def over_error_budget(metrics: dict[str, float], max_error_rate: float) -> str | None:
    """Why a cell's failed questions exceed `max_error_rate` (None when within it)."""
    asked, failed = int(metrics.get("questions", 0)), int(metrics.get("errors", 0))
    if failed and failed > max_error_rate * asked:
        return (f"{failed} of {asked} questions failed, over max_error_rate {max_error_rate:g} "
                f"(set it in the config to accept failed questions)")
    return None


def response_cache():
    """The process's response cache (one SQLite connection, opened on first use)."""
    global _RESPONSES
    if _RESPONSES is None:
        _RESPONSES = ResponseCache()
    _RESPONSES.hits = _RESPONSES.misses = 0  # counted per cell
    return _RESPONSES


_RESPONSES = None


def model_order(cells: list[Cell]) -> list[int]:
    """Cell indexes in run order: grouped by model spec (first appearance first, config order within), so a
    `model.spec` sweep loads each model once."""
    first: dict[str, int] = {}
    for c in cells:
        first.setdefault(c.model.spec, len(first))
    return sorted(range(len(cells)), key=lambda i: first[cells[i].model.spec])


def release_after(cell: Cell, later: list[Cell], protect: Collection = frozenset()) -> list[str]:
    """Free what the cell held: its strategy's K/V blocks; and, before the next cell loads another model,
    every loaded model no later cell needs (after the last cell the models stay, for the next experiment
    of a notebook or a test session). -> the model specs released."""
    if "instance" in cell.__dict__:  # built (cached_property): a skipped cell never built one
        cell.instance.release()
    if not later or later[0].model.spec == cell.model.spec:
        return []
    return release_models({c.model.spec for c in later if c.needs_model} | {c.judge.model for c in later if c.judge},
                          protect)


def cell_model(cell: Cell):
    """The cell's model: the whole model, or in a context-only cell (`model.generate: false`) its
    tokenizer alone unless the strategy generates while it builds its context (LLM summaries)."""
    m = cell.model
    if m.generate or cell.instance.generates_in_assembly():
        model = load_model(m.spec, **m.load_kwargs())
    else:
        model = load_tokenizer_model(m.spec, **m.load_kwargs())
    digest = model_weights_digest(m.spec)
    if digest:  # the response cache keys on it (dkilab.models.response_cache)
        model.weights_digest = digest
    return model


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        return {k: v for key, val in d.items() for k, v in _flat(val, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): d}


def _what_differs(a: Cell, b: Cell) -> list[str] | None:
    """The one thing two cells of one strategy on one dataset differ in, as `key = x and y` parts: a sweep
    key, or the params of two labelled variants (e.g. `recall.signals.fusion`); None if they differ in more
    than one sweep key, or in model, embedder or dataset."""
    if (a.strategy.name, a.dataset, a.model, a.embedder) != (b.strategy.name, b.dataset, b.model, b.embedder):
        return None
    if a.strategy.key == b.strategy.key:
        diff = [k for k in a.point if a.point[k] != b.point.get(k)]
        return [f"{diff[0]} = {a.point[diff[0]]} and {b.point[diff[0]]}"] if len(diff) == 1 else None
    pa, pb = (_flat(c.params.model_dump() if hasattr(c.params, "model_dump") else dict(c.strategy.params))
              for c in (a, b))
    keys = sorted(k for k in pa.keys() | pb.keys() if pa.get(k) != pb.get(k))
    return [f"{k} = {pa.get(k)} and {pb.get(k)}" for k in keys] or None


def sweep_notes(results: list[CellResult]) -> list[str]:
    """Sweep values, or labelled variants of one strategy, that changed nothing: two cells that differ in one
    thing only and gave the same prompt, context and answer on every question (e.g. a threshold no message
    reaches, or a recall knob whose ranking never reaches a budget the recent turns fill)."""
    done = [r for r in results if r.done]
    signatures: dict[int, dict] = {}

    def signature(res: CellResult) -> dict:  # per question: what the model saw and said (once per cell)
        if id(res) not in signatures:
            signatures[id(res)] = {r["qid"]: (r.get("prompt_digest"), r.get("prediction"),
                                              tuple(r.get("recalled_ids") or ()))
                                   for r in res.load_rows()}
        return signatures[id(res)]

    notes = []
    for a, b in itertools.combinations(done, 2):
        what = _what_differs(a.cell, b.cell)
        if not what:
            continue
        ra, rb = signature(a), signature(b)
        if ra and ra == rb:
            ka, kb = a.cell.strategy.key, b.cell.strategy.key
            who = ka if ka == kb else f"{ka} and {kb}"
            notes.append(f"{who}: {'; '.join(what)} gave the same prompts, contexts and answers on all {len(ra)} "
                         f"questions of {a.cell.dataset.name}")
    return notes


def check_expectations(cfg: ExperimentConfig, results: list[CellResult]) -> list[str]:
    """`expect:` ranges a run missed, and failed cells (empty = all good); skipped cells are checked on
    the metrics read back from MLflow."""
    problems = [f"{r.cell.label}: cell failed ({r.error})" for r in results if r.error]
    for res in results:
        if not res.done:
            continue
        key = res.cell.strategy.key
        ranges = cfg.expect.get(key, {}) | cfg.expect.get(f"{key}@{res.cell.dataset.key}", {})
        for metric, (lo, hi) in ranges.items():
            value = res.metrics.get(metric)
            if value is None or not (lo <= value <= hi):
                problems.append(f"{res.cell.label}: {metric} = {value} not in [{lo}, {hi}]")
    return problems


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
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Collection

from dkilab.config import ConfigError
from dkilab.eval.harness import interrupt, rescore
from dkilab.eval.harness.cell_run import NEST_UNDER, CellResult, rescore_one, run_one
from dkilab.eval.harness.experiment import Cell, ExperimentConfig, check_config
from dkilab.eval.harness.experiment.checks import missing_data
from dkilab.eval.harness.notes import over_error_budget, sweep_notes
from dkilab.eval.harness.prepare import model_order, release_after
from dkilab.eval.harness.processes import broadcast, process_state
from dkilab.eval.harness.sweep_data import check_thresholds
from dkilab.eval.scoring.judge_stress import judge_notes
from dkilab.eval.tracking import assessments, runstate, store_uri
from dkilab.eval.tracking import runs as tracking
from dkilab.eval.tracking.store_uri import check_server, tracking_uri
from dkilab.eval.views import logged
from dkilab.models.loading import loaded_keys


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


def run_experiment(cfg: ExperimentConfig, *, data_dir=None, uri: str | None = None, config_path: str | None = None,
                   progress: bool = True, echo=print, claim: bool = False, rescore: bool = False,
                   only: Collection[str] | None = None, parent_run_id: str | None = None) -> list[CellResult]:
    """Run (or resume) every cell; returns one CellResult per cell, finished, skipped or failed. With
    `claim`, a cell runs only if this process claims it in the tracking store (`runstate.claim_cell`):
    several machines running the same config each take different cells (claimed elsewhere: "claimed").
    A cell whose generation part is unchanged since a finished run is scored from that run's stored
    answers (dkilab.eval.harness.rescore). With `rescore`, every cell is, finished or not, and nothing generates:
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
        exp_id = broadcast(state, _ensure_experiment(cfg, uri) if main else None)
        if not main and cfg.tracing:  # every process traces its shard of the questions into the experiment
            mlflow.set_experiment(experiment_id=exp_id)
        if main:
            for run_id in runstate.mark_dead_runs_killed(exp_id):
                echo(f"run {run_id} was left RUNNING by a process that is gone: marked KILLED")
        owned = (active := mlflow.active_run()) is not None and active.info.run_id == parent_run_id
        token = NEST_UNDER.set(parent_run_id if parent_run_id and not owned else None)
        try:
            return _run_cells(cfg, cells, state, exp_id, data_dir, config_path, progress, echo,
                              claim and not rescore, rescore, parent=active if owned else None)
        finally:
            NEST_UNDER.reset(token)


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
    nested_elsewhere = NEST_UNDER.get() is not None  # a Ray task: the driver owns the parent
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
            skip = broadcast(state, None if done is None else done.info.run_id)
            if skip is not None:
                by_index[i] = CellResult(cell, skipped=True, run_id=skip,
                                         metrics=store_uri.read_metrics(done) if main else {})
                echo(f"[{n}/{len(cells)}] {cell.label}: finished before (config {cell.config_hash}), skipped")
            elif claim and (holder := broadcast(state, _claim(exp_id, cfg, cell) if main else None)) is not None:
                by_index[i] = CellResult(cell, claimed_by=holder)
                echo(f"[{n}/{len(cells)}] {cell.label}: claimed by {holder}, left to it")
            elif claim and (since := broadcast(state, _finished_since(exp_id, cfg, cell) if main else None)):
                by_index[i] = CellResult(cell, skipped=True, run_id=since[0], metrics=since[1])
                echo(f"[{n}/{len(cells)}] {cell.label}: finished by another machine meanwhile, skipped")
            else:
                beating = (runstate.claim_heartbeat(cfg.name, cell.config_hash) if claim and main
                           else nullcontext())
                try:
                    with beating:
                        source = broadcast(state, _answered(exp_id, cell, rescore_all) if main else None)
                        got = None if source is None else rescore_one(cfg, cell, n, len(cells), state, source,
                                                                       data_dir, datasets, echo)
                        if got is None and rescore_all:
                            got = CellResult(cell, error="no stored answers (never finished, or its generation part "
                                                         "changed since): `dkilab run` it")
                            echo(f"[{n}/{len(cells)}] {cell.label}: {got.error}")
                        by_index[i] = got if got is not None else run_one(cfg, cell, n, len(cells), state,
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
            n_cells, n = assessments.log_pending_assessments(exp_id, {r.run_id: r.rows for r in results
                                                                   if r.rows and r.run_id})
            if n:
                echo(f"feedback on the traces of {n_cells} cell(s): {n} assessments ({time.perf_counter() - t:.0f} s, "
                     "after the cells so no process waits on it)")
            if parent is not None:  # a Ray task leaves the card and the comparison to its driver
                logged.log_card(cfg, results)
                logged.log_comparison(results)
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



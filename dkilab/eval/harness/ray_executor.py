"""`dkilab run CONFIG --executor ray`: each cell of the config is one Ray task, placed by Ray with its GPU
request and retried by Ray when its worker dies; every task writes to the same tracking store.

    dkilab run experiments/gpu/locomo_strategies.yaml --executor ray --tracking-uri http://tracking:5000
    RAY_ADDRESS=ray://head:10001 dkilab run CONFIG --executor ray --tracking-uri http://tracking:5000

- A task runs `run_experiment` on its one cell with `claim`: a cell finished before is skipped, and a
  cell another live process holds is left to it, so a retried task never runs a cell twice. A retry
  marks the run its dead worker left RUNNING as KILLED, then resumes the cell question by question.
- Without `--ray-address` (or $RAY_ADDRESS) Ray starts a cluster on this machine for the run.
- GPUs: `--gpus-per-cell`, default 1 for a cell with a local model when the cluster has GPUs, else 0.
- The driver opens the invocation's one parent run before it submits; every task's cell run nests under it
  (a killed or retried task leaves no parent of its own), and it ends FAILED when a cell failed, KILLED on
  Ctrl-C.
- After the tasks, the driver reads every finished cell back (nothing reruns) to log the experiment's
  card and comparison and to print the table, as a local run does. A cell whose task failed stays
  failed, with Ray's reason; the next run retries it.
- Workers need dkilab installed (the same environment), the datasets at `--data-dir`, and a store they
  can all reach: an MLflow server, or a SQLite file on a shared disk (its cells then run one at a time:
  the store's file lock). Ray is the optional extra `dkilab[ray]`; the claim path (`--claim`) stays for
  Slurm arrays.
"""
from __future__ import annotations

import os
import socket
from typing import Any

from dkilab.eval.harness.experiment import check_config, load_experiment, parse_set, with_question_limit
from dkilab.eval.harness.runner import CellResult, open_parent, run_experiment
from dkilab.eval.tracking.store_uri import tracking_uri


def load(config_path: str, sets: list[str] | None, limit: int | None, data_dir: str | None):
    """The config as `dkilab run` loads it (overrides, question limit)."""
    if data_dir:
        os.environ["DKILAB_DATA_DIR"] = data_dir
    cfg = load_experiment(config_path, parse_set(sets))
    return with_question_limit(cfg, limit) if limit is not None else cfg


def run_cell(config_path: str, sets: list[str] | None, limit: int | None, data_dir: str | None, uri: str,
             config_hash: str, parent_run_id: str | None = None) -> dict[str, Any]:
    """One Ray task: the cell `config_hash` of the config, claimed in the store, its run nested under the
    driver's `parent_run_id` -> its outcome."""
    cfg = load(config_path, sets, limit, data_dir)
    [res] = run_experiment(cfg, data_dir=data_dir, uri=uri, config_path=config_path, progress=False, claim=True,
                           only={config_hash}, parent_run_id=parent_run_id)
    return {"status": res.status, "run_id": res.run_id, "error": res.error, "holder": res.claimed_by,
            "pid": os.getpid()}


def _gpus(cell, cluster_gpus: float, per_cell: float | None) -> float:
    if per_cell is not None:
        return per_cell
    local = cell.needs_model and not cell.model.spec.startswith(("openai:", "scripted:", "oracle"))
    return 1.0 if local and cluster_gpus >= 1 else 0.0


def reachable(address: str | None, timeout: float = 3.0) -> str | None:
    """Why a `host:port` (or `ray://host:port`) Ray address cannot be reached, None when it can or when the address
    is not of that form (`auto`, unset): Ray itself waits about 30 s, then raises a traceback."""
    if not address or address == "auto":
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return None
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as exc:
        return f"nothing answers at {host}:{port} ({exc.strerror or exc}); start it (ray start --head) or fix it"
    return None


def run_on_ray(config_path: str, sets: list[str] | None = None, limit: int | None = None, data_dir: str | None = None,
               uri: str | None = None, address: str | None = None, retries: int = 3,
               gpus_per_cell: float | None = None, echo=print) -> tuple[Any, list[CellResult]]:
    """Every cell of the config as a Ray task -> (config, one CellResult per cell, in config order)."""
    import mlflow

    cfg = load(config_path, sets, limit, data_dir)
    cells = check_config(cfg, config_path)
    uri = tracking_uri(uri)
    parent = open_parent(cfg, uri, config_path)
    try:
        outcomes = _submit(cfg, cells, config_path, sets, limit, data_dir, uri, address, retries, gpus_per_cell,
                           parent, echo)
        done = {h for h, o in outcomes.items() if o["status"] in ("finished", "skipped")}
        read = {r.cell.config_hash: r for r in (run_experiment(
            cfg, data_dir=data_dir, uri=uri, config_path=config_path, progress=False, echo=echo, only=done,
            parent_run_id=parent) if done else [])}
    except (KeyboardInterrupt, SystemExit):
        if mlflow.active_run() is not None:
            mlflow.end_run(status="KILLED")
        raise
    except BaseException:
        if mlflow.active_run() is not None:
            mlflow.end_run(status="FAILED")
        raise
    if mlflow.active_run() is not None:  # nothing was read back
        mlflow.end_run(status="FAILED")
    results = []
    for cell in cells:
        o = outcomes[cell.config_hash]
        res = read.get(cell.config_hash)
        if res is None or not res.skipped:  # not finished by its task (or, after all, not found finished)
            why = o.get("error") or (f"claimed by {o['holder']}" if o.get("holder") else f"task ended {o['status']}")
            res = CellResult(cell, error=why)
        results.append(res)
    if any(r.error for r in results):
        mlflow.MlflowClient().set_terminated(parent, status="FAILED")
    return cfg, results


def _submit(cfg, cells, config_path, sets, limit, data_dir, uri, address, retries, gpus_per_cell, parent,
            echo) -> dict[str, dict]:
    """Each cell a Ray task -> {config hash: the task's outcome}."""
    import ray

    started = not ray.is_initialized()
    if started:
        ray.init(address=address or os.environ.get("RAY_ADDRESS"), include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {k: v for k, v in os.environ.items()
                                           if k.startswith(("DKILAB_", "HF_", "MLFLOW_"))}})
    try:
        cluster_gpus = float(ray.cluster_resources().get("GPU", 0))
        task = ray.remote(run_cell)
        refs = []
        for cell in cells:
            gpus = _gpus(cell, cluster_gpus, gpus_per_cell)
            refs.append(task.options(num_cpus=1, num_gpus=gpus, max_retries=retries, retry_exceptions=True,
                                     name=f"dkilab {cell.label}").remote(config_path, sets, limit, data_dir, uri,
                                                                         cell.config_hash, parent))
        echo(f"ray: {len(refs)} cell(s) submitted to {ray.get_runtime_context().gcs_address} "
             f"({cluster_gpus:g} GPUs in the cluster), up to {retries} retries each")
        outcomes: dict[str, dict] = {}
        for cell, ref in zip(cells, refs):
            try:
                outcomes[cell.config_hash] = out = ray.get(ref)
            except Exception as e:  # noqa: BLE001 - retries spent: the cell fails with Ray's reason
                outcomes[cell.config_hash] = out = {"status": "failed",
                                                    "error": f"ray task failed: {str(e).strip().splitlines()[-1]}"}
            echo(f"ray: {cell.label}: {out['status']}" + (f" ({out['error']})" if out.get("error") else "")
                 + (f" (held by {out['holder']})" if out.get("holder") else ""))
    finally:
        if started:
            ray.shutdown()
    return outcomes

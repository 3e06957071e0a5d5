"""What makes resume trustworthy: which cells really finished, who is running, and one writer at a time.

- A cell counts as done only when its MLflow run is FINISHED *and* carries the completion tag, which
  the runner writes after every metric and artifact. A run that raised ends FAILED, one interrupted
  by Ctrl-C / SystemExit ends KILLED; neither is ever skipped.
- Every run records its host, pid and the pid's start time. On start, RUNNING runs of this host whose
  process is gone (kill -9, a crash, a power cut) are marked KILLED.
- On a local store (SQLite file, mlruns folder) one `dkilab run` per experiment writes at a time: a
  second one waits on a file lock, then finds the cells finished and reads them back. Creating or
  migrating the SQLite schema is locked too (two processes on a fresh store otherwise race).
  On a remote tracking server (http, postgres) there is no shared file: finished cells are re-checked
  just before each cell runs, so two concurrent runs can duplicate at most the cells they start at the
  same moment, and reports keep the newest finished run of each config hash.
"""
from __future__ import annotations

import contextlib
import os
import re
import socket
import time
from pathlib import Path

COMPLETE_TAG = "dkilab.complete"


def process_tags() -> dict[str, str]:
    import psutil

    return {"dkilab.host": socket.gethostname(), "dkilab.pid": str(os.getpid()),
            "dkilab.pid_start": f"{psutil.Process().create_time():.3f}"}


def _alive(pid: int, start: str | None) -> bool:
    import psutil

    try:
        proc = psutil.Process(pid)
        return start is None or abs(proc.create_time() - float(start)) < 1.0
    except (psutil.NoSuchProcess, ValueError):
        return False


def mark_dead_runs_killed(experiment_id: str) -> list[str]:
    """RUNNING runs of this host whose process is gone -> KILLED; returns their run ids."""
    import mlflow

    client = mlflow.MlflowClient()
    host, killed = socket.gethostname(), []
    for run in client.search_runs([experiment_id], "attributes.status = 'RUNNING'", max_results=5000):
        tags = run.data.tags
        if tags.get("dkilab.host") != host or "dkilab.pid" not in tags:
            continue
        if not _alive(int(tags["dkilab.pid"]), tags.get("dkilab.pid_start")):
            client.set_tag(run.info.run_id, "dkilab.ended_by", "a later run: its process was gone")
            client.set_terminated(run.info.run_id, "KILLED")
            killed.append(run.info.run_id)
    return killed


def finished_runs(experiment_id: str) -> dict[str, object]:
    """config hash -> the newest completed cell run (FINISHED and tagged complete)."""
    import mlflow

    client = mlflow.MlflowClient()
    runs = client.search_runs([experiment_id], f"tags.`dkilab.kind` = 'cell' and attributes.status = 'FINISHED' "
                                               f"and tags.`{COMPLETE_TAG}` = '1'",
                              order_by=["attributes.start_time DESC"], max_results=50000)
    out: dict[str, object] = {}
    for r in runs:
        out.setdefault(r.data.tags.get("dkilab.config_hash"), r)
    return out


def local_store_dir(uri: str) -> Path | None:
    """The directory of a local tracking store (sqlite file or mlruns folder); None for a server."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):]).expanduser().resolve().parent
    if uri.startswith("file:"):
        from urllib.parse import urlparse

        return Path(urlparse(uri).path).resolve()
    if "://" not in uri:
        return Path(uri).expanduser().resolve()
    return None


@contextlib.contextmanager
def store_lock(uri: str, name: str, echo=print, what: str = "experiment"):
    """A file lock beside a local store, held for the block; waits (saying who holds it) if taken."""
    from filelock import FileLock, Timeout

    root = local_store_dir(uri)
    if root is None:
        yield
        return
    locks = root / ".dkilab-locks"
    locks.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:100]
    lock, owner = FileLock(str(locks / f"{safe}.lock")), locks / f"{safe}.owner"
    try:
        lock.acquire(timeout=0)
    except Timeout:
        holder = owner.read_text().strip() if owner.exists() else "another process"
        echo(f"{what} {name!r} is being run by {holder} on this tracking store; waiting for it to finish (Ctrl-C to stop)")
        while True:
            try:
                lock.acquire(timeout=5)
                break
            except Timeout:
                continue
    try:
        owner.write_text(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}")
        yield
    finally:
        lock.release()


def open_store(uri: str) -> None:
    """Point MLflow at `uri` and make sure its schema exists (under a lock for a local store)."""
    import mlflow

    mlflow.set_tracking_uri(uri)
    with store_lock(uri, "__schema__", echo=lambda *_: None, what="store"):
        mlflow.MlflowClient().search_experiments(max_results=1)  # creates / migrates the schema

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
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import psutil
from filelock import FileLock, Timeout

COMPLETE_TAG = "dkilab.complete"
CLAIM_PREFIX = "dkilab-claim"  # `dkilab run --claim`: one MLflow experiment per claimed cell (names are unique)


# MLflow's SQL store inserts some rows after a separate "does it exist?" read (a dataset input, a tag), so
# two processes writing the same row at one moment make one of them fail on the unique constraint. The
# failed write rolled back whole; done again, it finds the other's row and uses it.
_CONFLICT = ("UNIQUE constraint failed", "IntegrityError", "Duplicate entry", "duplicate key value")


def on_conflict_retry(write, *args, tries: int = 4, **kwargs):
    """`write(*args, **kwargs)`, done again (up to `tries` times in all) when the tracking store refused it
    only because another process inserted the same row at the same moment."""
    from mlflow.exceptions import MlflowException

    for attempt in range(tries):
        try:
            return write(*args, **kwargs)
        except MlflowException as e:
            if attempt == tries - 1 or not any(m in str(e) for m in _CONFLICT):
                raise
            time.sleep(0.05 * (attempt + 1))


def process_tags() -> dict[str, str]:
    return {"dkilab.host": socket.gethostname(), "dkilab.pid": str(os.getpid()),
            "dkilab.pid_start": f"{psutil.Process().create_time():.3f}"}


def _alive(pid: int, start: str | None) -> bool:
    try:
        proc = psutil.Process(pid)
        return start is None or abs(proc.create_time() - float(start)) < 1.0
    except (psutil.NoSuchProcess, ValueError):
        return False


def writer_alive(tags: dict) -> bool:
    """Whether the process that wrote a run (its process tags) is still running on this host; a run
    from another host counts as alive (nothing here can tell)."""
    if "dkilab.pid" not in tags:
        return False
    if tags.get("dkilab.host") != socket.gethostname():
        return True
    if int(tags["dkilab.pid"]) == os.getpid():
        return False  # this process: whatever it left pending, it is past that point
    return _alive(int(tags["dkilab.pid"]), tags.get("dkilab.pid_start"))


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
            on_conflict_retry(client.set_tag, run.info.run_id, "dkilab.ended_by", "a later run: its process was gone")
            client.set_terminated(run.info.run_id, "KILLED")
            killed.append(run.info.run_id)
    return killed


def finished_runs(experiment_id: str, config_hash: str | None = None) -> dict[str, Any]:
    """config hash -> the newest completed cell run (FINISHED and tagged complete); only that hash's run when
    `config_hash` is given (one cell's check reads one run, not every run of the experiment)."""
    import mlflow

    client = mlflow.MlflowClient()
    only = f" and tags.`dkilab.config_hash` = '{config_hash}'" if config_hash else ""
    runs = client.search_runs([experiment_id], f"tags.`dkilab.kind` = 'cell' and attributes.status = 'FINISHED' "
                                               f"and tags.`{COMPLETE_TAG}` = '1'{only}",
                              order_by=["attributes.start_time DESC"], max_results=50000)
    out: dict[str, object] = {}
    for r in runs:
        out.setdefault(r.data.tags.get("dkilab.config_hash", ""), r)
    return out


def store_state_dir(uri: str, kind: str) -> Path | None:
    """Where dkilab keeps `kind` state (locks, journal) of a local store: `.dkilab-<kind>` beside it, one folder
    per SQLite file (two stores in one directory share nothing); None for a server."""
    root = local_store_dir(uri)
    if root is None:
        return None
    out = root / f".dkilab-{kind}"
    return out / Path(uri[len("sqlite:///"):]).name if uri.startswith("sqlite:///") else out


def local_store_dir(uri: str) -> Path | None:
    """The directory of a local tracking store (sqlite file or mlruns folder); None for a server."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///"):]).expanduser().resolve().parent
    if uri.startswith("file:"):
        return Path(urlparse(uri).path).resolve()
    if "://" not in uri:
        return Path(uri).expanduser().resolve()
    return None


@contextlib.contextmanager
def store_lock(uri: str, name: str, echo=print, what: str = "experiment"):
    """A file lock beside a local store, held for the block; waits (saying who holds it) if taken."""
    locks = store_state_dir(uri, "locks")
    if locks is None:
        yield
        return
    locks.mkdir(parents=True, exist_ok=True)
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:100]
    lock, owner = FileLock(str(locks / f"{safe}.lock")), locks / f"{safe}.owner"
    try:
        lock.acquire(timeout=0)
    except Timeout:
        holder = owner.read_text().strip() if owner.exists() else "another process"
        echo(f"{what} {name!r} is being run by {holder} on this tracking store; waiting for it to finish (Ctrl-C to "
             "stop)")
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


# --- cells claimed across machines (`dkilab run --claim`) ------------------------------------------
def claim_name(experiment: str, config_hash: str) -> str:
    return f"{CLAIM_PREFIX}::{experiment}::{config_hash}"


HEARTBEAT_TAG = "dkilab.heartbeat"


def claim_stale_s() -> float:
    """Seconds without a heartbeat after which a claim counts as abandoned (`$DKILAB_CLAIM_STALE_S`, 600)."""
    return float(os.environ.get("DKILAB_CLAIM_STALE_S", 600))


# (experiment, config hash) -> the id of the claim experiment this process holds: its fencing token. A claim taken
# over (the holder paused past the stale time, or clocks that disagree) is another experiment with another id, so
# the old holder finds it lost before it writes FINISHED (`claim_lost`) and never releases the new holder's claim.
_HELD: dict[tuple[str, str], str] = {}
CLAIM_LOST = "the claim on this cell was taken over"


def claim_cell(experiment: str, config_hash: str, stale_s: float | None = None) -> tuple[bool, str]:
    """Claim a cell for this process through the tracking store -> (claimed, who holds it). The claim
    is an experiment whose name the store keeps unique, so of several machines creating it at once
    exactly one succeeds. Its holder beats a heartbeat on it while the cell runs (`claim_heartbeat`); a
    claim whose process is gone (same host), that was released, or whose last beat is older than
    `stale_s` seconds (`claim_stale_s`) is taken over, however long the cell has been running."""
    import mlflow
    from mlflow.exceptions import MlflowException

    client = mlflow.MlflowClient()
    name = claim_name(experiment, config_hash)
    stale = claim_stale_s() if stale_s is None else stale_s
    holder = "?"
    for _ in range(3):
        now = f"{time.time():.0f}"
        try:
            token = client.create_experiment(name, tags={**process_tags(), "dkilab.claimed_at": now,
                                                         HEARTBEAT_TAG: now})
            _HELD[(experiment, config_hash)] = token
            return True, "this process"
        except MlflowException as e:
            if e.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        exp = client.get_experiment_by_name(name)
        if exp is None:
            continue  # released meanwhile: try again
        tags = exp.tags
        holder = f"{tags.get('dkilab.host', '?')} pid {tags.get('dkilab.pid', '?')}"
        if tags.get("dkilab.host") == socket.gethostname() and tags.get("dkilab.pid") == str(os.getpid()):
            _HELD[(experiment, config_hash)] = exp.experiment_id
            return True, "this process"
        beat = max(float(tags.get(k) or 0) for k in ("dkilab.claimed_at", HEARTBEAT_TAG))
        if not writer_alive(tags) or time.time() - beat > stale or tags.get("dkilab.released") == "1":
            release(exp.experiment_id, name)
            continue
        return False, holder
    return False, holder


@contextlib.contextmanager
def claim_heartbeat(experiment: str, config_hash: str, every_s: float | None = None):
    """While the block runs, a thread stamps the claim's heartbeat every `every_s` seconds (a tenth of
    `claim_stale_s`), so no other machine takes over a cell that is still running, however long it takes."""
    import mlflow

    every = claim_stale_s() / 10 if every_s is None else every_s
    stop = threading.Event()
    client = mlflow.MlflowClient()
    held = client.get_experiment_by_name(claim_name(experiment, config_hash))
    if held is None:
        yield  # nothing to beat on (released meanwhile)
        return

    def beat():  # on the claim this process holds, by id: a claim another machine took over is never stamped
        while not stop.wait(every):
            try:
                client.set_experiment_tag(held.experiment_id, HEARTBEAT_TAG, f"{time.time():.0f}")
            except Exception:  # noqa: BLE001 - a store briefly away: the next beat tries again
                pass

    thread = threading.Thread(target=beat, name="dkilab-claim-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def end_orphan_runs(experiment_id: str, config_hash: str) -> list[str]:
    """A cell just claimed: RUNNING runs of it left by an earlier holder (dead, or its claim abandoned) are
    marked KILLED, so none stays RUNNING for ever; returns their run ids."""
    import mlflow

    client = mlflow.MlflowClient()
    ended = []
    for run in client.search_runs([experiment_id], f"tags.`dkilab.config_hash` = '{config_hash}' and "
                                                   "attributes.status = 'RUNNING'", max_results=1000):
        tags = run.data.tags
        if tags.get("dkilab.host") == socket.gethostname() and tags.get("dkilab.pid") == str(os.getpid()):
            continue
        client.set_tag(run.info.run_id, "dkilab.ended_by",
                       f"claim taken over by {socket.gethostname()} pid {os.getpid()}")
        client.set_terminated(run.info.run_id, status="KILLED")
        ended.append(run.info.run_id)
    return ended


def claim_lost(experiment: str, config_hash: str) -> str | None:
    """Why this process no longer holds the cell's claim (another took it over, or it was released), checked by its
    token, not by a clock; None when it still does, or when the cell was not claimed here (no `--claim`)."""
    import mlflow

    token = _HELD.get((experiment, config_hash))
    if token is None:
        return None
    exp = mlflow.MlflowClient().get_experiment_by_name(claim_name(experiment, config_hash))
    if exp is not None and exp.experiment_id == token and exp.lifecycle_stage == "active":
        return None
    now = (f"{exp.tags.get('dkilab.host', '?')} pid {exp.tags.get('dkilab.pid', '?')}" if exp is not None
           else "nobody (released)")
    return f"{CLAIM_LOST} while it ran (now held by {now}): its result is not recorded here"


def release_claim(experiment: str, config_hash: str) -> None:
    """Give a claimed cell back (it failed or was interrupted here): the next `--claim` run takes it. Only the claim
    this process holds (its token): one taken over meanwhile belongs to its new holder."""
    import mlflow

    token = _HELD.pop((experiment, config_hash), None)
    exp = mlflow.MlflowClient().get_experiment_by_name(claim_name(experiment, config_hash))
    if exp is not None and token is not None and exp.experiment_id == token:
        release(exp.experiment_id, exp.name)


def release(experiment_id: str, name: str) -> None:
    """Free a claim's name: renamed out of the way (deleted experiments keep their names), then deleted.
    Two processes releasing one claim both rename it to the same name, so neither fails."""
    import mlflow
    from mlflow.exceptions import MlflowException

    client = mlflow.MlflowClient()
    try:
        client.rename_experiment(experiment_id, f"{name}::released::{experiment_id}")
        client.delete_experiment(experiment_id)
    except MlflowException:
        pass  # released by another process meanwhile

"""Which MLflow tracking store a command uses, whether its server answers, and a cell run's logged rows: what the
writer (the runner, tracking) and the readers (report, notebooks, the UI) share, so neither imports the other for it."""
from __future__ import annotations

import functools
import http.client
import json
import math
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dkilab.eval.scoring.base import METRIC_GROUPS

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_TRACKING_URI = f"sqlite:///{ROOT / 'mlflow' / 'mlflow.db'}"


def tracking_uri(uri: str | None = None) -> str:
    """The store to use: the one given, else $MLFLOW_TRACKING_URI, else mlflow/mlflow.db in the project."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


class TrackingStoreError(ValueError):
    """A tracking URI that names no existing store (a typo would otherwise create an empty one)."""


def check_server(uri: str, timeout: float = 5.0, answer_timeout: float = 60.0) -> None:
    """Fail in one line when a tracking server does not answer: within `timeout` seconds when nothing
    accepts the connection, within `answer_timeout` when a server accepts it but is busy (workers still
    starting on a loaded machine answer late, not never)."""
    parts = urlsplit(uri)
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)
    try:
        conn.connect()
        conn.sock.settimeout(answer_timeout)
        conn.request("GET", parts.path.rstrip("/") + "/health")
        resp = conn.getresponse()
        resp.read(64)
    except (OSError, http.client.HTTPException) as e:
        raise TrackingStoreError(f"MLflow tracking server {uri} is not reachable ({e or type(e).__name__}); "
                                 "start it, or pass --tracking-uri / set MLFLOW_TRACKING_URI to one that is") from None
    finally:
        conn.close()
    if resp.status >= 500:
        raise TrackingStoreError(f"MLflow tracking server {uri} answered {resp.status} on /health")


def run_rows(run_id: str) -> list[dict[str, Any]]:
    """The per-question rows a cell logged (predictions.jsonl); a fresh copy each call (the report's
    pairs, its category table and its plots read the same runs once)."""
    import mlflow

    return [dict(r) for r in _rows_of(mlflow.get_tracking_uri(), run_id)]


@functools.lru_cache(maxsize=256)
def _rows_of(uri: str, run_id: str) -> tuple[dict[str, Any], ...]:
    """Keyed by store and run: a logged artifact of a run never changes once written."""
    import mlflow

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    path = Path(mlflow.MlflowClient(uri).download_artifacts(run_id, "predictions.jsonl"))
    return tuple(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip())


SCRIPTED_TAG = "dkilab.scripted"


METRICS_TABLE = "metrics.json"  # every metric of a cell with its interval and n (tracking.runs.log_cell_metrics)
METRICS_TABLE_TAG = "dkilab.metrics_table"




def metric_name(key: str) -> str:
    """A logged MLflow key back to the metric's name (`fact/final_call` -> `final_call`); other keys as they are."""
    group, sep, rest = key.partition("/")
    return rest if sep and group in METRIC_GROUPS else key


def read_metrics(run, uri: str | None = None) -> dict[str, float]:
    """A run's metrics under today's names, intervals as `<metric>_ci95_low|high`: its metrics.json table
    where it has one (with n), then its MLflow metrics (exact where both have a value)."""
    import mlflow

    name = run.data.tags.get(METRICS_TABLE_TAG)
    out = dict(_table_of(uri or mlflow.get_tracking_uri(), run.info.run_id, name)) if name else {}
    out.update({metric_name(k): v for k, v in run.data.metrics.items()})  # the table's JSON keeps 10 decimals
    return out


@functools.lru_cache(maxsize=256)
def _table_of(uri: str, run_id: str, name: str) -> tuple[tuple[str, float], ...]:
    """Keyed by store, run and file: a logged artifact never changes once written."""
    import mlflow

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    path = Path(mlflow.MlflowClient(uri).download_artifacts(run_id, name))
    data = json.loads(path.read_text(encoding="utf-8"))
    out: list[tuple[str, float]] = []
    for row in data["data"]:
        rec = dict(zip(data["columns"], row))
        for key, col in ((rec["metric"], "value"), (f"{rec['metric']}_ci95_low", "ci95_low"),
                         (f"{rec['metric']}_ci95_high", "ci95_high")):
            v = rec.get(col)
            if isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v)):
                out.append((key, float(v)))
    return tuple(out)

"""Which MLflow tracking store a command uses: what the writer (the runner) and the readers (report,
notebooks, the UI) share, so neither imports the other for it."""
from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TRACKING_URI = f"sqlite:///{ROOT / 'mlflow' / 'mlflow.db'}"


def tracking_uri(uri: str | None = None) -> str:
    """The store to use: the one given, else $MLFLOW_TRACKING_URI, else mlflow/mlflow.db in the project."""
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI

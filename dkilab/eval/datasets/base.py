"""Where datasets live, and the errors a missing one gives."""
from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "DKILAB_DATA_DIR"


class DatasetNotFoundError(FileNotFoundError):
    pass


def data_dir(path: str | os.PathLike | None = None) -> Path:
    """The dataset directory: the argument, else $DKILAB_DATA_DIR."""
    chosen = path or os.environ.get(DATA_ENV)
    if not chosen:
        raise DatasetNotFoundError(
            f"no dataset directory: pass data_dir=... (or --data-dir) or set {DATA_ENV} to a directory "
            "holding locomo/, memdaily/, madial_bench/ (see datasets/*.md for where to get them)")
    return Path(chosen).expanduser()


def require(path: Path, what: str, how: str) -> Path:
    if not path.exists():
        raise DatasetNotFoundError(f"{what} not found at {path}. {how}")
    return path

"""Where dkilab keeps derived files (ingested stores, dequantised models): `$DKILAB_CACHE_DIR` or ~/.cache/dkilab."""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("DKILAB_CACHE_DIR", Path.home() / ".cache" / "dkilab"))

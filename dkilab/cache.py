"""Where dkilab keeps derived files (ingested stores, dequantised models): `$DKILAB_CACHE_DIR` or ~/.cache/dkilab;
and what a cache that stands for a file's content is keyed by: the file's bytes (`file_digest`).

A file's digest is memoised in the process by `stat_key`: size, modification time, inode and change time. The
change time (ctime) is set by the kernel on every write and cannot be set back (`touch -r`, `cp -p`, `rsync -a`
and `tar x` keep the mtime, never the ctime), so an edit of the same size with its mtime preserved is read again.
"""
from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path


def cache_dir() -> Path:
    return Path(os.environ.get("DKILAB_CACHE_DIR", Path.home() / ".cache" / "dkilab"))


def stat_key(path: str | os.PathLike) -> tuple[int, int, int, int]:
    """What changes whenever a file's bytes do: (size, mtime_ns, inode, ctime_ns)."""
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns


_DIGESTS: dict[tuple, str] = {}
_LOCK = threading.Lock()


def file_digest(path: str | os.PathLike) -> str:
    """The sha1 of a file's bytes (40 hex digits), memoised per `stat_key`."""
    p = Path(path).resolve()
    key = (str(p), stat_key(p))
    with _LOCK:
        if key in _DIGESTS:
            return _DIGESTS[key]
    h = hashlib.sha1()
    with p.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    with _LOCK:
        _DIGESTS[key] = digest
    return digest

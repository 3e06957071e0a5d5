"""A cache of model responses, as inspect's `--cache` and lm-eval's `--use_cache`: keyed by the model
(class, name, dtype), the exact messages, the tools offered, the K/V memories (text and alpha) and the
generation settings, so a repeated run (a rescore, a resumed sweep, a notebook re-run) does not generate
again. Only greedy generations (temperature 0) are cached: they are a function of the key. One SQLite file
(`$DKILAB_CACHE_DIR/responses.sqlite`), safe for several processes; `model.cache: true` turns it on.
"""
from __future__ import annotations

import copy
import hashlib
import json
import sqlite3
import threading
import time
import warnings
from pathlib import Path

from dkilab.cache import cache_dir
from dkilab.memory.sqlite import connect, transaction, with_retry
from dkilab.types import ChatModel, Generation, KVModel, MemoryBlock

SCHEMA = """CREATE TABLE IF NOT EXISTS responses(key TEXT PRIMARY KEY, model TEXT NOT NULL, text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL, new_tokens INTEGER NOT NULL, injected_tokens INTEGER NOT NULL,
    created REAL NOT NULL)"""


def model_identity(model: ChatModel, digest: str | None = None) -> str:
    """What a response depends on besides its prompt: the model class, name and dtype, and `digest`, the weights'
    (or a script's) content, so weights changed at one path are never served another model's replies."""
    dtype = getattr(model.model, "dtype", "") if isinstance(model, KVModel) and model.model is not None else ""
    return f"{type(model).__name__}:{model.name or repr(model)}:{dtype}" + (f":{digest}" if digest else "")


class ResponseCache:
    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else cache_dir() / "responses.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.conn = self._open(connect, with_retry)
        except sqlite3.DatabaseError as exc:  # not a database, or a damaged one: a cache is only a cache

            aside = self.path.with_name(f"{self.path.name}.damaged-{int(time.time())}")
            self.path.rename(aside)
            warnings.warn(f"response cache {self.path} could not be read ({exc}): moved to {aside.name}, "
                          "starting an empty one (responses are generated again)", stacklevel=2)
            self.conn = self._open(connect, with_retry)
        self.hits = self.misses = 0
        self.digest: str | None = None  # the model weights' digest its keys carry (`for_weights`)
        self._lock = threading.Lock()

    def _open(self, connect, with_retry) -> sqlite3.Connection:
        conn = connect(str(self.path))
        try:
            with_retry(lambda: conn.execute(SCHEMA))
            conn.execute("SELECT key FROM responses LIMIT 1").fetchall()
        except sqlite3.DatabaseError:
            conn.close()
            raise
        return conn

    def for_weights(self, digest: str | None) -> ResponseCache:
        """This cache as one cell uses it: its keys carry the digest of the cell's model weights, its hits and
        misses counted from zero; the connection is shared."""
        view = copy.copy(self)
        view.digest, view.hits, view.misses = digest, 0, 0
        return view

    def key(self, model, messages, max_new_tokens: int, tools=None, memories=None) -> str:
        mem = [(m.text if isinstance(m, MemoryBlock) else str(m), float(a)) for m, a in (memories or [])]
        blob = json.dumps([model_identity(model, self.digest), messages, max_new_tokens, tools or None, mem],
                          ensure_ascii=False, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()

    def get(self, key: str) -> Generation | None:
        row = self.conn.execute("SELECT text, prompt_tokens, new_tokens, injected_tokens FROM responses WHERE key=?",
                                (key,)).fetchone()
        with self._lock:
            if row is None:
                self.misses += 1
                return None
            self.hits += 1
        return Generation(row[0], row[1], row[2], row[3])

    def put(self, key: str, model, gen: Generation) -> None:
        def save():
            with transaction(self.conn) as c:
                c.execute("INSERT OR REPLACE INTO responses VALUES(?,?,?,?,?,?,?)",
                          (key, model_identity(model, self.digest), gen.text, gen.prompt_tokens, gen.new_tokens,
                           gen.injected_tokens, time.time()))
        try:
            with_retry(save)
        except sqlite3.Error:  # a cache that cannot write (full disk) costs a regeneration, never an answer
            pass

    def close(self) -> None:
        self.conn.close()


def shared(digest: str | None = None) -> ResponseCache:
    """The process's response cache (one SQLite connection, opened on first use) as a cell uses it: keyed by
    the digest of its model's weights (a script's content), hits counted from zero."""
    global _SHARED
    if _SHARED is None:
        _SHARED = ResponseCache()
    return _SHARED.for_weights(digest)


_SHARED: ResponseCache | None = None

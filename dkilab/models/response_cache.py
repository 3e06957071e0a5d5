"""A cache of model responses, as inspect's `--cache` and lm-eval's `--use_cache`: keyed by the model
(class, name, dtype), the exact messages, the tools offered, the K/V memories (text and alpha) and the
generation settings, so a repeated run (a rescore, a resumed sweep, a notebook re-run) does not generate
again. Only greedy generations (temperature 0) are cached: they are a function of the key. One SQLite file
(`$DKILAB_CACHE_DIR/responses.sqlite`), safe for several processes; `model.cache: true` turns it on.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
import warnings
from pathlib import Path

from dkilab.cache import cache_dir
from dkilab.memory.sqlite import connect, transaction, with_retry
from dkilab.types import Generation

SCHEMA = """CREATE TABLE IF NOT EXISTS responses(key TEXT PRIMARY KEY, model TEXT NOT NULL, text TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL, new_tokens INTEGER NOT NULL, injected_tokens INTEGER NOT NULL,
    created REAL NOT NULL)"""


def model_identity(model) -> str:
    inner = getattr(model, "model", None)
    digest = getattr(model, "weights_digest", None)  # set by the runner: weights or a script changed at one path
    return (f"{type(model).__name__}:{getattr(model, 'name', '') or repr(model)}:{getattr(inner, 'dtype', '')}"
            + (f":{digest}" if digest else ""))


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

    @staticmethod
    def key(model, messages, max_new_tokens: int, tools=None, memories=None) -> str:
        mem = [(getattr(m, "text", str(m)), float(a)) for m, a in (memories or [])]
        blob = json.dumps([model_identity(model), messages, max_new_tokens, tools or None, mem],
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
                          (key, model_identity(model), gen.text, gen.prompt_tokens, gen.new_tokens,
                           gen.injected_tokens, time.time()))
        try:
            with_retry(save)
        except sqlite3.Error:  # a cache that cannot write (full disk) costs a regeneration, never an answer
            pass

    def close(self) -> None:
        self.conn.close()

"""How many of a dataset's messages are over an encoder's window: those a store indexes as passages
(encoders/passages.py). A cell's identity records that its store has passages, so a cell finished before passage
indexing existed, on data with long messages, runs again instead of standing for a store it no longer has; on data
whose messages all fit (LoCoMo, MemDaily and MADial-Bench turns) nothing changes and its cells keep their hashes."""
from __future__ import annotations

import threading
from typing import Callable

from dkilab.encoders import passages
from dkilab.encoders.embedder import Embedder
from dkilab.memory.store import index_text

WINDOWS = {"offline:minilm": 256, "offline:minilm-int8": 256, "offline:minilm-torch": 256,
           "offline:minilm-locomo": 256, "offline:e5": 512}
_COUNTS: dict[tuple, int] = {}
_LOCK = threading.Lock()


def over_window(key: tuple, load: Callable[[], list], model: str) -> int:
    """The messages of the conversations `load()` gives whose own text (as the store reads it) is over `model`'s
    window, memoised by `key` (what selects the conversations, with their files' digest) and the model; 0 for an
    encoder that cannot be loaded here (the cell cannot run here either)."""
    with _LOCK:
        if (key, model) in _COUNTS:
            return _COUNTS[(key, model)]
    texts = [index_text(m, None, "1") for c in load() for m in c.messages]  # what the store decides by
    window = WINDOWS.get(model)
    long = [t for t in texts if window is None or not passages.fits(t, window)]
    n = 0
    if long:
        try:
            embedder = Embedder(model)
            n = sum(k > embedder.window for k in embedder.count_tokens(long))
        except Exception:  # no such model here: nothing to record
            n = 0
    with _LOCK:
        _COUNTS[(key, model)] = n
    return n

"""How many of a dataset's messages are over an encoder's window: those a store indexes as passages
(encoders/passages.py). A cell's identity records that its store has passages, so a cell finished before passage
indexing existed, on data with long messages, runs again instead of standing for a store it no longer has; on data
whose messages all fit (LoCoMo, MemDaily and MADial-Bench turns) nothing changes and its cells keep their hashes."""
from __future__ import annotations

from functools import lru_cache

from dkilab.encoders import passages
from dkilab.encoders.embedder import Embedder

WINDOWS = {"offline:minilm": 256, "offline:minilm-int8": 256, "offline:minilm-torch": 256,
           "offline:minilm-locomo": 256, "offline:e5": 512}


@lru_cache(maxsize=256)
def _over(texts: tuple[str, ...], model: str) -> int:
    window = WINDOWS.get(model)
    long = [t for t in texts if window is None or not passages.fits(t, window)]
    if not long:
        return 0
    embedder = Embedder(model)
    return sum(n > embedder.window for n in embedder.count_tokens(long))


def over_window(conversations, model: str) -> int:
    """The messages of `conversations` whose own text (speaker and content) is over `model`'s window."""
    texts = tuple(f"{m.speaker}: {m.content}" if m.speaker else m.content for c in conversations for m in c.messages)
    return _over(texts, model)

"""Cached memory stores for datasets: ingest once (embeddings are the slow part), reuse after."""
from __future__ import annotations

import hashlib
import json
import os

from dkilab.cache import cache_dir
from dkilab.types import Conversation

LOADER_VERSION = "2"  # bump when loaders change what they ingest


def store_for(conversations: list[Conversation], name: str, embedder=None, path: str | os.PathLike | None = None):
    """A MemoryStore holding `conversations` (idempotent: a cached store only ingests what it lacks)."""
    from dkilab.memory import Embedder, MemoryStore

    embedder = embedder or Embedder()
    if path is None:
        ids = [m.message_id for c in conversations for m in c.messages]
        key = hashlib.sha1(json.dumps([LOADER_VERSION, embedder.model_name, ids]).encode()).hexdigest()[:12]
        path = cache_dir() / "stores" / f"{name}-{key}"
    store = MemoryStore.open(path, embedder=embedder)
    if store.count() < sum(len(c.messages) for c in conversations):
        for conv in conversations:
            store.add_messages(conv.messages)
        store.flush()
    return store

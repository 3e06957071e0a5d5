"""Cached memory stores for datasets: ingest once (embeddings are the slow part), reuse after."""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from tqdm.auto import tqdm

from dkilab.cache import cache_dir
from dkilab.encoders.embedder import index_text_for
from dkilab.memory import Embedder, MemoryStore
from dkilab.types import Conversation

LOADER_VERSION = "2"  # bump when loaders change what they ingest
PROGRESS_FROM = 1000  # messages still to embed from which a store build shows its progress


def store_key(conversations: list[Conversation], encoder: str) -> str:
    """What makes a cached store this data's: every field of every message that is stored (user, id,
    session, turn, role, text, time, speaker, metadata), the encoder and the loader version. A message
    edited under the same id gets a new store rather than the stale one."""
    h = hashlib.sha1(json.dumps([LOADER_VERSION, encoder]).encode())
    for c in conversations:
        for m in c.messages:
            h.update(json.dumps([m.user_id, m.message_id, m.session_id, m.turn_id, m.role, m.content,
                                 m.timestamp.isoformat(), m.speaker, m.topic, m.metadata], sort_keys=True,
                                ensure_ascii=False, default=str).encode())
    return h.hexdigest()[:16]


def store_path(conversations: list[Conversation], name: str, embedder, index_text: str | None = None,
               passages: bool = True) -> Path:
    """Where the cached store of `conversations` for `embedder` lives: keyed by the data, the encoder (a local
    model directory by its files too, `Embedder.weights`) and the index text."""
    # v2 stores were cached without a suffix (v2 was the default then); the key never depends on the default
    version = index_text or index_text_for(embedder.model_name)
    weights = f"@{embedder.weights}" if embedder.weights else ""
    encoder = (embedder.model_name + weights + ("" if version == "2" else f"|index_text={version}")
               + ("" if passages else "|passages=off"))
    return cache_dir() / "stores" / f"{name}-{store_key(conversations, encoder)}"


def store_for(conversations: list[Conversation], name: str, embedder=None, path: str | os.PathLike | None = None,
              index_text: str | None = None, passages: bool = True):
    """A MemoryStore holding `conversations` (idempotent: a cached store only ingests what it lacks);
    `index_text` "1" embeds each turn alone, "2" with the turn it replies to (default: by encoder,
    `encoders.embedder.index_text_for`)."""
    embedder = embedder or Embedder()
    path = path or store_path(conversations, name, embedder, index_text, passages)
    # a cache: a lost one is rebuilt
    store = MemoryStore.open(path, embedder=embedder, create=True, index_text=index_text, passages=passages)
    have, total = store.count(), sum(len(c.messages) for c in conversations)
    if have < total:
        # a build of thousands of messages shows what it embeds, its rate and ETA (on stderr, every 10 s in a log)
        with tqdm(total=total, initial=have, unit="msg", desc=f"store {name} ({embedder.model_name})",
                  disable=total - have < PROGRESS_FROM, mininterval=1 if sys.stderr.isatty() else 10) as bar:
            for conv in conversations:
                bar.update(store.add_messages(conv.messages))
        store.flush()
    if store.index_passages():  # a store cached before passages: its messages over the window get theirs
        store.flush()
    return store

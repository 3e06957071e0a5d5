"""Store benchmark: ingest rate and query-tool latency at LoCoMo size and at 100x that size, then
concurrent writers and readers (messages lost must be 0) and open time at 10k users
(`dkilab.bench.concurrency`). `--parts` picks some of: locomo, synthetic, concurrency, open.

1. LoCoMo: every conversation (one user each) with real MiniLM embeddings, by the encoder `embedder: auto`
   gives English data (`EmbedderSpec.for_language("en")`: the fine-tuned `offline:minilm-locomo`, at
   stock MiniLM's size), as the store ingests them (its default index text), then the recall stage as
   strategies run it (`MultiSignalRecall` with the library defaults, learned fusion included, the query
   encoding included): warm (the store open, each user queried before, the query-embedding cache emptied)
   and cold (the first question of each user on a store just opened: its FAISS index read from disk, its
   turn order built).
2. Synthetic: `scale` users who each hold all ten LoCoMo conversations (so each user is 10x a
   LoCoMo user and the store is `scale` x LoCoMo), with random unit vectors: it measures the index,
   not the encoder. Query embedding time is included in semantic_search latency in both.
Query texts are LoCoMo questions; per-user FAISS indexes are built before timing (reported apart).
"""
from __future__ import annotations

import random
import statistics
import tempfile
import time
from dataclasses import replace

import numpy as np

from dkilab.bench import concurrency as conc
from dkilab.eval.data import load_locomo
from dkilab.eval.harness.experiment import EmbedderSpec
from dkilab.eval.scoring.base import percentile
from dkilab.memory import Embedder, MemoryStore
from dkilab.recall.config import RecallConfig
from dkilab.recall.multi_signal import MultiSignalRecall
from dkilab.recall.reference import ReferenceResolver
from dkilab.types import Memory


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1000


def measure_tools(store, users: list[str], questions: list[str], n: int, seed: int = 0) -> dict[str, list[float]]:
    rng = random.Random(seed)
    views = {u: store.for_user(u) for u in users}
    ids = {u: [r[0] for r in store.conn.execute("SELECT message_id FROM messages WHERE user_id=? LIMIT 2000", (u,))]
           for u in users}
    t_build = time.perf_counter()
    for v in views.values():  # first-time FAISS build per user, excluded from query latency
        v.semantic_search(query_embedding=np.ones(store.vectors.dim, np.float32) / np.sqrt(store.vectors.dim), top_k=1)
    build_ms = (time.perf_counter() - t_build) * 1000 / len(users)
    store.embedder._cache.clear()
    out: dict[str, list[float]] = {"lexical_search": [], "semantic_search": [], "messages_list": [], "neighbors": []}
    for i in range(n):
        u = rng.choice(users)
        v, q = views[u], questions[i % len(questions)] + ("" if i < len(questions) else f" {i}")
        out["lexical_search"].append(_time(lambda: v.lexical_search(q, page_size=20)))
        out["semantic_search"].append(_time(lambda: v.semantic_search(q, top_k=10)))
        out["messages_list"].append(_time(lambda: v.messages_list(page_size=50)))
        mid = rng.choice(ids[u])
        out["neighbors"].append(_time(lambda: v.neighbors(mid, before=5, after=5)))
    out["_index_build_ms_per_user"] = [build_ms]
    return out


def measure_recall(path, embedder, asked: list[tuple[str, str]], n: int) -> dict[str, list[float]]:
    """Recall latency (ms) with the library defaults: `cold` = each user's first question on the store
    opened afresh, `warm` = `n` questions after that (query-embedding cache emptied first)."""
    cfg, resolver = RecallConfig(), ReferenceResolver()
    store = MemoryStore.open(path, embedder=embedder)
    embedder.clear_cache()
    views: dict[str, Memory] = {}
    cold, warm = [], []
    for user, q in asked:
        if user not in views:
            views[user] = store.for_user(user)
            cold.append(_time(lambda: MultiSignalRecall(cfg, resolver, views[user]).recall(q)))
    embedder.clear_cache()
    for i in range(n):
        user, q = asked[i % len(asked)]
        warm.append(_time(lambda: MultiSignalRecall(cfg, resolver, views[user]).recall(q)))
    store.close()
    return {"recall (cold)": cold, "recall (warm)": warm}


def _report(name: str, n_msgs: int, n_users: int, ingest_s: float, lat: dict[str, list[float]]) -> None:
    print(f"\n{name}: {n_msgs:,} messages, {n_users} users, ingest {n_msgs / ingest_s:,.0f} msg/s ({ingest_s:.1f} s)")
    print(f"  first FAISS build per user: {lat['_index_build_ms_per_user'][0]:.1f} ms")
    print(f"  {'tool':16s} {'p50 ms':>8s} {'p95 ms':>8s}")
    for tool, xs in lat.items():
        if not tool.startswith("_"):
            print(f"  {tool:16s} {percentile(xs, 50):8.2f} {percentile(xs, 95):8.2f}")


PARTS = ("locomo", "synthetic", "concurrency", "open")


def main(data_dir: str | None = None, scale: int = 100, queries: int = 200, parts=PARTS, writers: int = 4,
         writer_messages: int = 2000, readers: int = 2, open_users: int = 2000) -> int:
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown bench store parts {sorted(unknown)}; the parts are {', '.join(PARTS)}")
    if "locomo" in parts or "synthetic" in parts:
        _sizes(data_dir, scale, queries, parts)
    c = conc.concurrency(writers, writer_messages, readers) if "concurrency" in parts else None
    o = conc.open_time(open_users) if "open" in parts else None
    conc.report(c, o)
    return 1 if c is not None and (c["lost"] or c["write_errors"] or c["read_errors"]) else 0


def _sizes(data_dir, scale: int, queries: int, parts) -> None:
    convs = load_locomo(data_dir)
    questions = [q.question for c in convs for q in c.questions]
    random.Random(1).shuffle(questions)
    embedder = Embedder(EmbedderSpec().for_language("en").model)  # what a LoCoMo experiment's stores are embedded by
    results = {}
    with tempfile.TemporaryDirectory(prefix="dkilab-bench-") as tmp:
        store = MemoryStore.open(f"{tmp}/locomo", embedder=embedder)
        msgs = [m for c in convs for m in c.messages]
        embedder.encode(["warm up"])
        t = time.perf_counter()
        store.add_messages(msgs)
        ingest = time.perf_counter() - t
        lat = measure_tools(store, [c.user_id for c in convs], questions, queries)
        store.close()
        asked = [(c.user_id, q.question) for c in convs for q in c.questions]
        random.Random(2).shuffle(asked)
        lat |= measure_recall(f"{tmp}/locomo", embedder, asked, queries)
        _report(f"LoCoMo (real embeddings, {embedder.model_name})", len(msgs), len(convs), ingest, lat)
        results["locomo"] = lat
        if "synthetic" not in parts:
            return

        n_users = max(1, scale)
        store = MemoryStore.open(f"{tmp}/synthetic", embedder=embedder)
        rng = np.random.default_rng(0)
        t = time.perf_counter()
        total = 0
        for u in range(n_users):
            batch = [replace(m, message_id=f"x{u}:{m.message_id}", user_id=f"synth-{u}",
                             session_id=f"x{u}:{m.session_id}")
                     for m in msgs]
            vecs = rng.standard_normal((len(batch), store.embedder.dim)).astype(np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
            total += store.add_messages(batch, embeddings=vecs, batch_size=2000)
        ingest = time.perf_counter() - t
        lat = measure_tools(store, [f"synth-{u}" for u in range(n_users)], questions, queries)
        _report(f"Synthetic {scale}x (random unit vectors)", total, n_users, ingest, lat)
        results["synthetic"] = lat
        store.close()
    growth = (statistics.median(results["synthetic"]["semantic_search"])
              / statistics.median(results["locomo"]["semantic_search"]))
    print(f"\nsemantic_search p50 growth from LoCoMo size to {scale}x: {growth:.2f}x")

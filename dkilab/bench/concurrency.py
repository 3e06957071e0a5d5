"""Store benchmark parts: concurrent writers and readers, and open time with many users.

Concurrency: `writers` processes each add `messages` messages for their own user with the *same* ids
(msg-0, msg-1, ...; ids are per user), 10 per call, while `readers` threads in this process run
the query tools on those users. Reports rows lost (must be 0), errors, and reader latency during the
writes. Open time: a store with `users` users (3 messages each) is closed and reopened.
Random unit vectors stand in for the encoder: this measures the store.
"""
from __future__ import annotations

import multiprocessing as mp
import random
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone

import numpy as np

from dkilab.eval.scoring.base import percentile
from dkilab.memory import MemoryStore
from dkilab.types import Message

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
BATCH = 10  # messages per add_messages call: many small write transactions, as L1 makes them
WORDS = "apple river cat train coffee bicycle garden museum winter lisbon porto honey".split()


def _messages(user: str, n: int):
    rng = random.Random(user)
    return [Message(f"msg-{i}", user, f"s{i // 20}", i % 20, "user" if i % 2 == 0 else "assistant",
                    " ".join(rng.choice(WORDS) for _ in range(12)), T0 + timedelta(minutes=i)) for i in range(n)]


def _unit(n: int, dim: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _writer(path: str, user: str, n: int, seed: int, q, started) -> None:
    errors, added = [], 0
    with MemoryStore.open(path) as store:
        msgs, vecs = _messages(user, n), _unit(n, 384, seed)
        for i in range(0, n, BATCH):
            try:
                added += store.add_messages(msgs[i:i + BATCH], embeddings=vecs[i:i + BATCH])
            except Exception as exc:  # counted, reported
                errors.append(repr(exc))
            if i == 0:
                with started.get_lock():
                    started.value += 1
    q.put((user, added, errors))


def concurrency(writers: int = 4, messages: int = 2000, readers: int = 2, seed: int = 0) -> dict:
    with tempfile.TemporaryDirectory(prefix="dkilab-bench-conc-") as tmp:
        path = f"{tmp}/store"
        users = [f"writer-{w}" for w in range(writers)]
        with MemoryStore.open(path) as store:
            store.add_messages(_messages("reader-warm", 1), embeddings=_unit(1, 384, 99))
        ctx = mp.get_context("spawn")
        q, started = ctx.Queue(), ctx.Value("i", 0)
        procs = [ctx.Process(target=_writer, args=(path, u, messages, seed + i, q, started)) for i,
                 u in enumerate(users)]
        lat: dict[str, list[float]] = {"lexical_search": [], "semantic_search": [], "messages_list": [],
                                       "neighbors": []}
        errors: list[str] = []
        done = threading.Event()
        store = MemoryStore.open(path)
        warm = store.for_user("reader-warm")  # load jieba and faiss before timing
        warm.lexical_search("apple river"), warm.semantic_search(query_embedding=_unit(1, 384, 7)[0])

        def read(r: int) -> None:
            rng = random.Random(r)
            while started.value < writers and not done.is_set():  # time the reads once every writer writes
                time.sleep(0.01)
            while not done.is_set():
                view = store.for_user(rng.choice(users))
                for tool, call in (("lexical_search", lambda: view.lexical_search(" ".join(rng.sample(WORDS, 2)))),
                                   ("semantic_search", lambda: view.semantic_search(query_embedding=_unit(1, 384,
                                                                                                          rng.randrange(10**9))[0])),
                                   ("messages_list", lambda: view.messages_list(page_size=50)),
                                   ("neighbors", lambda: view.neighbors(f"msg-{rng.randrange(5)}"))):
                    t = time.perf_counter()
                    try:
                        call()
                    except KeyError:
                        continue  # the writer has not stored that message yet
                    except Exception as exc:
                        errors.append(f"{tool}: {exc!r}")
                    lat[tool].append((time.perf_counter() - t) * 1000)

        threads = [threading.Thread(target=read, args=(r,)) for r in range(readers)]
        t0 = time.perf_counter()
        for p in procs:
            p.start()
        for th in threads:
            th.start()
        results = [q.get(timeout=600) for _ in procs]
        wall = time.perf_counter() - t0  # includes starting the writer processes
        done.set()
        for th in threads:
            th.join()
        for p in procs:
            p.join(timeout=60)
        stored = {u: store.for_user(u).count() for u in users}
        store.close()
    added = {u: a for u, a, _ in results}
    return {"writers": writers, "messages": messages, "readers": readers, "wall_s": wall,
            "lost": sum(messages - stored[u] for u in users), "reported_added": sum(added.values()),
            "write_errors": [e for _, _, es in results for e in es], "read_errors": errors,
            "latency": {k: (percentile(v, 50), percentile(v, 95), len(v)) for k, v in lat.items() if v}}


def open_time(users: int = 2000, per_user: int = 3) -> dict:
    with tempfile.TemporaryDirectory(prefix="dkilab-bench-open-") as tmp:
        path = f"{tmp}/store"
        t = time.perf_counter()
        with MemoryStore.open(path) as store:
            for start in range(0, users, 500):
                msgs = [m for u in range(start, min(users, start + 500)) for m in _messages(f"user-{u}", per_user)]
                store.add_messages(msgs, embeddings=_unit(len(msgs), 384, start))
        build = time.perf_counter() - t
        t = time.perf_counter()
        store = MemoryStore.open(path)
        opened = time.perf_counter() - t
        t = time.perf_counter()
        store.for_user(f"user-{users // 2}").lexical_search("apple river")
        first = time.perf_counter() - t
        store.close()
    return {"users": users, "messages": users * per_user, "build_s": build, "open_ms": opened * 1000,
            "first_query_ms": first * 1000}


def report(c: dict | None, o: dict | None) -> None:
    if c is not None:
        print(f"\nConcurrency: {c['writers']} writer processes x {c['messages']} messages (the same ids for every "
              f"user), {c['readers']} reader threads, {c['wall_s']:.1f} s")
        print(f"  messages lost: {c['lost']}   write errors: {len(c['write_errors'])}   read errors: "
              f"{len(c['read_errors'])}")
        for e in (c["write_errors"] + c["read_errors"])[:5]:
            print(f"    {e[:200]}")
        print(f"  {'tool during writes':20s} {'p50 ms':>8s} {'p95 ms':>8s} {'calls':>7s}")
        for tool, (p50, p95, n) in c["latency"].items():
            print(f"  {tool:20s} {p50:8.2f} {p95:8.2f} {n:7d}")
    if o is not None:
        print(f"\nOpen time: {o['users']:,} users ({o['messages']:,} messages; built in {o['build_s']:.0f} s): "
              f"open {o['open_ms']:.1f} ms, first lexical_search {o['first_query_ms']:.1f} ms")

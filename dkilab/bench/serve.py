"""Recall-service load figures: a bounded load run against a local `dkilab serve` on the LoCoMo store.

    dkilab bench serve [--data-dir DIR] [--clients 1,8,32] [--seconds 4] [--endpoints ...]

Starts the server itself (loopback, a free port, its own keys file: one key per LoCoMo user), then for
each endpoint and client count runs that many concurrent clients (asyncio + aiohttp keep-alive
connections, each client a LoCoMo user with its own key, round robin) for a fixed time, and prints
requests/s, p50/p95/p99 latency and errors (any non-200 answer or transport failure), beside the p50 of
the same calls made on the store in this process ("store p50": the store's share of a request). The load runs
in this process and the server in another, on the same cores: the figures are for both together.
Then the isolation row: another tenant's `get` latency alone, and while one tenant floods the server
with `--flood-clients` clients making the largest legal calls (`recent n=10000`, `messages_list`
page_size 1000); the flood's 429s (its per-key limit) are counted apart from errors.
Stops by itself; the server is stopped at the end, on an error and on Ctrl-C.
"""
from __future__ import annotations

import asyncio
import itertools
import math
import os
import subprocess
import tempfile
import time

from dkilab.eval.data import load_dataset
from dkilab.eval.harness.experiment import EmbedderSpec
from dkilab.eval.harness.stores import store_for
from dkilab.eval.scoring.base import percentile
from dkilab.memory import Embedder
from dkilab.service.keys import add_key
from dkilab.service.server import free_port, spawn

ENDPOINTS = ("lexical_search", "semantic_search", "messages_list", "neighbors", "get")


def _store(data_dir):
    convs = load_dataset("locomo", data_dir=data_dir)
    store = store_for(convs, "locomo", Embedder(EmbedderSpec().for_language("en").model))
    return store, convs


def _requests(convs):
    """Per user: the request bodies each endpoint cycles through (the LoCoMo questions and message ids)."""
    out = {}
    for c in convs:
        qs = [q.question for q in c.questions][:50] or ["what happened"]
        mids = [m.message_id for m in c.messages][::7][:50]
        out[c.user_id] = {
            "lexical_search": [{"query_text": q, "page_size": 10} for q in qs],
            "semantic_search": [{"query_text": q, "top_k": 10} for q in qs],
            "messages_list": [{"page_size": 20}],
            "neighbors": [{"message_id": m, "before": 3, "after": 3} for m in mids],
            "get": [{"message_id": m} for m in mids],
        }
    return out


async def _timed_posts(session, url: str, key: str, bodies: list, stop: float, lat: list, errors: list) -> None:
    """POST `bodies` in a cycle until `stop`, appending each latency (ms) and each failure."""
    import aiohttp

    headers = {"X-API-Key": key}
    for body in itertools.cycle(bodies):
        if time.perf_counter() >= stop:
            return
        t = time.perf_counter()
        try:
            async with session.post(url, json=body, headers=headers) as r:
                await r.read()
                if r.status != 200:
                    errors.append(f"HTTP {r.status}")
        except aiohttp.ClientError as e:
            errors.append(type(e).__name__)
        lat.append((time.perf_counter() - t) * 1000)


async def _load(url: str, keys: dict[str, str], bodies: dict, endpoint: str, clients: int, seconds: float):
    import aiohttp

    lat: list[float] = []
    errors: list[str] = []
    users = list(keys)
    stop = time.perf_counter() + seconds

    async def client(n: int, session):
        user = users[n % len(users)]
        await _timed_posts(session, f"{url}/v1/{endpoint}", keys[user], bodies[user][endpoint], stop, lat, errors)

    conn = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=conn) as session:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(n, session) for n in range(clients)))
        wall = time.perf_counter() - t0
    return lat, errors, wall


async def _isolation(url: str, keys: dict[str, str], bodies: dict, flood_clients: int, seconds: float):
    """(the quiet tenant's get latencies, flood answers, flood 429s, errors); no flood when flood_clients=0."""
    import aiohttp

    flood_user, quiet_user = list(keys)[:2]
    lat: list[float] = []
    errors: list[str] = []
    counts = {"answered": 0, "refused": 0}
    stop = time.perf_counter() + seconds

    async def quiet(session):
        await _timed_posts(session, f"{url}/v1/get", keys[quiet_user], bodies[quiet_user]["get"], stop, lat, errors)

    async def flood(n: int, session):
        headers = {"X-API-Key": keys[flood_user]}
        for i in itertools.count(n):
            if time.perf_counter() >= stop:
                return
            try:
                if i % 2:
                    call = session.get(f"{url}/v1/recent", params={"n": "10000"}, headers=headers)
                else:
                    call = session.post(f"{url}/v1/messages_list", json={"page_size": 1000}, headers=headers)
                async with call as r:
                    await r.read()
                    if r.status == 429:
                        counts["refused"] += 1
                    elif r.status == 200:
                        counts["answered"] += 1
                    else:
                        errors.append(f"flood HTTP {r.status}")
            except aiohttp.ClientError as e:
                errors.append(f"flood {type(e).__name__}")

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=flood_clients + 1)) as session:
        await asyncio.gather(quiet(session), *(flood(n, session) for n in range(flood_clients)))
    return lat, counts["answered"], counts["refused"], errors


def _in_process(store, bodies, endpoint: str, n: int = 300) -> float:
    """p50 ms of the same calls on the store directly (no HTTP): the store's share of a request."""
    lat = []
    users = list(bodies)
    for i in range(n):
        user = users[i % len(users)]
        body = bodies[user][endpoint][i // len(users) % len(bodies[user][endpoint])]
        mem = store.for_user(user)
        t = time.perf_counter()
        if endpoint == "get":
            mem.get(body["message_id"])
        elif endpoint == "neighbors":
            mem.neighbors(body["message_id"], body["before"], body["after"])
        elif endpoint == "messages_list":
            mem.messages_list(page_size=body["page_size"])
        elif endpoint == "lexical_search":
            mem.lexical_search(body["query_text"], page_size=body["page_size"])
        else:
            mem.semantic_search(body["query_text"], top_k=body["top_k"])
        lat.append((time.perf_counter() - t) * 1000)
    return percentile(lat, 50, math.nan)


def main(data_dir=None, clients=(1, 8, 32), seconds: float = 4.0, endpoints=ENDPOINTS, flood_clients: int = 4) -> int:
    unknown = [e for e in endpoints if e not in ENDPOINTS]
    if unknown:
        raise ValueError(f"unknown endpoints {unknown}; known: {', '.join(ENDPOINTS)}")
    store, convs = _store(data_dir)
    store_path, n_msgs = str(store.path), store.count()
    bodies = _requests(convs)
    for endpoint in endpoints:  # warm: jieba, FAISS indexes, the query-embedding cache
        _in_process(store, bodies, endpoint, 100)
    local = {e: _in_process(store, bodies, e) for e in endpoints}
    store.close()
    tmp = tempfile.mkdtemp(prefix="dkilab-bench-serve-")
    keys_path = os.path.join(tmp, "keys.yaml")
    keys = {c.user_id: add_key(keys_path, c.user_id) for c in convs}
    port = free_port()
    print(f"LoCoMo store: {n_msgs} messages, {len(keys)} users; server on 127.0.0.1:{port} (one process); "
          f"{seconds:g} s per row; {os.cpu_count()} CPU cores shared by the server and the load")
    proc = spawn(store_path, keys_path, port)
    total_errors = 0
    try:
        url = f"http://127.0.0.1:{port}"
        asyncio.run(_load(url, keys, bodies, "lexical_search", 4, 1.0))  # warm up: jieba, FAISS, caches
        asyncio.run(_load(url, keys, bodies, "semantic_search", 4, 1.0))
        print(f"{'endpoint':16s} {'clients':>7s} {'requests':>8s} {'req/s':>7s} {'p50 ms':>7s} {'p95 ms':>7s} "
              f"{'p99 ms':>7s} {'errors':>6s} {'store p50':>9s}")
        for endpoint in endpoints:
            for c in clients:
                lat, errors, wall = asyncio.run(_load(url, keys, bodies, endpoint, c, seconds))
                total_errors += len(errors)
                print(f"{endpoint:16s} {c:7d} {len(lat):8d} {len(lat) / wall:7.0f} "
                      f"{percentile(lat, 50, math.nan):7.1f} {percentile(lat, 95, math.nan):7.1f} "
                      f"{percentile(lat, 99, math.nan):7.1f} {len(errors):6d} {local[endpoint]:9.2f}"
                      + (f"  ({', '.join(sorted(set(errors)))})" if errors else ""), flush=True)
        if flood_clients:
            for n in (0, flood_clients):
                lat, answered, refused, errors = asyncio.run(_isolation(url, keys, bodies, n, seconds))
                total_errors += len(errors)
                what = (f"while one tenant floods ({n} clients: recent n=10000, messages_list page_size 1000; "
                        f"{answered} answered, {refused} refused 429)" if n else "alone")
                print(f"isolation: another tenant's get p50 {percentile(lat, 50, math.nan):.1f} ms, p99 "
                      f"{percentile(lat, 99, math.nan):.1f} ms ({len(lat)} requests) {what}"
                      + (f"  errors: {', '.join(sorted(set(errors)))}" if errors else ""),
                      flush=True)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
    print(f"errors: {total_errors}")
    return 1 if total_errors else 0



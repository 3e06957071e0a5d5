"""Encoder benchmark: how fast each offline sentence encoder embeds stored messages (messages/s,
batched as the store ingests them) and one query (ms, uncached), on LoCoMo (English: each turn alone with
its speaker, as MiniLM stores embed it, and with the turn it replies to, as e5 stores do) and MADial-Bench
(Chinese) messages, or on the bundled fixtures without a data dir. `offline:minilm-torch` is the same
MiniLM run by sentence-transformers (PyTorch), beside its ONNX builds. Quality (recall@10, MRR) comes from
`dkilab run experiments/embedders.yaml` (and, for the int8 build of MiniLM, `experiments/embedders_int8.yaml`).

    dkilab bench embedders [--data-dir DIR] [--messages 1000] [--queries 100]
"""
from __future__ import annotations

import statistics
import time

from dkilab.eval.data import load_dataset
from dkilab.memory import Embedder
from dkilab.memory.store import index_text

ENCODERS = ("offline:minilm", "offline:minilm-torch", "offline:minilm-int8", "offline:e5")


def _texts(data_dir, n: int) -> list[tuple[str, list[str], list[str]]]:
    """[(label, messages, queries)] per language."""
    out = []
    for name, label in (("locomo", "en (LoCoMo)"), ("madial_bench_zh", "zh (MADial-Bench)")):
        try:
            convs = load_dataset(name, data_dir=data_dir)
        except FileNotFoundError:
            continue
        qs = [q.question for c in convs for q in c.questions][:n]
        if name == "locomo":  # what the stores embed: the turn alone (index text v1), or with the turn before (v2)
            out.append(("en, turn alone", _index_texts(convs, "1")[:n], qs))
            out.append(("en, with turn before", _index_texts(convs, "2")[:n], qs))
        else:
            # each MADial-Bench dialogue's store repeats its user's memory archive: every message once
            unique = {m.message_id: m.content for c in convs for m in c.messages}
            out.append((label, list(unique.values())[:n], qs))
    if not out:
        convs = load_dataset("fixtures")
        out.append(("fixtures (en+zh)", [m.content for c in convs for m in c.messages],
                    [q.question for c in convs for q in c.questions]))
    return out


def _index_texts(convs, version: str) -> list[str]:
    texts = []
    for c in convs:
        last = None
        for m in c.messages:
            texts.append(index_text(m, last if last is not None and last.session_id == m.session_id else None, version))
            last = m
    return texts


def main(data_dir=None, messages: int = 1000, queries: int = 100) -> int:
    sets = _texts(data_dir, messages)
    print(f"{'encoder':<20} {'texts':<20} {'messages':>8} {'msgs/s':>8} {'query p50 ms':>13} {'query p95 ms':>13}")
    for enc in ENCODERS:
        e = Embedder(enc)
        e.encode(["warm up"])
        for label, msgs, qs in sets:
            t = time.perf_counter()
            e.encode(msgs)
            rate = len(msgs) / (time.perf_counter() - t)
            times = []
            for q in qs[:queries]:
                e.clear_cache()
                t = time.perf_counter()
                e.encode_query(q)
                times.append((time.perf_counter() - t) * 1000)
            times.sort()
            p95 = times[min(len(times) - 1, int(0.95 * (len(times) - 1)))]
            print(f"{enc:<20} {label:<20} {len(msgs):>8} {rate:>8.0f} {statistics.median(times):>13.1f} {p95:>13.1f}")
    return 0

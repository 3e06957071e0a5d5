"""Retrieval benchmark: the recall stage alone (no LLM), evidence recall@k and MRR per variant.

Config (YAML): dataset {name, limit, categories}, recall (a RecallConfig block), ks, and variants
mapping a name to dotted-key updates of the recall config (e.g. a signal switched off).
"""
from __future__ import annotations

import statistics
import time

from dkilab.config import read_yaml
from dkilab.eval.metrics.retrieval import evidence_recall, reciprocal_rank
from dkilab.recall import MultiSignalRecall, ReferenceResolver, validate_recall_config


def run(config_path: str, data_dir: str | None = None, question_limit: int | None = None) -> dict[str, dict[str, float]]:
    from dkilab.eval.datasets import load_dataset
    from dkilab.eval.stores import store_for

    cfg = read_yaml(config_path)
    spec = cfg["dataset"]
    convs = load_dataset(spec["name"], data_dir=data_dir, limit=spec.get("limit"),
                         question_limit=question_limit or spec.get("question_limit"))
    cats = set(spec.get("categories") or [])
    base = validate_recall_config(cfg.get("recall", {}), source=config_path)
    ks = cfg.get("ks", [5, 10, 20])
    store = store_for(convs, spec["name"])
    resolver = ReferenceResolver()
    rows = {}
    for variant, updates in (cfg.get("variants") or {"fused": {}}).items():
        config = base.with_updates(updates or {})
        recalls = {k: [] for k in ks}
        rrs, lat = [], []
        for conv in convs:
            msr = MultiSignalRecall(config, resolver, store.for_user(conv.user_id))
            for q in conv.questions:
                if not q.evidence_ids or (cats and q.category not in cats):
                    continue
                t = time.perf_counter()
                res = msr.recall(q.question, session_id=None, max_results=max(ks))
                lat.append((time.perf_counter() - t) * 1000)
                ids = [r.message.message_id for r in res.ranked]
                for k in ks:
                    recalls[k].append(evidence_recall(ids, q.evidence_ids, k))
                rrs.append(reciprocal_rank(ids, q.evidence_ids))
        row = {f"recall@{k}": statistics.fmean(v) for k, v in recalls.items()}
        row |= {"mrr": statistics.fmean(rrs), "questions": len(rrs), "latency_p50_ms": statistics.median(lat)}
        rows[variant] = row
    store.close()
    return rows


def print_table(rows: dict[str, dict[str, float]]) -> None:
    cols = list(next(iter(rows.values())).keys())
    print(f"{'variant':18s}" + "".join(f"{c:>15s}" for c in cols))
    for name, row in rows.items():
        print(f"{name:18s}" + "".join(f"{row[c]:15.3f}" if isinstance(row[c], float) else f"{row[c]:15d}" for c in cols))


def main(config_path: str, data_dir: str | None = None, question_limit: int | None = None) -> int:
    print_table(run(config_path, data_dir, question_limit))
    return 0

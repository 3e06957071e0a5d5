"""Two fusion model files on the bench's held-back test rows, paired by question.

Each model (with its range guard, as recall uses it) reorders the same candidates that `dkilab bench retrieval
--leave-one-dataset-out` collects and caches on the defaults' stores, so the figures differ by the model
alone; `shipped` there reproduces the logged `defaults` rows exactly. For each test split it prints A, B and
B - A with its 95% interval (conversations resampled, the project's paired bootstrap) at recall@10, NDCG@10
and MRR. What a refit changed, without rerunning the bench on the old model:

    python experiments/bench/model_pair.py OLD.json [NEW.json]      (NEW: dkilab/recall/fusion_lr.json)
    git show HEAD~1:dkilab/recall/fusion_lr.json > /tmp/old.json    (an earlier model, for instance)
"""
from __future__ import annotations

import argparse
from pathlib import Path

from dkilab.bench import lodo
from dkilab.eval.scoring import METRICS
from dkilab.eval.scoring.bootstrap import paired
from dkilab.recall.learned import DEFAULT_MODEL, load_model


def rows(model, test: list[dict]) -> dict[str, list[dict]]:
    """{test dataset: metric rows} of `model`'s order (the weighted order where its guard says so)."""
    out: dict[str, list[dict]] = {}
    for r in test:
        out.setdefault(r["dataset"], []).append(lodo.metric_row(r, lodo.model_order(model, r)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path, nargs="?", default=DEFAULT_MODEL)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    _, test = lodo.collect_all(args.data_dir, echo=lambda _: None)
    a, b = rows(load_model(args.a), test), rows(load_model(args.b), test)
    print(f"A = {args.a}, B = {args.b}; B - A [95% CI], * = real")
    for ds in a:
        cells = []
        for metric in ("recall_at_10", "ndcg_at_10", "mrr"):
            res = paired(METRICS[metric], a[ds], b[ds])
            assert res is not None
            cells.append(f"{metric} {res['a']:.3f} -> {res['b']:.3f} {res['diff']:+.3f} [{res['low']:+.3f}, "
                         f"{res['high']:+.3f}]{'*' if res['real'] else ''}")
        print(f"{ds:<16} n={len(a[ds]):>4}  " + "   ".join(cells))


if __name__ == "__main__":
    main()

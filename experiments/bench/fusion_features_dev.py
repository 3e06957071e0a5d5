"""Which fusion features cost the work sessions their first ranks (issue 59), on dev rows only.

The shipped fusion model ranks the generated long-message work sessions well at recall@10 and badly at the
first ranks (docs/retrieval.md). This study reads the dev rows that `dkilab bench retrieval
--leave-one-dataset-out` collects (and caches), scores them with the shipped model, and prints:
- how often the first candidate is wrong, and how often it is then a turn next to the evidence;
- recall@10 and MRR with each feature in `--features` held at the part's fitted mean (its effect removed),
  on every dev dataset, so the cost elsewhere is seen beside the gain.

    python experiments/bench/fusion_features_dev.py [--features chars_share speaker session_best]

A dev study (`purpose: tune` data only); it chooses nothing by itself.
"""
from __future__ import annotations

import argparse

import numpy as np


def _metrics(rows, model, held: list[str]) -> tuple[float, float]:
    from dkilab.bench import lodo
    from dkilab.recall.learned import FEATURES

    out = []
    for r in rows:
        part = model.part_for(r["model"], r["query"])
        mean = (model.parts.get(part) or model.parts[model.default])[0]
        X = r["X"].copy()
        for name in held:
            X[:, FEATURES.index(name)] = mean[FEATURES.index(name)]
        got = lodo.metric_row(r, lodo._order(model.score(X, part)))
        out.append((got["recall_at_10"], got["mrr"]))
    return tuple(np.mean(out, axis=0)) if out else (0.0, 0.0)


def _first_wrong(rows, model) -> tuple[int, int]:
    from dkilab.bench import lodo

    wrong = next_to = 0
    for r in rows:
        first = r["ids"][lodo._order(model.score(r["X"], model.part_for(r["model"], r["query"])))[0]]
        if first in r["gold"]:
            continue
        wrong += 1
        session, index = first.rsplit("#", 1)
        next_to += any(g.rsplit("#", 1)[0] == session and abs(int(g.rsplit("#", 1)[1]) - int(index)) == 1
                       for g in r["gold"] if "#" in g and index.isdigit() and g.rsplit("#", 1)[1].isdigit())
    return wrong, next_to


def main() -> None:
    from dkilab.bench import lodo
    from dkilab.recall.learned import FEATURES, load_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--features", nargs="+", default=["chars_share", "speaker", "session_best"], choices=FEATURES)
    ap.add_argument("--data-dir", default=None)
    args = ap.parse_args()
    model = load_model()
    dev, _ = lodo.collect_all(args.data_dir, echo=lambda _: None)
    groups: dict[str, list[dict]] = {}
    for r in dev:  # each dev dataset on each encoder's stores
        groups.setdefault(f"{r['dataset']} ({r['model']})", []).append(r)
    print("dev rows, the shipped model; recall@10 / MRR with each feature held at its part's fitted mean")
    print(f"{'dev rows':<44} {'n':>5} {'as shipped':>14} " + " ".join(f"{f:>16}" for f in args.features))
    for name, rows in groups.items():
        cells = [_metrics(rows, model, [])] + [_metrics(rows, model, [f]) for f in args.features]
        print(f"{name:<44} {len(rows):>5} " + " ".join(f"{a:.3f} / {b:.3f}".rjust(14 if i == 0 else 16)
                                                     for i, (a, b) in enumerate(cells)))
    ws = groups.get("worksessions (offline:minilm-locomo)", [])
    if ws:
        wrong, next_to = _first_wrong(ws, model)
        print(f"\nworksessions dev: the first candidate is wrong on {wrong} of {len(ws)} questions; "
              f"on {next_to} of them it is a turn next to the evidence")


if __name__ == "__main__":
    main()

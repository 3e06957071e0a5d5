"""Retrieval benchmark (issue 30): the recall candidates of `experiments/retrieval_bench.yaml` on data
they were not tuned on, as one table: dataset split x method, the metric with its 95% interval, the
paired difference of each method against the shipped defaults, and every category where the fused
pipeline falls below the best single signal by more than its interval.

    dkilab bench retrieval [--data-dir DIR] [--metric recall_at_10] [--tracking-uri URI]

It runs the config like `dkilab run` (cached stores, finished cells read back), so a rerun is quick.
"""
from __future__ import annotations

from pathlib import Path

CONFIG = Path(__file__).resolve().parents[2] / "experiments" / "retrieval_bench.yaml"
BASELINE, FUSED, SINGLE = "defaults", "tuned", ("bm25_only", "dense_only")


def main(data_dir=None, metric: str = "recall_at_10", tracking_uri: str | None = None, config: str | None = None) -> int:
    from dkilab.eval.experiment import load_experiment
    from dkilab.eval.metrics.base import aggregate, category_of
    from dkilab.eval.metrics.bootstrap import metric_ci, paired
    from dkilab.eval.runner import run_experiment
    from dkilab.registry import METRICS

    cfg = load_experiment(config or CONFIG)
    results = run_experiment(cfg, data_dir=data_dir, uri=tracking_uri, progress=False,
                             echo=lambda line: print(line) if "FAILED" in line else None)
    failed = [r.cell.label for r in results if not r.done]
    cells: dict[str, dict[str, list[dict]]] = {}
    for r in results:
        if r.done:
            d = r.cell.dataset
            cells.setdefault(f"{d.key}:{d.split}" if d.split != "full" else d.key, {})[r.cell.strategy.key] = r.load_rows()
    fn = METRICS[metric]
    methods = list(dict.fromkeys(m for by in cells.values() for m in by))
    print(f"{metric}, 95% interval half-width; vs {BASELINE}: paired difference [95% CI], * = real")
    print(f"{'dataset':<20}" + "".join(f"{m:>30}" for m in methods))
    for ds, by in cells.items():
        line = f"{ds:<20}"
        for m in methods:
            rows = by.get(m)
            if rows is None:
                line += f"{'-':>30}"
                continue
            ci = metric_ci(fn, rows)
            value = aggregate(rows).get(metric, float("nan"))
            cell = f"{value:.3f}" + (f" ±{(ci[1] - ci[0]) / 2:.3f}" if ci else "")
            if m != BASELINE and BASELINE in by:
                res = paired(fn, by[BASELINE], rows)
                if res is not None:
                    cell += f" {res['diff']:+.3f}{'*' if res['real'] else ''}"
            line += f"{cell:>30}"
        print(line)
    print(f"\n{FUSED} - {BASELINE} per dataset (n, diff, 95% CI):")
    for ds, by in cells.items():
        if FUSED in by and BASELINE in by and (res := paired(fn, by[BASELINE], by[FUSED])) is not None:
            print(f"  {ds:<20} n={int(res['n']):>5}  {res['diff']:+.3f} [{res['low']:+.3f}, {res['high']:+.3f}]"
                  f"{'  real' if res['real'] else ''}")
    print(f"\ncategories where {FUSED} is below the best single signal beyond the interval:")
    losses = 0
    for ds, by in cells.items():
        if FUSED not in by:
            continue
        for cat in sorted({category_of(r) for r in by[FUSED]}, key=str):
            fused = [r for r in by[FUSED] if category_of(r) == cat]
            for single in SINGLE:
                if single in by:
                    other = [r for r in by[single] if category_of(r) == cat]
                    res = paired(fn, other, fused)
                    if res is not None and res["real"] and res["diff"] < 0:
                        losses += 1
                        print(f"  {ds} category {cat}: {FUSED} {res['b']:.3f} vs {single} {res['a']:.3f} "
                              f"({res['diff']:+.3f} [{res['low']:+.3f}, {res['high']:+.3f}], n={int(res['n'])})")
    if not losses:
        print("  none")
    if failed:
        print(f"\nFAILED cells: {', '.join(failed)}")
    return 1 if failed else 0

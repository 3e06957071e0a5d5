"""Retrieval benchmark: the recall candidates of `experiments/retrieval_bench.yaml` on data
they were not tuned on, as one table: dataset split x method, the metric with its 95% interval, the
paired difference of each method against the previous defaults, every category where a candidate loses
against them or the shipped defaults falls below the best single signal by more than its interval,
and with `--peers` two third-party retrievers run in the same experiment (same stores, same questions,
same encoder), compared on every retrieval metric with the dkilab/peer ratio.

    dkilab bench retrieval [--data-dir DIR] [--metric recall_at_10] [--peers] [--tracking-uri URI]
    dkilab bench retrieval --leave-one-dataset-out   the fusion refitted without each dataset (bench/lodo.py)

It runs the config like `dkilab run` (cached stores, finished cells read back), so a rerun is quick.
"""
from __future__ import annotations

from pathlib import Path

from dkilab.config import read_yaml
from dkilab.eval.harness.experiment import experiment_from_dict, header_comment
from dkilab.eval.harness.runner import run_experiment
from dkilab.eval.scoring import METRICS
from dkilab.eval.scoring.base import aggregate, category_of
from dkilab.eval.scoring.bootstrap import metric_ci, paired

CONFIG = Path(__file__).resolve().parents[2] / "experiments" / "retrieval_bench.yaml"
BASELINE, FUSED, SINGLE = "previous_defaults", "defaults", ("bm25_only", "dense_only")
# the peers `--peers` adds to the config's strategies (dkilab/strategies/peer_*.py)
PEERS = [{"name": "peer_engram", "label": "engram_search"}, {"name": "peer_bm25", "label": "rank_bm25"}]
# the metrics a peer is compared on, and which published figure each corresponds to (metrics/retrieval.py)
PEER_METRICS = ("recall_at_10", "any_hit_at_10", "session_any_hit_at_5", "ndcg_at_10", "mrr")


def load_config(config: str | Path | None = None, peers: bool = False):
    """The bench experiment, with the peer strategies appended when asked."""
    path = Path(config or CONFIG)
    data = read_yaml(path)
    if peers:
        data["strategies"] = [*data.get("strategies", []), *PEERS]
    cfg = experiment_from_dict(data, str(path))
    return cfg if cfg.description else cfg.model_copy(update={"description": header_comment(path)})


def _fmt(res) -> str:
    return f"{res['diff']:+.3f} [{res['low']:+.3f}, {res['high']:+.3f}], n={int(res['n'])}"


def main(data_dir=None, metric: str = "recall_at_10", tracking_uri: str | None = None, config: str | None = None,
         peers: bool = False) -> int:
    cfg = load_config(config, peers)
    results = run_experiment(cfg, data_dir=data_dir, uri=tracking_uri, progress=False,
                             echo=lambda line: print(line) if "FAILED" in line else None)
    failed = [r.cell.label for r in results if not r.done]
    cells: dict[str, dict[str, list[dict]]] = {}
    for r in results:
        if r.done:
            d = r.cell.dataset
            cells.setdefault(f"{d.key}:{d.split}" if d.split != "full" else d.key,
                             {})[r.cell.strategy.key] = r.load_rows()
    fn = METRICS[metric]
    peer_labels = [p["label"] for p in PEERS] if peers else []
    methods = [m for m in dict.fromkeys(m for by in cells.values() for m in by) if m not in peer_labels]
    print(f"{metric}, 95% interval half-width; vs {BASELINE}: paired difference [95% CI], * = real")
    print(f"{'dataset':<22}" + "".join(f"{m:>30}" for m in methods))
    for ds, by in cells.items():
        line = f"{ds:<22}"
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
    losses = _category_losses(cells, fn, FUSED, [BASELINE], f"{FUSED} is below {BASELINE}", category_of, paired)
    losses += _category_losses(cells, fn, FUSED, list(SINGLE), f"{FUSED} is below the best single signal",
                               category_of, paired)
    if peers:
        _peer_table(cells, peer_labels, aggregate, metric_ci, paired, METRICS)
    if failed:
        print(f"\nFAILED cells: {', '.join(failed)}")
    return 1 if failed else 0


def _category_losses(cells, fn, method, others, title, category_of, paired) -> int:
    """Print every category where `method` falls below one of `others` beyond the interval."""
    print(f"\ncategories where {title} beyond the interval:")
    losses = 0
    for ds, by in cells.items():
        if method not in by:
            continue
        for cat in sorted({category_of(r) for r in by[method]}, key=str):
            mine = [r for r in by[method] if category_of(r) == cat]
            for other in others:
                if other in by:
                    theirs = [r for r in by[other] if category_of(r) == cat]
                    res = paired(fn, theirs, mine)
                    if res is not None and res["real"] and res["diff"] < 0:
                        losses += 1
                        print(f"  {ds} category {cat}: {method} {res['b']:.3f} vs {other} {res['a']:.3f} ({_fmt(res)})")
    if not losses:
        print("  none")
    return losses


def _peer_table(cells, peer_labels, aggregate, metric_ci, paired, metrics) -> None:
    """dkilab (previous and shipped defaults) against each peer on every retrieval metric, in the same run:
    value, the dkilab/peer ratio, and whether defaults - peer is a real difference (paired, 95%)."""
    ours = [m for m in (BASELINE, FUSED) if any(m in by for by in cells.values())]
    print(f"\npeers in the same run (same stores, questions and encoder); ratio = {FUSED} / peer, "
          f"* = {FUSED} - peer real (paired 95%):")
    head = f"{'dataset':<22}{'metric':<22}" + "".join(f"{m:>16}" for m in [*ours, *peer_labels])
    head += "".join(f"{'/' + p:>18}" for p in peer_labels)
    print(head)
    for ds, by in cells.items():
        if not any(p in by for p in peer_labels):
            continue
        for name in PEER_METRICS:
            fn = metrics[name]
            values = {m: aggregate(by[m]).get(name, float("nan")) for m in [*ours, *peer_labels] if m in by}
            line = f"{ds:<22}{name:<22}"
            for m in [*ours, *peer_labels]:
                ci = metric_ci(fn, by[m]) if m in by else None
                line += (f"{values[m]:>10.3f} ±{(ci[1] - ci[0]) / 2:.2f}" if ci
                         else f"{values.get(m, float('nan')):>16.3f}")
            for p in peer_labels:
                if FUSED in values and p in values and values[p]:
                    res = paired(fn, by[p], by[FUSED])
                    mark = "*" if res is not None and res["real"] else " "
                    line += f"{values[FUSED] / values[p]:>17.2f}{mark}"
                else:
                    line += f"{'-':>18}"
            print(line)

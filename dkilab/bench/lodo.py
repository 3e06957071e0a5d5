"""Leave-one-dataset-out retrieval figures: how the learned fusion does on a dataset none of
its fitting data came from.

For each dataset source of the bench (LoCoMo, MemDaily, MADial-Bench: its English and Chinese halves are
one source, one generator), the fusion model is refitted on the dev splits of the *other* sources only
and scores the held-out source's test split. The candidates and their features are collected once
(`fusion_train.collect`, the code recall runs) on the defaults' stores; every pipeline below reorders the
same candidates, so the figures differ by the ordering alone:

- `shipped`: the shipped model (fitted on every dev split: in distribution), with its range guard, as
  `defaults` recalls;
- `shipped_unguarded`: its parts alone (`experiments/models/fusion_lr_unguarded.json`, the bench's
  `unguarded` row: what the guard costs in distribution);
- `weighted`: the hand-weighted fusion's own order (the `fused` list; `fusion: weighted`);
- `lodo_parts`: the shipped model's structure (one part per encoder family and cue kind,
  `fusion_train.parts`) refitted without the held-out source; a family or cue kind left with no part
  falls back as `FusionModel.part_for` says;
- `lodo_parts_guarded`: `lodo_parts` with the range guard below fitted on the same rows (the shipped
  model's structure as it ships: parts and guard);
- `lodo_pooled`: one part over all the other sources' dev rows (every family and cue kind);
- `lodo_hybrid`: reciprocal-rank fusion of `lodo_pooled`'s and `weighted`'s orders (k = `RRF_K`);
- `lodo_guarded`: `lodo_pooled`, except for a question whose candidates lie outside the fitted range
  (`learned.RangeGuard`: more of its feature values outside the training rows' 0.5-99.5 percentiles than
  99% of the training questions have), which gets `weighted`.

Each is compared, paired by question, with the rows `dkilab bench retrieval` logs for the same questions:
`previous_defaults`, `defaults` (which `shipped` must reproduce), `unguarded` (which `shipped_unguarded`
must reproduce) and the single signals `bm25_only` and
`dense_only` (run here when not finished yet; the same cells as the bench's).

    dkilab bench retrieval --leave-one-dataset-out [--data-dir DIR] [--metric recall_at_10] [--turn-alone]

`--turn-alone` collects everything again with the English stores embedding each turn alone, refits every
held-out pipeline there and pairs it with the same pipeline on the defaults' stores, which embed each turn
with the one it replies to (`previous_turn_table`): the choice between one vector per turn and the turn
with its context is made by held-out figures, not in distribution (e5 stores keep the turn before either
way).

Only the fusion model is refitted: the fine-tuned English encoder (`offline:minilm-locomo`) was fitted on
LoCoMo dev, so on LoCoMo test its cosines are still in distribution (the table says so).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from dkilab.bench.fusion_train import C_RULES, DEV, STOCK, _fit, choose_c, collected, default_part, for_spec, parts
from dkilab.bench.retrieval import CONFIG, SINGLE, load_config
from dkilab.config import read_yaml
from dkilab.eval.data import dataset_info
from dkilab.eval.harness.runner import run_experiment
from dkilab.eval.scoring import METRICS
from dkilab.eval.scoring.base import aggregate_metric
from dkilab.eval.scoring.bootstrap import metric_ci, paired
from dkilab.eval.scoring.retrieval import any_hit, evidence_recall, ndcg, reciprocal_rank
from dkilab.recall import learned
from dkilab.recall.learned import FEATURES, RangeGuard, load_model

RRF_K = 60
TOP = 20  # the bench's max_results: metrics are read over the top 20, as a recall_only answer holds
RUNNER = ("previous_defaults", "defaults", "unguarded", "bm25_only", "dense_only")
PIPELINES = ("shipped", "shipped_unguarded", "weighted", "lodo_parts", "lodo_parts_guarded", "lodo_pooled",
             "lodo_hybrid", "lodo_guarded")


def source(dataset: str) -> str:
    """The generator a dataset comes from: MADial-Bench's two languages are one source."""
    return "madial_bench" if dataset.startswith("madial_bench") else dataset


def test_datasets() -> list[dict[str, Any]]:
    """The bench's held-back datasets (`experiments/retrieval_bench.yaml`), as config dicts."""
    return list(read_yaml(CONFIG)["datasets"])


def collect_all(data_dir=None, echo=print, turn_alone: bool = False) -> tuple[list[dict], list[dict]]:
    """(dev rows, test rows): the dev rows as `--train` fits on them (the fine-tuned encoder's LoCoMo dev
    rows left out, the English dev data on stock-MiniLM stores beside), the test rows
    on the defaults' stores; each dataset's cached (`collected`). `turn_alone`: the English data on stores
    that embed each turn alone (`fusion_train.for_spec`)."""
    auto: dict[str, Any] = {"model": "auto"}
    dev: list[dict] = []
    for spec in DEV:
        dev += [r for r in collected(data_dir, for_spec(auto, spec, turn_alone), spec, echo, stand_ins=True)
                if not r.get("stand_in")]
        if dataset_info(str(spec["name"]))["language"] == "en":
            dev += collected(data_dir, for_spec(STOCK, spec, turn_alone), spec, echo)
    test = [r for spec in test_datasets() for r in collected(data_dir, for_spec(auto, spec, turn_alone), spec, echo)]
    if not dev or not test:
        raise ValueError("leave-one-dataset-out: no question with evidence (is $DKILAB_DATA_DIR set?)")
    return dev, test


def _fit_best(rows: list[dict], echo, name: str, rule: str = C_RULES[0]):
    choice = choose_c(rows, rule)  # as `--train` chooses it
    echo(f"  {name}: {len(rows)} questions, {choice.line()}")
    return _fit(rows, choice.C)


def fit_parts(train: list[dict], echo=print, rule: str = C_RULES[0]):
    """The shipped model's structure (`fusion_train.parts`) fitted on `train`, each part's C chosen by `rule`
    (`fusion_train.choose_c`): a `FusionModel`."""
    models = {}
    for name, mine in parts(train).items():
        scaler, lr = _fit_best(mine, echo, name, rule)
        models[name] = {"mean": scaler.mean_.tolist(), "scale": scaler.scale_.tolist(), "coef": lr.coef_[0].tolist()}
    return learned.FusionModel({"version": "lodo", "features": list(learned.FEATURES), "default": default_part(models),
                                "models": models}, "<leave-one-dataset-out>")


def dev_held_out_rows(rows: list[dict], echo=lambda _: None, rule: str = C_RULES[0], fit=None
                      ) -> dict[str, list[dict]]:
    """{dev dataset (encoder family): its metric rows (`metric_row`)} of the shipped structure fitted on every
    other source's dev rows of `rows` (`fit(train, echo, rule)`, default `fit_parts`: anything with
    `part_for` and `score`), for each source in turn: the dev studies' held-out rows, which never read a
    test split."""
    out: dict[str, list[dict]] = {}
    for held in dict.fromkeys(source(r["dataset"]) for r in rows):
        echo(f"{rule}, {held} held out:")
        model = (fit or fit_parts)([r for r in rows if source(r["dataset"]) != held], echo, rule)
        for r in rows:
            if source(r["dataset"]) == held:
                out.setdefault(f"{r['dataset']} ({r['model'].split(':')[-1]})", []).append(
                    metric_row(r, _order(model.score(r["X"], model.part_for(r["model"], r["query"])))))
    return out


def dev_held_out(rows: list[dict], echo=lambda _: None, rule: str = C_RULES[0]
                 ) -> dict[str, tuple[float, float, float]]:
    """{dev dataset (encoder family): (recall@10, NDCG@10, MRR)} of `dev_held_out_rows`."""
    def mean(v: list[dict], f: str) -> float:
        return float(np.mean([m[f] for m in v]))

    return {k: (mean(v, "recall_at_10"), mean(v, "ndcg_at_10"), mean(v, "mrr"))
            for k, v in dev_held_out_rows(rows, echo, rule).items()}


def dev_lines(table: dict[str, dict[str, tuple[float, float, float]]]) -> list[str]:
    """The dev studies' table of {column: `dev_held_out`}: recall@10 / NDCG@10 / MRR of each held-out dev
    dataset under each column, and their mean over the datasets."""
    cols = list(table)
    names = list(table[cols[0]])
    cell = "%.3f / %.3f / %.3f"
    lines = ["recall@10 / NDCG@10 / MRR", f"{'held-out dev rows':<40} " + " ".join(f"{c:>22}" for c in cols)]
    lines += [f"{n:<40} " + " ".join((cell % table[c][n]).rjust(22) for c in cols) for n in names]
    lines.append(f"{'mean':<40} " + " ".join((cell % tuple(np.mean([table[c][n] for n in names], axis=0))).rjust(22)
                                               for c in cols))
    return lines


def _order(scores: np.ndarray) -> np.ndarray:
    return np.argsort(-scores, kind="stable")


def model_order(model: learned.FusionModel, row: dict) -> np.ndarray:
    """The order a fusion model with its range guard gives `row`'s candidates, as recall uses it: its part's
    scores, or the weighted order where the guard says the row lies outside the fitted range."""
    if model.guard is not None and model.guard.outside(row["X"]):
        return weighted_order(row["X"])
    return _order(model.score(row["X"], model.part_for(row["model"], row["query"])))


def weighted_order(X: np.ndarray) -> np.ndarray:
    """The hand-weighted fusion's order of the candidates (its fused rank; neighbours it did not list last)."""
    return np.argsort(X[:, FEATURES.index("log_fused_rank")], kind="stable")


def rrf(*orders: np.ndarray, k: int = RRF_K) -> np.ndarray:
    """Reciprocal-rank fusion of orders of the same candidates."""
    score = np.zeros(len(orders[0]))
    for order in orders:
        score[order] += 1.0 / (k + 1 + np.arange(len(order)))
    return _order(score)


def metric_row(row: dict, order: np.ndarray) -> dict[str, Any]:
    """The per-question retrieval metrics of `row`'s candidates in `order` (top `TOP`), keyed like the
    runner's rows so `paired` matches them by question."""
    ranked = [row["ids"][i] for i in order[:TOP]]
    gold = list(row["gold"])
    out = {"qid": row["qid"], "user_id": row["user"], "recall_at_10": evidence_recall(ranked, gold, 10),
           "ndcg_at_10": ndcg(ranked, gold, 10), "mrr": reciprocal_rank(ranked, gold),
           "any_hit_at_10": any_hit(ranked, gold, 10)}
    for k in (1, 5, 20):
        out[f"recall_at_{k}"] = evidence_recall(ranked, gold, k)
    return out


def score_held_out(dev: list[dict], test: list[dict], echo=print) -> dict[str, dict[str, list[dict]]]:
    """{test dataset: {pipeline: metric rows}} for every pipeline of `PIPELINES`, each source held out in turn."""
    shipped = load_model()
    if shipped.guard is None:
        raise ValueError(
            "dkilab/recall/fusion_lr.json: the shipped fusion model has no range guard (fitted with --no-guard?)")
    out: dict[str, dict[str, list[dict]]] = {}
    for held in dict.fromkeys(source(r["dataset"]) for r in test):
        train = [r for r in dev if source(r["dataset"]) != held]
        names = ", ".join(dict.fromkeys(r["dataset"] for r in train))
        echo(f"held out {held}: fitting on {names} dev")
        model = fit_parts(train, echo)
        scaler, lr = _fit_best(train, echo, "pooled")
        guard = RangeGuard.fit([r["X"] for r in train])
        for r in (r for r in test if source(r["dataset"]) == held):
            by = out.setdefault(r["dataset"], {p: [] for p in PIPELINES})
            weighted = weighted_order(r["X"])
            parts = _order(model.score(r["X"], model.part_for(r["model"], r["query"])))
            pooled = _order(lr.decision_function(scaler.transform(r["X"])))
            mine = _order(shipped.score(r["X"], shipped.part_for(r["model"], r["query"])))
            outside, shipped_outside = guard.outside(r["X"]), shipped.guard.outside(r["X"])
            orders = {"shipped": weighted if shipped_outside else mine, "shipped_unguarded": mine,
                      "weighted": weighted,
                      "lodo_parts": parts,
                      "lodo_parts_guarded": weighted if outside else parts,
                      "lodo_pooled": pooled, "lodo_hybrid": rrf(pooled, weighted),
                      "lodo_guarded": weighted if outside else pooled}
            for p, order in orders.items():
                by[p].append(metric_row(r, order))
            for p in ("lodo_guarded", "lodo_parts_guarded"):
                by[p][-1]["to_weighted"] = outside
            by["shipped"][-1]["to_weighted"] = shipped_outside
    return out


def runner_rows(data_dir=None, tracking_uri: str | None = None) -> dict[str, dict[str, list[dict]]]:
    """{test dataset: {label: rows}} of the bench's `RUNNER` strategies (run, or read back when finished)."""
    cfg = load_config()
    cfg = cfg.model_copy(update={"strategies": [s for s in cfg.strategies if s.key in RUNNER]})
    results = run_experiment(cfg, data_dir=data_dir, uri=tracking_uri, progress=False,
                             echo=lambda line: print(line) if "FAILED" in line else None)
    failed = [r.cell.label for r in results if not r.done]
    if failed:
        raise RuntimeError(f"leave-one-dataset-out: bench cells failed: {', '.join(failed)}")
    out: dict[str, dict[str, list[dict]]] = {}
    for r in results:
        out.setdefault(r.cell.dataset.name, {})[r.cell.strategy.key] = r.load_rows()
    return out


def table(held: dict[str, dict[str, list[dict]]], runner: dict[str, dict[str, list[dict]]],
          metric: str = "recall_at_10") -> list[str]:
    """The lines of the table: per dataset, each runner strategy and pipeline with its 95% interval, and the
    paired difference of every pipeline against the previous defaults and the best single signal."""
    fn = METRICS[metric]
    lines = [f"{metric} on each test split; lodo_* fitted without the dataset's source; "
             "vs = paired difference [95% CI], * = real", ""]
    for ds, mine in held.items():
        theirs = runner.get(ds, {})
        rows = {**theirs, **mine}
        singles: dict[str, float] = {s: aggregate_metric(fn, theirs[s]) or 0.0 for s in SINGLE if s in theirs}
        best: str | None = max(singles, key=lambda s: singles[s]) if singles else None
        lines.append(f"{ds} ({len(next(iter(mine.values())))} questions; best single signal: {best}):")
        for name, rs in rows.items():
            ci = metric_ci(fn, rs)
            line = f"  {name:<18} {aggregate_metric(fn, rs) or 0.0:.3f}" + (f" ±{(ci[1] - ci[0]) / 2:.3f}" if ci
                                                                            else "")
            for other in ("previous_defaults", best):
                if other and other in theirs and name != other and name in mine:
                    res = paired(fn, theirs[other], rs)
                    if res is not None:
                        line += (f"   vs {other} {res['diff']:+.3f} [{res['low']:+.3f}, {res['high']:+.3f}]"
                                 f"{'*' if res['real'] else ''}")
            lines.append(line)
        for p in ("shipped", "lodo_parts_guarded", "lodo_guarded"):
            sent = sum(bool(r.get("to_weighted")) for r in mine[p])
            lines.append(f"  ({p}: the guard gave {sent} of {len(mine[p])} questions the weighted order)")
        for offline, logged in (("shipped", "defaults"), ("shipped_unguarded", "unguarded")):
            if logged in theirs and (res := paired(fn, theirs[logged], mine[offline])) is not None:
                lines.append(
                    f"  ({offline} offline - {logged} logged: {res['diff']:+.4f} over {int(res['n'])} questions)")
        lines.append("")
    means = {p: float(np.mean([aggregate_metric(fn, held[d][p]) or 0.0 for d in held]))
             for p in PIPELINES if p.startswith("lodo")}
    lines.append("mean over datasets, held out: " + ", ".join(f"{p} {v:.3f}" for p, v in means.items()))
    winner = max(means, key=lambda p: means[p])
    lines.append(f"winner: {winner}")
    lines.append("against the winner, paired by question (a pipeline with no real loss on any dataset ties it):")
    for p in means:
        if p == winner:
            continue
        diffs = {d: paired(fn, held[d][winner], held[d][p]) for d in held}
        tie = all(r is None or not (r["real"] and r["diff"] < 0) for r in diffs.values())
        lines.append(f"  {p:<18} " + "   ".join(f"{d} {r['diff']:+.3f} [{r['low']:+.3f}, {r['high']:+.3f}]"
                                               f"{'*' if r['real'] else ''}" for d, r in diffs.items() if r)
                     + ("   ties" if tie else ""))
    return lines


def previous_turn_table(alone: dict[str, dict[str, list[dict]]], paired_with: dict[str, dict[str, list[dict]]],
                        metric: str = "recall_at_10") -> list[str]:
    """Each held-out pipeline on English stores that embed a turn with the one it replies to,
    paired by question with the same pipeline on stores of each turn alone, and the choice it makes."""
    fn = METRICS[metric]
    lines = [f"{metric} held out, each English turn embedded alone vs with the turn it replies to (the "
             "defaults; e5 stores keep it either way): with - alone [95% CI], * = real", ""]
    means: dict[str, list[float]] = {}
    for ds in alone:
        lines.append(f"{ds}:")
        for p in ("lodo_parts_guarded", "lodo_guarded", "lodo_parts", "lodo_pooled"):
            a, w = aggregate_metric(fn, alone[ds][p]) or 0.0, aggregate_metric(fn, paired_with[ds][p]) or 0.0
            means.setdefault(p, []).append(w - a)
            res = paired(fn, alone[ds][p], paired_with[ds][p])
            diff = (f"{res['diff']:+.3f} [{res['low']:+.3f}, {res['high']:+.3f}]{'*' if res['real'] else ''}"
                    if res else "-")
            lines.append(f"  {p:<18} alone {a:.3f}   with previous turn {w:.3f}   {diff}")
    shipped = means["lodo_parts_guarded"]
    lines += ["", "mean difference over datasets: " + ", ".join(f"{p} {np.mean(v):+.3f}" for p, v in means.items()),
              f"choice for the defaults' structure (lodo_parts_guarded): "
              f"{'with the previous turn' if np.mean(shipped) > 0 else 'each turn alone'}"]
    return lines


def main(data_dir=None, metric: str = "recall_at_10", tracking_uri: str | None = None,
         turn_alone: bool = False) -> int:
    runner = runner_rows(data_dir, tracking_uri)
    dev, test = collect_all(data_dir)
    held = score_held_out(dev, test)
    for line in table(held, runner, metric):
        print(line)
    if turn_alone:
        print()
        dev, test = collect_all(data_dir, turn_alone=True)
        for line in previous_turn_table(score_held_out(dev, test, echo=lambda _: None), held, metric):
            print(line)
    return 0

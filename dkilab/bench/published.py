"""The first answer-level comparison on real replies: GPT-4o-mini's published LoCoMo answers (the LoCoMo audit's
full-context baseline, two answer prompts) imported as cells beside the audit's intentionally wrong answers, on
categories 1-4 with and without the golds the audit finds wrong.

    dkilab bench published [--data-dir DIR] [--tracking-uri URI] [--format markdown|text]

Per cell: the published judge (GPT-4o-mini, majority of its three verdicts) and dkilab's official LoCoMo score of
the same replies, each with its 95% interval, by category; how often the two agree (the LoCoMo score at 0.5 or
more read as correct) and their correlation; the ceiling the audited golds leave; the judge's acceptance of the
wrong answers (its stress figure); and the paired differences between the two prompts. It runs the cells like
`dkilab import` (finished cells read back), so a rerun is quick.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from dkilab.eval.harness.experiment import experiment_from_dict
from dkilab.eval.harness.imported import import_config
from dkilab.eval.harness.runner import run_experiment
from dkilab.eval.scoring import METRICS
from dkilab.eval.scoring.base import category_of
from dkilab.eval.scoring.bootstrap import metric_ci, paired

EXPERIMENT = "published-locomo"
AUDIT = "locomo_audit"
# label -> (file under the data dir, who wrote the answers)
RUNS = {
    "4o-mini-memos": ("fc-baseline/gpt-4o-mini-memos/eval_results.json", None),
    "4o-mini-cot": ("fc-baseline/gpt-4o-mini-cot/eval_results.json", None),
    "wrong-specific": ("ap-baseline/v1/ap_eval_results_scored.json",
                       "Claude Opus 4.6, told to write specific but wrong answers (the audit's ap-baseline v1)"),
    "wrong-vague": ("ap-baseline/v2/ap_eval_results_scored.json",
                    "Claude Opus 4.6, told to write vague but topical wrong answers (the audit's ap-baseline v2)"),
}
REAL = ("4o-mini-memos", "4o-mini-cot")
CATEGORY_ORDER = ("single_hop", "multi_hop", "temporal", "open_domain")


def config(data_dir: str | None = None) -> dict:
    """The experiment mapping: the four files on LoCoMo categories 1-4, with and without the audited golds."""
    root = Path(data_dir or os.environ.get("DKILAB_DATA_DIR") or ".") / AUDIT
    data = import_config([str(root / f) for f, _ in RUNS.values()], "locomo", name=EXPERIMENT, labels=list(RUNS),
                         categories=["1", "2", "3", "4"], exclude_audited=str(root / "audit"))
    for s in data["strategies"]:
        if RUNS[s["label"]][1]:
            s["params"]["answer_model"] = RUNS[s["label"]][1]
    data["description"] = ("GPT-4o-mini's published LoCoMo replies (whole conversation in context, two answer "
                           "prompts) and the audit's intentionally wrong answers, imported: `dkilab bench published`")
    return data


def _mean_ci(name: str, rows: list[dict]) -> tuple[float, float, float, int]:
    m = METRICS[name]
    vals = [float(r[m.field]) for r in rows if not r.get("error") and r.get(m.field) is not None]
    lo, hi = metric_ci(m, rows) or (float("nan"), float("nan"))
    return (sum(vals) / len(vals) if vals else float("nan")), lo, hi, len(vals)


def _fmt(v: float, lo: float, hi: float) -> str:
    return f"{100 * v:.2f}% [{100 * lo:.1f}, {100 * hi:.1f}]"


def agreement(rows: list[dict]) -> dict[str, float]:
    """How the published judge and the LoCoMo score agree per question: the share where the score at >= 0.5
    and the judge's majority say the same, and their Pearson correlation."""
    pairs = [(float(r["score"]), float(r["published_judge"])) for r in rows
             if r.get("score") is not None and r.get("published_judge") is not None]
    s, j = np.array(pairs).T
    same = float(np.mean((s >= 0.5) == (j >= 0.5)))
    corr = float(np.corrcoef(s, j)[0, 1]) if s.std() > 0 and j.std() > 0 else float("nan")
    return {"agreement": same, "pearson": corr, "n": len(pairs),
            "judge_only": float(np.mean((j >= 0.5) & (s < 0.5))), "score_only": float(np.mean((s >= 0.5) & (j < 0.5)))}


def comparison(data_dir: str | None = None, uri: str | None = None, echo=print) -> dict[str, Any]:
    """Run (or read back) the cells, then the figures: {overall, by_category, agreement, paired, ceiling}."""
    cfg = experiment_from_dict(config(data_dir), "<dkilab bench published>")
    results = run_experiment(cfg, data_dir=data_dir, uri=uri, config_path="<dkilab bench published>", echo=echo,
                             progress=False)
    failed = [r.cell.label for r in results if r.error]
    if failed:
        raise RuntimeError(f"cells failed: {', '.join(failed)}")
    overall, by_cat, agree, ceiling = [], [], [], None
    rows_of = {r.cell.label: r.load_rows() for r in results}
    for r in results:
        rows, audited = rows_of[r.cell.label], r.cell.dataset.exclude_audited is not None
        if audited:
            ceiling = r.cell.dataset.info()["audit"]
        judge, score = _mean_ci("published_judge", rows), _mean_ci("score", rows)
        runs = _mean_ci("published_judge_mean", rows)
        overall.append({"cell": r.cell.strategy.key, "golds": "audited out" if audited else "all",
                        "questions": judge[3], "published_judge": _fmt(*judge[:3]),
                        "published_judge_mean": f"{100 * runs[0]:.2f}%", "locomo_score": _fmt(*score[:3])})
        if not audited:
            agree.append({"cell": r.cell.strategy.key} | agreement(rows))
            for cat in CATEGORY_ORDER:
                sub = [x for x in rows if category_of(x) == cat]
                j, s = _mean_ci("published_judge", sub), _mean_ci("score", sub)
                by_cat.append({"cell": r.cell.strategy.key, "category": cat, "questions": j[3],
                               "published_judge": _fmt(*j[:3]), "locomo_score": _fmt(*s[:3])})
    pairs = []
    for golds, suffix in (("all", "locomo"), ("audited out", "locomo-audited")):
        a, b = rows_of[f"{REAL[0]}@{suffix}"], rows_of[f"{REAL[1]}@{suffix}"]
        for name in ("published_judge", "score"):
            p = paired(METRICS[name], a, b)
            if p is not None:
                pairs.append({"golds": golds, "metric": name, "a": REAL[0], "b": REAL[1], "n": int(p["n"]),
                              "b - a": f"{100 * p['diff']:+.2f} [{100 * p['low']:+.1f}, {100 * p['high']:+.1f}]",
                              "real": "yes" if p["real"] else "no"})
    return {"overall": overall, "by_category": by_cat, "agreement": agree, "paired": pairs, "ceiling": ceiling}


def _table(rows: list[dict], floats: str = "{:.3f}") -> str:
    if not rows:
        return "(none)"
    cols = list(rows[0])
    cell = lambda v: floats.format(v) if isinstance(v, float) else str(v)  # noqa: E731
    return "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols),
                      *("| " + " | ".join(cell(r[c]) for c in cols) + " |" for r in rows)])


def render(out: dict[str, Any]) -> str:
    c = out["ceiling"] or {}
    return "\n\n".join([
        "Overall (published judge: GPT-4o-mini, majority of its 3 verdicts, and the mean of its 3 runs as the file "
        "reports it; LoCoMo score: the official F1 scorer; 95% intervals over conversations):",
        _table(out["overall"]), "By category (all golds):", _table(out["by_category"]),
        "Published judge against the LoCoMo score, per question (score >= 0.5 read as correct):",
        _table(out["agreement"]), "Paired differences, cot - memos, on the same questions (95% CI, points):",
        _table(out["paired"]),
        f"Ceiling the audited golds leave on categories 1-4: {100 * c.get('ceiling_before', float('nan')):.2f}% "
        f"({c.get('excluded')} golds the audit finds wrong; its digest {c.get('sha1')})."])


def main(data_dir: str | None = None, uri: str | None = None) -> int:
    print(render(comparison(data_dir, uri)))
    return 0

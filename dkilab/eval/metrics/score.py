"""Per-question metric rows and their aggregates (overall and per category)."""
from __future__ import annotations

import math
from typing import Any

from dkilab.eval.metrics.abstention import is_abstention
from dkilab.eval.metrics.claims import unsupported_rate
from dkilab.eval.metrics.qa import choice_accuracy, exact_match, f1_score, locomo_score, zh_exact_match, zh_f1
from dkilab.eval.metrics.retrieval import evidence_recall, reciprocal_rank
from dkilab.text.lang import detect_language
from dkilab.types import Answer, QAItem

STAGES = ("recall", "assembly", "generation")
RECALL_KS = (1, 5, 10, 20)  # evidence recall@k of retrieval-only answers (recall_only)


def quality(item: QAItem, prediction: str, dataset: str) -> dict[str, float]:
    """score (the dataset's primary measure), f1 and em for an answerable question."""
    if item.choices:
        acc = choice_accuracy(prediction, item.answer, item.choices)
        return {"score": acc, "accuracy": acc}
    gold = str(item.answer)
    if dataset.startswith("locomo") and isinstance(item.category, int):
        return {"score": locomo_score(prediction, gold, item.category), "f1": f1_score(prediction, gold),
                "em": float(exact_match(prediction, gold))}
    if detect_language(gold) == "cn":
        f1 = zh_f1(prediction, gold)
        return {"score": f1, "f1": f1, "em": float(zh_exact_match(prediction, gold))}
    f1 = f1_score(prediction, gold)
    return {"score": f1, "f1": f1, "em": float(exact_match(prediction, gold))}


def _latency(row: dict[str, Any], answer: Answer) -> dict[str, Any]:
    for stage in STAGES:
        row[f"latency_{stage}_ms"] = answer.latency_ms.get(stage, 0.0)
    row["latency_total_ms"] = sum(answer.latency_ms.values())
    return row


def score_retrieval(item: QAItem, answer: Answer) -> dict[str, Any]:
    """A retrieval-only row: evidence recall@k and reciprocal rank of the ranked `recalled_ids`."""
    row: dict[str, Any] = {"answerable": item.answerable}
    if item.evidence_ids:
        ranked = answer.recalled_ids
        row |= {f"recall_at_{k}": evidence_recall(ranked, item.evidence_ids, k) for k in RECALL_KS}
        row["mrr"] = reciprocal_rank(ranked, item.evidence_ids)
    return _latency(row, answer)


def score_answer(item: QAItem, answer: Answer, dataset: str) -> dict[str, Any]:
    """One metric row: quality, hallucination, fact calls, retrieval and cost."""
    if answer.metadata.get("retrieval_only"):
        return score_retrieval(item, answer)
    row: dict[str, Any] = {"answerable": item.answerable, "abstained": is_abstention(answer.text)}
    if item.answerable:
        row |= quality(item, answer.text, dataset)
        rate = unsupported_rate(answer.text, item.question + "\n" + answer.context_text)
        row["unsupported_claim_rate"] = rate
    else:
        # LoCoMo's category 5 keeps its official score; everywhere an abstention is the right answer
        row["score"] = (locomo_score(answer.text, None, 5) if dataset.startswith("locomo") and item.category == 5
                        else float(row["abstained"]))
        row["hallucinated"] = float(not row["abstained"])
    gold = set(item.evidence_ids)
    calls = answer.fact_calls
    row |= {
        "fact_calls": len(calls), "rounds": answer.rounds,
        "valid_calls": sum(c.valid for c in calls), "malformed_calls": sum(c.malformed for c in calls),
        "evidence_hit_calls": sum(1 for c in calls if c.trace_id in gold),
        "fact_tokens": sum(c.tokens for c in calls),
        "prompt_tokens": answer.prompt_tokens, "injected_tokens": answer.injected_tokens,
        "generated_tokens": answer.generated_tokens,
        "evidence_in_context": (len(gold & set(answer.recalled_ids)) / len(gold)) if gold and item.answerable else None,
    }
    return _latency(row, answer)


def primary_metric(metrics) -> str | None:
    """The headline metric of a cell's metrics (a dict or table columns): score, else recall@10."""
    return next((m for m in ("score", "recall_at_10") if m in metrics), None)


def _mean(xs):
    xs = [x for x in xs if x is not None and not (isinstance(x, float) and math.isnan(x))]
    return sum(xs) / len(xs) if xs else None


def _pct(xs, p):
    xs = sorted(x for x in xs if x is not None)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else None


def aggregate(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Metrics of a set of rows (error rows count in `errors` only)."""
    ok = [r for r in rows if not r.get("error")]
    out: dict[str, float | None] = {"questions": float(len(rows)), "errors": float(len(rows) - len(ok))}
    if not ok:
        return {k: v for k, v in out.items() if v is not None}
    ans = [r for r in ok if r["answerable"]]
    un = [r for r in ok if not r["answerable"]]
    gen = [r for r in ok if "fact_calls" in r]  # rows of answering strategies (not retrieval-only)
    calls = sum(r["fact_calls"] for r in gen)
    out |= {
        "score": _mean([r.get("score") for r in ok]),
        "answer_score": _mean([r.get("score") for r in ans]),
        "f1": _mean([r.get("f1") for r in ans]), "em": _mean([r.get("em") for r in ans]),
        "accuracy": _mean([r.get("accuracy") for r in ans]),
        "hallucination_rate": _mean([r.get("hallucinated") for r in un]),
        "abstention_rate_answerable": _mean([float(r["abstained"]) for r in ans if "abstained" in r]),
        "unsupported_claim_rate": _mean([r.get("unsupported_claim_rate") for r in ans]),
        "fact_call_rate": _mean([float(r["fact_calls"] > 0) for r in gen]),
        "mean_rounds": _mean([r["rounds"] for r in gen]),
        "valid_call_rate": (sum(r["valid_calls"] for r in gen) / calls) if calls else None,
        "evidence_hit_rate": (sum(r["evidence_hit_calls"] for r in gen) / calls) if calls else None,
        "malformed_call_rate": (sum(r["malformed_calls"] for r in gen) / calls) if calls else None,
        "fact_tokens": _mean([r["fact_tokens"] for r in gen]),
        "evidence_in_context": _mean([r.get("evidence_in_context") for r in ans]),
        "prompt_tokens": _mean([r["prompt_tokens"] for r in gen]),
        "injected_tokens": _mean([r["injected_tokens"] for r in gen]),
        "mrr": _mean([r.get("mrr") for r in ok]),
        "judge_score": _mean([r.get("judge") for r in ans]),  # LLM judge (when the experiment has one)
        "judge_unparsed_rate": _mean([float(r["judge"] is None) for r in ans if "judge" in r]),
    }
    out |= {f"recall_at_{k}": _mean([r.get(f"recall_at_{k}") for r in ok]) for k in RECALL_KS}
    for stage in (*STAGES, "total"):
        xs = [r[f"latency_{stage}_ms"] for r in ok]
        out[f"latency_{stage}_p50_ms"], out[f"latency_{stage}_p95_ms"] = _pct(xs, 50), _pct(xs, 95)
    return {k: float(v) for k, v in out.items() if v is not None}


def aggregate_by_category(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    cats: dict[str, list] = {}
    for r in rows:
        cats.setdefault(str(r.get("category")), []).append(r)
    return {c: aggregate(rs) for c, rs in sorted(cats.items())}

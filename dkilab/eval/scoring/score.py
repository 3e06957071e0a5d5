"""The core metrics: the answer score (by the dataset's scorer), cost, fact calls and latency per stage.
Hallucination (abstention.py), unsupported claims (claims.py), retrieval (retrieval.py) and the judge
(judge.py) declare theirs beside their code."""
from __future__ import annotations

from typing import Any

from dkilab.eval.scoring.base import Scored, declare, metric, score_row
from dkilab.types import Answer, QAItem

STAGES = ("recall", "assembly", "generation")


def score_answer(item: QAItem, answer: Answer, scorer: str = "auto", abstained: bool | None = None,
                 detector: str = "hybrid") -> dict[str, Any]:
    """One metric row (the per-question values of every declared metric that applies); `abstained`
    overrides the abstention detector (an LLM judge's label)."""
    return score_row(item, answer, scorer, abstained, detector)


# --- quality ----------------------------------------------------------------------------------
@metric("score", group="answers",
        label="answer score (0-1)", rate=True, plot=0, higher_is_better=True, per_category=True, rank=0,
        headline=True, description="the dataset's primary measure; on unanswerable questions 1 for an abstention")
def _score(q: Scored):
    return q.quality.get("score")


declare("answer_score", group="answers", field="score", subset="answerable", higher_is_better=True, rank=1,
        description="score over the answerable questions only")


@metric("f1", group="answers", higher_is_better=True, subset="answerable", per_category=True)
def _f1(q: Scored):
    return q.quality.get("f1") if q.item.answerable else None


@metric("em", group="answers", higher_is_better=True, subset="answerable")
def _em(q: Scored):
    return q.quality.get("em") if q.item.answerable else None


@metric("accuracy", group="answers", higher_is_better=True, subset="answerable", description="multiple-choice accuracy")
def _accuracy(q: Scored):
    return q.quality.get("accuracy") if q.item.answerable else None


# --- memory in context and fact calls ----------------------------------------------------------
@metric("evidence_in_context", group="context", higher_is_better=True, subset="answerable", rank=20, kind="context",
        description="share of a question's gold evidence messages the strategy put before the model")
def _evidence(q: Scored):
    gold = set(q.item.evidence_ids)
    return len(gold & set(q.answer.recalled_ids)) / len(gold) if gold and q.item.answerable else None


@metric("fact_call_rate", group="fact",
        label="fact-call rate (share of questions)", rate=True, plot=8, field="fact_called",
        higher_is_better=None, per_category=True, rank=15,
        description="share of questions with at least one retrieve_fact call")
def _fact_called(q: Scored):
    return float(bool(q.answer.fact_calls))


@metric("fact_calls", group="fact", field="fact_calls")
def _fact_calls(q: Scored):
    return len(q.answer.fact_calls)


@metric("valid_calls", group="fact", field="valid_calls")
def _valid(q: Scored):
    return sum(c.valid for c in q.answer.fact_calls)


@metric("malformed_calls", group="fact", field="malformed_calls")
def _malformed(q: Scored):
    return sum(c.malformed for c in q.answer.fact_calls)


@metric("evidence_hit_calls", group="fact", field="evidence_hit_calls")
def _hits(q: Scored):
    gold = set(q.item.evidence_ids)
    return sum(1 for c in q.answer.fact_calls if c.trace_id in gold)


declare("valid_call_rate", group="fact",
        field="valid_calls", aggregation="ratio", ratio_of=("valid_calls", "fact_calls"),
        higher_is_better=True, description="calls whose trace id was offered and found, per call")
declare("evidence_hit_rate", group="fact", field="evidence_hit_calls", aggregation="ratio",
        ratio_of=("evidence_hit_calls", "fact_calls"), higher_is_better=True,
        description="calls that asked for a gold evidence message, per call")
declare("malformed_call_rate", group="fact",
        field="malformed_calls", aggregation="ratio", ratio_of=("malformed_calls", "fact_calls"),
        higher_is_better=False, description="calls that could not be parsed, per call")


@metric("mean_rounds", group="fact", field="rounds", description="generations per question (the fact loop adds rounds)")
def _rounds(q: Scored):
    return q.answer.rounds


@metric("fact_tokens", group="fact", field="fact_tokens", description="fact-segment tokens per question")
def _fact_tokens(q: Scored):
    return sum(c.tokens for c in q.answer.fact_calls)


@metric("final_call", group="fact", rate=True, higher_is_better=False, rank=16,
        description="the final reply was still a call (the fact loop's forced last generation, or call text any "
                    "strategy left in its reply, cut-off calls included): recorded as no answer (score 0), never as "
                    "an abstention nor a hallucination", version="2")
def _final_call(q: Scored):
    return float(bool(q.answer.metadata.get("final_call"))) if q.answer.kind == "answer" else None


# --- cost ----------------------------------------------------------------------------------------
@metric("tokens_processed", group="usage", label="tokens processed (mean)", higher_is_better=False, rank=39, kind="any",
        description="every prompt token of every round, plus injected K/V tokens, plus generated tokens: the "
                    "comparisons' cost axis")
def _tokens_processed(q: Scored):
    spent = q.answer.metadata.get("tokens_processed")
    a = q.answer
    return spent if spent is not None else a.prompt_tokens + a.injected_tokens + a.generated_tokens

@metric("prompt_tokens", group="usage",
        label="prompt tokens (mean)", plot=9, narrow=("answers", "context"), higher_is_better=False,
        rank=40, kind="context", description="tokens of the final visible prompt")
def _prompt_tokens(q: Scored):
    return q.answer.prompt_tokens


@metric("injected_tokens", group="usage",
        label="injected K/V tokens (mean)", plot=10, narrow=("context",), higher_is_better=False,
        rank=41, kind="context", description="K/V memory columns attended to")
def _injected(q: Scored):
    return q.answer.injected_tokens


@metric("generated_tokens", group="usage")
def _generated(q: Scored):
    return q.answer.generated_tokens


@metric("history_budget", group="context", rank=42, kind="context",
        description="the matched history budget (ContextBudget.total): the same for every strategy on a question")
def _budget(q: Scored):
    return q.answer.budget.total if q.answer.budget is not None else None


def _stage_metric(stage: str) -> None:
    field = f"latency_{stage}_ms"

    def fn(q: Scored):
        return q.answer.latency_ms.get(stage, 0.0) if stage != "total" else sum(q.answer.latency_ms.values())

    metric(f"latency_{stage}_p50_ms", group="usage", field=field, aggregation="p50", higher_is_better=False, kind="any",
           rank={"recall": 50, "total": 51}.get(stage), plot=11 if stage == "total" else None,
           label="latency p50 (ms)" if stage == "total" else "",
           narrow=("answers", "context") if stage == "total" else ())(fn)
    declare(f"latency_{stage}_p95_ms", group="usage", field=field, aggregation="p95", higher_is_better=False)


for _stage in (*STAGES, "total"):
    _stage_metric(_stage)

declare("harness_overhead_p50_ms", group="usage",
        field="overhead_ms", aggregation="p50", higher_is_better=False, rank=52,
        description="what a question costs beyond the strategy's own stages (runner, scoring)")
declare("questions_per_minute", group="usage", field="", aggregation="cell", higher_is_better=True, rank=53)
declare("query_embeddings", group="usage", field="", aggregation="cell",
        description="query embeddings the cell computed (caches start empty in every cell)")
declare("store_over_window", group="usage", field="", aggregation="cell", higher_is_better=False,
        description="messages of the cell's store over its encoder's window, each indexed as passages that fit it")
declare("store_vectors", group="usage", field="", aggregation="cell", higher_is_better=False,
        description="vectors the cell's store holds, what its ingest encoded: a message each, and its passages")
declare("questions", field="questions", aggregation="count", per_category=True)
declare("errors", field="errors", aggregation="count", higher_is_better=False, rank=60)

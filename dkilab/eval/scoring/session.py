"""Metrics of the session-memory flow, one row per dialogue turn.

A strategy that runs whole dialogues (`session_l2`) returns one Answer holding every turn
(`metadata["turns"]`); `expand_turns` turns it into one (QAItem, Answer) pair per turn, so each turn is a
row with its own gold, qid `{dialogue}#{n}` (paired across cells), category (the turn's kind) and
cluster (the dialogue's user: bootstrap intervals resample dialogues, not turns).

Per turn: intent accuracy, entity F1 (domain, business object and stage against what the turn means in
context), L2 state accuracy (the current operation after the update against the gold state), routed
retrieval recall@k against the gold documents (also over the turns tagged `ellipsis` alone), the rule
each L2 update applied, and how often the LLM steps fell back to the rules.
"""
from __future__ import annotations

from typing import Any

from dkilab.agents.session_flow import stage_latencies
from dkilab.eval.scoring.base import Scored, metric
from dkilab.types import Answer, QAItem

L2_RULES = ("new", "inherit", "overwrite_intent", "overwrite_object")


def turn_items(item: QAItem) -> list[QAItem]:
    """A dialogue's turns as questions of their own (`<qid>#<n>`, each with its gold); a question that is not
    a dialogue: itself."""
    golds = (item.metadata.get("gold") or {}).get("turns")
    if not golds:
        return [item]
    user = (item.task or {}).get("user")
    return [QAItem(turn, gold["answer"], gold["category"], list(gold["docs"]), True, item.question_date,
                   qid=f"{item.qid}#{n}", metadata={"gold": gold, "user_id": user, "dialogue_id": item.qid})
            for n, (turn, gold) in enumerate(zip((item.task or {}).get("turns") or [""] * len(golds), golds), 1)]


def expand_turns(item: QAItem, answer: Answer) -> list[tuple[QAItem, Answer]]:
    """One (QAItem, Answer) per dialogue turn (an Answer without turns: itself)."""
    turns = answer.metadata.get("turns")
    golds = (item.metadata.get("gold") or {}).get("turns")
    if not turns or not golds:
        return [(item, answer)]
    if len(turns) != len(golds):
        raise ValueError(f"dialogue {item.qid}: {len(turns)} turns answered for {len(golds)} gold turns")
    out = []
    for sub, turn in zip(turn_items(item), turns):
        sub.question = turn["query"]
        latency = stage_latencies(turn["latency_ms"])
        out.append((sub, Answer(turn["answer"], answer.strategy, prompt_tokens=turn["prompt_tokens"],
                                generated_tokens=turn["generated_tokens"], recalled_ids=list(turn["doc_ids"]),
                                rounds=turn["llm_calls"], latency_ms=latency, context_text=turn.get("context", ""),
                                prompt=turn.get("prompt", ""),
                                review={"session_turn": turn},
                                kind="answer" if answer.metadata.get("answers", True) else "ranking")))
    return out


def _turn(q: Scored) -> tuple[dict, dict] | None:
    turn, gold = q.answer.review.get("session_turn"), q.item.metadata.get("gold")
    return (turn, gold) if turn is not None and isinstance(gold, dict) and "meaning" in gold else None


def _pairs(entry: dict | None) -> set[tuple[str, str]]:
    e = entry or {}
    out = {("domain", d) for d in e.get("active_domain") or []}
    out |= {(k, e[k]) for k in ("business_object", "operation_stage") if e.get(k)}
    return out


def entity_f1(pred: dict | None, gold: dict | None) -> float:
    p, g = _pairs(pred), _pairs(gold)
    if not p and not g:
        return 1.0
    tp = len(p & g)
    return 0.0 if not tp else 2 * tp / (len(p) + len(g))


def same_state(pred: dict | None, gold: dict) -> bool:
    p = pred or {}
    return (p.get("intent") == gold["intent"] and sorted(p.get("active_domain") or []) == sorted(gold["active_domain"])
            and p.get("business_object") == gold["business_object"]
            and p.get("operation_stage") == gold["operation_stage"])


@metric("intent_accuracy", group="session",
        rate=True, paired=True, kind="any", higher_is_better=True, per_category=True, rank=3,
        description="session flow: turns whose recognised intent is the gold intent")
def _intent(q: Scored):
    t = _turn(q)
    return None if t is None else float(t[0]["extraction"]["intent"] == t[1]["meaning"]["intent"])


@metric("entity_f1", group="session",
        rate=True, paired=True, kind="any", higher_is_better=True, per_category=True, rank=4,
        description="session flow: F1 of the extracted domain, business object and stage against the turn's meaning")
def _entities(q: Scored):
    t = _turn(q)
    return None if t is None else entity_f1(t[0]["extraction"], t[1]["meaning"])


@metric("l2_state_accuracy", group="session",
        rate=True, paired=True, kind="any", higher_is_better=True, per_category=True, rank=5,
        description="session flow: turns after which L2's current operation equals the gold state")
def _l2(q: Scored):
    t = _turn(q)
    return None if t is None else float(same_state(t[0]["l2_after"], t[1]["l2"]))


def _recall(q: Scored, k: int, tag: str | None = None):
    t = _turn(q)
    if t is None or (tag is not None and tag not in t[1]["tags"]):
        return None
    gold = set(t[1]["docs"])
    return len(gold & set(t[0]["doc_ids"][:k])) / len(gold)


for _k, _rank in ((1, 6.0), (3, 7.0)):
    metric(f"routed_recall_at_{_k}", group="session",
           kind="any", higher_is_better=True, per_category=True, rank=_rank, rate=True,
           plot=4 if _k == 1 else None, label=f"routed recall@{_k} (0-1)", paired=_k == 1,
           description=f"session flow: gold documents among the first {_k} retrieved")(lambda q, k=_k: _recall(q, k))
for _k, _rank in ((1, 8), (3, 8.5)):
    metric(f"ellipsis_recall_at_{_k}", group="session",
           kind="any", higher_is_better=True, rank=_rank, rate=True, paired=_k == 1,
           description=f"session flow: routed recall@{_k} on the turns tagged ellipsis (object or stage from context)"
           )(lambda q, k=_k: _recall(q, k, "ellipsis"))


@metric("rewrite_fallback_rate", group="session", field="rewrite_fallback", kind="any", higher_is_better=False, rank=9,
        description="session flow: LLM rewrites that were unusable (or raised) and fell back to the rules")
def _rewrite_fallback(q: Scored):
    t = _turn(q)
    return None if t is None or t[0]["rewrite_method"] not in ("llm", "llm_fallback") else float(
        t[0]["rewrite_method"] == "llm_fallback")


@metric("intent_fallback_rate", group="session", field="intent_fallback", kind="any", higher_is_better=False, rank=10,
        description="session flow: LLM extractions without a JSON object with a known intent (rules used)")
def _intent_fallback(q: Scored):
    t = _turn(q)
    if t is None or t[0]["extraction_method"] == "rules":
        return None
    return float(t[0]["extraction_method"] == "llm_fallback")


@metric("filter_relaxed_rate", group="session", field="filter_relaxed", kind="any", higher_is_better=False,
        description="session flow: turns whose L2 filter matched no document (searched without it)")
def _relaxed(q: Scored):
    t = _turn(q)
    return None if t is None else float(t[0]["filter_relaxed"])


@metric("l2_rule", group="session",
        field="l2_rule", kind="any", description="session flow: the L2 rule the turn's update applied")
def _rule(q: Scored) -> Any:
    t = _turn(q)
    return None if t is None else t[0]["l2_rule"]


def _rule_share(rule: str) -> None:
    metric(f"l2_rule_{rule}_rate", group="session", field=f"l2_rule_{rule}", kind="any",
           description=f"session flow: share of L2 updates that applied rule {rule!r}")(
        lambda q: None if (t := _turn(q)) is None else float(t[0]["l2_rule"] == rule))


for _rule_name in L2_RULES:
    _rule_share(_rule_name)

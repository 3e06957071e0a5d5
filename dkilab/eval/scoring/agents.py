"""Metrics of the agents: the recall agent's memory view against gold statements and evidence,
and semantic pointers against gold entity facts, distractors and the cases that must fall back.

A view item counts for a gold statement when it is active (not superseded) and cites one of the
statement's evidence messages. Datasets without gold statements (MemDaily) are scored on evidence ids.
"""
from __future__ import annotations

from dkilab.eval.scoring.base import Scored, declare, metric


def _view(q: Scored) -> dict | None:
    return q.answer.review.get("memory_view")


def _active(view: dict) -> list[dict]:
    mv = view["memory_view"]
    return [i for kind in ("preferences", "profile", "constraints") for i in mv[kind] if not i.get("superseded_by")]


def _gold(q: Scored) -> dict | None:
    return q.item.metadata.get("gold") if isinstance(q.item.metadata.get("gold"), dict) else None


def _statements(q: Scored) -> list[dict] | None:
    g = _gold(q)
    return None if g is None or "statements" not in g else g["statements"]


@metric("view_recall", group="agent", label="view recall (0-1)", rate=True, plot=2, kind="any", higher_is_better=True,
        per_category=True, rank=5, headline=True,
        description="gold statements the memory view states (an active item citing their evidence)")
def _view_recall(q: Scored):
    view, gold = _view(q), _statements(q)
    if view is None or not gold:
        return None
    cited = {i for item in _active(view) for i in item["evidence_ids"]}
    return sum(1 for g in gold if cited & set(g["evidence"])) / len(gold)


@metric("view_precision", group="agent", kind="any", higher_is_better=True, rank=6,
        description="active view items that cite gold evidence (questions with a non-empty view)")
def _view_precision(q: Scored):
    view = _view(q)
    if view is None or (_statements(q) is None and not q.item.evidence_ids):
        return None
    active = _active(view)
    if not active:
        return None
    gold = set(q.item.evidence_ids) | {i for g in (_statements(q) or []) for i in g["evidence"]}
    return sum(1 for item in active if gold & set(item["evidence_ids"])) / len(active)


@metric("view_evidence_recall", group="agent",
        kind="any", higher_is_better=True, subset="answerable", rank=7, headline=True,
        description="gold evidence messages cited by an active view item")
def _view_evidence_recall(q: Scored):
    view, gold = _view(q), set(q.item.evidence_ids)
    if view is None or not gold:
        return None
    cited = {i for item in _active(view) for i in item["evidence_ids"]}
    return len(gold & cited) / len(gold)


@metric("empty_view_rate", group="agent", kind="any", higher_is_better=True, subset="unanswerable", rank=8,
        description="questions with nothing to recall answered by an empty view (nothing active)")
def _empty(q: Scored):
    view = _view(q)
    return None if view is None or q.item.answerable else float(not _active(view))


@metric("limits_stated", group="agent", kind="any", higher_is_better=True,
        description="views whose limits give the window, role and messages read, with a note when empty")
def _limits(q: Scored):
    view = _view(q)
    if view is None:
        return None
    lim = view["limits"]
    ok = lim.get("time_range") is not None and "role" in lim and lim.get("messages_considered") not in (None, "unknown")
    return float(ok and (bool(_active(view)) or bool(lim.get("note"))))


@metric("adjudication_accuracy", group="agent", kind="any", higher_is_better=True, rank=9,
        description="conflicts adjudicated as the gold says (winner active and loser superseded, or both uncertain)")
def _adjudication(q: Scored):
    view, g = _view(q), _gold(q)
    if view is None or not g or not g.get("conflicts"):
        return None
    items = [i for kind in ("preferences", "profile", "constraints") for i in view["memory_view"][kind]]

    def status(mid):
        found = [i for i in items if mid in i["evidence_ids"]]
        if not found:
            return "absent"
        if any(i.get("uncertain") for i in found):
            return "uncertain"
        return "active" if any(not i.get("superseded_by") for i in found) else "superseded"

    right = 0
    for c in g["conflicts"]:
        if "unresolved" in c:
            right += all(status(m) == "uncertain" for m in c["unresolved"])
        else:
            right += status(c["winner"]) == "active" and status(c["loser"]) in ("superseded", "absent")
    return right / len(g["conflicts"])


@metric("evidence_items", group="agent", field="evidence_items", kind="any")
def _evidence_items(q: Scored):
    view = _view(q)
    return None if view is None else len(view["evidence"])


@metric("evidence_verbatim", group="agent", field="evidence_verbatim", kind="any")
def _evidence_verbatim(q: Scored):
    view = _view(q)
    if view is None:
        return None
    return len(view["evidence"]) - len(q.answer.metadata.get("evidence_problems", []))


declare("evidence_validity", group="agent", field="evidence_verbatim", aggregation="ratio",
        ratio_of=("evidence_verbatim", "evidence_items"), higher_is_better=True, rank=10,
        description="evidence items that are the stored message verbatim (must be 1.0)")


@metric("agent_tool_calls", group="agent",
        kind="any", rank=44, description="query-tool calls per question (one per loop round)")
def _calls(q: Scored):
    return q.answer.metadata.get("agent_tool_calls")


@metric("agent_rounds", group="agent", kind="any", description="Observe -> Reflect -> Decide rounds per question")
def _rounds(q: Scored):
    return q.answer.metadata.get("agent_rounds")


@metric("policy_steps", group="agent", field="policy_steps", kind="any",
        description="LLM-policy generations per question (plans, syntheses, pointer prompts; 0 with rules)")
def _policy_steps(q: Scored):
    return q.answer.metadata.get("policy_steps")


@metric("policy_fallbacks", group="agent", field="policy_fallbacks", kind="any")
def _policy_fallbacks(q: Scored):
    return q.answer.metadata.get("policy_fallbacks")


declare("policy_fallback_rate", group="agent", field="policy_fallbacks", aggregation="ratio",
        ratio_of=("policy_fallbacks", "policy_steps"), higher_is_better=False, rank=45,
        description="LLM-policy steps whose output was unusable (the rule step ran)")


# --- semantic pointers ----------------------------------------------------------------------------
def _pointer(q: Scored) -> tuple[dict, dict] | None:
    p, g = q.answer.review.get("pointer"), _gold(q)
    return None if p is None or g is None else (p, g)


def _has(text: str, alternatives) -> bool:
    alts = [alternatives] if isinstance(alternatives, str) else alternatives
    return any(a.lower() in text.lower() for a in alts)


@metric("pointer_accuracy", group="agent",
        label="pointer accuracy (0-1)", rate=True, plot=3, kind="agent", higher_is_better=True,
        per_category=True, rank=2, headline=True,
        description="pointers that name every gold fact (cases an ancestor can resolve)")
def _pointer_accuracy(q: Scored):
    pg = _pointer(q)
    if pg is None or pg[1].get("fallback"):
        return None
    p, g = pg
    return float(not p["fell_back"] and all(_has(p["resolved_desc"], f) for f in g["facts"]))


@metric("distractor_rate", group="agent", kind="agent", higher_is_better=False, rank=3,
        description="pointers that name a distractor (a sibling's or an unrelated entity)")
def _distractor(q: Scored):
    pg = _pointer(q)
    if pg is None or not pg[1].get("distractors"):
        return None
    return float(any(_has(pg[0]["resolved_desc"], d) for d in pg[1]["distractors"]))


@metric("fallback_tp", group="agent", field="fallback_tp", kind="agent")
def _fb_tp(q: Scored):
    pg = _pointer(q)
    return None if pg is None else float(pg[0]["fell_back"] and bool(pg[1].get("fallback")))


@metric("fallback_pred", group="agent", field="fallback_pred", kind="agent")
def _fb_pred(q: Scored):
    pg = _pointer(q)
    return None if pg is None else float(pg[0]["fell_back"])


@metric("fallback_gold", group="agent", field="fallback_gold", kind="agent")
def _fb_gold(q: Scored):
    pg = _pointer(q)
    return None if pg is None else float(bool(pg[1].get("fallback")))


declare("fallback_precision", group="agent",
        field="fallback_tp", aggregation="ratio", ratio_of=("fallback_tp", "fallback_pred"),
        higher_is_better=True, rank=4, description="fallbacks (original description kept) where no ancestor knows")
declare("fallback_recall", group="agent",
        field="fallback_tp", aggregation="ratio", ratio_of=("fallback_tp", "fallback_gold"),
        higher_is_better=True, rank=4.5, description="cases no ancestor can resolve that fell back")


@metric("ambiguity_detected", group="agent", kind="agent", higher_is_better=True, rank=4.7, rate=True,
        description="ambiguous cases (two referents at the nearest level that knows) the resolver flagged")
def _ambiguity_detected(q: Scored):
    pg = _pointer(q)
    if pg is None or not pg[1].get("ambiguous"):
        return None
    return float(bool(pg[0].get("ambiguous")) and pg[0]["fell_back"])


@metric("ambiguity_false_alarm", group="agent", kind="agent", higher_is_better=False, rank=4.8, rate=True,
        description="cases with one referent the resolver wrongly flagged as ambiguous")
def _ambiguity_false_alarm(q: Scored):
    pg = _pointer(q)
    if pg is None or pg[1].get("ambiguous"):
        return None
    return float(bool(pg[0].get("ambiguous")))


@metric("multi_level_share", group="agent", kind="agent", higher_is_better=None, rank=4.9, rate=True,
        description="resolved pointers that combine facts from two or more ancestor levels")
def _multi_level_share(q: Scored):
    pg = _pointer(q)
    if pg is None or pg[0]["fell_back"]:
        return None
    return float(pg[0].get("contributing_levels", 0) >= 2)

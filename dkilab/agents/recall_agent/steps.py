"""Observe and the first Decide of the loop (seed recall-agent §4.1-4.3), each a function of its own:
`hypotheses` (1-3 verifiable hypotheses, each with its own query and saying what counts as evidence),
`narrow` (time window and role from the question's cues) and `choose_tool` (lexical vs semantic vs listing).

Every call the loop makes names the §4 step that chose it (`ToolCall.step`, one of STEPS); the trace
records it with the call."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from dkilab.agents.recall_agent import cues
from dkilab.agents.recall_agent.contract import RecallContext
from dkilab.memory.view import TimeRange
from dkilab.text.segment import content_tokens

_QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”|「([^」]+)」')
_SPECIFIC = re.compile(r"[A-Za-z]*\d[\w\-]*|(?<=[\u4e00-\u9fff])[A-Z][a-zA-Z]+")


STEPS = {  # the named steps of the closed loop (§4), as the trace records them
    "search": "§4.3: the hypothesis' first search, lexical / semantic / listing by the question's signals",
    "read_context": "§4.2(3): read an anchor's neighbours before trusting it",
    "narrow_hits": "§4.2(4): too many hits: a shorter window and a tightened query",
    "rewrite_query": "§4.4: the last round named entities or dates the query lacks: search for them",
    "cover_hypothesis": "§4.4/4.5: a hypothesis without evidence gets the other search tool before it counts as empty",
    "widen": "§4.2(4): too few hits: switch tool, widen the window, drop role=user",
    "standing": "§4.6: explicit standing statements (a constraint, \"never\", \"always\") from before the window: a "
                "time window never hides them",
    "conflict_context": "§4.6.1(1): read the context of both sides of a conflict",
    "conflict_lexical": "§4.6.1(2)(3): search lexically for a later, clearer statement",
    "conflict_semantic": "§4.6.1(3): search by meaning for a paraphrased later statement",
    "page": "the result kept yielding evidence: read its next page",
    "planned": "the LLM policy planned this call",
}


@dataclass
class Hypothesis:
    """What the question could be about, and what counts as evidence for it (§4.1). Each hypothesis has
    its own query (the subject plus what evidence of its kind tends to say); a message is evidence for it
    when it mentions a term and its statement does not name another hypothesis' kind."""
    kind: str  # preferences | profile | constraints
    terms: list[str]  # a message mentioning one of these is a candidate
    query: str  # the query text the search tools get
    evidence_rule: str  # in words, for the trace
    about_user: bool = True  # statements about a third party do not count (the question is about the user)
    phrases: list[str] = field(default_factory=list)  # quoted/exact phrases of the question
    rewrites: list[str] = field(default_factory=list)  # entities later rounds added to its terms (§4.4)


@dataclass
class Narrowing:
    """The time window and role the search starts from (§4.2)."""
    time_range: TimeRange
    window: str  # short | medium | long | date | context | default | all
    days: int | None
    role: str | None
    role_locked: bool = False  # the caller's role_pref: never widened
    now: datetime | None = None


@dataclass
class ToolCall:
    tool: str  # messages_list | lexical_search | semantic_search | neighbors
    args: dict
    why: str
    hypothesis: int = 0
    step: str = "search"  # one of STEPS


def question_terms(question: str) -> list[str]:
    """Content words of the question without question words and memory-kind cues."""
    kinds = {c for cs in cues.KIND_CUES.values() for c in cs}
    return [t for t in content_tokens(question) if t not in cues.QUESTION_WORDS and t not in kinds
            and len(t.strip()) > 0
            and not t.isdigit()]


def hypotheses(question: str) -> list[Hypothesis]:
    """1-3 hypotheses, the most cued kind first (§4.1). Every hypothesis accepts a message that
    mentions the question's content words or its topic's terms."""
    phrases = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(question)]
    scores = {k: cues.count_cues(question, cs) for k, cs in cues.KIND_CUES.items()}
    ranked = [k for k, s in sorted(scores.items(), key=lambda kv: -kv[1]) if s > 0] or ["profile"]
    words = question_terms(question)
    terms = list(dict.fromkeys([*phrases, *words, *cues.topic_terms(question)]))
    third = cues.has_cue(question, cues.THIRD_PARTY) or any(w in question for w in ("上司", "同事", "朋友", "家人"))
    about_user = not third
    role = "the user's own words (role=user)"
    out = []
    for kind in ranked[:3]:
        own = [w for w in cues.KIND_QUERY[kind][cues.lang(question)] if w not in words]
        query = " ".join(dict.fromkeys([*(f'"{p}"' for p in phrases), *words, *cues.topic_terms(question)[:12], *own]))
        rule = f"{role} stating a {kind[:-1] if kind.endswith('s') else kind} that mentions one of {terms[:8]}"
        out.append(Hypothesis(kind, list(terms), query or question, rule, about_user, phrases))
    return out


def narrow(question: str, context: RecallContext | None, now: datetime, hyps: list[Hypothesis],
           default_days: int | None = 30) -> Narrowing:
    """Time window from the question's cues (explicit date > short/medium/long cue > the caller's
    `time_range` > the default), and role=user for preferences/profile/constraints unless the question
    is about what the assistant said (§4.2(1)-(2))."""
    context = context or RecallContext()
    role_locked = context.role_pref is not None
    role = context.role_pref if role_locked else (None if cues.has_cue(question, cues.ASSISTANT_CUES) else "user")
    if role == "any":
        role = None
    if (explicit := cues.explicit_range(question)) is not None:
        return Narrowing(explicit, "date", None, role, role_locked, now)
    if (cue := cues.window_cue(question)) is not None:
        label, days = cue
        return Narrowing(TimeRange(since=now - timedelta(days=days), until=now), label, days, role, role_locked, now)
    if context.time_range is not None:
        return Narrowing(context.time_range, "context", None, role, role_locked, now)
    if default_days is None:
        return Narrowing(TimeRange(until=now), "all", None, role, role_locked, now)
    return Narrowing(TimeRange(since=now - timedelta(days=default_days), until=now), "default", default_days, role,
                     role_locked, now)


def search_filter(nar: Narrowing) -> dict:
    tr = {k: v for k, v in (("since", nar.time_range.since), ("until", nar.time_range.until)) if v is not None}
    return {k: v for k, v in (("role", nar.role), ("time_range", tr or None)) if v is not None}


def choose_tool(question: str, hyp: Hypothesis, nar: Narrowing, index: int = 0, prefer: str | None = None) -> ToolCall:
    """§4.3: listing for timeline questions, lexical search for explicit phrases and specific keywords
    (names, numbers, "did I say ..."), semantic search for naturally phrased preferences and background."""
    f = search_filter(nar)
    if prefer is None:
        if cues.has_cue(question, cues.TIMELINE_CUES):
            prefer = "messages_list"
        elif hyp.phrases or cues.has_cue(question, cues.EXACT_CUES) or _SPECIFIC.search(question):
            prefer = "lexical_search"
        else:
            prefer = "semantic_search"
    if prefer == "messages_list":
        tr = f.get("time_range", {})
        return ToolCall("messages_list", {"since": tr.get("since"), "until": tr.get("until"), "role": nar.role,
                                          "page_size": 100}, "timeline question: scan the window in time order", index)
    if prefer == "lexical_search":
        return ToolCall("lexical_search", {"query_text": hyp.query, "filter": f, "page_size": 20},
                        "explicit phrase or keywords: match them lexically", index)
    return ToolCall("semantic_search", {"query_text": hyp.query, "filter": f, "top_k": 20},
                    "naturally phrased memory: search by meaning", index)

"""Step 2 of the session flow (seed session-l1-l2-memory §5.1, "query 改写 LLM"): rewrite the user's query
so it stands without the conversation, from L1 history.

- `rewrite_by_llm`: one prompt with the recent turns; the output is checked (`check_rewrite`) and None
  when it is not a usable question (empty, another script, far too long, a dialogue transcript).
- `rewrite_by_rules`: the fallback. A business object or stage the query does not name is taken from
  the user's recent turns: the turns the reference resolver points at when the query holds a
  reference ("刚才那个", "you said earlier"), else the last `window` turns. The stage is filled only
  when the query points back ("那", "that", a resolver match), so "金额上限有什么政策？" after an
  approval question is not turned into an approval question.
"""
from __future__ import annotations

import re
from typing import Any

from dkilab.agents.session_flow.schema import DomainSchema
from dkilab.prompts import REWRITE_PROMPT as PROMPT  # prompt texts: dkilab/prompts.py
from dkilab.recall.reference import ReferenceResolver, ReferenceType
from dkilab.text.lang import has_cjk

POINTING = {"cn": ("那", "这", "它", "其", "该", "上面"),
            "en": ("that", "this", "it", "them", "those", "these", "there", "then")}
ROLE = {"cn": {"user": "用户", "assistant": "助手"}, "en": {"user": "User", "assistant": "Assistant"}}
_LABEL = re.compile(r"^\s*(改写后的问题|改写|rewritten question|rewrite|question|问题)\s*[:：]\s*", re.I)


def _points_back(query: str, language: str) -> bool:
    low = query.lower()
    if language == "cn":
        return any(w in query for w in POINTING["cn"])
    return any(re.search(rf"(?<![a-z]){w}(?![a-z])", low) for w in POINTING["en"])


def rewrite_by_rules(query: str, history: list[dict[str, Any]], schema: DomainSchema, resolver: ReferenceResolver,
                     language: str, window: int = 3) -> tuple[str, dict[str, Any]]:
    """(rewritten query, what was filled and from where). `history`: earlier L1 messages, oldest first."""
    obj, stage = schema.find_object(query), schema.find_stage(query)
    ref = resolver.resolve(query, history)
    referred = ref.reference_type != ReferenceType.NONE and bool(ref.source_turns)
    pool = [history[i] for i in ref.source_turns] if referred else history[-2 * window:]
    users = [m["content"] for m in reversed(pool) if m.get("role") == "user"]
    fill: dict[str, str] = {}
    if obj is None:
        found = next((o for o in map(schema.find_object, users) if o), None)
        if found:
            fill["object"] = found
    if stage is None and (referred or _points_back(query, language)):
        found = next((s for s in map(schema.find_stage, users) if s), None)
        if found:
            fill["stage"] = found
    info = {"filled": fill, "reference": ref.matched_keyword, "reference_scope": ref.scope.value if referred else None}
    if not fill:
        return query, info
    words = [schema.name(kind, value, language) for kind, value in fill.items()]
    return f"{''.join(words) if language == 'cn' else ' '.join(words)} {query}", info


def rewrite_messages(query: str, history: list[dict[str, Any]], language: str, window: int = 3) -> list[dict]:
    system, head, ask = PROMPT[language]
    lines = [f"{ROLE[language].get(m['role'], m['role'])}: {m['content']}" for m in history[-2 * window:]]
    body = "\n".join([head, *lines, "", ask.format(q=query)]) if lines else ask.format(q=query)
    return [{"role": "system", "content": system}, {"role": "user", "content": body}]


def check_rewrite(query: str, candidate: str | None) -> str | None:
    """The model's rewrite if it is usable: its first line, labels and quotes stripped, in the query's
    script, not much longer than the query with an object added; else None."""
    if not isinstance(candidate, str):
        return None
    line = next((ln for ln in candidate.strip().splitlines() if ln.strip()), "")
    line = _LABEL.sub("", line).strip().strip("\"'“”「」 ")
    if not line or has_cjk(line) != has_cjk(query):
        return None
    if len(line) > max(3 * len(query), len(query) + 40):
        return None
    if re.match(r"^(user|assistant|用户|助手)\s*[:：]", line, re.I):
        return None
    return line


def rewrite_by_llm(model, query: str, history: list[dict[str, Any]], language: str, max_new_tokens: int = 40,
                   window: int = 3) -> tuple[str | None, str, Any]:
    """(checked rewrite or None, raw output, the Generation)."""
    gen = model.generate_full(rewrite_messages(query, history, language, window), max_new_tokens=max_new_tokens)
    return check_rewrite(query, gen.text), gen.text, gen

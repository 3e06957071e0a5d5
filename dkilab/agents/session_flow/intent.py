"""Step 4 of the session flow (seed session-l1-l2-memory §5.2-5.3): intent recognition and key-entity
extraction in one call, returning `{intent, active_domain, business_object, operation_stage}`.

- `extract_by_llm`: the extended intent prompt (§5.3) with the allowed values and, when the flow reads
  L2, the current business state; `parse_extraction` reads the reply tolerantly (a JSON object anywhere
  in it, code fences, single quotes, trailing commas, keys in any case) and normalises every value
  against the schema. A reply without a known intent is a fallback to the rules (counted by the flow).
- `extract_by_rules`: the schema's words; a query that names no intent keeps the L2 intent (or the
  schema's default), a missing object or stage stays None (L2's rules decide what is inherited).
"""
from __future__ import annotations

import ast
import json
import re
from typing import Any

from dkilab.agents.session_flow.schema import DomainSchema
from dkilab.prompts import INTENT_PROMPT as PROMPT  # prompt texts: dkilab/prompts.py


def extraction_messages(query: str, schema: DomainSchema, language: str, l2_entry: dict | None) -> list[dict]:
    system, state, ask = PROMPT[language]
    body = ""
    if l2_entry:
        body += state.format(state=json.dumps({k: l2_entry.get(k) for k in ("intent", "active_domain",
                                                                            "business_object",
                                                                             "operation_stage")}, ensure_ascii=False))
    return [{"role": "system", "content": system.format(values=schema.describe(language))},
            {"role": "user", "content": body + ask.format(q=query)}]


def _first_object(text: str) -> str | None:
    """The first balanced {...} in the text."""
    start = text.find("{")
    while start != -1:
        depth = 0
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[start:i + 1]
        start = text.find("{", start + 1)
    return None


def _loads(blob: str) -> dict | None:
    for attempt in (blob, re.sub(r",\s*([}\]])", r"\1", blob)):
        try:
            out = json.loads(attempt)
        except json.JSONDecodeError:
            try:
                out = ast.literal_eval(attempt.replace("null", "None").replace("true", "True").replace("false",
                                                                                                       "False"))
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                continue
        if isinstance(out, dict):
            return out
    return None


def parse_extraction(text: str, schema: DomainSchema) -> dict[str, Any] | None:
    """The normalised extraction in a model's reply, or None when it holds no JSON object with a known
    intent."""
    if not isinstance(text, str):
        return None
    blob = _first_object(text)
    raw = _loads(blob) if blob else None
    if raw is None:
        return None
    raw = {str(k).strip().lower(): v for k, v in raw.items()}
    intent = schema.normalise("intent", raw.get("intent"))
    if intent is None:
        return None
    domains = raw.get("active_domain")
    domains = domains if isinstance(domains, list) else [domains]
    domains = list(dict.fromkeys(d for d in (schema.normalise("domain", x) for x in domains) if d))
    return {"intent": intent, "active_domain": domains or [schema.domain_of(intent)],
            "business_object": schema.normalise("object", raw.get("business_object")),
            "operation_stage": schema.normalise("stage", raw.get("operation_stage"))}


def extract_by_rules(query: str, schema: DomainSchema, l2_entry: dict | None = None) -> dict[str, Any]:
    intent = schema.find_intent(query) or (l2_entry or {}).get("intent") or schema.default_intent
    if intent not in schema.intents:
        intent = schema.default_intent
    return {"intent": intent, "active_domain": [schema.domain_of(intent)],
            "business_object": schema.find_object(query), "operation_stage": schema.find_stage(query)}


def extract_by_llm(model, query: str, schema: DomainSchema, language: str, l2_entry: dict | None = None,
                   max_new_tokens: int = 64) -> tuple[dict[str, Any] | None, str, Any]:
    """(normalised extraction or None, raw reply, the Generation)."""
    gen = model.generate_full(extraction_messages(query, schema, language, l2_entry), max_new_tokens=max_new_tokens)
    return parse_extraction(gen.text, schema), gen.text, gen

"""The flow itself: FlowConfig, SessionFlow.turn and its timed steps (the package docstring says what runs)."""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dkilab.agents.session_flow.intent import extract_by_llm, extract_by_rules
from dkilab.agents.session_flow.rewrite import rewrite_by_llm, rewrite_by_rules
from dkilab.agents.session_flow.routing import retrieve, route_filter
from dkilab.agents.session_flow.schema import DomainSchema
from dkilab.prompts import FLOW_ANSWER as ANSWER  # prompt texts: dkilab/prompts.py
from dkilab.recall import create_reference_resolver
from dkilab.text.lang import detect_language
from dkilab.tracing import documents, span

STEPS = ("l1_write_query", "rewrite", "l2_read", "intent", "l2_update", "retrieval", "answer", "l1_write_answer")


class FlowConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["query", "rewrite", "l2"] = "l2"
    rewriter: Literal["llm", "rules"] = "llm"
    extractor: Literal["llm", "rules"] = "llm"
    answer: bool = True  # False: no answer generation (retrieval and state only)
    top_k: int = Field(3, ge=1, le=50)  # documents retrieved and put before the model
    depth: int = Field(20, ge=1, le=200)  # candidates per search before fusion
    history_turns: int = Field(3, ge=1, le=50)  # turns of L1 the rewrite sees
    max_new_tokens: int = Field(48, ge=1, le=4096)
    rewrite_tokens: int = Field(40, ge=1, le=512)
    extraction_tokens: int = Field(64, ge=1, le=1024)

    def needs_model(self) -> bool:
        return self.answer or (self.mode != "query" and self.rewriter == "llm") or self.extractor == "llm"


@dataclass
class TurnResult:
    session_id: str
    turn_id: int
    query: str
    rewritten: str
    rewrite_method: str  # none | rules | llm | llm_fallback
    extraction: dict[str, Any]
    extraction_method: str  # rules | llm | llm_fallback
    l2_before: dict[str, Any] | None  # the current operation (last chain entry) before and after the update
    l2_after: dict[str, Any] | None  # None only when the update left no operation (never after a turn)
    l2_rule: str  # new | overwrite_intent | overwrite_object | inherit
    filter: dict[str, Any] | None
    filter_relaxed: bool
    doc_ids: list[str]
    answer: str = ""
    filled: dict[str, str] = field(default_factory=dict)  # what the rule rewrite took from L1 (object, stage)
    new_session: bool = False  # the given session had expired (or was none): this turn started one
    prompt_tokens: int = 0  # the answer prompt
    generated_tokens: int = 0
    llm_calls: int = 0
    latency_ms: dict[str, float] = field(default_factory=dict)
    raw: dict[str, str] = field(default_factory=dict)  # the LLM steps' raw outputs
    notes: list[str] = field(default_factory=list)  # fallbacks and why

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def stage_latencies(step_ms: dict[str, float]) -> dict[str, float]:
    """A turn's step times under the stage names every strategy reports: retrieval -> recall, answer ->
    generation, the rest (L1/L2 reads and writes, rewrite, intent) -> assembly."""
    out = {"recall": 0.0, "generation": 0.0, "assembly": 0.0}
    for step, ms in step_ms.items():
        out[{"retrieval": "recall", "answer": "generation"}.get(step, "assembly")] += ms
    return out


def current_entry(state: dict[str, Any] | None) -> dict[str, Any] | None:
    chain = (state or {}).get("operation_chain") or []
    if not chain:
        return None
    return {k: chain[-1].get(k) for k in ("intent", "active_domain", "business_object", "operation_stage")}


class SessionFlow:
    """`manager`: a MemoryManager (sessions, L1, L2); `knowledge`: the document collection (a user-bound
    Memory whose messages carry `metadata.domain` / `metadata.object`); `model`: a ChatModel (needed
    for the LLM steps and the answer)."""

    def __init__(self, manager, knowledge, model=None, config: FlowConfig | dict | None = None,
                 schema: DomainSchema | None = None, resolver=None):
        self.manager, self.knowledge, self.model = manager, knowledge, model
        self.config = config if isinstance(config, FlowConfig) else FlowConfig.model_validate(config or {})
        self.schema = schema or DomainSchema.load()
        if tuple(manager.l2.stage_order) != self.schema.stage_order:
            raise ValueError(f"the memory manager's L2 stage order {list(manager.l2.stage_order)} differs from the "
                             f"schema's stages {list(self.schema.stage_order)}")
        self.resolver = resolver or create_reference_resolver()
        if model is None and self.config.needs_model():
            raise ValueError(f"session flow {self.config.model_dump(exclude_defaults=True)} needs a model "
                             "(LLM rewrite, LLM extraction or answers); pass model= or use the rules without answers")

    @contextmanager
    def _step(self, times: dict[str, float], name: str, **inputs):
        t = time.perf_counter()
        try:
            with span(name, **inputs) as out:
                yield out
        finally:
            times[name] = times.get(name, 0.0) + (time.perf_counter() - t) * 1000

    def turn(self, user: str | int, session_id: str | None, query: str) -> TurnResult:
        """Run one turn in the user's session (a new session when `session_id` is None or has expired)."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"session flow: the query must be a non-empty string, got {query!r}")
        cfg, m = self.config, self.manager
        user = str(user)
        times: dict[str, float] = {}
        notes: list[str] = []
        raw: dict[str, str] = {}
        calls = 0
        lang = "cn" if detect_language(query) == "cn" else "en"
        sid = m.sessions.get_or_create_session(user, session_id)
        with self._step(times, "l1_write_query", session_id=sid, query=query):
            turn_id = m.l1.save_user_query(sid, None, query, user_id=user)
        history = [h for h in m.l1.get_conversation_history(sid, 2 * cfg.history_turns + 2, user_id=user)
                   if h["turn_id"] < turn_id]

        filled: dict[str, str] = {}
        with self._step(times, "rewrite", query=query) as out:
            rewritten, method = query, "none"
            if cfg.mode != "query":
                if cfg.rewriter == "llm":
                    calls += 1
                    try:
                        got, raw["rewrite"], _ = rewrite_by_llm(self.model, query, history, lang, cfg.rewrite_tokens,
                                                                cfg.history_turns)
                    except Exception as exc:  # the model is down or broken: the rules carry the turn
                        got = None
                        notes.append(f"rewrite LLM raised {type(exc).__name__}: {exc}")
                    if got is not None:
                        rewritten, method = got, "llm"
                    elif "rewrite" in raw:
                        notes.append("rewrite: LLM output unusable, rules used")
                if method == "none":
                    rewritten, info = rewrite_by_rules(query, history, self.schema, self.resolver, lang,
                                                       cfg.history_turns)
                    method = "rules" if cfg.rewriter == "rules" else "llm_fallback"
                    filled = info["filled"]
            out.update(rewritten=rewritten, method=method)

        with self._step(times, "l2_read", session_id=sid) as out:
            before = current_entry(m.l2.get_l2_state(sid, user_id=user))
            out["l2"] = before
        seen_state = before if cfg.mode == "l2" else None  # only the l2 mode lets L2 inform the extraction

        with self._step(times, "intent", query=rewritten) as out:
            extraction, emethod = None, "rules"
            if cfg.extractor == "llm":
                calls += 1
                try:
                    extraction, raw["intent"], _ = extract_by_llm(self.model, rewritten, self.schema, lang, seen_state,
                                                                  cfg.extraction_tokens)
                except Exception as exc:
                    notes.append(f"intent LLM raised {type(exc).__name__}: {exc}")
                emethod = "llm" if extraction is not None else "llm_fallback"
                if extraction is None and "intent" in raw:
                    notes.append("intent: LLM reply had no JSON object with a known intent, rules used")
            if extraction is None:
                extraction = extract_by_rules(rewritten, self.schema, seen_state)
            out.update(extraction=extraction, method=emethod)

        with self._step(times, "l2_update", extraction=extraction) as out:
            entities = {k: v for k, v in extraction.items() if k != "intent"}
            state, rule = m.l2.apply_update(sid, extraction["intent"], entities, user_id=user)
            after = current_entry(state)
            out.update(l2=after, rule=rule)

        with self._step(times, "retrieval", query=rewritten) as out:
            flt = route_filter(after) if cfg.mode == "l2" else None
            docs, relaxed = retrieve(self.knowledge, rewritten, flt, cfg.top_k, cfg.depth)
            if relaxed:
                notes.append(f"retrieval: the L2 filter {flt} matched no document; searched without it")
            out.update(filter=flt, relaxed=relaxed, documents=documents(docs))

        answer, prompt_tokens, new_tokens = "", 0, 0
        if cfg.answer:
            with self._step(times, "answer", question=rewritten) as out:
                system, head, ask = ANSWER[lang]
                body = "\n".join([head, *(f"[{i}] {d.content}" for i, d in enumerate(docs, 1)), "",
                                  ask.format(q=rewritten)])
                gen = self.model.generate_full([{"role": "system", "content": system},
                                                {"role": "user", "content": body}],
                                               max_new_tokens=cfg.max_new_tokens)
                calls += 1
                answer, prompt_tokens, new_tokens = gen.text.strip(), gen.prompt_tokens, gen.new_tokens
                out["answer"] = answer
        if answer:
            with self._step(times, "l1_write_answer", session_id=sid):
                m.l1.save_assistant_answer(sid, turn_id, answer, user_id=user)
        return TurnResult(sid, turn_id, query, rewritten, method, extraction, emethod, before, after, rule, flt,
                          relaxed, [d.message_id for d in docs], answer, filled=filled, new_session=sid != session_id,
                          prompt_tokens=prompt_tokens, generated_tokens=new_tokens, llm_calls=calls,
                          latency_ms=times, raw=raw, notes=notes)


__all__ = ["SessionFlow", "FlowConfig", "TurnResult", "DomainSchema", "STEPS", "current_entry"]

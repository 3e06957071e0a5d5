"""session_l2: the session-memory flow (seed session-l1-l2-memory §5) over a dialogue, turn by turn.

For each dialogue (a `session_flow` question: task inputs `turns` and `user`) a fresh MemoryManager in
a throw-away store holds the dialogue's session, L1 and L2; the knowledge base is the cell's memory
(the dataset's documents). `mode` is what the harness compares: `query` (the query alone, no L2),
`rewrite` (L1 rewrite only) and `l2` (L1 rewrite + L2 read before extraction + L2-filtered retrieval);
`rewriter` / `extractor` llm (the seed; SmolLM2 on CPU) or rules. The Answer holds every turn
(`metadata["turns"]`), scored one row per turn (dkilab.eval.scoring.session).
"""
from __future__ import annotations

from typing import Literal

from pydantic import Field

from dkilab import prompts as text
from dkilab.agents.session_flow import FlowConfig, SessionFlow, stage_latencies
from dkilab.agents.session_flow.schema import DomainSchema
from dkilab.memory import MemoryManager, MemoryStore
from dkilab.memory.sessions import L2_MEMORY_TTL, SESSION_TTL
from dkilab.strategies.base import Strategy, StrategyParams, register
from dkilab.tracing import span
from dkilab.types import Answer, VectorMemory


class SessionL2Params(StrategyParams):
    mode: Literal["query", "rewrite", "l2"] = "l2"
    rewriter: Literal["llm", "rules"] = "llm"
    extractor: Literal["llm", "rules"] = "llm"
    answer: bool = True
    top_k: int = Field(3, ge=1, le=50)
    depth: int = Field(20, ge=1, le=200)
    history_turns: int = Field(3, ge=1, le=50)
    rewrite_tokens: int = Field(40, ge=1, le=512)
    extraction_tokens: int = Field(64, ge=1, le=1024)
    session_ttl: float = Field(SESSION_TTL, gt=0)
    l2_ttl: float = Field(L2_MEMORY_TTL, gt=0)
    schema_path: str | None = None  # a domain schema YAML (default: dkilab/agents/session_flow/bank_credit.yaml)


@register
class SessionL2(Strategy):
    name = "session_l2"
    version = "1"
    Params = SessionL2Params
    params: SessionL2Params
    takes_task_inputs = True

    def __init__(self, params=None, source: str = "<params>", **kw):
        super().__init__(params, source, **kw)

        p = self.params
        self.flow_config = FlowConfig(mode=p.mode, rewriter=p.rewriter, extractor=p.extractor, answer=p.answer,
                                      top_k=p.top_k, depth=p.depth, history_turns=p.history_turns,
                                      max_new_tokens=p.max_new_tokens, rewrite_tokens=p.rewrite_tokens,
                                      extraction_tokens=p.extraction_tokens)
        self.schema = DomainSchema.load(p.schema_path)

    supports_context_only = False  # its output is the task's own (pointers, a session flow), not a prompt

    def requires_model(self) -> bool:
        return self.flow_config.needs_model()

    def identity(self, model_name: str = "") -> dict:
        return super().identity(model_name) | {"schema": self.schema.model_dump(mode="json")}

    def prompts(self, model_name: str = "") -> dict[str, str]:
        return {f"{step}.{lang}": "\n".join(parts) for step, table in (("rewrite", text.REWRITE_PROMPT),
                                                                        ("intent", text.INTENT_PROMPT),
                                                                        ("answer", text.FLOW_ANSWER))
                for lang, parts in table.items()}

    def _answer(self, question, memory, model, *, session_id, preferences, stages, asked_at=None, task=None):
        # a dialogue (dataset session_flow: task inputs `turns`, `user`), or a lone question: a one-turn
        # dialogue of the memory's user over their own memory
        turns = (task or {}).get("turns") or [question]
        user = (task or {}).get("user") or memory.user_id
        store = MemoryStore.open(None, embedder=memory.embedder if isinstance(memory, VectorMemory) else None)
        try:
            manager = MemoryManager(store, ttl=self.params.session_ttl, l2_ttl=self.params.l2_ttl,
                                    stage_order=self.schema.stage_order)
            flow = SessionFlow(manager, memory, model, self.flow_config, self.schema)
            results, sid = [], None
            for n, query in enumerate(turns, 1):
                with span(f"turn {n}", query=query) as out:
                    r = flow.turn(user, sid, query)
                    out.update(rewritten=r.rewritten, l2=r.l2_after, rule=r.l2_rule, docs=r.doc_ids, answer=r.answer)
                sid = r.session_id
                turn = r.as_dict()
                docs = [memory.get(i) for i in r.doc_ids]
                turn["context"] = "\n".join(d.content for d in docs)
                results.append(turn)
        finally:
            store.close()
        last = results[-1]
        for t in results:  # the flow's steps under the stage names every strategy reports
            for stage, ms in stage_latencies(t["latency_ms"]).items():
                stages.ms[stage] = stages.ms.get(stage, 0.0) + ms
        return Answer(last["answer"], recalled_ids=list(last["doc_ids"]), rounds=sum(t["llm_calls"] for t in results),
                      prompt_tokens=last["prompt_tokens"], generated_tokens=sum(t["generated_tokens"] for t in results),
                      context_text=last["context"], prompt=last.get("prompt", ""),
                      metadata={"turns": results, "answers": self.params.answer})

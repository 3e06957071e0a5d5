"""The session-memory flow (seed session-l1-l2-memory §5.1), one turn at a time:

    user query -> write L1 (raw query) -> rewrite the query with L1 -> read L2 -> intent + key entities
    (one call) -> update L2 (the four rules) -> route & retrieve (filtered by L2 domain/object)
    -> answer -> write L1 (answer)

`SessionFlow(manager, knowledge, model).turn(user, session_id, query) -> TurnResult`. Each step is a
function of its own module (`rewrite`, `intent`, `routing`) and a traced, timed span here. What the flow
uses is set by `FlowConfig`: `mode` query (no rewrite, no L2 filter: the query alone), rewrite (L1 rewrite,
no L2 filter) or l2 (rewrite, L2 read before extraction, L2-filtered retrieval); `rewriter` and
`extractor` llm (the seed) or rules. An LLM step whose output is unusable, or that raises, falls back to
the rules and the turn records it (`rewrite_method` / `extraction_method` = `llm_fallback`, `notes`).
"""
from dkilab.agents.session_flow.flow import STEPS, FlowConfig, SessionFlow, TurnResult, current_entry, stage_latencies

__all__ = ["STEPS", "FlowConfig", "SessionFlow", "TurnResult", "current_entry", "stage_latencies"]

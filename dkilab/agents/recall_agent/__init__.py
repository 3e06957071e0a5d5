"""The recall agent (seed recall-agent.md): a memory view with verbatim evidence and honest limits, from
the four user-bound query tools, by an Observe -> Reflect -> Decide loop.

Modules, one step each: `steps` (hypotheses, narrowing, tool choice), `reflect` (checks and the next
decision), `adjudicate` (conflicts), `synthesis` (the view), `policy` (rule and LLM), `tools`,
`contract` (the §2 input/output models), `agent` (the loop)."""
from dkilab.agents.recall_agent.agent import RecallAgent, RecallResult
from dkilab.agents.recall_agent.contract import (
                                                 EvidenceItem,
                                                 Limits,
                                                 MemoryView,
                                                 RecallContext,
                                                 RecallOutput,
                                                 ViewItem,
                                                 validate_evidence,
)

__all__ = ["RecallAgent", "RecallResult", "RecallContext", "RecallOutput", "MemoryView", "ViewItem", "EvidenceItem",
           "Limits", "validate_evidence"]

"""What a peer system's own pipeline did for the question's user (peer_mem0, dkilab/strategies/peer_mem0.py): the
memories its extraction stored and the extraction replies it could not read. A model that cannot follow mem0's
extraction prompt stores nothing, and without these the cell would read as no_memory with 0 errors."""
from dkilab.eval.scoring.base import Scored, declare, metric


@metric("memories_stored", group="context", kind="any",
        description="memories a peer system stored for the question's user (peer_mem0: mem0's extraction)")
def _stored(q: Scored):
    return q.answer.metadata.get("memories_stored")


@metric("extraction_calls", group="context", kind="any", description="a peer system's extraction calls per user")
def _calls(q: Scored):
    return q.answer.metadata.get("extraction_calls")


@metric("extraction_failures", group="context", kind="any",
        description="extraction replies a peer system could not parse (mem0 logs them and stores nothing)")
def _failures(q: Scored):
    return q.answer.metadata.get("extraction_failures")


declare("extraction_failure_rate", group="context", field="extraction_failures", aggregation="ratio",
        ratio_of=("extraction_failures", "extraction_calls"), higher_is_better=False,
        description="share of a peer system's extraction replies it could not parse")

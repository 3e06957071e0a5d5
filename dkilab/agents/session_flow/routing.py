"""Step 6 of the session flow (seed session-l1-l2-memory §5.1, "路由 & ES 查询（用 L2 过滤 domain/object）"):
retrieval over a document collection, filtered by the L2 business state.

The collection is a user-bound `Memory` whose messages are documents with `metadata.domain` and
`metadata.object` (the seed's `policy` / `system` indexes become a `domain` filter); the query runs
through the store's lexical (BM25) and semantic search with the same metadata filter, fused by
reciprocal rank. A filter that leaves nothing (a wrong L2 state) is dropped for that turn, and the
turn says so (`relaxed`).
"""
from __future__ import annotations

from typing import Any

from dkilab.types import Message

RRF_K = 60


def route_filter(entry: dict[str, Any] | None) -> dict[str, Any] | None:
    """The search filter an L2 entry implies: its domains and its business object (the stage is left to
    the query text: a user may ask about an earlier stage while L2 keeps the furthest one)."""
    if not entry:
        return None
    meta: dict[str, Any] = {}
    if entry.get("active_domain"):
        meta["domain"] = list(entry["active_domain"])
    if entry.get("business_object"):
        meta["object"] = entry["business_object"]
    return {"metadata": meta} if meta else None


def fused_search(kb, query: str, filter: dict | None, top_k: int, depth: int = 20) -> list[Message]:
    """The top_k documents by reciprocal-rank fusion of lexical and semantic search (each `depth` deep)."""
    lexical = kb.lexical_search(query, filter=filter, page_size=depth).items
    semantic = kb.semantic_search(query, filter=filter, top_k=depth).items
    score: dict[str, float] = {}
    docs: dict[str, Message] = {}
    for hits in (lexical, semantic):
        for rank, hit in enumerate(hits):
            m = hit.message
            docs[m.message_id] = m
            score[m.message_id] = score.get(m.message_id, 0.0) + 1.0 / (RRF_K + rank + 1)
    order = sorted(score, key=lambda i: (-score[i], i))
    return [docs[i] for i in order[:top_k]]


def retrieve(kb, query: str, filter: dict | None, top_k: int, depth: int = 20) -> tuple[list[Message], bool]:
    """(documents, relaxed): filtered retrieval, unfiltered when the filter leaves nothing."""
    docs = fused_search(kb, query, filter, top_k, depth)
    if docs or filter is None:
        return docs, False
    return fused_search(kb, query, None, top_k, depth), True

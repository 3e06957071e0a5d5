"""FactRetriever (seed recall-v4 §4.4): trace id -> original records, paged with offset/limit.

- a message id: a long message is paged in sentence chunks, a short one is a single item;
- a session id (a trace id that stands for a group of turns): the session's messages are paged;
- an unknown trace id: a response that says so (found=False), never an exception.
At most `max_fact_tokens` are returned per call; `has_more` tells the model to page on.
"""
from __future__ import annotations

from dkilab.memory.view import MessageNotFoundError
from dkilab.text.summarize import split_sentences
from dkilab.text.tokens import HeuristicTokenCounter, TokenCounter
from dkilab.types import FactResponse, Memory, Message


class FactRetriever:
    def __init__(self, memory: Memory, token_counter: TokenCounter | None = None, max_fact_tokens: int = 800,
                 chunk_threshold: int = 200, max_limit: int = 50):
        self.memory, self.counter = memory, token_counter or HeuristicTokenCounter()
        self.max_fact_tokens, self.chunk_threshold, self.max_limit = max_fact_tokens, chunk_threshold, max_limit

    def _items(self, trace_id: str) -> list[dict[str, str]] | None:
        try:
            msg = self.memory.get(trace_id)
        except MessageNotFoundError:
            group = self.memory.session_messages(trace_id)
            return [self._item(m, m.content) for m in group] if group else None
        if self.counter.count_tokens(msg.content) > self.chunk_threshold:
            return [self._item(msg, s, i) for i, s in enumerate(split_sentences(msg.content))]
        return [self._item(msg, msg.content)]

    @staticmethod
    def _item(m: Message, content: str, chunk: int | None = None) -> dict[str, str]:
        item = {"role": m.role, "content": content, "timestamp": m.timestamp.isoformat(), "message_id": m.message_id}
        if m.speaker:
            item["speaker"] = m.speaker
        if chunk is not None:
            item["chunk"] = str(chunk)
        return item

    def retrieve(self, trace_id: str, session_id: str | None = None, offset: int = 0, limit: int = 5) -> FactResponse:
        offset, limit = max(0, int(offset)), max(1, min(int(limit), self.max_limit))
        items = self._items(trace_id) if isinstance(trace_id, str) and trace_id else None
        if items is None:
            return FactResponse([], str(trace_id), 0, offset, False, found=False,
                                error=f"unknown trace_id {trace_id!r}: no such message or session in this memory")
        page: list = []
        used = 0
        for item in items[offset:offset + limit]:
            cost = self.counter.count_tokens(item["content"])
            if used + cost > self.max_fact_tokens:
                if not page:  # one oversized chunk: return its head rather than nothing
                    page.append(item | {"content": self.counter.truncate(item["content"], self.max_fact_tokens)})
                break
            page.append(item)
            used += cost
        return FactResponse(page, trace_id, len(items), offset, offset + len(page) < len(items))

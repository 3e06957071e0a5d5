"""Agent memories in the memory store, and the walk up the tree (seed semantic-pointer §3.3.1).

A memory is a stored message of the user whose `session_id` is the agent's scope; core memory (facts
the agent holds, e.g. its task's entities) is stored with role `system` and `metadata.kind = core`.
"""
from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from typing import Any

from dkilab.agents.semantic_pointer.tree import AgentTree, node_scope
from dkilab.text.lang import has_cjk
from dkilab.text.segment import content_tokens, segment
from dkilab.types import Message


def shares_word(text: str, words: set[str]) -> bool:
    """Whether `text` holds one of `words` (Chinese words as substrings: jieba may cut 客户号 as one word)."""
    tokens = set(segment(text))
    return any((w in text) if has_cjk(w) else (w.lower() in tokens) for w in words)


class TreeMemory:
    """`store` is a MemoryStore (or anything with `for_user(user_id)` and `add_messages`)."""

    def __init__(self, store, max_lines: int = 20):
        self.store, self.max_lines = store, max_lines

    def remember(self, user_id: str, tree: AgentTree, agent_id: str, text: str, kind: str = "user",
                 timestamp: datetime | None = None) -> Message:
        """Store one memory of an agent: kind `user` / `assistant` (conversation) or `core`."""
        if kind not in ("user", "assistant", "core"):
            raise ValueError(f"memory kind must be user, assistant or core, got {kind!r}")
        scope = node_scope(user_id, tree, agent_id)
        n = len(self.store.for_user(user_id).session_messages(scope))
        ts = timestamp or datetime.now(timezone.utc)
        digest = hashlib.sha1(f"{scope}|{n}|{text}".encode()).hexdigest()[:8]
        msg = Message(f"{scope}#{n}-{digest}", user_id, scope, n, "system" if kind == "core" else kind, text, ts,
                      metadata={"kind": "core"} if kind == "core" else {})
        self.store.add_messages([msg])
        return msg

    def source(self, user_id: str) -> str:
        """Where the user's memory lives (`Memory.source`): part of the resolver cache key."""
        return self.store.for_user(user_id).source

    def version(self, user_id: str) -> tuple[int, str]:
        """(message count, newest id) of the user: part of the resolver cache key."""
        view = self.store.for_user(user_id)
        last = view.recent(1)
        return view.count(), last[0].message_id if last else ""

    def get_ancestor_context(self, user_id: str, agent_id: str, tree: AgentTree, max_levels: int = 3,
                             query: str = "") -> list[dict[str, Any]]:
        """Each ancestor's memory, nearest first: agent_id, level, conversation_history, core_memory,
        agent_description, scope. With `query`, only lines sharing a word with it are kept."""
        view = self.store.for_user(user_id)
        words = set(content_tokens(query)) if query.strip() else None
        out = []
        for level, anc in enumerate(tree.ancestors(agent_id, max_levels), start=1):
            scope = node_scope(user_id, tree, anc)
            msgs = view.session_messages(scope)
            if words is not None:
                msgs = [m for m in msgs if shares_word(m.content, words)]
            msgs = msgs[-self.max_lines:]
            core = [m.content for m in msgs if m.metadata.get("kind") == "core" or m.role == "system"]
            talk = [f"{m.role}: {m.content}" for m in msgs if not (m.metadata.get("kind") == "core"
                                                                   or m.role == "system")]
            out.append({"agent_id": anc, "level": level, "conversation_history": "\n".join(talk),
                        "core_memory": "\n".join(core), "agent_description": tree.node(anc).description,
                        "scope": scope})
        return out

"""AgentTree (seed semantic-pointer §2.1 TreeManager): agents with parents, `get_parent`,
`get_full_path`; unknown parents and cycles are refused. Memory scopes follow seed §2.2: the tree's
scope `{user}:{root}` (the root agent's memory) and a node's scope `{user}:{root}:{agent}`."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass


class TreeError(ValueError):
    pass


@dataclass
class AgentNode:
    agent_id: str
    parent: str | None
    description: str = ""  # the agent's task goal / role, part of what its descendants may resolve from


class AgentTree:
    def __init__(self):
        self._nodes: dict[str, AgentNode] = {}

    @classmethod
    def from_rows(cls, rows) -> "AgentTree":
        """From [(agent_id, parent, description)] in any order that lists parents before children."""
        tree = cls()
        for row in rows:
            agent_id, parent, *rest = row
            tree.add(agent_id, parent, rest[0] if rest else "")
        return tree

    def add(self, agent_id: str, parent: str | None = None, description: str = "") -> AgentNode:
        if not isinstance(agent_id, str) or not agent_id or ":" in agent_id:
            raise TreeError(f"agent id must be a non-empty string without ':', got {agent_id!r}")
        if agent_id in self._nodes:
            raise TreeError(f"agent {agent_id!r} is already in the tree")
        if parent is not None and parent not in self._nodes:
            raise TreeError(f"agent {agent_id!r}: unknown parent {parent!r}")
        self._nodes[agent_id] = node = AgentNode(agent_id, parent, description)
        return node

    def set_parent(self, agent_id: str, parent: str | None) -> None:
        """Move an agent under another; refused when it would make a cycle."""
        node = self.node(agent_id)
        if parent is not None:
            self.node(parent)
            if parent == agent_id or agent_id in self.get_full_path(parent):
                raise TreeError(f"moving {agent_id!r} under {parent!r} would make a cycle")
        node.parent = parent

    def ids(self) -> list[str]:
        """Every agent id, in the order they were added."""
        return list(self._nodes)

    def node(self, agent_id: str) -> AgentNode:
        try:
            return self._nodes[agent_id]
        except KeyError:
            raise TreeError(f"unknown agent {agent_id!r}") from None

    def get_parent(self, agent_id: str) -> str | None:
        return self.node(agent_id).parent

    def get_full_path(self, agent_id: str) -> list[str]:
        """Root first, `agent_id` last."""
        path: list[str] = []
        cur: str | None = agent_id
        while cur is not None:
            if cur in path:
                raise TreeError(f"cycle through {cur!r}")
            path.append(cur)
            cur = self.node(cur).parent
        return path[::-1]

    def root_of(self, agent_id: str) -> str:
        return self.get_full_path(agent_id)[0]

    def ancestors(self, agent_id: str, max_levels: int | None = None) -> list[str]:
        """Parent first, up to `max_levels` levels."""
        up = self.get_full_path(agent_id)[:-1][::-1]
        return up if max_levels is None else up[:max_levels]

    def children(self, agent_id: str) -> list[str]:
        return [n.agent_id for n in self._nodes.values() if n.parent == agent_id]

    @property
    def version(self) -> str:
        """A digest of the structure and descriptions (part of every cache key)."""
        blob = "|".join(f"{n.agent_id}<{n.parent}>{n.description}" for n in sorted(self._nodes.values(),
                                                                                    key=lambda n: n.agent_id))
        return hashlib.sha1(blob.encode()).hexdigest()[:12]

    def __contains__(self, agent_id) -> bool:
        return agent_id in self._nodes

    def __len__(self) -> int:
        return len(self._nodes)


def tree_scope(user_id: str, root: str) -> str:
    return f"{user_id}:{root}"


def node_scope(user_id: str, tree: AgentTree, agent_id: str) -> str:
    """The memory scope of one agent: the tree scope for the root, `{user}:{root}:{agent}` below it."""
    root = tree.root_of(agent_id)
    return tree_scope(user_id, root) if agent_id == root else f"{user_id}:{root}:{agent_id}"

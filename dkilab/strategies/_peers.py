"""What the peer retrievers share (`peer_bm25`, `peer_engram`): third-party retrieval pipelines run as
retrieval-only strategies, so they answer the same questions over the same stores in the same run as
`recall_only`, and are scored by the same metrics (`dkilab bench retrieval --peers`).

A peer indexes a user's whole history once per cell (one document per message, rendered as
`[date] Speaker: text`, the way engram-search renders a turn) and ranks all of it for each question.
The index is cached per store and user (and the user's message count), never across stores.
Nothing here sees gold evidence or answers.
"""
from __future__ import annotations

import importlib
import threading
from importlib.metadata import PackageNotFoundError, version
from typing import Any, ClassVar

from pydantic import Field

from dkilab.strategies.base import Strategy, StrategyParams
from dkilab.types import Answer, Message


class PeerParams(StrategyParams):
    max_results: int = Field(20, ge=1, le=1000)  # the deepest k the metrics look at


def render(m: Message) -> str:
    """One message as a peer's document text."""
    who = f"{m.speaker}: " if m.speaker else ""
    return f"[{m.timestamp:%Y-%m-%d}] {who}{m.content}"


def need(module: str, package: str):
    """Import a peer's package, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(f"this peer retriever needs {package}: pip install 'dkilab[peers]'") from exc


class PeerRetriever(Strategy):
    """A retrieval-only strategy over a third-party index built from the user's messages."""
    Params: ClassVar[type[StrategyParams]] = PeerParams
    needs_model = False
    supports_context_only = False
    package: ClassVar[str] = ""  # pinned requirement: part of the identity (a new peer release re-runs)
    output_kind = "ranking"  # a ranking, no answer

    def __init__(self, params=None, source: str = "<params>", **kw):
        super().__init__(params, source, **kw)
        self._indexes: dict[tuple, Any] = {}
        self._lock = threading.Lock()

    def identity(self, model_name: str = "") -> dict[str, Any]:
        name = self.package.split("==")[0]
        try:
            installed = version(name)
        except PackageNotFoundError:
            installed = "not installed"
        return super().identity(model_name) | {"peer": f"{name} {installed}"}


    def index_for(self, memory):
        """The user's index, built on first use (keyed by store, user and message count)."""
        count = memory.count()
        key = (memory.source, memory.user_id, count)
        with self._lock:
            if key not in self._indexes:
                msgs = memory.recent(count) if count else []
                self._indexes[key] = (msgs, self.build(msgs, memory))
            return self._indexes[key]

    def build(self, messages: list[Message], memory) -> Any:
        raise NotImplementedError

    def rank(self, index: Any, messages: list[Message], question: str, asked_at) -> list[int]:
        """Positions into `messages`, best first."""
        raise NotImplementedError

    def _answer(self, question, memory, model, *, session_id, preferences, stages, asked_at=None, task=None):
        with stages("recall", question=question) as trace:
            msgs, index = self.index_for(memory)
            order = self.rank(index, msgs, question, asked_at)[:self.params.max_results] if msgs else []
            ranked = [msgs[i] for i in order]
            trace["recalled_ids"] = [m.message_id for m in ranked]
        return Answer("", recalled_ids=[m.message_id for m in ranked], rounds=0,
                      metadata={"recalled_sessions": [m.session_id for m in ranked]})

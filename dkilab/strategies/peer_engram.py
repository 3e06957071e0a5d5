"""peer_engram: engram-search's retrieval pipeline (engram-search 0.1.7: dense + its BM25 + person-name,
quoted-phrase and relative-date boosts, fused by RRF), one document per message, with the store's own
encoder in place of its bge-large (same encoder as recall_only; its cross-encoder is off: its weights
are not offline here). The question date feeds its temporal boost."""
from __future__ import annotations

import threading

import numpy as np

from dkilab.memory import Embedder
from dkilab.strategies._peers import PeerRetriever, need, render
from dkilab.strategies.base import register


class _Encoder:
    """engram's embedder interface over dkilab's encoder (unit vectors, query side prefixed as it wants)."""

    def __init__(self, embedder):
        self._e = embedder

    def encode_query(self, text: str) -> np.ndarray:
        return self._e.encode_query(text)


@register
class PeerEngram(PeerRetriever):
    name = "peer_engram"
    package = "engram-search==0.1.7"
    takes_task_inputs = True  # asked_at: its temporal boost needs the question date

    def __init__(self, params=None, source: str = "<params>", **kw):
        super().__init__(params, source, **kw)
        self._encoders: dict = {}
        self._encoders_lock = threading.Lock()  # build() runs under the index lock

    def build(self, messages, memory):
        pipeline = need("engram.retrieval.pipeline", self.package)
        base = need("engram.backends.base", self.package)
        texts = [render(m) for m in messages]
        encoder = self.encoder(memory)
        vectors = encoder.encode(texts)
        docs = [base.Document(id=str(i), text=t, embedding=v, metadata={"timestamp": f"{m.timestamp:%Y-%m-%d}"})
                for i, (t, v, m) in enumerate(zip(texts, vectors, messages))]
        return pipeline.RetrievalPipeline(embedder=_Encoder(encoder), use_reranker=False), docs

    def encoder(self, memory):
        """The store's encoder: the view's own, or over the recall service (which encodes only its own
        queries) the same encoder loaded here by the name the server reports, once per strategy."""
        if memory.embedder is not None:
            return memory.embedder
        with self._encoders_lock:
            if memory.encoder_name not in self._encoders:
                self._encoders[memory.encoder_name] = Embedder(memory.encoder_name)
            return self._encoders[memory.encoder_name]

    def rank(self, index, messages, question, asked_at):
        pipe, docs = index
        date = f"{asked_at:%Y-%m-%d}" if asked_at is not None else None
        found = pipe.search(question, docs, top_k=self.params.max_results, question_date=date)
        return [int(d.id) for d in found]

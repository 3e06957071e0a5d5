"""peer_bm25: plain Okapi BM25 (rank-bm25, k1 1.5, b 0.75) over every message, tokenised like dkilab's
own index (jieba for Chinese runs, lower-cased words otherwise). The simplest lexical peer."""
from __future__ import annotations

from dkilab.strategies._peers import PeerRetriever, need, render
from dkilab.strategies.base import register
from dkilab.text.segment import segment


@register
class PeerBM25(PeerRetriever):
    name = "peer_bm25"
    package = "rank-bm25==0.2.2"

    def build(self, messages, memory):
        rank_bm25 = need("rank_bm25", self.package)
        return rank_bm25.BM25Okapi([segment(render(m)) or [""] for m in messages])

    def rank(self, index, messages, question, asked_at):
        scores = index.get_scores(segment(question))
        return sorted(range(len(messages)), key=lambda i: (-scores[i], i))

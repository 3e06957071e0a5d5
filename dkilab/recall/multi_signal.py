"""MultiSignalRecall (seed recall-v4 §2.2, §4.2): reference scope + weighted keywords (BM25) +
vectors, fused, deduplicated and ranked, then the recent-turn supplement.

Fusion (configurable, `signals.fusion`):
- `rrf`: score = sum over signals of weight_s / (rrf_k + rank_s)  (reciprocal-rank fusion);
- `weighted`: score = sum over signals of weight_s * min-max-normalised signal score.
The keyword signal is BM25 over the query's jieba keywords, re-weighted by the share of keyword
weight a hit contains: bm25 * (0.5 + 0.5 * matched_weight / total_weight) (seed §2.2.3).
Optional levers: speaker focus (a query naming one speaker searches that speaker's turns first),
temporal focus (a date cue searches its window first: recall/temporal.py), session-neighbour expansion
of the top hits and a boost for messages whose session holds many of the hits.
- `learned`: the weighted fusion's list and the session neighbours of its top hits, ordered by a logistic
  regression over their features (recall/learned.py).
- `seed`: the seed's own ranking, keyword weight + cosine in the reference's range (recall/seed_ranking.py).
Nothing here sees gold evidence or answers.
"""
from __future__ import annotations

import re
import time
import unicodedata
from collections import Counter
from functools import lru_cache
from typing import Any, Callable

from dkilab.recall import learned, seed_ranking
from dkilab.recall.config import RecallConfig
from dkilab.recall.reference import ReferenceResolver, ReferenceType, refers_back
from dkilab.recall.signals import SIGNALS
from dkilab.recall.temporal import date_window
from dkilab.text.keywords import ALLOW_POS, extract_keywords
from dkilab.text.segment import segment
from dkilab.types import EncodedMemory, Memory, Message, RecalledMessage, RecallResult, to_utc


@lru_cache(maxsize=4096)
def _words(text: str) -> frozenset[str]:
    return frozenset(segment(text))


def _contains(content: str, speaker: str | None, keyword: str) -> bool:
    """Whether `keyword` is a word of the speaker's name or of `content` (as `segment` cuts them), or occurs
    in `content`: segmenting only where the cheap substring test cannot decide (a name; text that NFKC
    normalisation changes, such as fullwidth letters)."""
    low = content.lower()
    if keyword in low or (speaker and keyword in _words(speaker)):
        return True
    return unicodedata.normalize("NFKC", content).lower() != low and keyword in _words(content)


def _referenced_first(ranked: list[RecalledMessage], refs: list[tuple[Message, float]]) -> list[RecalledMessage]:
    """A question that refers back to a few turns ("刚才", "that suggestion you made"): those turns lead the ranking,
    newest first (seed recall-v4 §2.2.2 step 1: the reference decides where recall looks), whatever the fusion made
    of them; the rest keep their order. A wide scope ("最近", 50 turns) is a range to rank within, not an answer."""
    by_id = {r.message.message_id: r for r in ranked}
    top = max((r.score for r in ranked), default=0.0)
    front = []
    for m, s in refs:
        r = by_id.pop(m.message_id, None) or RecalledMessage(m, 0.0)
        r.score, r.signals["reference"] = top + s, s
        front.append(r)
    return front + [r for r in ranked if r.message.message_id in by_id]


class MultiSignalRecall:
    def __init__(self, config: RecallConfig, reference_resolver: ReferenceResolver | None, memory: Memory,
                 embedder=None):
        self.config, self.resolver, self.memory, self.embedder = config, reference_resolver, memory, embedder
        self._speakers: dict[str, set[str]] | None = None
        # called with (candidates, feature rows) whenever learned fusion ranks (its trainer collects them)
        self.on_candidates: Callable[[list[Message], Any], None] | None = None

    def _timed(self, lat: dict, name: str, fn):
        t = time.perf_counter()
        out = fn()
        lat[name] = lat.get(name, 0.0) + (time.perf_counter() - t) * 1000
        return out

    def recall(self, query: str, session_id: str | None = None, max_results: int = 50, asked_at=None) -> RecallResult:
        """`asked_at`: when the question is asked (date cues resolve against it; else the newest message)."""
        sig = self.config.signals
        lat: dict[str, float] = {}
        if sig.fusion == "seed":
            return self._seed_recall(query, session_id, max_results, lat)
        turns = self._scope_turns() if sig.reference_window == "scope" else self.config.default_recall_turns
        history = self._timed(lat, "history", lambda: self.memory.session_messages(session_id) if session_id
                              else self.memory.recent(2 * turns))
        lists: dict[str, list[tuple[Message, float]]] = {}
        ref = None
        if sig.reference_enabled and self.resolver is not None:
            ref = self._timed(lat, "reference", lambda: self.resolver.resolve(query, history))
            if ref.reference_type != ReferenceType.NONE:
                idx = ref.source_turns or list(range(max(0, len(history) - 2 * (ref.recall_turns or 0)), len(history)))
                picked = [history[i] for i in sorted(idx, reverse=True) if 0 <= i < len(history)]
                lists["reference"] = [(m, 1.0 / (1 + r)) for r, m in enumerate(picked)]
        keywords: list[tuple[str, float]] = []
        focus = self._timed(lat, "speaker", lambda: self._speaker_filter(query)) if sig.speaker_focus else None
        unfocused = sig.speaker_focus if focus else 1.0  # the weight of the lists searched without the focus
        window = None
        if sig.temporal_focus:
            window = self._timed(lat, "temporal", lambda: self._date_window(query, asked_at))
        if window is not None:
            focus = (focus or {}) | {"time_range": {"since": window[0], "until": window[1]}}
            unfocused = min(unfocused, sig.temporal_focus)
        if sig.keyword_enabled:
            keywords = self._timed(lat, "keywords", lambda: extract_keywords(query, sig.keyword_topk,
                                                                             sig.keyword_method))
            lists["keyword"] = self._timed(lat, "lexical", lambda: self._keyword_hits(query, keywords, focus))
            if focus:
                lists["keyword_unfocused"] = self._timed(lat, "lexical", lambda: self._keyword_hits(query, keywords))
        if sig.vector_enabled:
            lists["vector"] = self._timed(lat, "vector", lambda: self._vector_hits(query, focus))
            if focus:
                lists["vector_unfocused"] = self._timed(lat, "vector", lambda: self._vector_hits(query))
        for name, signal in self._plugins().items():
            lists[name] = self._timed(lat, name, lambda s=signal: s.hits(query, self.memory, filter=focus,
                                                                       limit=sig.lexical_top_k))
        ranked = self._timed(lat, "fusion", lambda: self._fuse(lists, unfocused))
        if sig.prf_docs and ranked:
            terms = self._timed(lat, "prf", lambda: self._feedback_terms(query, ranked[:sig.prf_docs]))
            if terms:
                lists["prf"] = self._timed(lat, "lexical", lambda: self._lexical(f"{query} {' '.join(terms)}", focus))
                ranked = self._timed(lat, "fusion", lambda: self._fuse(lists, unfocused))
        if sig.fusion == "learned" and ranked:
            ranked = self._timed(lat, "learned", lambda: self._learned(query, ranked, keywords, focus, asked_at, lists))
        if sig.neighbor_expansion and ranked:
            ranked = self._timed(lat, "neighbors", lambda: self._expand(ranked))
        if self._fronted(query, ref, lists.get("reference", [])):
            ranked = _referenced_first(ranked, lists["reference"])
        return self._result(ranked[:max_results], history if session_id else [], ref, lists, keywords, max_results, lat)

    def _fronted(self, query: str, ref, referenced: list) -> bool:
        """Whether the referenced turns lead the ranking (`signals.reference_front`): the question refers back
        (`reference_front_rule`) to at most `reference_front` turns."""
        sig = self.config.signals
        return (0 < len(referenced) <= 2 * sig.reference_front and ref is not None
                and (sig.reference_front_rule == "any" or refers_back(query, ref)))

    def _result(self, ranked: list[RecalledMessage], session_history: list[Message], ref, lists, keywords,
                max_results: int, lat: dict) -> RecallResult:
        """The recent-turn supplement of a session (seed §2.2.2 step 7: min-max recent turns, the reference's
        own count within them) first, then the ranked messages it does not hold."""
        recent: list[Message] = []
        if session_history:
            b = self.config.budget
            turns = (ref.recall_turns if ref is not None and ref.recall_turns else b.min_recent_turns)
            turns = max(b.min_recent_turns, min(b.max_recent_turns, turns))
            recent = session_history[-2 * turns:] if turns else []
        seen = {m.message_id for m in recent}
        final = list(recent) + [r.message for r in ranked if r.message.message_id not in seen]
        return RecallResult(
            messages=final[:max(max_results, len(recent))], keyword_hits=len(lists.get("keyword", [])),
            vector_hits=len(lists.get("vector", [])), reference_scope=ref.scope.value if ref is not None else None,
            recent_turns_added=len(recent) // 2, ranked=ranked, keywords=keywords,
            reference_hits=len(lists.get("reference", [])), latency_ms=lat)

    def _seed_recall(self, query: str, session_id: str | None, max_results: int, lat: dict) -> RecallResult:
        """The seed's ranking (recall/seed_ranking.py): keywords matched in the reference's range, vectors over
        the memory, keyword weight + cosine."""
        sig = self.config.signals
        history = self._timed(lat, "history", lambda: seed_ranking.history(self.memory, session_id))
        resolver = self.resolver if sig.reference_enabled else None
        scope = self._timed(lat, "reference", lambda: seed_ranking.keyword_range(query, history, resolver))
        lists: dict[str, list[tuple[Message, float]]] = {}
        keywords: list[tuple[str, float]] = []
        if sig.keyword_enabled:
            pos = seed_ranking.SEED_POS if sig.keyword_pos == "seed" else ALLOW_POS
            keywords = self._timed(lat, "keywords", lambda: extract_keywords(query, sig.keyword_topk,
                                                                             sig.keyword_method, pos))
            lists["keyword"] = self._timed(lat, "lexical", lambda: seed_ranking.keyword_hits(scope.messages, keywords,
                                                                                             _contains))
        if sig.vector_enabled:
            lists["vector"] = self._timed(lat, "vector", lambda: self._vector_hits(query))
        if scope.reference is not None and scope.reference.reference_type != ReferenceType.NONE:
            lists["reference"] = [(m, 1.0) for m in scope.messages]
        ranked = self._timed(lat, "fusion", lambda: seed_ranking.rank(lists.get("keyword", []),
                                                                      lists.get("vector", [])))
        referenced = lists.get("reference", [])
        if self._fronted(query, scope.reference, referenced):  # newest first, as the weighted path fronts them
            ranked = _referenced_first(ranked, [(m, 1.0 / (1 + r)) for r, (m, _) in enumerate(reversed(referenced))])
        return self._result(ranked[:max_results], history if session_id else [], scope.reference, lists, keywords,
                            max_results, lat)

    def _plugins(self) -> dict[str, Any]:
        """The signals of dkilab/recall/signals/ this config switches on, by name."""
        if not self.config.signals.plugins:
            return {}

        return {name: SIGNALS[name]() for name in self.config.signals.plugins}

    def _scope_turns(self) -> int:
        """Turns of the conversation's latest history a question with no session resolves its reference
        against under `reference_window: scope`: the widest scope the resolver maps a cue to ("最近" = 50)."""
        c = self.resolver.config if self.resolver is not None else None
        widest = max(c.last_few_turns * 2, c.recent_turns, c.session_max_turns) if c is not None else 0
        return max(self.config.default_recall_turns, widest)

    # --- signals ----------------------------------------------------------------------------
    def _date_window(self, query: str, asked_at):
        """The window of the query's date cue, against when it is asked (else the newest message)."""
        if asked_at is None:
            newest = self.memory.recent(1)
            if not newest:
                return None
            asked_at = newest[-1].timestamp
        window = date_window(query, to_utc(asked_at))
        if window is None or not self.memory.messages_list(since=window[0], until=window[1], page_size=1).items:
            return None  # no cue, or nothing was said in its window: no focus (the ranking stays as it was)
        return window

    def _speaker_filter(self, query: str) -> dict | None:
        """{role: ...} when the query names exactly one speaker and that speaker has one role."""
        if self._speakers is None:
            self._speakers = self.memory.speakers()
        low = query.lower()
        named = [s for s in self._speakers if s and re.search(rf"(?<!\w){re.escape(s.lower())}(?!\w)", low)]
        if len(named) != 1 or len(self._speakers[named[0]]) != 1:
            return None
        return {"role": next(iter(self._speakers[named[0]]))}

    def _keyword_hits(self, query: str, keywords: list[tuple[str, float]], filter: dict | None = None
                      ) -> list[tuple[Message, float]]:
        sig = self.config.signals
        text = query if sig.lexical_query == "full" or not keywords else " ".join(k for k, _ in keywords)
        page = self.memory.lexical_search(text, filter=filter, page_size=sig.lexical_top_k)
        total = sum(w for _, w in keywords) or 1.0
        out = []
        for hit in page.items:  # a keyword counts where it is a word of the speaker's name or the text, or in the text
            matched = sum(w for k, w in keywords if _contains(hit.content, hit.speaker, k))
            out.append((hit.message, (hit.score or 0.0) * (0.5 + 0.5 * matched / total)))
        out.sort(key=lambda x: -x[1])
        return out

    def _feedback_terms(self, query: str, top: list[RecalledMessage]) -> list[str]:
        """Keywords of the top hits that the query does not already contain (pseudo-relevance feedback)."""
        sig = self.config.signals
        have = set(segment(query))
        text = "\n".join(r.message.content for r in top)
        found = extract_keywords(text, sig.prf_terms + len(have), sig.keyword_method)
        return [k for k, _ in found if k not in have][:sig.prf_terms]

    def _lexical(self, text: str, filter: dict | None = None) -> list[tuple[Message, float]]:
        page = self.memory.lexical_search(text, filter=filter, page_size=self.config.signals.lexical_top_k)
        return [(h.message, h.score or 0.0) for h in page.items]

    def _vector_hits(self, query: str, filter: dict | None = None) -> list[tuple[Message, float]]:
        sig = self.config.signals
        kwargs = ({"query_embedding": self.embedder.encode_query(query)} if self.embedder is not None
                  else {"query_text": query})
        page = self.memory.semantic_search(top_k=sig.vector_top_k, min_score=sig.vector_threshold, filter=filter,
                                           **kwargs)
        return [(h.message, float(h.score or 0.0)) for h in page.items]

    # --- fusion -----------------------------------------------------------------------------
    def _fuse(self, lists: dict[str, list[tuple[Message, float]]], unfocused: float = 1.0) -> list[RecalledMessage]:
        sig = self.config.signals
        merged: dict[str, RecalledMessage] = {}
        for name, hits in lists.items():
            base, _, rest = name.partition("_")
            w = (sig.plugins[name] if name in sig.plugins else sig.prf_weight if base == "prf"
                 else sig.weights.get(base, 1.0) * (unfocused if rest else 1.0))
            if not hits or w == 0:
                continue
            scores = [s for _, s in hits]
            lo, hi = min(scores), max(scores)
            for rank, (msg, s) in enumerate(hits):
                if sig.fusion == "rrf":
                    part = w / (sig.rrf_k + rank + 1)
                else:
                    part = w * ((s - lo) / (hi - lo) if hi > lo else 1.0)
                entry = merged.setdefault(msg.message_id, RecalledMessage(msg, 0.0))
                entry.score += part
                entry.signals[name] = s
        ranked = sorted(merged.values(), key=lambda r: (-r.score, r.message.timestamp))
        if sig.session_boost and ranked:
            counts = Counter(r.message.session_id for r in ranked)
            for r in ranked:
                r.score *= 1 + sig.session_boost * counts[r.message.session_id] / len(ranked)
            ranked.sort(key=lambda r: (-r.score, r.message.timestamp))
        return ranked

    def _learned(self, query: str, ranked: list[RecalledMessage], keywords, focus: dict | None, asked_at,
                 lists: dict[str, list[tuple[Message, float]]]) -> list[RecalledMessage]:
        """The weighted fusion's list and the neighbours of its top hits, ordered by the fusion model; the
        switched-on signals' declared features follow the built-in ones in each row."""

        scope = {m.message_id: r for r, (m, _) in enumerate(lists.get("reference", []))}
        messages, X = learned.candidates(query, ranked, self.memory, keywords=keywords,
                                         focus_role=(focus or {}).get("role"), asked_at=asked_at,
                                         embedder=self.embedder, scope=scope)
        X, columns = learned.with_signals(X, messages, query, self._plugins(), lists)
        if self.on_candidates is not None:
            self.on_candidates(messages, X)
        model = learned.load_model(self.config.signals.fusion_model)
        X = model.columns_of(X, columns)
        if model.guard is not None and model.guard.outside(X):  # outside what it was fitted on: the hand weights
            return ranked
        encoder = (self.embedder.model_name if self.embedder is not None else
                   self.memory.encoder_name if isinstance(self.memory, EncodedMemory) else None)
        part = model.part_for(encoder, query)
        return learned.rerank(model, messages, X, ranked, part)

    def _expand(self, ranked: list[RecalledMessage]) -> list[RecalledMessage]:
        sig = self.config.signals
        by_id = {r.message.message_id: r for r in ranked}
        for anchor in ranked[:sig.neighbor_top]:
            for m in self.memory.neighbors(anchor.message.message_id, sig.neighbor_expansion, sig.neighbor_expansion):
                score = anchor.score * sig.neighbor_decay
                cur = by_id.get(m.message_id)
                if cur is None:
                    by_id[m.message_id] = RecalledMessage(m, score, {"neighbor": score})
                elif cur.score < score:
                    cur.score, cur.signals["neighbor"] = score, score
        return sorted(by_id.values(), key=lambda r: (-r.score, r.message.timestamp))

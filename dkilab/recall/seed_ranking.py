"""The seed's own recall ranking (recall-v4 §2.2.2-2.2.3), `signals.fusion: seed` (`recall: {preset: seed}`):

1. the reference resolver fixes the range the keywords are matched in: the resolved scope's turns ("刚才"
   the last 3, "最近" 50, "那件事" the turns of the last shared topic), else the whole session history
   (the user's whole memory when no session is given);
2. each message of that range scores the sum of the weights of the query keywords it contains (jieba TF-IDF,
   top 5, nouns and verbs of two characters or more; a question with none is searched by jieba's keywords of
   any kind rather than by none; English questions take dkilab's English keywords, as jieba's POS filter
   keeps no English word);
3. the vector search returns its top `vector_top_k` at cosine >= `vector_threshold` over the memory;
4. the two lists are merged by message id and ranked by keyword weight + cosine;
5. a question that refers back to at most `signals.reference_front` turns (the preset's 3) has them lead
   (`MultiSignalRecall._fronted`): step 1's range is where it points.
Nothing here sees gold evidence or answers.
"""
from __future__ import annotations

from dataclasses import dataclass

from dkilab.recall.reference import ReferenceResolver, ReferenceType, ResolvedReference
from dkilab.types import Memory, Message, RecalledMessage

SEED_POS = ("n", "nr", "ns", "nt", "nz", "v", "vn")  # seed §5.1.2 allowPOS


@dataclass
class SeedRange:
    """Where the keywords are matched: `messages`, and the reference that chose them (None: none found)."""
    messages: list[Message]
    reference: ResolvedReference | None


HISTORY_CAP = 10_000  # the most messages the recall service returns in one `recent` call


def history(memory: Memory, session_id: str | None) -> list[Message]:
    """The session's messages, or the user's whole memory (its latest `HISTORY_CAP` messages), oldest first."""
    return memory.session_messages(session_id) if session_id else memory.recent(min(memory.count(), HISTORY_CAP))


def keyword_range(query: str, messages: list[Message], resolver: ReferenceResolver | None) -> SeedRange:
    """The resolved scope's messages (`source_turns`, else the last `recall_turns` turns) when the query
    carries a reference, else all of `messages`."""
    ref = resolver.resolve(query, messages) if resolver is not None else None
    if ref is None or ref.reference_type == ReferenceType.NONE:
        return SeedRange(messages, ref)
    if ref.source_turns:
        picked = [messages[i] for i in sorted(set(ref.source_turns)) if 0 <= i < len(messages)]
    elif ref.recall_turns:
        picked = messages[-2 * ref.recall_turns:]
    else:
        picked = messages
    return SeedRange(picked, ref)


def keyword_hits(messages: list[Message], keywords: list[tuple[str, float]], contains) -> list[tuple[Message, float]]:
    """(message, sum of the weights of the keywords it contains) for every message containing one, best first;
    `contains(content, speaker, keyword)` decides a match."""
    out = []
    for m in messages:
        score = sum(w for k, w in keywords if contains(m.content, m.speaker, k))
        if score > 0:
            out.append((m, score))
    out.sort(key=lambda x: (-x[1], x[0].timestamp))
    return out


def rank(keyword: list[tuple[Message, float]], vector: list[tuple[Message, float]]) -> list[RecalledMessage]:
    """Merged by message id, ranked by keyword weight + vector score (ties: older first)."""
    merged: dict[str, RecalledMessage] = {}
    for name, hits in (("keyword", keyword), ("vector", vector)):
        for m, s in hits:
            entry = merged.setdefault(m.message_id, RecalledMessage(m, 0.0))
            entry.score += s
            entry.signals[name] = s
    return sorted(merged.values(), key=lambda r: (-r.score, r.message.timestamp))

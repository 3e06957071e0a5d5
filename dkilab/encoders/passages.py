"""A message longer than the encoder's window, cut into passages that fit it: each passage is embedded beside the
message's own vector, and a search scores the message by its best passage (the store's `passages` table). An
encoder reads at most its window (MiniLM 256 tokens, e5 512), so without passages a 500-word reply is embedded
from its first sentences and a fact in its last one is never embedded.

Passages are whole sentences packed into as few passages of about equal size as fit the window (a sentence longer
than the window is cut at words, or at characters where there are no spaces), each led by the speaker's name as the
message's own vector is. The same passages are BM25 documents beside the message's own (memory/store.py
`passage_fts`), so a long message scores lexically as its best passage too: two query words in one of its sentences
outweigh the same words scattered over a shorter message."""
from __future__ import annotations

import re
from typing import Callable

# how messages are cut (a store and a cell record it: another version re-cuts a cached store's passages);
# 3: the passages are BM25 documents too
VERSION = "3"
# where a message is cut: after a sentence's end (Latin or CJK), or at a line break
_SENTENCE = re.compile(r"(?<=[.!?。！？；;])\s+|(?<=[。！？；])|\n+")
MARGIN = 8  # tokens kept free in every passage: the speaker's name and e5's "passage: " are counted, this is slack
CHARS_PER_TOKEN_MIN = 1  # a wordpiece or sentencepiece token covers at least one character


def fits(text: str, window: int) -> bool:
    """Whether a text surely fits the window without counting its tokens (a short message, most of them)."""
    return len(text) * CHARS_PER_TOKEN_MIN + 2 * MARGIN <= window


def _halves(piece: str) -> list[str]:
    words = piece.split(" ")
    if len(words) > 1:
        mid = len(words) // 2
        return [" ".join(words[:mid]), " ".join(words[mid:])]
    mid = len(piece) // 2
    return [piece[:mid], piece[mid:]]


def split(text: str, count: Callable[[list[str]], list[int]], budget: int) -> list[str]:
    """`text` as passages of at most `budget` tokens by `count` (token counts of texts, without special tokens),
    in order, every character but the whitespace between sentences kept."""
    pieces = [p for p in _SENTENCE.split(text) if p and p.strip()]
    sized = [q for piece, k in zip(pieces, count(pieces) if pieces else [])
             for q in ([(piece, k)] if k <= budget else _fit(piece, count, budget))]
    # as many passages as the budget needs, of about equal size (no short tail passage standing for the message)
    total = sum(k + 1 for _, k in sized)
    target = min(budget, -(-total // max(1, -(-total // budget))))
    out: list[str] = []
    cur: list[str] = []
    used = 0
    for piece, k in sized:
        if cur and (used + k + 1 > budget or used >= target):
            out.append(" ".join(cur))
            cur, used = [], 0
        used += k + (1 if cur else 0)
        cur.append(piece)
    if cur:
        out.append(" ".join(cur))
    return out


def _fit(piece: str, count: Callable[[list[str]], list[int]], budget: int) -> list[tuple[str, int]]:
    """A sentence over the budget, cut in halves (at a space where it has one) until each part fits."""
    (k,) = count([piece])
    if k <= budget or len(piece) <= 1:
        return [(piece, k)]
    return [q for half in _halves(piece) for q in _fit(half, count, budget)]


def of(embedder, speaker: str | None, content: str, text: str) -> list[str]:
    """The passages of a message whose own text `text` (its speaker, content and loader extras, without the turn
    it replies to: `memory.store.index_text(m, None, "1")`) is over `embedder`'s window, each led by the speaker;
    none when the text fits."""
    window = embedder.window
    if fits(text, window) or embedder.count_tokens([text])[0] <= window:
        return []
    lead = f"{speaker}: " if speaker else ""
    empty, led = embedder.count_tokens(["", lead])

    def count(texts: list[str]) -> list[int]:
        return [k - empty for k in embedder.count_tokens(texts)]

    return [lead + p for p in split(content, count, window - led - MARGIN)]

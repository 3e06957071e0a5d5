"""Weighted query keywords (seed recall-v4 §5.1.2): jieba TF-IDF / TextRank for Chinese, a
stopword-filtered term weighting for English (capitalised names and numbers weigh more)."""
from __future__ import annotations

import re
from collections import Counter

from dkilab.text.lang import detect_language
from dkilab.text.segment import _jieba, segment
from dkilab.text.stopwords import STOPWORDS

# nouns (incl. names, places, organisations, other proper nouns), verbs, verbal nouns (seed §5.1.2),
# plus English words and numbers when they appear inside Chinese text
ALLOW_POS = ("n", "nr", "ns", "nt", "nz", "v", "vn", "eng", "m")
_CAP = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-zA-Z'-]+")


def extract_keywords(text: str, top_k: int = 5, method: str = "tfidf",
                     allow_pos: tuple[str, ...] | None = ALLOW_POS) -> list[tuple[str, float]]:
    """Up to `top_k` (keyword, weight) pairs, best first, weights in (0, 1]."""
    if method not in ("tfidf", "textrank"):
        raise ValueError(f"keyword method must be 'tfidf' or 'textrank', got {method!r}")
    if not text or not text.strip():
        return []
    if detect_language(text) == "cn":
        import jieba.analyse

        _jieba()
        fn = jieba.analyse.extract_tags if method == "tfidf" else jieba.analyse.textrank
        pairs = fn(text, topK=top_k, withWeight=True, allowPOS=allow_pos or ())
        if not pairs:  # very short queries may have no word of the allowed kinds
            pairs = fn(text, topK=top_k, withWeight=True)
        pairs = [(w.lower(), wt) for w, wt in pairs if w.strip() and w.lower() not in STOPWORDS]
    else:
        pairs = _english_keywords(text, top_k)
    if not pairs:
        return []
    top = max(w for _, w in pairs) or 1.0
    return [(w, round(wt / top, 4)) for w, wt in pairs[:top_k]]


def _english_keywords(text: str, top_k: int) -> list[tuple[str, float]]:
    names = {m.group(0).lower() for m in _CAP.finditer(text)}
    counts = Counter(t for t in segment(text) if t not in STOPWORDS and (len(t) > 1 or t.isdigit()))
    scored = []
    for tok, n in counts.items():
        w = n * (1.0 + 0.15 * min(len(tok), 10) / 10)
        if tok in names:
            w *= 1.6
        if any(c.isdigit() for c in tok):
            w *= 1.4
        scored.append((tok, w))
    scored.sort(key=lambda x: (-x[1], x[0]))
    return scored[:top_k]
